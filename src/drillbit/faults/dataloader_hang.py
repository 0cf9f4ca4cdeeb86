"""dataloader-hang (fail-hang): freeze one rank's data-loader worker.

The rank waits for a batch that never comes (DataLoader's timeout is 0: forever), its peers
wait for it in the all-reduce, and no collective timeout fires because no collective is
running late — it never started. BLOOM 2022-04-30: a DataLoader worker deadlock froze
training for ~18 h while the liveness check said "running" (bigscience train/tr11-176B-ml/chronicles.md).

Target: the first child process of the chosen rank (its DataLoader worker). Confirmed when
that worker is stopped and global progress stalls; healed with SIGCONT like hang-collective.
"""
from __future__ import annotations

import psutil

from drillbit.core.errors import FaultError
from drillbit.faults.base import Plan
from drillbit.faults.hang_collective import HangCollective, HangParams
from drillbit.core.proc import ProcRef


class DataloaderHang(HangCollective):
    """Params, State, confirm and heal are hang-collective's; only the frozen process differs."""

    name = "dataloader-hang"
    needs = ("to signal the job's processes: the job's user, or root")
    blast_radius = ("one data-loader worker of a rank, stopped until the heal's SIGCONT")
    verb = "stalled in its data loader"
    detected_by = ("watchdog", "collective")  # the rank itself is alive: its heartbeat goes on

    def plan(self, targets: list[ProcRef], params: HangParams) -> Plan:
        return Plan(fault=self.name, targets=targets, action="SIGSTOP the DataLoader worker of each target rank",
                    heal="SIGCONT that worker (same pid and start time), verify it runs")

    def frozen(self, target: ProcRef) -> ProcRef:
        proc = target.process()
        children = proc.children() if proc is not None else []
        if not children:
            raise FaultError(f"rank {target.rank} (pid {target.pid}) has no DataLoader worker to freeze; "
                             "run the job with num_workers >= 1")
        worker = sorted(children, key=lambda c: c.create_time())[0]
        try:
            return ProcRef.of(worker, rank=target.rank, node=target.node)
        except psutil.NoSuchProcess as exc:
            raise FaultError(f"rank {target.rank}'s loader worker exited before it could be frozen") from exc
