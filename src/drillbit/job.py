"""A tiny reporter for teams who own their training loop: tell drillbit what the job does.

    from drillbit import job
    job.step(n)                               # after every optimizer step
    job.checkpoint_save_begin(step, path)     # a save starts
    job.checkpoint_saved(step, path)          # a save finished (and is complete)
    job.restored(step, path)                  # the job loaded a checkpoint

Each call writes one line, ``drillbit-event t=<epoch> kind=<kind> ... [path=<path>]``, that
the built-in ``drillbit`` preset reads: appended to the file named by ``$DRILLBIT_EVENTS``
(list it in the job profile's ``logs``), else to standard error. ``$DRILLBIT_HEARTBEAT``, if
set, names a file rewritten with ``<step> <epoch>`` at every step (the no-log alternative:
the profile's ``heartbeat_file``). The rank comes from ``$RANK`` when set.

Standard library only. It never raises and never blocks: a line that cannot be written at
once (no such folder, a full pipe) is dropped and counted in ``job.dropped``; safe to leave
in production code.
"""
from __future__ import annotations

import os
import time

dropped = 0
_fd: int | None = None
_fd_for: str | None = None


def _out() -> int | None:
    """The file descriptor to write to, opened once per $DRILLBIT_EVENTS value."""
    global _fd, _fd_for
    target = os.environ.get("DRILLBIT_EVENTS", "")
    if _fd is not None and _fd_for == target:
        return _fd
    if _fd is not None and _fd_for:
        os.close(_fd)
    _fd, _fd_for = None, target
    if target:
        _fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644)
    else:
        _fd = os.dup(2)
        os.set_blocking(_fd, False)
    return _fd


def _emit(kind: str, path: str | None = None, **fields: object) -> None:
    global dropped
    try:
        rank = os.environ.get("RANK")
        parts = [f"drillbit-event t={time.time():.6f} kind={kind}"]
        parts += [f"{k}={v}" for k, v in fields.items() if v is not None]
        if rank is not None and rank.isdigit():
            parts.append(f"rank={rank}")
        if path is not None:
            parts.append(f"path={path}")
        line = (" ".join(parts).replace("\n", " ") + "\n").encode()
        fd = _out()
        if fd is None or os.write(fd, line) != len(line):
            dropped += 1
    except Exception:  # never raise into the training loop; the count says it happened
        dropped += 1


def step(n: int) -> None:
    """An optimizer step finished; ``n`` is its number."""
    _emit("step", n=int(n))
    beat = os.environ.get("DRILLBIT_HEARTBEAT")
    if beat:
        global dropped
        try:
            tmp = f"{beat}.{os.getpid()}.tmp"
            with open(tmp, "w") as fh:
                fh.write(f"{int(n)} {time.time():.6f}\n")
            os.replace(tmp, beat)
        except Exception:  # as above: counted, never raised
            dropped += 1


def checkpoint_save_begin(step: int, path: str) -> None:
    _emit("ckpt.save.begin", path=str(path), step=int(step))


def checkpoint_saved(step: int, path: str, seconds: float | None = None) -> None:
    _emit("ckpt.save", path=str(path), step=int(step), seconds=None if seconds is None else f"{seconds:.6f}")


def restored(step: int, path: str) -> None:
    _emit("restore", path=str(path), step=int(step))
