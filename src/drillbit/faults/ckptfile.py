"""Checkpoint files a fault takes aside and puts back (corrupt-checkpoint, restore-hang).

A file is copied to the drill's scratch folder before it is touched; putting it back
writes the copy under a temporary name, renames it into place and verifies the sha256.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
import time
from pathlib import Path

from drillbit.errors import FaultError
from drillbit.faults.base import HealReport, State
from drillbit.proc import ProcRef

PREFIX, MARKER, META, MANIFEST = "step_", "COMPLETE", "meta.json", "MANIFEST.json"


def sha256(path: Path) -> str | None:
    """The file's sha256; None when it is missing or not a regular file (never opens a FIFO,
    whose read would block forever)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def checkpoints(ckpt_dir: Path) -> list[Path]:
    """Checkpoint folders, newest step first."""
    found = [p for p in ckpt_dir.iterdir() if p.is_dir() and p.name.startswith(PREFIX)] if ckpt_dir.is_dir() else []
    return sorted(found, key=lambda p: int("".join(ch for ch in p.name if ch.isdigit()) or 0), reverse=True)


def pick(checkpoint_dir: str | None, nth_newest: int, fault: str) -> Path:
    if not checkpoint_dir:
        raise FaultError(f"{fault} needs a checkpoint_dir (set it in the job profile)")
    found = checkpoints(Path(checkpoint_dir))
    if len(found) <= nth_newest:
        raise FaultError(f"only {len(found)} checkpoint(s) in {checkpoint_dir}; cannot use #{nth_newest}")
    return found[nth_newest]


def shard_of(ckpt: Path) -> Path:
    shards = sorted(p for p in ckpt.iterdir() if p.is_file() and p.name not in (MARKER, META, MANIFEST))
    if not shards:
        raise FaultError(f"{ckpt} has no shard")
    return shards[0]


class Backup(State):
    """A checkpoint file taken aside: where it was, where its copy is, and its sha256."""

    checkpoint: str
    file: str
    backup: str
    original_sha256: str


def take_aside(file: Path, scratch: Path) -> Backup:
    """Copy ``file`` into a fresh folder under ``scratch``; returns what heal needs."""
    folder = scratch.resolve() / f"backup-{os.getpid()}-{time.time_ns()}"
    folder.mkdir(parents=True)
    backup = folder / file.name
    shutil.copy2(file, backup)
    for path in (backup, folder):  # durable before the fault touches the original
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return Backup(checkpoint=str(file.parent), file=str(file), backup=str(backup),
                  original_sha256=sha256(backup) or "")


def put_back(state: Backup, *, still_ours: bool) -> HealReport:
    """Restore the original bytes, unless the job has since replaced or removed the file."""
    path, backup = Path(state.file), Path(state.backup)
    if sha256(path) == state.original_sha256:
        discard(state)
        return HealReport(healed=True, verified=True, detail=f"{path.name} already intact")
    if not backup.exists():
        return HealReport(healed=False, verified=False, detail=f"backup {backup} is missing")
    if not still_ours or not path.parent.exists():
        return HealReport(healed=True, verified=True,
                          detail=f"{path} was since replaced or removed by the job; its newer data is kept "
                                 f"(original kept at {backup})")
    tmp = path.with_name(f".{path.name}.drillbit-heal")
    shutil.copy2(backup, tmp)
    os.replace(tmp, path)
    ok = sha256(path) == state.original_sha256
    if ok:
        discard(state)
    return HealReport(healed=ok, verified=ok,
                      detail=f"restored {path} byte for byte (sha256 {state.original_sha256[:12]}…)" if ok
                      else f"restored {path} but its sha256 does not match the original")


def discard(state: Backup) -> None:
    """The heal is verified: the copy has done its job."""
    shutil.rmtree(Path(state.backup).parent, ignore_errors=True)


def wait_gone(target: ProcRef, timeout: float = 10.0) -> bool:
    """True once the process is gone (a killed rank), False if it outlives ``timeout``."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not target.alive():
            return True
        time.sleep(0.01)
    return not target.alive()
