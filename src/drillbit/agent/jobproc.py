"""The job's launcher on one node: started under the job's init (:mod:`drillbit.agent.jobinit`,
the subreaper that adopts the job's orphans) in a cgroup of its own where one can be made
(:mod:`drillbit.agent.jobcgroup`), in a session of its own, with a mark in its environment;
stopped as a whole — every process in its cgroup, that descends from the init or carries the
mark — and its cgroup removed."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil

from drillbit.agent import jobcgroup
from drillbit.agent.jobcgroup import JobCgroup
from drillbit.core.errors import ConfigError
from drillbit.core.proc import ProcRef


def free_port() -> int:
    """A TCP port free on this host now (for the job's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


JOBINIT = Path(__file__).with_name("jobinit.py")  # run by path: it imports nothing of drillbit
MARK = "DRILLBIT_JOB"  # every process of a launched job inherits it: found even once reparented


class LaunchedJob:
    """A job a drill started: a session of its own, and a mark in its environment that every
    process it starts inherits — torch's workers start sessions of their own, so neither a
    process group nor a session spans the job, and a worker whose launcher died is no one's
    descendant any more. Where the agent could make one, a cgroup holds it all (``cgroup``);
    ``contained`` says what holds the job, for the launch's record."""

    def __init__(self, popen: subprocess.Popen, ref: ProcRef, stop_timeout: float, mark: str,
                 cgroup: JobCgroup | None = None, contained: str = "") -> None:
        self.popen = popen
        self.ref = ref
        self.mark = mark
        self.stop_timeout = stop_timeout
        self.cgroup = cgroup
        self.contained = contained
        self.left: str | None = None  # why the cgroup could not be removed, once stopped
        self.stopped = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    def exit_code(self) -> int | None:
        return self.popen.poll()

    def stop(self, timeout: float | None = None) -> int | None:
        """Stop every process of the job (those its launcher left behind too, when it has
        exited), then remove its cgroup."""
        timeout = self.stop_timeout if timeout is None else timeout
        stop_job(self.ref, self.mark, timeout if self.popen.poll() is None else 2.0, self.cgroup)
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            return self.popen.wait()
        finally:
            self.stopped = True
            if self.cgroup is not None:
                self.left = self.cgroup.remove()


def start_job(argv: list[str], env: dict[str, str], cwd: str | None, out_path: Path | str,
              stop_timeout: float, node: str | None = None,
              cgroups: tuple[jobcgroup.Version, ...] = ("v2", "v1-freezer")) -> LaunchedJob:
    """Start the job's command under the job's init, in a cgroup of its own (the first of
    ``cgroups`` that can be made here; none: the init's subreaper alone) and a session of its
    own, its output appended to ``out_path``. A command or folder the node lacks is a
    ConfigError (exit 2), raised here."""
    mark = uuid.uuid4().hex
    full = {**os.environ, **{k: v.replace("$PATH", os.environ.get("PATH", "")) for k, v in env.items()}, MARK: mark}
    # the description names what the node does not have: exit 2, naming it (nothing started)
    if not argv:
        raise ConfigError("launch.command is empty")
    if os.sep not in argv[0] and shutil.which(argv[0], path=full.get("PATH")) is None:
        raise ConfigError(f"launch.command: {argv[0]} is not on the job's PATH on this node")
    if os.sep in argv[0] and not Path(cwd or ".", argv[0]).exists():
        raise ConfigError(f"launch.command: {argv[0]} does not exist on this node (from {cwd or os.getcwd()})")
    if cwd is not None and not Path(cwd).is_dir():
        raise ConfigError(f"launch.cwd: {cwd} is not a folder on this node")
    # the launcher's output file is in the run folder's path, which a host of its own may not have yet
    Path(out_path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    cgroup, how = jobcgroup.make(mark, cgroups) if cgroups else (None, "none asked for")
    if cgroup is not None:
        full[jobcgroup.JOIN_VAR] = str(cgroup.path)  # the init joins it before it starts the launcher
    try:
        with open(out_path, "ab") as out:
            popen = subprocess.Popen([sys.executable, "-I", str(JOBINIT), *argv], cwd=cwd, env=full, stdout=out,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    except BaseException:
        if cgroup is not None:
            cgroup.remove()
        raise
    contained = f"subreaper only (no cgroup: {how})"
    if cgroup is not None:
        try:
            cgroup.add(popen.pid)  # the init does it too, before it starts anything; this one is checked
            contained = how
        except ProcessLookupError:
            contained = how  # the init has already ended (it joined first, or started nothing)
        except OSError as exc:
            contained = f"subreaper only (the job's init could not be moved into {cgroup.path}: {exc.strerror})"
    ref = ProcRef.of(psutil.Process(popen.pid), node=node)
    return LaunchedJob(popen, ref, stop_timeout, mark, cgroup, contained)


def job_processes(root: ProcRef | None, mark: str | None, cgroup: JobCgroup | None = None) -> list[ProcRef]:
    """Every live process of one launched job, each by (pid, start time): every process in
    its cgroup, the root (if it is still the process it was) and its descendants, and every
    process that carries the job's mark — never one that merely reuses a pid or a
    process-group id."""
    found: dict[int, ProcRef] = {}
    for pid in cgroup.pids() if cgroup is not None else []:
        try:
            found[pid] = ProcRef.of(psutil.Process(pid))
        except psutil.Error:
            continue
    proc = root.process() if root is not None else None
    if proc is not None:
        try:
            for p in [proc, *proc.children(recursive=True)]:
                found[p.pid] = ProcRef.of(p, node=root.node if root else None)
        except psutil.Error:
            pass
    if mark:
        me = os.getpid()
        for p in psutil.process_iter():
            if p.pid in found or p.pid == me:
                continue
            try:
                if p.environ().get(MARK) == mark:
                    found[p.pid] = ProcRef.of(p)
            except (psutil.Error, OSError):
                continue  # another user's process, or gone
    alive = []
    for ref in found.values():
        status = ref.status()
        if status is not None and status != psutil.STATUS_ZOMBIE:
            alive.append(ref)
    return alive


def stop_job(root: ProcRef | None, mark: str | None, timeout: float, cgroup: JobCgroup | None = None
             ) -> list[ProcRef]:
    """SIGTERM every process of the job, then SIGKILL whatever is left after ``timeout``
    (workers that block in a SIGTERM handler, or ignore it); returns what had to be killed.
    Processes started while it waits are in its cgroup or carry the mark, and are found on the
    next look. With a cgroup the SIGKILL is the cgroup's, to all of it at once: a process that
    forks and exits faster than a look can list it is killed too (the cgroup is left, empty,
    for its owner to remove)."""
    def signal_all(sig: signal.Signals) -> list[ProcRef]:
        members = job_processes(root, mark, cgroup)
        # the job's init last: what it adopted is reaped by it, not left a zombie of PID 1
        members.sort(key=lambda m: root is not None and m.key == root.key)
        for m in members:
            m.send(signal.SIGCONT)  # a stopped member would not act on SIGTERM
            m.send(sig)
        return members

    told = {m.key for m in signal_all(signal.SIGTERM)}
    deadline = time.time() + timeout
    def empty() -> bool:  # a process that forks on and exits may be gone by the time it is named: the
        # cgroup's own list says whether anything is in it, never a look that named no one
        return not job_processes(root, mark, cgroup) and not (cgroup is not None and cgroup.pids())

    while time.time() < deadline:
        left = job_processes(root, mark, cgroup)
        if not left and empty():
            return []
        for m in left:
            if m.key not in told:  # started since: told too
                m.send(signal.SIGTERM)
                told.add(m.key)
        time.sleep(0.25)
    killed = job_processes(root, mark, cgroup)
    if cgroup is not None:
        cgroup.kill()  # False where it could not: the SIGKILLs below still reach every process seen
    killed += [m for m in signal_all(signal.SIGKILL) if m.key not in {k.key for k in killed}]
    end = time.time() + 5.0
    while not empty() and time.time() < end:
        time.sleep(0.05)
    return killed
