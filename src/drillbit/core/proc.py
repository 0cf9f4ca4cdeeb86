"""Processes named by (pid, start time), never by pid alone.

A heal that sends SIGCONT must not reach a process that reused a dead rank's pid, so
every signal goes through :meth:`ProcRef.send`, which re-checks the start time.

The start time that names a process is when it started after the node booted
(``/proc/PID/stat``'s starttime, in clock ticks), not psutil's ``create_time()``: that one
adds the boot time the kernel derives from the wall clock, read afresh at every call, so a
step of the wall clock (NTP, a clock set after a virtual machine was paused) moves every
process's create time by whole seconds (psutil#2526) — and a drill that compared them
found its job's ranks gone, and its dead-man's switch found the controller dead.
``start_time`` (the wall clock's epoch seconds) stays for people and for a start time given
from outside (a pid file, ``attach_start_time``), which is compared as before.
"""
from __future__ import annotations

import os
import shutil
import signal
import sys
from typing import Any

import psutil
from pydantic import BaseModel, ConfigDict


try:
    CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
except (ValueError, OSError, AttributeError):
    CLOCK_TICKS = 100


def since_boot(pid: int) -> float | None:
    """When process ``pid`` started, in seconds after this node booted (``/proc/PID/stat``'s
    starttime): no step of the wall clock moves it. None where there is no such file (the
    process is gone, or this is not Linux)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
        # the command name (field 2) is in parentheses and may hold spaces or ')': split after the last
        return int(data[data.rindex(b")") + 2:].split()[19]) / CLOCK_TICKS
    except (OSError, ValueError, IndexError):
        return None


def same_start(proc: psutil.Process, start_time: float | None, boot_start: float | None = None) -> bool:
    """Whether ``proc`` is the process that started then: by its start after boot where that
    is known (exact to the clock tick), else by the wall-clock start time to 10 ms (psutil's
    precision; a start time given from outside, by a pid file or a profile)."""
    if boot_start is not None:
        now = since_boot(proc.pid)
        if now is not None:
            return abs(now - boot_start) < 0.5 / CLOCK_TICKS
    return start_time is None or abs(proc.create_time() - start_time) <= 0.01


def pidfile_identity(pid: int) -> dict[str, Any]:
    """What a pid file says of process ``pid`` so that its reader can tell it from a later process
    given the same pid: ``{pid, start_time, boot_start}`` (:func:`named_by` reads it back)."""
    return {"pid": pid, "start_time": psutil.Process(pid).create_time(), "boot_start": since_boot(pid)}


def named_by(proc: psutil.Process, info: dict[str, Any]) -> bool:
    """Whether ``proc`` is the process a pid file's ``{pid, start_time[, boot_start]}`` named (a
    file without either start names whichever process has the pid)."""
    start, boot = info.get("start_time"), info.get("boot_start")
    return same_start(proc, None if start is None else float(start), None if boot is None else float(boot))


def started_before(ref: "ProcRef", other: "ProcRef") -> bool:
    """Whether ``ref``'s process started before ``other``'s (both on one node): after boot
    where both are known, else by the wall clock with psutil's 10 ms."""
    if ref.boot_start is not None and other.boot_start is not None:
        return ref.boot_start < other.boot_start
    return ref.start_time < other.start_time - 0.01


class ProcRef(BaseModel):
    model_config = ConfigDict(frozen=True)

    pid: int
    start_time: float  # the wall clock's epoch seconds (psutil's create_time when named)
    rank: int | None = None
    node: str | None = None
    boot_start: float | None = None  # seconds after its node booted: what names it (see above)

    @classmethod
    def of(cls, proc: psutil.Process, *, rank: int | None = None, node: str | None = None) -> "ProcRef":
        return cls(pid=proc.pid, start_time=proc.create_time(), rank=rank, node=node, boot_start=since_boot(proc.pid))

    @property
    def key(self) -> tuple[int, float]:
        """What names the process: (pid, its start after boot), or (pid, its wall-clock start)
        for a reference made from a start time given from outside."""
        return (self.pid, self.boot_start if self.boot_start is not None else self.start_time)

    def __eq__(self, other: object) -> bool:
        # the same process, rank and node: two references made either side of a step of the wall
        # clock differ in start_time, not in the process they name
        if not isinstance(other, ProcRef):
            return NotImplemented
        if (self.pid, self.rank, self.node) != (other.pid, other.rank, other.node):
            return False
        if self.boot_start is not None and other.boot_start is not None:
            return self.boot_start == other.boot_start
        return self.start_time == other.start_time

    def __hash__(self) -> int:
        return hash((self.pid, self.rank, self.node))

    def process(self) -> psutil.Process | None:
        """The live process this names, or None if it is gone (or the pid was reused)."""
        try:
            proc = psutil.Process(self.pid)
            if not same_start(proc, self.start_time, self.boot_start):
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
