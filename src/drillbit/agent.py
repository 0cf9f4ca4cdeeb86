"""NodeAgent: finds rank processes on one node, applies and heals faults.

The agent keeps the registry of active faults and mirrors it to a JSON file on every
change. A separate guardian process (``python -m drillbit.agent guard``) is the
dead-man's switch: it watches the controller by (pid, start time) and, the moment the
controller is gone without having released it, heals every fault in the registry and
stops the job the harness launched. So no fault outlives its drill, even when the
controller is SIGKILLed.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from drillbit.faults import get as get_fault
from drillbit.faults.base import Evidence, Handle, HealReport
from drillbit.proc import ProcRef
from drillbit.spec.config import RankDiscovery


class NodeAgent:
    def __init__(self, node: str, registry_path: Path) -> None:
        self.node = node
        self.registry_path = Path(registry_path)
        self._active: dict[str, Handle] = {}
        self._job: dict | None = None
        self._lock = threading.Lock()
        self._guardian: subprocess.Popen | None = None

    # --- discovery ---------------------------------------------------------------------
    def find_ranks(self, discovery: RankDiscovery, root_pid: int | None = None) -> list[ProcRef]:
        """Rank processes on this node: command line match + rank from the environment.

        With ``root_pid`` only descendants of that process count, so a drill never
        touches another job's ranks on a shared node.
        """
        pattern = re.compile(discovery.cmdline)
        exclude = re.compile(discovery.exclude_cmdline) if discovery.exclude_cmdline else None
        if root_pid is not None:
            try:
                candidates = psutil.Process(root_pid).children(recursive=True)
            except psutil.NoSuchProcess:
                return []
        else:
            candidates = list(psutil.process_iter())
        found = []
        for proc in candidates:
            try:
                cmd = " ".join(proc.cmdline())
                if not pattern.search(cmd) or (exclude and exclude.search(cmd)):
                    continue
                rank = proc.environ().get(discovery.rank_env)
                if rank is None or proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                found.append((proc.ppid(), ProcRef.of(proc, rank=int(rank), node=self.node)))
            except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
                continue
        # a rank's own helpers (DataLoader workers) are forked copies with the same command
        # line and environment: the rank is the one whose parent is not a rank
        pids = {ref.pid for _, ref in found}
        ranks = [ref for ppid, ref in found if ppid not in pids]
        return sorted(ranks, key=lambda r: r.rank if r.rank is not None else -1)

    # --- faults ------------------------------------------------------------------------
    def inject(self, fault_name: str, target: ProcRef, params: dict) -> Handle:
        fault = get_fault(fault_name)
        fault.scratch = self.registry_path.parent / f"scratch-{self.node}"
        validated = fault.Params.model_validate(params)
        handle = fault.inject(target, validated)
        with self._lock:
            self._active[self._key(handle)] = handle
            self._save()
        return handle

    def confirm(self, handle: Handle) -> Evidence | None:
        return get_fault(handle.fault).confirm(handle)

    def heal(self, handle: Handle) -> HealReport:
        report = get_fault(handle.fault).heal(handle)
        if report.healed:
            with self._lock:
                self._active.pop(self._key(handle), None)
                self._save()
        return report

    def active(self) -> list[Handle]:
        with self._lock:
            return list(self._active.values())

    # --- the launched job, for the dead-man's switch -------------------------------------
    def register_job(self, proc: ProcRef, pgid: int) -> None:
        with self._lock:
            self._job = {"proc": proc.model_dump(), "pgid": pgid}
            self._save()

    def release_job(self) -> None:
        with self._lock:
            self._job = None
            self._save()

    # --- dead-man's switch ---------------------------------------------------------------
    def arm(self, controller: ProcRef) -> None:
        """Start the guardian that heals this agent's faults if the controller dies."""
        self._save()
        self._guardian = subprocess.Popen(
            [sys.executable, "-m", "drillbit.agent", "guard", "--registry", str(self.registry_path),
             "--controller-pid", str(controller.pid), "--controller-start", repr(controller.start_time)],
            stdin=subprocess.DEVNULL, start_new_session=True,
        )

    def disarm(self) -> None:
        if self._guardian is not None and self._guardian.poll() is None:
            self._guardian.terminate()
            try:
                self._guardian.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._guardian.kill()
                self._guardian.wait()
        self._guardian = None

    @staticmethod
    def _key(handle: Handle) -> str:
        return f"{handle.fault}:{handle.target.pid}:{handle.target.start_time}"

    def _save(self) -> None:
        payload = {"node": self.node, "faults": [h.model_dump() for h in self._active.values()], "job": self._job}
        tmp = self.registry_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(payload))
        os.replace(tmp, self.registry_path)


def group_members(pgid: int) -> list[psutil.Process]:
    """Live (non-zombie) processes of a process group."""
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return members


def stop_process_group(pgid: int, timeout: float) -> None:
    """SIGTERM a job's process group, then SIGKILL what is left after ``timeout``."""
    try:
        os.killpg(pgid, signal.SIGCONT)  # a stopped member would not act on SIGTERM
        os.killpg(pgid, signal.SIGTERM)  # the group id stays reserved while any member lives
    except ProcessLookupError:
        return
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not group_members(pgid):
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def guard(registry: Path, controller: ProcRef, poll: float = 0.2) -> int:
    """The dead-man's switch loop; returns once the controller is gone and all is healed."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.is_set():
        if not controller.alive():
            break
        stop.wait(poll)
    if stop.is_set():
        return 0  # released by a controller that heals for itself
    payload = json.loads(registry.read_text()) if registry.exists() else {"faults": [], "job": None}
    log = registry.with_suffix(".deadman.jsonl")
    with open(log, "a") as out:
        for raw in payload.get("faults", []):
            handle = Handle.model_validate(raw)
            report = get_fault(handle.fault).heal(handle)
            out.write(json.dumps({"t": time.time(), "kind": "fault.heal", "by": "dead-man",
                                  "fault": handle.fault, "pid": handle.target.pid,
                                  "rank": handle.target.rank, **report.model_dump()}) + "\n")
        job = payload.get("job")
        if job:
            stop_process_group(int(job["pgid"]), timeout=20.0)
            out.write(json.dumps({"t": time.time(), "kind": "job.stop", "by": "dead-man", "pgid": job["pgid"]}) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m drillbit.agent", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("guard", help="dead-man's switch for one agent's registry")
    g.add_argument("--registry", required=True)
    g.add_argument("--controller-pid", type=int, required=True)
    g.add_argument("--controller-start", type=float, required=True)
    args = p.parse_args(argv)
    return guard(Path(args.registry), ProcRef(pid=args.controller_pid, start_time=args.controller_start))


if __name__ == "__main__":
    raise SystemExit(main())
