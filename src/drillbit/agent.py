"""NodeAgent: finds rank processes on one node, applies and heals faults.

Three ways to run it, one code: in the controller's process (the ``local-process``
cluster), as a Ray actor on each node (:class:`AgentService` under ``ray.remote``), and as
``python -m drillbit.agent serve`` over SSH, speaking JSON lines on stdin/stdout.

The agent keeps the registry of active faults and mirrors it to a JSON file on every
change. A separate guardian process (``python -m drillbit.agent guard``) is the
dead-man's switch: it watches the controller by (pid, start time) and, the moment the
controller is gone without having released it, heals every fault in the registry and
stops the job the harness launched. So no fault outlives its drill, even when the
controller is SIGKILLed.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import signal
import socket
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
        self.node_id: str | None = None  # the Ray node id, where the agent is a Ray actor

    # --- discovery ---------------------------------------------------------------------
    def find_ranks(self, discovery: RankDiscovery, root_pid: int | None = None) -> list[ProcRef]:
        """Rank processes on this node: command line match + rank from the environment.

        With ``root_pid`` only descendants of that process count, so a drill never
        touches another job's ranks on a shared node.
        """
        if discovery.pidfiles is not None:
            return self._ranks_from_pidfiles(discovery.pidfiles)
        assert discovery.cmdline is not None
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

    def _ranks_from_pidfiles(self, pattern: str) -> list[ProcRef]:
        """Ranks that wrote ``{"pid", "rank", "node_id"}`` files; only those on this node
        (``node_id`` is this agent's node name or its Ray node id) and still alive."""
        found: dict[int, ProcRef] = {}
        for path in sorted(glob.glob(pattern)):
            try:
                info = json.loads(Path(path).read_text())
                if info.get("node_id") not in (self.node, self.node_id):
                    continue
                proc = psutil.Process(int(info["pid"]))
                if proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                ref = ProcRef.of(proc, rank=int(info["rank"]), node=self.node)
            except (OSError, ValueError, KeyError, psutil.NoSuchProcess):
                continue  # a rank of an earlier attempt, or a file half written
            found[ref.rank] = ref  # type: ignore[index]
        return [found[r] for r in sorted(found)]

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


def free_port() -> int:
    """A TCP port free on this host now (for the job's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LaunchedJob:
    """A job a drill started, in a session (process group) of its own."""

    def __init__(self, popen: subprocess.Popen, ref: ProcRef, stop_timeout: float) -> None:
        self.popen = popen
        self.ref = ref
        self.pgid = popen.pid
        self.stop_timeout = stop_timeout

    @property
    def pid(self) -> int:
        return self.popen.pid

    def exit_code(self) -> int | None:
        return self.popen.poll()

    def stop(self, timeout: float | None = None) -> int | None:
        timeout = self.stop_timeout if timeout is None else timeout
        if self.popen.poll() is None:
            stop_process_group(self.pgid, timeout)
        else:
            stop_process_group(self.pgid, 2.0)  # stragglers left in the group
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            return self.popen.wait()


def start_job(argv: list[str], env: dict[str, str], cwd: str | None, out_path: Path | str,
              stop_timeout: float, node: str | None = None) -> LaunchedJob:
    """Start the job's command in a session of its own, its output appended to ``out_path``."""
    with open(out_path, "ab") as out:
        popen = subprocess.Popen(argv, cwd=cwd, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
    return LaunchedJob(popen, ProcRef.of(psutil.Process(popen.pid), node=node), stop_timeout)


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


class AgentService:
    """A NodeAgent with the job it launched on its node and a heartbeat dead-man's switch.

    Every argument and result is plain JSON data, so the same object serves as a Ray actor
    and behind the JSON-lines server that SSH runs. The controller calls ``heartbeat``
    every second once ``arm`` is called; if none arrives for ``deadman_s`` the agent heals
    every fault it holds on its own, records it in ``agent-<node>.deadman.jsonl``, lets the
    job run ``job_grace_s`` more (so the recovery can be seen), stops the job it launched,
    records ``orphan.done`` and calls ``on_orphaned`` (a Ray actor exits there).

    ``skew_s`` shifts every timestamp this agent reports, to test the controller's
    clock-offset correction with a known offset on one machine.
    """

    def __init__(self, node: str, state_dir: str, skew_s: float = 0.0) -> None:
        self.node = node
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.agent = NodeAgent(node, self.state_dir / f"agent-{node}.json")
        self.skew_s = skew_s
        self._job: LaunchedJob | None = None
        self._lease = None
        self._beat = time.time()
        self._armed: tuple[float, float] | None = None  # (deadman_s, job_grace_s)
        self._stop = threading.Event()
        self.on_orphaned = lambda: None
        self._monitor = threading.Thread(target=self._watch, name="deadman", daemon=True)
        self._monitor.start()

    # --- time and liveness ---------------------------------------------------------------
    def clock(self) -> float:
        return time.time() + self.skew_s

    def info(self) -> dict:
        return {"node": self.node, "pid": os.getpid(), "host": socket.gethostname(), "t": self.clock()}

    def heartbeat(self) -> float:
        self._beat = time.time()
        return self.clock()

    def arm(self, deadman_s: float, job_grace_s: float) -> None:
        self._beat = time.time()
        self._armed = (deadman_s, job_grace_s)

    def disarm(self) -> None:
        self._armed = None

    def shutdown(self) -> None:
        """The controller is done with this agent: a job it launched does not outlive it."""
        self._armed = None
        self._stop.set()
        if self._job is not None and self._job.exit_code() is None:
            self.stop_job(20.0)

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            armed = self._armed
            if armed is not None and time.time() - self._beat > armed[0]:
                self._armed = None
                self._orphaned(*armed)

    def _orphaned(self, deadman_s: float, job_grace_s: float) -> None:
        log = self.state_dir / f"agent-{self.node}.deadman.jsonl"

        def note(kind: str, **data: object) -> None:
            with open(log, "a") as out:
                out.write(json.dumps({"t": self.clock(), "kind": kind, "node": self.node, "by": "dead-man",
                                      **data}) + "\n")

        note("controller.lost", silent_s=round(time.time() - self._beat, 3), deadman_s=deadman_s)
        for handle in self.agent.active():
            report = self.agent.heal(handle)
            note("fault.heal", fault=handle.fault, pid=handle.target.pid, rank=handle.target.rank,
                 **{**report.model_dump(), "t": report.t + self.skew_s})
        if self._job is not None and self._job.exit_code() is None:
            self._stop.wait(job_grace_s)
            note("job.stop", code=self.stop_job(20.0))
        note("orphan.done")
        self.on_orphaned()

    # --- the job on this node ------------------------------------------------------------
    def launch(self, argv: list[str], env: dict[str, str], cwd: str | None, out_path: str) -> dict:
        self._job = start_job(argv, env, cwd, out_path, stop_timeout=20.0, node=self.node)
        self.agent.register_job(self._job.ref, self._job.pgid)
        return self._job.ref.model_dump()

    def job_status(self) -> int | None:
        return None if self._job is None else self._job.exit_code()

    def stop_job(self, timeout: float) -> int | None:
        if self._job is None:
            return None
        code = self._job.stop(timeout)
        self.agent.release_job()
        return code

    def lease_acquire(self, cluster: str, holder: str) -> None:
        """Hold the cluster's lease (a file lock on this host) for as long as this agent lives."""
        from drillbit.lease import Lease

        self._lease = Lease(cluster, holder)
        self._lease.acquire()

    def lease_release(self) -> None:
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def free_port(self) -> int:
        return free_port()

    # --- faults --------------------------------------------------------------------------
    def find_ranks(self, discovery: dict, attach_pid: int | None = None) -> list[dict]:
        # ranks under the launcher this agent started; else under an attached job's root if
        # it lives on this node; else any matching process here
        if self._job is not None:
            root: int | None = self._job.pid
        else:
            root = attach_pid if attach_pid is not None and psutil.pid_exists(attach_pid) else None
        found = self.agent.find_ranks(RankDiscovery.model_validate(discovery), root_pid=root)
        return [r.model_dump() for r in found]

    def inject(self, fault: str, target: dict, params: dict) -> dict:
        return self.agent.inject(fault, ProcRef.model_validate(target), params).model_dump()

    def confirm(self, handle: dict) -> dict | None:
        evidence = self.agent.confirm(Handle.model_validate(handle))
        return None if evidence is None else {**evidence.model_dump(), "t": evidence.t + self.skew_s}

    def heal(self, handle: dict) -> dict:
        report = self.agent.heal(Handle.model_validate(handle))
        return {**report.model_dump(), "t": report.t + self.skew_s}

    def active(self) -> list[dict]:
        return [h.model_dump() for h in self.agent.active()]


def serve(service: AgentService, inp=None, out=None) -> int:
    """JSON-lines RPC on stdin/stdout: ``{"id", "method", "args"}`` in, ``{"id", "result"|"error"}`` out.

    End of input (the SSH connection dropped) counts as a lost controller at once when armed.
    """
    inp = inp or sys.stdin
    out = out or sys.stdout
    lock = threading.Lock()
    done = threading.Event()
    service.on_orphaned = done.set

    def reply(payload: dict) -> None:
        with lock:
            out.write(json.dumps(payload) + "\n")
            out.flush()

    def handle(req: dict) -> None:
        try:
            result = getattr(service, req["method"])(*req.get("args", []))
            reply({"id": req["id"], "result": result})
        except Exception as exc:  # the error goes back to the controller, the agent lives on
            reply({"id": req["id"], "error": f"{exc.__class__.__name__}: {exc}"})

    reply({"id": 0, "result": service.info()})
    for line in inp:
        req = json.loads(line)
        if req["method"] == "exit":
            service.shutdown()
            return 0
        # heal and confirm may take seconds; heartbeats must not wait behind them
        threading.Thread(target=handle, args=(req,), daemon=True).start()
    if service._armed is not None:
        service._beat = 0.0  # the controller's channel closed: no heartbeat will come again
        done.wait()
    service.shutdown()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m drillbit.agent", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run one node's agent, JSON-lines RPC on stdin/stdout (used over SSH)")
    s.add_argument("--node", required=True)
    s.add_argument("--state-dir", required=True)
    s.add_argument("--skew", type=float, default=0.0, help=argparse.SUPPRESS)
    g = sub.add_parser("guard", help="dead-man's switch for one agent's registry")
    g.add_argument("--registry", required=True)
    g.add_argument("--controller-pid", type=int, required=True)
    g.add_argument("--controller-start", type=float, required=True)
    args = p.parse_args(argv)
    if args.cmd == "serve":
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a dropped SSH session is handled as lost heartbeats
        return serve(AgentService(args.node, args.state_dir, args.skew))
    return guard(Path(args.registry), ProcRef(pid=args.controller_pid, start_time=args.controller_start))


if __name__ == "__main__":
    raise SystemExit(main())
