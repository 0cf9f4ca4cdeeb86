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

from contextlib import nullcontext

from drillbit.checkpoints import Checkpoint, CheckpointSpec, scan, unmatched, where
from drillbit.errors import ConfigError, FaultError
from drillbit.faults.base import HealReport, Observation, State
from drillbit.paths import entered
from drillbit.proc import ProcRef
from drillbit.readwatch import ReadWatch


def sha256(path: Path) -> str | None:
    """The file's sha256; None when it is missing or not a regular file (never opens a FIFO,
    whose read would block forever)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def pick(spec: CheckpointSpec | None, nth_newest: int, fault: str) -> Checkpoint:
    if spec is None:
        raise FaultError(f"{fault} needs the job's checkpoints: set checkpoint: {{dir, layout}} in the job profile")
    found = scan(spec)
    if not found and (names := unmatched(spec)):
        shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        raise ConfigError(f"{fault}: {spec.dir} holds {shown}, but the job profile's checkpoint layout "
                          f"({spec.layout}) takes none of them for a checkpoint. Describe them: a file the job "
                          f"rewrites in place is checkpoint: {{dir: ..., layout: file, files: [{names[0]}]}}; files "
                          "with a step in the name are layout: glob with glob and step_regex")
    if len(found) <= nth_newest:
        raise FaultError(f"only {len(found)} checkpoint(s) in {where(spec)}; cannot use #{nth_newest}")
    return found[nth_newest]


def data_of(ckpt: Checkpoint) -> Path:
    if not ckpt.data:
        raise FaultError(f"{ckpt.path} has no data file")
    return ckpt.data[0]


def marker_of(ckpt: Checkpoint, layout: str) -> Path:
    if ckpt.marker is None:
        raise FaultError(f"layout {layout} has no completion marker; use another mode (flip-bytes, truncate, "
                         "delete-shard, corrupt-metadata)")
    if not ckpt.marker.exists():
        raise FaultError(f"{ckpt.path} has no {ckpt.marker.name}: it is not complete, so there is no marker to drop")
    return ckpt.marker


def metadata_of(ckpt: Checkpoint, layout: str) -> Path:
    if ckpt.metadata is None:
        raise FaultError(f"layout {layout} names no metadata file for {ckpt.path}; use another mode")
    return ckpt.metadata


class Backup(State):
    """A checkpoint file taken aside: where it was, where its copy is, and its sha256."""

    checkpoint: str
    file: str
    backup: str
    original_sha256: str
    step: int | None = None  # the checkpoint's step, where its layout names one


def real_inside(file: Path, root: Path | str, fault: str) -> Path:
    """The file a fault would really touch: ``file`` with every link resolved — refused when
    that lies outside the job's checkpoint folder (a marker, metadata file or checkpoint
    folder that is a link to something else: the fault would write through it, and the heal
    would put back the link, not the file)."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(file)
    if os.path.commonpath([real, real_root]) != real_root:
        raise FaultError(f"{fault}: {file} leads to {real}, outside the job's checkpoint folder {root} (a symlink); "
                         "drillbit does not write through it. Pick another checkpoint (nth_newest) or mode")
    if not stat.S_ISREG(os.stat(real).st_mode):
        raise FaultError(f"{fault}: {real} is not a regular file")
    return Path(real)


def take_aside(file: Path, scratch: Path, checkpoint: Path | None = None, root: Path | str | None = None,
               fault: str = "fault") -> Backup:
    """Copy ``file`` (of ``checkpoint``: its folder, or the file itself) into a fresh folder
    under ``scratch``; returns what heal needs. With ``root`` (the job's checkpoint folder),
    the file is taken at its real place, which must lie inside it (:func:`real_inside`)."""
    if root is not None:
        file = real_inside(file, root, fault)
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
    return Backup(checkpoint=str(checkpoint or file.parent), file=str(file), backup=str(backup),
                  original_sha256=sha256(backup) or "")


def put_back(state: Backup, *, still_ours: bool) -> HealReport:
    """Restore the original bytes, unless the job has since replaced or removed the file.
    The file is written at its own place, never through a link: a link found there now is
    the job's (it replaced the file), and left as it is."""
    path, backup = Path(state.file), Path(state.backup)
    if path.is_symlink():
        return HealReport(healed=True, verified=True, detail=f"{path} is now a link the job made; left as it is "
                          f"(original kept at {backup})")
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


class ReadWitness:
    """A file fault's witness of what the job read: from the damage until the heal, a
    :class:`~drillbit.readwatch.ReadWatch` on the job's checkpoint folder (on this node, the
    one that holds the file); its reads go back with the heal report as ``ckpt.read``
    observations, and the evidence says how the reads were seen and which checkpoints (and
    steps) were there to read."""

    _watch: ReadWatch | None = None

    def watch_reads(self, spec: CheckpointSpec | None) -> None:
        if spec is None or self._watch is not None:
            return
        self._watch = ReadWatch(spec.dir).start()

    def own_reads(self):
        """A block whose reads are this agent's, not the job's (a hash, a put-back)."""
        return self._watch.own() if self._watch is not None else nullcontext()

    def read_evidence(self, spec: CheckpointSpec | None) -> dict:
        w = self._watch
        found = scan(spec) if spec is not None else []
        return {"root": entered(spec.dir) if spec is not None else None,
                "checkpoints": {str(c.path): c.step for c in found},
                "reads": w.mode if w is not None else "none",
                "reads_local": w.local if w is not None else None,
                "reads_why": (w.why if w is not None else "the read watch was not started")
                + (f"; the folder is on {w.network_fs}, whose other hosts' reads no watch here sees"
                   if w is not None and not w.local else "")}

    def read_observations(self, *, final: bool) -> list[Observation]:
        w = self._watch
        if w is None:
            return []
        if final:
            w.stop()
            self._watch = None
        return [Observation(t=r.t, kind="ckpt.read", rank=r.rank,
                            data={"pid": r.pid, "file": r.path, "cmdline": r.cmdline, "how": w.mode})
                for r in w.drain()]
