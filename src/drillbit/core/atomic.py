"""Files written whole or not at all: a temporary file beside the target, fsynced, then
renamed over it. A reader (``drill report``, the guardian, ``drill heal``) never sees half
a result.json, report or registry, even when the writer is killed mid-write."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path


def write_atomic(path: Path | str, text: str, mode: int = 0o644, *, dir_fd: int | None = None) -> Path:
    """``text`` to ``path``, whole, at ``mode`` (never wider: the file is created at it, not
    chmodded after). A link at the temporary name is refused (O_EXCL does not follow it); one
    at ``path`` is replaced, never written through. With ``dir_fd`` (a folder opened once, as
    :func:`drillbit.core.trust.folder` gives it), ``path`` is a name in that folder, whatever
    is renamed meanwhile."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp, dir_fd=dir_fd)  # a leftover of a writer killed mid-write
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode, dir_fd=dir_fd), "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    return path


def write_private(path: Path | str, text: str) -> Path:
    """Like :func:`write_atomic`, readable by its owner only (a registry, a batch script with
    the launch's secrets)."""
    return write_atomic(path, text, 0o600)
