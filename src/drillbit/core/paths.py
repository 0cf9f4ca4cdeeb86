"""Paths made absolute and resolved once, where they enter drillbit.

A run folder, a checkpoint folder, a file a fault touched and a file a read event names are
compared with each other by the checkers. They are only comparable when every one of them is
absolute and has its links resolved: a run folder given as ``reports`` (relative to wherever
``drill`` ran), a symlinked reports folder, or a checkpoint folder named relative to the
job's working folder would otherwise never match the absolute, resolved paths the kernel
reports for a read (fanotify names the file by ``/proc/self/fd``). That mismatch once made
the reads witness say "no process opened the damaged checkpoint" while every rank had.

:func:`entered` is the one way in; :data:`AbsPath` is the type a model field takes when it
holds such a path: it refuses a relative one, so a checker never receives one.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator


def entered(path: str | os.PathLike[str], base: str | os.PathLike[str] | None = None) -> str:
    """``path`` made absolute (against ``base``, else this process's working folder) and
    resolved (every link followed, as far as the path exists; ``..`` folded)."""
    p = os.fspath(path)
    if not os.path.isabs(p):
        p = os.path.join(os.fspath(base) if base is not None else os.getcwd(), p)
    for _ in range(3):
        try:
            return os.path.realpath(p)
        except OSError:  # a link swapped for a folder between realpath's lstat and its readlink
            continue  # (EINVAL): the user who owns it is moving it; read it again
    return os.path.normpath(p)  # still moving: absolute, its links as they stand unresolved


def entered_path(path: str | os.PathLike[str], base: str | os.PathLike[str] | None = None) -> Path:
    return Path(entered(path, base))


def _absolute(value: str) -> str:
    if not os.path.isabs(value):
        raise ValueError(f"{value!r} is a relative path; drillbit records paths absolute and resolved "
                         "(drillbit.core.paths.entered)")
    return os.path.normpath(value)


# A path that is absolute (checked) and normalised; the code that makes one resolves it first.
AbsPath = Annotated[str, AfterValidator(_absolute)]


def is_within(path: str, folder: str) -> bool:
    """``path`` is ``folder`` or inside it; both must be absolute (a relative one is never
    within anything: it cannot be placed)."""
    if not (os.path.isabs(path) and os.path.isabs(folder)):
        return False
    p, f = os.path.normpath(path), os.path.normpath(folder)
    return p == f or p.startswith(f.rstrip("/") + "/")
