"""Checkpoint files a fault takes aside and puts back (corrupt-checkpoint, restore-hang).

A file is copied to the drill's scratch folder before it is touched; putting it back
writes the copy under a temporary name, renames it into place and verifies the sha256.
"""
from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import stat
import time
from pathlib import Path

from contextlib import nullcontext

from pydantic import Field

from drillbit.spec.checkpoints import Checkpoint, CheckpointSpec, scan, unmatched, where
from drillbit.core.errors import ConfigError, FaultError
from drillbit.faults.base import HealReport, Observation, Params, State
from drillbit.core.paths import entered, is_within
from drillbit.core.proc import ProcRef
from drillbit.core.readwatch import ReadWatch


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
    """A checkpoint file taken aside: where it was, where its copy is, its sha256, and the
    file's identity and attributes (device, inode, owner, group, mode, times) to restore."""

    checkpoint: str
    file: str
    backup: str
    original_sha256: str
    step: int | None = None  # the checkpoint's step, where its layout names one
    dev: int | None = None
    ino: int | None = None
    uid: int | None = None
    gid: int | None = None
    file_mode: int | None = None
    atime_ns: int | None = None
    mtime_ns: int | None = None


class ThisRun(Params):
    """A file fault's params for "only what the job wrote in this run"."""

    older_ok: bool = Field(False, description="damage a checkpoint file the job did not write in this run (older "
                                              "than the job's first process); refused otherwise, and named in the "
                                              "report when allowed")
    job_started: float | None = Field(None, description="filled by the agent: when the job's root process on the "
                                                        "node started (its clock); a file older than that is not "
                                                        "this run's")


def written_before(path: Path, started: float | None) -> str | None:
    """How long before ``started`` (the job's first process, on this node's clock) the file
    was last written, or None when it was written since (or nothing says when the run began)."""
    if started is None:
        return None
    try:
        mtime = os.lstat(path).st_mtime
    except OSError:
        return None  # gone: the act's own checks say so
    if mtime >= started:
        return None
    ago = started - mtime
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(mtime))
    return f"at {when} ({ago:.0f} s before the job's first process started)" if ago < 86400 * 2 else \
        f"at {when} ({ago / 86400:.0f} days before the job's first process started)"



def this_run(victim: Path, params: ThisRun, fault: str) -> str | None:
    """Refuse (exit 2, nothing touched) a file the job did not write in this run, unless the
    drill says ``older_ok``; returns how much older it is where allowed, else None."""
    older = written_before(victim, params.job_started)
    if older and not params.older_ok:
        raise ConfigError(
            f"{fault}: {victim} was last written {older}, before the job's run began: the job did not write it in "
            "this run, so damaging it tests nothing the job did (and may damage what belongs to another run). "
            "Trigger the fault after the job's first save (trigger.at_step past it), or, if you mean it, set "
            "params.older_ok: true (the report says so); nothing was touched")
    return older


BACKUP_PREFIX = "backup-"


def backup_distrust(state: Backup, root: str | None, scratch: Path | None) -> str | None:
    """A registry's Backup names its file inside the checkpoint folder (``root``) and its copy
    in a ``backup-*`` folder of the agent's scratch folder; anything else is not obeyed."""
    file, copy = os.path.realpath(state.file), os.path.realpath(state.backup)
    if root is None or not is_within(file, os.path.realpath(root)):
        return f"its file {state.file} is not inside the checkpoint folder it names ({root})"
    if scratch is None or not is_within(copy, os.path.realpath(scratch)) or \
            not Path(copy).parent.name.startswith(BACKUP_PREFIX):
        return f"its copy {state.backup} is not in a {BACKUP_PREFIX}* folder of the agent's scratch folder ({scratch})"
    return None


