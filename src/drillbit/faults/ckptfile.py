"""Checkpoint files a fault takes aside and puts back (corrupt-checkpoint, restore-hang).

A file is copied to the drill's scratch folder before it is touched; putting it back
writes the copy under a temporary name, renames it into place and verifies the sha256.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time
from pathlib import Path

from contextlib import nullcontext

from pydantic import Field

from drillbit.spec.checkpoints import Checkpoint, CheckpointSpec, scan, unmatched, where
from drillbit.core.errors import ConfigError, FaultError
from drillbit.faults.base import HealReport, Observation, Params, State
from drillbit.core.handsop import write_all
from drillbit.core.jobhands import Hands
from drillbit.core.paths import entered, is_within
from drillbit.core.proc import ProcRef
from drillbit.core.readwatch import ReadWatch


def pick(spec: CheckpointSpec | None, nth_newest: int, fault: str) -> Checkpoint:
    if spec is None:
        raise FaultError(f"{fault} needs the job's checkpoints: set checkpoint: {{dir, layout}} in the job profile")
    try:
        found = scan(spec)
    except OSError as exc:  # the folder changed under the listing (a job pruning it, or someone swapping it)
        raise FaultError(f"{fault}: could not list the checkpoints in {where(spec)} ({exc.strerror}); nothing was "
                         "touched") from None
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


class ActsAs(State):
    """Whose credentials the fault's file operations run with: the job's, as its target
    process held them when the fault was prepared (:class:`~drillbit.core.jobhands.Hands`), so
    the guardian and ``drill heal`` act as the job's user too."""

    as_uid: int | None = None
    as_gid: int | None = None
    as_groups: list[int] = []

    def hands(self) -> Hands:
        if self.as_uid is None or self.as_gid is None:  # a state recorded before it said (agent API 5)
            return Hands.mine()
        return Hands(self.as_uid, self.as_gid, tuple(self.as_groups))


def acts_as(hands: Hands) -> dict:
    return {"as_uid": hands.uid, "as_gid": hands.gid, "as_groups": list(hands.groups)}


class Backup(ActsAs):
    """A checkpoint file taken aside: where it was (its real path, and the real checkpoint
    folder and folders below it that lead to it, with the identities of the first and the last),
    where its copy is, its sha256, and the file's identity and attributes (device, inode, owner,
    group, mode, times) to restore; after the act, what the damage left there."""

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
    real_root: str | None = None
    dirs: list[str] = []
    name: str | None = None
    root_id: list[int] | None = None
    parent_id: list[int] | None = None
    damage_kind: str | None = None  # file, fifo, absent: what the act left at the name
    corrupted_sha256: str | None = None  # the file the damage left (None: none)
    damage_ino: int | None = None

    def where(self) -> dict:
        """The request fields that lead a helper to the file, and the identities it must find
        (with the descriptor of the file's folder this process kept when it took the file aside:
        the guardian and ``drill heal``, in other processes, find the folder by its path)."""
        return {"real_root": self.real_root or str(Path(self.file).parent), "dirs": list(self.dirs),
                "name": self.name or Path(self.file).name,
                "expect": {"root": self.root_id, "parent": self.parent_id, "held_fd": held_fd(self.backup)}}


_HELD: dict[str, tuple[int, int]] = {}  # a backup's path -> (this process's pid, the file's folder's descriptor)


def held_fd(backup: str) -> int | None:
    held = _HELD.get(backup)
    return held[1] if held is not None and held[0] == os.getpid() else None


def let_go(backup: str) -> None:
    held = _HELD.pop(backup, None)
    if held is not None and held[0] == os.getpid():
        with contextlib.suppress(OSError):
            os.close(held[1])


class ThisRun(Params):
    """A file fault's params for "only what the job wrote in this run"."""

    older_ok: bool = Field(False, description="damage a checkpoint file the job did not write in this run (older "
                                              "than the job's first process); refused otherwise, and named in the "
                                              "report when allowed")
    job_started: float | None = Field(None, description="filled by the agent: when the job's root process on the "
                                                        "node started (its clock); a file older than that is not "
                                                        "this run's")


def written_before(mtime: float | None, started: float | None) -> str | None:
    """How long before ``started`` (the job's first process, on this node's clock) the file
    was last written (``mtime``), or None when it was written since (or nothing says when the
    run began)."""
    if started is None or mtime is None or mtime >= started:
        return None
    ago = started - mtime
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(mtime))
    return f"at {when} ({ago:.0f} s before the job's first process started)" if ago < 86400 * 2 else \
        f"at {when} ({ago / 86400:.0f} days before the job's first process started)"


