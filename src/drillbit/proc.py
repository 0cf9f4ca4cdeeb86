"""Processes named by (pid, start time), never by pid alone.

A heal that sends SIGCONT must not reach a process that reused a dead rank's pid, so
every signal goes through :meth:`ProcRef.send`, which re-checks the start time.
"""
from __future__ import annotations

import os
import shutil
import signal
import sys

import psutil
from pydantic import BaseModel, ConfigDict


class ProcRef(BaseModel):
    model_config = ConfigDict(frozen=True)

    pid: int
    start_time: float
    rank: int | None = None
    node: str | None = None

    @classmethod
    def of(cls, proc: psutil.Process, *, rank: int | None = None, node: str | None = None) -> "ProcRef":
        return cls(pid=proc.pid, start_time=proc.create_time(), rank=rank, node=node)

    def process(self) -> psutil.Process | None:
        """The live process this names, or None if it is gone (or the pid was reused)."""
        try:
            proc = psutil.Process(self.pid)
            if abs(proc.create_time() - self.start_time) > 0.01:
                return None
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            return proc
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return None

    def alive(self) -> bool:
        return self.process() is not None

    def status(self) -> str | None:
        proc = self.process()
        if proc is None:
            return None
        try:
            return proc.status()
        except psutil.NoSuchProcess:
            return None

    def send(self, sig: signal.Signals) -> bool:
        """Signal the process if it is still the same one; False if it is gone."""
        # A pidfd pins the process: once opened and checked, the signal cannot reach a
        # newcomer that reused the pid in between.
        try:
            fd = os.pidfd_open(self.pid)
        except (ProcessLookupError, AttributeError, OSError):
            fd = None
        try:
            if self.process() is None:
                return False
            if fd is not None:
                signal.pidfd_send_signal(fd, sig)
            else:
                os.kill(self.pid, sig)
        except ProcessLookupError:
            return False
        finally:
            if fd is not None:
                os.close(fd)
        return True


def open_fds(pid: int | str, *, flags: bool = False) -> list[tuple[str, int | None]]:
    """The files a process holds open, from /proc/PID/fd: (path, its open flags when asked,
    else None); empty when the process is gone or not ours to read."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    out: list[tuple[str, int | None]] = []
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            mode = None
            if flags:
                with open(f"/proc/{pid}/fdinfo/{fd}") as fh:
                    mode = int(next(line.split()[1] for line in fh if line.startswith("flags:")), 8)
        except (OSError, StopIteration, ValueError, IndexError):
            continue
        out.append((target, mode))
    return out


def which(name: str, path: str | None = None) -> str | None:
    """A command drillbit runs on a job's behalf: on ``path`` (default: PATH), else installed
    beside the interpreter drillbit runs under — a virtual environment's ``bin/``, which is
    not on PATH when ``drill`` is started by its absolute path (cron, systemd)."""
    return shutil.which(name, path=path) or shutil.which(name, path=os.path.dirname(sys.executable))
