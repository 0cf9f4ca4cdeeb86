"""Atomic, checksummed checkpoints with fallback to the newest one that verifies.

Layout of one checkpoint::

    <ckpt_dir>/step_00000040/
        shard_0.pt        model and optimizer state (torch.save)
        meta.json         {"step": 40, "world_size": 4, ...}
        MANIFEST.json     {"files": {"shard_0.pt": "<sha256>", "meta.json": "<sha256>"}}
        COMPLETE          written last: a checkpoint without it is a partial upload

A checkpoint is written into a temporary sibling directory, fsynced, then renamed, so a
reader never sees half a checkpoint under a final name.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

PREFIX = "step_"
MANIFEST = "MANIFEST.json"
COMPLETE = "COMPLETE"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def checkpoint_dirs(ckpt_dir: Path) -> list[Path]:
    """Final checkpoint directories, newest step first."""
    if not ckpt_dir.is_dir():
        return []
    found = []
    for entry in ckpt_dir.iterdir():
        if entry.is_dir() and entry.name.startswith(PREFIX) and entry.name[len(PREFIX):].isdigit():
            found.append(entry)
    return sorted(found, key=lambda p: int(p.name[len(PREFIX):]), reverse=True)


def write_checkpoint(ckpt_dir: Path, step: int, payload: dict[str, bytes], meta: dict, *,
                     atomic: bool = True, pause_s: float = 0.0) -> Path:
    """Write the files (``pause_s`` after each, as a slow filesystem would take); returns the
    final directory. ``atomic``: into a temporary sibling, with a manifest and the COMPLETE
    marker last, then renamed into place. Not atomic: straight into the final folder, no
    marker — what a job that trusts its saves does (the fixture of reference-nonatomic)."""
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    final = ckpt_dir / f"{PREFIX}{step:08d}"
    tmp = ckpt_dir / f".tmp-{final.name}-{os.getpid()}" if atomic else final
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    files = dict(payload)
    files["meta.json"] = json.dumps({"step": step, **meta}, sort_keys=True).encode()
    hashes = {}
    for name, data in files.items():
        with open(tmp / name, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        hashes[name] = hashlib.sha256(data).hexdigest()
        time.sleep(pause_s)
    with open(tmp / MANIFEST, "w") as fh:
        json.dump({"step": step, "files": hashes}, fh, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    time.sleep(pause_s)
    if not atomic:
        return final
    (tmp / COMPLETE).write_text("ok\n")
    time.sleep(pause_s)
    _fsync_dir(tmp)
    if final.exists():
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(ckpt_dir)
    return final


@dataclass(frozen=True)
class Verified:
    path: Path
    step: int


def verify(path: Path, *, checksums: bool = True) -> str | None:
    """Return None if the checkpoint is usable, else the reason it is not."""
    if not (path / COMPLETE).exists():
        return "no COMPLETE marker (partial write)"
    try:
        manifest = json.loads((path / MANIFEST).read_text())
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"unreadable manifest: {exc.__class__.__name__}"
    for name, expected in files.items():
        target = path / name
        if not target.exists():
            return f"missing file {name}"
        if checksums and sha256_file(target) != expected:
            return f"sha256 mismatch in {name}"
    try:
        meta = json.loads((path / "meta.json").read_text())
        int(meta["step"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        if checksums:
            return f"bad meta.json: {exc.__class__.__name__}"
        raise
    return None


QUARANTINE = "QUARANTINE"


def quarantined(ckpt_dir: Path) -> set[str]:
    """Checkpoints the job's own watchdog gave up on (a restore that hung), by name."""
    try:
        return {line.strip() for line in (ckpt_dir / QUARANTINE).read_text().splitlines() if line.strip()}
    except FileNotFoundError:
        return set()


def quarantine(ckpt_dir: Path, name: str) -> None:
    with open(ckpt_dir / QUARANTINE, "a") as fh:
        fh.write(name + "\n")


def newest_valid(ckpt_dir: Path, *, checksums: bool = True,
                 on_try: Callable[[Path], None] | None = None) -> tuple[Verified | None, list[tuple[Path, str]]]:
    """The newest checkpoint that verifies, and every newer one rejected with its reason.

    ``on_try`` is told of each candidate before it is read, so a restore that hangs on a
    read can be seen (and the checkpoint quarantined) from outside."""
    rejected: list[tuple[Path, str]] = []
    skip = quarantined(ckpt_dir)
    for path in checkpoint_dirs(ckpt_dir):
        if path.name in skip:
            rejected.append((path, "quarantined after a hung restore"))
            continue
        if on_try is not None:
            on_try(path)
        reason = verify(path, checksums=checksums)
        if reason is None:
            meta = json.loads((path / "meta.json").read_text())
            return Verified(path=path, step=int(meta["step"])), rejected
        rejected.append((path, reason))
    return None, rejected


def prune(ckpt_dir: Path, keep: int) -> None:
    for path in checkpoint_dirs(ckpt_dir)[keep:]:
        shutil.rmtree(path, ignore_errors=True)