def real_inside(file: Path, root: Path | str, fault: str) -> Path:
    """The file a fault would really touch: ``file`` with every link resolved — refused when
    that lies outside the job's checkpoint folder (a marker, metadata file or checkpoint
    folder that is a link to something else: the fault would write through it, and the heal
    would put back the link, not the file), and when it has another name (a hard link: the
    damage would show under a name outside the folder, which no heal of this name can see)."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(file)
    if os.path.commonpath([real, real_root]) != real_root:  # the description's to fix: exit 2
        raise ConfigError(f"{fault}: {file} leads to {real}, outside the job's checkpoint folder {root} (a symlink); "
                          "drillbit does not write through it. Pick another checkpoint (nth_newest) or mode")
    info = os.stat(real)
    if not stat.S_ISREG(info.st_mode):
        raise FaultError(f"{fault}: {real} is not a regular file")
    if info.st_nlink > 1:
        raise ConfigError(f"{fault}: {real} has {info.st_nlink} names (hard links): damaging it would damage the "
                          "file under its other names too, outside what the drill watches and heals. Pick another "
                          "checkpoint (nth_newest) or mode, or give the job a copy")
    return Path(real)


def take_aside(file: Path, scratch: Path, checkpoint: Path | None = None, root: Path | str | None = None,
               fault: str = "fault") -> Backup:
    """Copy ``file`` (of ``checkpoint``: its folder, or the file itself) into a fresh folder
    under ``scratch``; returns what heal needs. With ``root`` (the job's checkpoint folder),
    the file is taken at its real place, which must lie inside it (:func:`real_inside`)."""
    if root is not None:
        file = real_inside(file, root, fault)
    info = os.stat(file, follow_symlinks=False)
    folder = scratch.resolve() / f"{BACKUP_PREFIX}{os.getpid()}-{time.time_ns()}"
    folder.mkdir(parents=True, mode=0o700)
    backup = folder / file.name
    shutil.copy2(file, backup)
    for path in (backup, folder):  # durable before the fault touches the original
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return Backup(checkpoint=str(checkpoint or file.parent), file=str(file), backup=str(backup),
                  original_sha256=sha256(backup) or "", dev=info.st_dev, ino=info.st_ino, uid=info.st_uid,
                  gid=info.st_gid, file_mode=stat.S_IMODE(info.st_mode), atime_ns=info.st_atime_ns,
                  mtime_ns=info.st_mtime_ns)


def _digest_fd(fd: int) -> str:
    h = hashlib.sha256()
    os.lseek(fd, 0, os.SEEK_SET)
    while chunk := os.read(fd, 1 << 20):
        h.update(chunk)
    return h.hexdigest()


def write_all(fd: int, data: bytes) -> None:
    """All of ``data`` to ``fd`` (a short write goes on), then fsync."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.fsync(fd)


def _attributes(fd: int, state: Backup) -> None:
    """The original owner, group, mode and times, on the file written (a root heal must not
    hand the job back a root-owned checkpoint it cannot read)."""
    if state.uid is not None and state.gid is not None:
        os.fchown(fd, state.uid, state.gid)
    if state.file_mode is not None:
        os.fchmod(fd, state.file_mode)
    if state.atime_ns is not None and state.mtime_ns is not None:
        os.utime(fd, ns=(state.atime_ns, state.mtime_ns))


def _same_inode(path: Path, state: Backup) -> bool:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(info.st_mode) and state.ino is not None and (info.st_dev, info.st_ino) == (state.dev, state.ino)


def put_back(state: Backup, *, still_ours: bool) -> HealReport:
    """Restore the original bytes, unless the job has since replaced or removed the file.
    The file is written at its own place, never through a link: a link found there now is
    the job's (it replaced the file), and left as it is. Where the damaged file is still the
    inode the fault took aside, its bytes are written back into that inode (opened without
    following links), so every name of it, its owner, mode and times are the original's;
    where it is gone (deleted, swapped for a FIFO), a new file is made under a name only this
    heal can have created (O_EXCL, O_NOFOLLOW), given the original's owner, mode and times,
    and renamed into place. Verified by reading back the file now at the path."""
    path, backup = Path(state.file), Path(state.backup)
    if path.is_symlink():
        return HealReport(healed=True, verified=True, detail=f"{path} is now a link the job made; left as it is "
                          f"(original kept at {backup})")
    if sha256(path) == state.original_sha256 and (state.ino is None or _same_inode(path, state)):
        discard(state)
        return HealReport(healed=True, verified=True, detail=f"{path.name} already intact")
    if not backup.exists():
        return HealReport(healed=False, verified=False, detail=f"backup {backup} is missing")
    if not still_ours or not path.parent.exists():
        return HealReport(healed=True, verified=True,
                          detail=f"{path} was since replaced or removed by the job; its newer data is kept "
                                 f"(original kept at {backup})")
    data = backup.read_bytes()
    if _same_inode(path, state):  # in place: the same inode, through no link
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_TRUNC)
        try:
            write_all(fd, data)
            _attributes(fd, state)
        finally:
            os.close(fd)
        how = "in place (the same inode)"
    else:
        tmp = path.with_name(f".{path.name}.drillbit-heal-{secrets.token_hex(8)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            write_all(fd, data)
            _attributes(fd, state)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        how = "as a new file with the original's owner, mode and times"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return HealReport(healed=False, verified=False, detail=f"restored {path} but cannot read it back: {exc}")
    try:
        info = os.fstat(fd)
        ok = stat.S_ISREG(info.st_mode) and _digest_fd(fd) == state.original_sha256
    finally:
        os.close(fd)
    if ok:
        discard(state)
    return HealReport(healed=ok, verified=ok,
                      detail=f"restored {path} byte for byte {how} (sha256 {state.original_sha256[:12]}…)" if ok
                      else f"restored {path} but what is there now does not match the original's sha256")


def discard(state: Backup) -> None:
    """The heal is verified: the copy has done its job. Only a folder this module made (its
    name, a real folder, this user's) is removed: a registry planted by someone else cannot
    turn this into a removal of anything it names."""
    folder = Path(state.backup).parent
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        return
    if not folder.name.startswith(BACKUP_PREFIX) or not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        return
    shutil.rmtree(folder, ignore_errors=True)


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
    :class:`~drillbit.core.readwatch.ReadWatch` on the job's checkpoint folder (on this node, the
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
