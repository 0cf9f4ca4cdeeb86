"""The process executor: one NodeAgent in the controller's process, the job as a subprocess.

The launched job gets a session (process group) of its own, so teardown reaches every
process it started, and the agent's guardian can stop it if the controller dies.
"""
from __future__ import annotations

import sys
from pathlib import Path

from drillbit.agent import LaunchedJob, NodeAgent, free_port, start_job
from drillbit.executors.cluster import expand
from drillbit.faults.base import Evidence, Handle, HealReport
from drillbit.lease import Lease
from drillbit.proc import ProcRef
from drillbit.spec.config import JobProfile, RankDiscovery


class LocalExecutor:
    def __init__(self, run_dir: Path, cluster_name: str = "local-process", node: str = "local") -> None:
        self.run_dir = run_dir
        self.cluster_name = cluster_name
        self.node = node
        self.agent = NodeAgent(node, run_dir / f"agent-{node}.json")
        self.values = {"run_dir": str(run_dir), "python": sys.executable, "node": node, "node_rank": "0",
                       "nnodes": "1", "head": "127.0.0.1"}
        self.notes: list[tuple[str, dict]] = []
        self.job: LaunchedJob | None = None

    # --- life cycle ----------------------------------------------------------------------
    def acquire(self, holder: str) -> Lease:
        lease = Lease(self.cluster_name, holder)
        lease.acquire()
        return lease

    def start(self, controller: ProcRef) -> None:
        self.agent.arm(controller)

    def close(self) -> None:
        self.agent.disarm()

    # --- the job -------------------------------------------------------------------------
    def launch(self, profile: JobProfile) -> LaunchedJob:
        assert profile.launch is not None
        spec = profile.launch
        values = {**self.values, "port": str(free_port())}
        argv = [expand(a, values) for a in spec.command]
        env = {k: expand(v, values) for k, v in spec.env.items()}
        self.job = start_job(argv, env, expand(spec.cwd, values) if spec.cwd else None, self.run_dir / "job.out",
                             spec.stop_timeout)
        self.agent.register_job(self.job.ref, self.job.pgid)
        return self.job

    def log_paths(self, profile: JobProfile) -> list[Path]:
        return [Path(expand(p, self.values)) for p in profile.logs]

    # --- faults --------------------------------------------------------------------------
    def find_ranks(self, discovery: RankDiscovery, attach_pid: int | None = None) -> list[ProcRef]:
        return self.agent.find_ranks(discovery, root_pid=self.job.pid if self.job else attach_pid)

    def inject(self, fault: str, target: ProcRef, params: dict) -> Handle:
        return self.agent.inject(fault, target, params)

    def confirm(self, handle: Handle) -> Evidence | None:
        return self.agent.confirm(handle)

    def heal(self, handle: Handle) -> HealReport:
        return self.agent.heal(handle)

    def active(self) -> list[Handle]:
        return self.agent.active()
