"""The job's init: the first process of a job a drill launches, as tini is a container's.

``python -I -m drillbit.agent.jobinit ARGV...`` joins the cgroup the agent made for the job
(``$DRILLBIT_JOB_CGROUP``, :mod:`drillbit.agent.jobcgroup`; taken out of the job's
environment) before it starts anything, so every process of the job is born inside it; makes
itself the child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), starts ARGV (the job's
launcher) and waits. A process of the job whose parent dies is adopted here instead of by PID 1, so the job is exactly this
process's descendants: a worker that started a session of its own, cleared its environment
(no ``DRILLBIT_JOB`` mark) and outlived its launcher is still found and stopped.

- SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are passed on to the launcher.
- When the launcher ends, whatever of the job is left (strays the launcher did not take
  down) gets SIGTERM, then SIGKILL after ``DRILLBIT_JOBINIT_GRACE_S`` (default 5 s); this
  process leaves the cgroup and removes it if nothing is left in it (what a scan could not
  find is, and teardown kills it with the cgroup), and ends as the launcher did: its exit
  code, or the same signal.
"""
from __future__ import annotations

import ctypes
import errno
import os
import signal
import sys
import time
import contextlib

PR_SET_CHILD_SUBREAPER = 36
CGROUP_VAR = "DRILLBIT_JOB_CGROUP"  # jobcgroup.JOIN_VAR (nothing of drillbit is imported here)
PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def subreaper() -> bool:
    """Become the child subreaper of this process's descendants (Linux ≥ 3.4)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def join_cgroup() -> str | None:
    """Into the job's cgroup, if the agent made one (returned); said on the job's output if
    that fails (the agent moves this process there too, and records which holds the job)."""
    where = os.environ.pop(CGROUP_VAR, None)
    if not where:
        return None
    try:
        with open(os.path.join(where, "cgroup.procs"), "w") as procs:
            procs.write(f"{os.getpid()}\n")
    except OSError as exc:
        print(f"drillbit: the job's init could not join its cgroup {where}: {exc.strerror}", file=sys.stderr)
    return where


def leave_cgroup(where: str | None) -> None:
    """The job is over: out of its cgroup (into the agent's), and the cgroup removed if
    nothing is left in it. A stray still there keeps it: teardown kills it and removes it."""
    if not where:
        return
    try:
        with open(os.path.join(os.path.dirname(where), "cgroup.procs"), "w") as procs:
            procs.write(f"{os.getpid()}\n")
        os.rmdir(where)
    except OSError as exc:
        if exc.errno not in (errno.EBUSY, errno.ENOENT):  # busy: strays are left; gone: teardown came first
            print(f"drillbit: the job's init could not remove its cgroup {where}: {exc.strerror}", file=sys.stderr)


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid``, from /proc (no third-party import here: this runs
    as the job's first process, in the job's environment)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if fields and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _reap() -> list[tuple[int, int]]:
    """Every child that has ended, without blocking."""
    ended: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended.append((pid, status))


def end_strays(grace_s: float) -> None:
    """SIGTERM what is left of the job, SIGKILL it after ``grace_s``; reaps all of it."""
    me = os.getpid()
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        left = descendants(me)
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and descendants(me):
            _reap()
            time.sleep(0.05)
    _reap()


def main(argv: list[str]) -> int:
    if not argv:
        print("drillbit.agent.jobinit: no command to run", file=sys.stderr)
        return 2
    cgroup = join_cgroup()  # first: nothing of the job may start outside it
    subreaper()
    launcher: list[int] = []

    def pass_on(sig: int, _frame: object) -> None:
        if launcher:
            with contextlib.suppress(ProcessLookupError):
                os.kill(launcher[0], sig)

    for sig in PASSED_ON:
        signal.signal(sig, pass_on)
    try:
        pid = os.posix_spawnp(argv[0], argv, dict(os.environ))
    except OSError as exc:
        print(f"drillbit: cannot start {argv[0]}: {exc.strerror}", file=sys.stderr)
        leave_cgroup(cgroup)
        return 127 if exc.errno == errno.ENOENT else 126
    launcher.append(pid)
    status = None
    while status is None:
        try:
            ended, code = os.waitpid(-1, 0)  # adopted strays are reaped here too
        except ChildProcessError:
            break
        if ended == pid:
            status = code
    grace = float(os.environ.get("DRILLBIT_JOBINIT_GRACE_S", "5") or 5)
    end_strays(grace)
    leave_cgroup(cgroup)
    if status is None:
        return 1
    if os.WIFSIGNALED(status):
        ended_by = os.WTERMSIG(status)
        if ended_by in PASSED_ON:
            signal.signal(ended_by, signal.SIG_DFL)
        os.kill(os.getpid(), ended_by)
        return 128 + ended_by
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