def this_run(backup: Backup, params: ThisRun, fault: str) -> str | None:
    """Refuse (exit 2, nothing touched; the copy taken aside is discarded) a file the job did
    not write in this run, unless the drill says ``older_ok``; returns how much older it is
    where allowed, else None."""
    older = written_before(backup.mtime_ns / 1e9 if backup.mtime_ns is not None else None, params.job_started)
    if older and not params.older_ok:
        discard(backup)
        raise ConfigError(
            f"{fault}: {backup.file} was last written {older}, before the job's run began: the job did not write it in "
            "this run, so damaging it tests nothing the job did (and may damage what belongs to another run). "
            "Trigger the fault after the job's first save (trigger.at_step past it), or, if you mean it, set "
            "params.older_ok: true (the report says so); nothing was touched")
    return older


BACKUP_PREFIX = "backup-"


def backup_distrust(state: Backup, root: str | None, scratch: Path | None) -> str | None:
    """A registry's Backup names its file inside the checkpoint folder (``root``) and its copy
    in a ``backup-*`` folder of the agent's scratch folder; anything else is not obeyed."""
    file, copy = os.path.realpath(state.file), os.path.realpath(state.backup)
    if root is None or not (is_within(file, os.path.realpath(root)) or
                            (state.real_root is not None and is_within(state.file, state.real_root)
                             and state.real_root == os.path.realpath(root))):
        return f"its file {state.file} is not inside the checkpoint folder it names ({root})"
    if scratch is None or not is_within(copy, os.path.realpath(scratch)) or \
            not Path(copy).parent.name.startswith(BACKUP_PREFIX):
        return f"its copy {state.backup} is not in a {BACKUP_PREFIX}* folder of the agent's scratch folder ({scratch})"
    return None


def take_aside(file: Path, scratch: Path, checkpoint: Path | None = None, root: Path | str | None = None,
               fault: str = "fault", hands: Hands | None = None, writes: str = "file") -> Backup:
    """Copy ``file`` (of ``checkpoint``: its folder, or the file itself) into a fresh folder
    under ``scratch``; returns what heal needs. The file is read by the job's hands (``hands``,
    default the agent's own) at its real place, which must lie inside ``root`` (the job's
    checkpoint folder; a link out of it, or a file with other names, is refused: exit 2), from
    descriptors opened without following links; the copy is written by the agent into its own
    scratch folder, which no one else can write. A file (``writes="file"``) or folder
    (``writes="folder"``: the damage removes or replaces the file) the job's user may not write
    is refused too: the job could not have written it, so it is not the job's to damage."""
    hands = hands or Hands.mine()
    answer, body = hands.must("read", {"root": str(root if root is not None else file.parent), "path": str(file),
                                       "hold": True}, what=fault)
    fd_kept = answer.get("held_fd")
    if not answer.get("writable", {}).get(writes, True):
        if fd_kept is not None:
            os.close(fd_kept)
        owner = answer["file"]["uid"]
        where = answer["real"] if writes == "file" else os.path.dirname(answer["real"])
        raise ConfigError(f"{fault}: {where} is not writable by the job's user ({hands.label()}; the file belongs to "
                          f"uid {owner}): the job could not have written it, so drillbit does not damage it (a "
                          "checkpoint folder that leads into another user's folder?). Point checkpoint.dir at the "
                          "job's own folder; nothing was touched")
    folder = scratch.resolve() / f"{BACKUP_PREFIX}{os.getpid()}-{time.time_ns()}"
    folder.mkdir(parents=True, mode=0o700)
    backup = folder / answer["name"]
    fd = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        write_all(fd, body)
    finally:
        os.close(fd)
    fd = os.open(folder, os.O_RDONLY)  # durable before the fault touches the original
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    info = answer["file"]
    if fd_kept is not None:
        _HELD[str(backup)] = (os.getpid(), fd_kept)
    return Backup(checkpoint=str(checkpoint or answer["real"]), file=answer["real"], backup=str(backup),
                  original_sha256=answer["sha256"], dev=info["dev"], ino=info["ino"], uid=info["uid"],
                  gid=info["gid"], file_mode=info["mode"], atime_ns=info["atime_ns"], mtime_ns=info["mtime_ns"],
                  real_root=answer["real_root"], dirs=answer["dirs"], name=answer["name"], root_id=answer["root"],
                  parent_id=answer["parent"], **acts_as(hands))


def look(state: Backup) -> dict:
    """What stands at the file's name now, seen by the job's hands: ``{"file": {kind, ino, …} |
    None, "sha256": …}``; ``{"error": …}`` where its folder is no longer the one it was."""
    answer, _ = state.hands().call("look", state.where())
    return answer


def damage(state: Backup, how: str, data: bytes = b"", **extra) -> dict:
    """The act on the file the fault took aside (its inode) by the job's hands; the state's
    ``damage_kind``/``damage_ino``/``corrupted_sha256`` are what it left."""
    hands = state.hands()
    answer, _ = hands.call("damage", {**state.where(), "how": how, "ino": state.ino, **extra}, data)
    if "error" not in answer:
        return answer
    who = "" if hands.in_process else f" as the job's user ({hands.label()})"
    if answer.get("code") in REFUSED:  # refused before anything was changed: nothing to heal
        raise FaultError(f"the damage to {state.file}{who} was refused: {answer['error']}; nothing was touched")
    # failed part-way (code partial: a full disk, an I/O error, a file made unreadable the moment after):
    # the fault stays registered, and its heal puts the copy back
    raise OSError(answer.get("errno") or 0, f"the damage to {state.file}{who} failed: {answer['error']}")


