"""The job's launcher on one node: started in a session of its own, stopped as a group."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil

from drillbit.proc import ProcRef


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
        popen = subprocess.Popen(argv, cwd=cwd, env={**os.environ, **{k: v.replace("$PATH", os.environ.get("PATH", "")) for k, v in env.items()}}, stdout=out, stderr=subprocess.STDOUT,
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