REFUSED = {"swapped", "moved", "gone", "link", "notfile", "outside", "hardlink", "EACCES", "EPERM"}


def put_back(state: Backup, *, acted: bool = True) -> HealReport:
    """Restore the original bytes by the job's hands, unless the job has since replaced or
    removed the file (before the heal or while it ran): the original is written under a fresh
    name beside it and exchanged with what is there (``renameat2(RENAME_EXCHANGE)``); what came
    out is removed only when it is this fault's damage (its inode and digest), else it is the
    job's save and goes back. Verified by reading back the file now at the name."""
    path, backup = Path(state.file), Path(state.backup)
    kept = f"original kept at {backup}"
    try:
        data = backup.read_bytes()
    except FileNotFoundError:
        data = None
    left = {"kind": state.damage_kind, "ino": state.damage_ino, "sha256": state.corrupted_sha256} if acted and \
        state.damage_kind else {"kind": "cut-short", "ino": state.ino}
    request = {**state.where(),
               "original": {"sha256": state.original_sha256, "uid": state.uid, "gid": state.gid,
                            "mode": state.file_mode, "atime_ns": state.atime_ns, "mtime_ns": state.mtime_ns},
               "damage": left}
    if data is None:  # nothing to put back from: only say what is there
        now = look(state)
        if now.get("sha256") == state.original_sha256:
            return HealReport(healed=True, verified=True, detail=f"{path.name} already intact")
        return HealReport(healed=False, verified=False, detail=f"backup {backup} is missing")
    answer, _ = state.hands().call("heal", request, data)
    for _ in range(3):  # gone or another folder there: asked again, as a folder swapped to and fro is
        if answer.get("outcome") not in ("gone", "moved"):  # there one moment and not the next
            break
        time.sleep(0.1)
        answer, _ = state.hands().call("heal", request, data)
    if "error" in answer:
        return HealReport(healed=False, verified=False,
                          detail=f"could not put back {path} ({answer['error']}); {kept}")
    outcome = answer["outcome"]
    if outcome == "intact":
        discard(state)
        return HealReport(healed=True, verified=True, detail=f"{path.name} already intact")
    if outcome == "restored":
        discard(state)
        notes = "; " + "; ".join(answer["notes"]) if answer.get("notes") else ""
        woken = f"woke {answer['woken']} blocked reader(s); " if answer.get("woken") else ""
        return HealReport(healed=True, verified=True,
                          detail=f"{woken}restored {path} byte for byte, {answer.get('how', 'in place')} "
                                 f"(sha256 {state.original_sha256[:12]}…){notes}")
    if outcome == "job":
        return HealReport(healed=True, verified=True,
                          detail=f"{path} was since replaced or removed by the job; its newer data is kept ({kept})")
    if outcome == "link":
        return HealReport(healed=True, verified=True, detail=f"{path} is now a link the job made; left as it is "
                                                             f"({kept})")
    if outcome in ("gone", "moved"):  # the job pruned that checkpoint, or saved it again as a new folder
        return HealReport(healed=True, verified=True,
                          detail=f"{answer.get('detail', path.parent)}: replaced or removed by the job, nothing was "
                                 f"written there; its newer data is kept ({kept})")
    if outcome == "swapped":  # a folder on the way is a link now: not the job's save; healed later, or by hand
        return HealReport(healed=False, verified=False,
                          detail=f"{answer.get('detail')}: nothing was written through it; {kept}, to be put back "
                                 "once the folder is back (the heal is retried; `drill heal --abandon` ends it)")
    return HealReport(healed=False, verified=False, detail=f"{answer.get('detail', outcome)} ({kept})")


def discard(state: Backup) -> None:
    """The heal is verified: the copy has done its job. Only a folder this module made (its
    name, a real folder, this user's) is removed: a registry planted by someone else cannot
    turn this into a removal of anything it names."""
    let_go(state.backup)
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

    _watch_error: str | None = None

    def watch_reads(self, spec: CheckpointSpec | None) -> None:
        """Start the watch; never raises (it comes after the damage, whose state must reach the
        registry whatever the watch does: a watch that failed leaves the reads unseen, and says why)."""
        if spec is None or self._watch is not None:
            return
        try:
            self._watch = ReadWatch(spec.dir).start()
        except Exception as exc:  # noqa: BLE001
            self._watch, self._watch_error = None, f"the read watch failed to start ({exc.__class__.__name__}: {exc})"

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
                "reads_why": (w.why if w is not None else self._watch_error or "the read watch was not started")
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
