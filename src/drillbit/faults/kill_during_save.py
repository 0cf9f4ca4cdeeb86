"""kill-during-save (recovery path): the job dies while it writes a checkpoint.

Real failures do not wait for a save to finish. A node lost during a save leaves a folder
that looks complete and is not; Hugging Face's auto-resume picks the highest
``checkpoint-N`` without checking it (transformers issue 35525), and a public study that
killed an HF Trainer job at every file boundary of one save found 17 of 19 crash points
left a job that could not resume unaided (the ckpt-chaos crash-consistency study; this project's issue 14).

The fault is armed on the target's node: its agent watches the job's checkpoint folder
(inotify, or polling where there is none — :mod:`drillbit.core.dirwatch`) and, in the
``save``-th save that starts after arming, at the crash point (``point``: the create, close
or publish of a named file, or ``torn``: closed and then cut to half its size), SIGKILLs
the target rank — or, with ``scope: node``, the whole job on that node (launcher and every
rank), as a machine dies. With ``record: true`` it kills nothing and reports the save's
file events: the first pass of a sweep.

The crash is the fault, so heal leaves the job's files as the crash left them. Right after
the crash what the cut-short save wrote is copied into the drill's run folder, with a listing
of the whole checkpoint folder (``keep_copy``), for the post-mortem, and the folder is judged: which checkpoints were
complete when the job died (the newest of
them is the best a restart could restore) and whether the save that was cut short left a
visible, incomplete checkpoint. ``restore_after: true`` puts the folder back as it was when
the fault was armed, after the drill (the job's later files are kept aside, not deleted).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import tarfile
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from drillbit.core.evidence import SaveCrash, SaveRecorded
from drillbit.spec.checkpoints import CheckpointSpec, scan
from drillbit.core.dirwatch import DirWatch, FileEvent
from drillbit.core.errors import FaultError
from drillbit.faults.base import Evidence, Fault, HealReport, Params, Plan, PlanStep
from drillbit.faults.ckptfile import ActsAs, acts_as, wait_gone, write_all
from drillbit.core.jobhands import Hands
from drillbit.faults.kill_node import TORCHRUN, job_tree
from drillbit.core.paths import is_within
from drillbit.core.proc import ProcRef, open_fds
from drillbit.spec.models import launcher_regex
from drillbit.core.saves import CrashPoint, Save, SaveTracker


class KillDuringSaveParams(Params):
    point: str = Field("create *", description="where in the save: 'create|close|torn|publish PATTERN [#N]' — "
                                               "PATTERN an fnmatch of the file's or folder's name")
    save: int = Field(1, ge=1, description="which save after arming: 1 = the next one to start")
    delay_s: float = Field(0.0, ge=0, description="wait this long after the crash point's event")
    scope: Literal["rank", "ranks", "node"] = Field(
        "rank", description="rank: SIGKILL the target rank; ranks: every rank its launcher runs on that node (the "
                            "launcher lives, and restarts them); node: the job's whole tree on the node, launcher "
                            "included, as a machine dies")
    launcher: str | None = Field(None, description="scope node: the launcher's command line (regex; default: the "
                                                   "job profile's, else torchrun)")
    root: ProcRef | None = Field(None, description="scope node: the job's root on the node (filled by the agent); "
                                                   "never climbed above")
    watch: Literal["auto", "inotify", "poll"] = "auto"
    poll_interval_s: float = Field(0.05, gt=0)
    settle_s: float = Field(0.5, gt=0, description="a save is over after this long without a file event")
    arm_timeout_s: float = Field(300.0, gt=0, description="give up when no save reached the point in this long")
    record: bool = Field(False, description="watch one save and report its file events; kill nothing")
    keep_copy: Literal["save", "all", "none"] = Field(
        "save", description="right after the crash, copy into the run folder what the cut-short save wrote (save), "
                            "the whole checkpoint folder (all: mind its size), or nothing; a listing of the whole "
                            "folder (names, sizes) is kept whenever something is")
    restore_after: bool = Field(False, description="after the drill, put the checkpoint folder back as it was "
                                                   "when the fault was armed")
    checkpoint: CheckpointSpec | None = Field(None, description="default: the job profile's checkpoint")

    @field_validator("point")
    @classmethod
    def _point(cls, value: str) -> str:
        CrashPoint.parse(value)
        return value

    _launcher = field_validator("launcher")(classmethod(lambda cls, v: launcher_regex(v)))


class KillDuringSaveState(ActsAs):
    dir: str
    armed_at: float = 0.0
    before: str | None = None       # restore_after: the folder as it was when armed (a tar the job's hands made)
    manifest: dict[str, str | None] = {}  # restore_after: its files' sha256 (a link: None)
    parent_id: list[int] | None = None    # the identity of the folder that holds the checkpoint folder
    folder_mode: int = 0o755
    keep: str | None = None         # the post-crash copy


class _Outcome:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.data: dict[str, Any] = {}
        self.error: str | None = None


class KillDuringSave(Fault[KillDuringSaveParams, KillDuringSaveState]):
    name = "kill-during-save"
    needs = ("read access to the checkpoint folder (inotify) and the job's signals (the job's user, or root)")
    blast_radius = ("the target rank (scope rank) or the job's processes on its node (scope node), at one point of "
                    "one save; the save's files stay as the crash left them (a copy goes to the run folder)")
    binds = ("checkpoint", "launcher")
    evidence = (SaveCrash, SaveRecorded)
    needs_checkpoint = True
    verb = "killed during a save"

    def hurts(self, params: KillDuringSaveParams) -> Literal["rank", "node"]:
        return "rank" if params.scope == "rank" else "node"
    fault_class = "recovery-path"
    Params = KillDuringSaveParams
    State = KillDuringSaveState
    expects = "crash"
    max_targets = 1  # one watch of one checkpoint folder; scope: node takes the rest of the node
    arms_on_save = True

    def __init__(self, scratch: Path | None = None) -> None:
        super().__init__(scratch)
        self._outcome: _Outcome | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- plan ------------------------------------------------------------------------------
    def plan(self, targets: list[ProcRef], params: KillDuringSaveParams) -> Plan:
        who = {"node": "the job's whole tree on the target's node", "ranks": "every rank on the target's node",
               "rank": "the target rank"}[params.scope]
        action = (f"watch save #{params.save} and record its file events (kill nothing)" if params.record else
                  f"in save #{params.save}, at '{params.point}'"
                  + (f" + {params.delay_s:g} s" if params.delay_s else "") + f", SIGKILL {who}")
        heal = ("nothing: the files stay as the crash left them (a copy is kept in the run folder)"
                if not params.restore_after else "put the checkpoint folder back as it was when armed")
        return Plan(fault=self.name, targets=targets, action=action, heal=heal)

    def describe(self, target: ProcRef, params: KillDuringSaveParams) -> PlanStep:
        step = super().describe(target, params)
        return step.model_copy(update={"files": [self._dir(params)]})

    def heals_after_job(self, params: KillDuringSaveParams) -> bool:
        return params.restore_after  # the folder goes back once nothing writes it any more

    def confirm_wait(self, params: KillDuringSaveParams) -> float:
        return params.arm_timeout_s

    # --- inject ------------------------------------------------------------------------------
    def _dir(self, params: KillDuringSaveParams) -> str:
        if params.checkpoint is None:
            raise FaultError(f"{self.name} needs the job's checkpoints: set checkpoint: {{dir, layout}} in the job "
                             "profile")
        return str(Path(params.checkpoint.dir).resolve())

    def _scratch(self, ckpt_dir: str) -> Path:
        base = (self.scratch or Path(ckpt_dir).parent).resolve()
        folder = base / f"kill-during-save-{os.getpid()}-{time.time_ns()}"
        folder.mkdir(parents=True)
        return folder

    def prepare(self, target: ProcRef, params: KillDuringSaveParams) -> KillDuringSaveState:
        ckpt_dir = self._dir(params)
        if not target.alive():
            raise FaultError(f"rank {target.rank} (pid {target.pid}) is gone; nothing to arm")
        hands = Hands.of_target(target)
        folder = self._scratch(ckpt_dir)
        before, manifest, parent_id, mode = None, {}, None, 0o755
        if params.restore_after:
            # the folder as it is now, read by the job's own hands without following a link (a tar
            # in the agent's scratch folder); put back by them too (heal)
            before = str(folder / "before.tar")
            parent, name = os.path.split(ckpt_dir)
            answer, body = hands.call("pack", {"real_root": parent, "dirs": [], "name": name})
            if "error" in answer and answer.get("code") != "gone":
                raise FaultError(f"{self.name}: cannot take a copy of {ckpt_dir} to put back after the drill: "
                                 f"{answer['error']}")
            if "error" in answer:  # not made yet: it is put back empty
                answer, body = {"manifest": {}}, _empty_tar()
            fd = os.open(before, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                write_all(fd, body)
            finally:
                os.close(fd)
            manifest = answer.get("manifest", {})
            parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                info = os.fstat(parent_fd)
                parent_id = [info.st_dev, info.st_ino]
            finally:
                os.close(parent_fd)
            with contextlib.suppress(OSError):
                mode = stat.S_IMODE(os.stat(ckpt_dir).st_mode)
        return KillDuringSaveState(dir=ckpt_dir, before=before, manifest=manifest, parent_id=parent_id,
                                   folder_mode=mode, keep=str(folder / "after-crash") if params.keep_copy != "none"
                                   else None, **acts_as(hands))

    def unprepare(self, target: ProcRef, params: KillDuringSaveParams, intent: KillDuringSaveState) -> None:
        if intent.before:
            shutil.rmtree(Path(intent.before).parent, ignore_errors=True)

    def act(self, target: ProcRef, params: KillDuringSaveParams, intent: KillDuringSaveState) -> KillDuringSaveState:
        state = intent.model_copy(update={"armed_at": time.time()})
        watch = DirWatch(state.dir, params.watch, params.poll_interval_s)  # from now: no event is missed
        self._outcome = _Outcome()
        self._thread = threading.Thread(target=self._run, args=(target, params, state, watch), daemon=True,
                                        name="kill-during-save")
        self._thread.start()
        return state

    def _run(self, target: ProcRef, params: KillDuringSaveParams, state: KillDuringSaveState,
             watch: DirWatch) -> None:
        outcome = self._outcome
        assert outcome is not None
        point = CrashPoint.parse(params.point)
        tracker = SaveTracker(params.settle_s)
        seen: dict[tuple[str, str], int] = {}
        writers: dict[str, dict[str, Any]] = {}
        deadline = state.armed_at + params.arm_timeout_s
        try:
            with watch:
                while not self._stop.is_set():
                    now = time.time()
                    if now > deadline:
                        outcome.error = (f"no save reached '{params.point}' within {params.arm_timeout_s:g} s "
                                         f"({len(tracker.saves)} save(s) seen)")
                        return
                    events = watch.events(0.2)
                    hit: FileEvent | None = None
                    for event in events:
                        if params.record and event.kind == "create" and not event.is_dir:
                            writers[event.path] = writer_of(Path(state.dir) / event.path, target)
                        save = tracker.feed(event)
                        if save is None or save.number != params.save or params.record or hit is not None:
                            continue
                        if point.matches(event, seen):
                            hit = event
                    current = tracker.current
                    if params.record and current is not None and current.number > params.save:
                        outcome.data = self._recorded(tracker.saves[params.save - 1], watch.mode, writers)
                        return
                    if params.record and current is not None and current.number == params.save \
                            and tracker.ended(time.time()):
                        outcome.data = self._recorded(current, watch.mode, writers)
                        return
                    if current is not None and current.number > params.save and not params.record:
                        outcome.error = (f"save #{params.save} ended without reaching '{params.point}' (its "
                                         f"files: {', '.join(sorted({e.name for e in tracker.saves[params.save - 1].events}))})")
                        return
                    if hit is not None:
                        outcome.data = self._crash(target, params, state, point, hit, tracker.saves[params.save - 1],
                                                   watch)
                        return
        except Exception as exc:  # reported through confirm; the drill records it
            outcome.error = f"{exc.__class__.__name__}: {exc}"
        finally:
            outcome.done.set()

    def _recorded(self, save: Save, mode: str, writers: dict[str, dict[str, Any]]) -> dict[str, Any]:
        return {"recorded": True, "watch": mode, "save": save.number,
                "events": [{**_rel(e, save.started), **writers.get(e.path, {})} if e.kind == "create" else
                           _rel(e, save.started) for e in save.events]}

    def _crash(self, target: ProcRef, params: KillDuringSaveParams, state: KillDuringSaveState, point: CrashPoint,
               hit: FileEvent, save: Save, watch: DirWatch) -> dict[str, Any]:
        if params.delay_s:
            time.sleep(params.delay_s)
        if params.scope == "node":
            victims = job_tree(target, params.launcher or TORCHRUN, params.root)
        elif params.scope == "ranks":
            victims = [target] + siblings(target)
        else:
            victims = [target]
        # frozen first, so no writer can close a file between the look and the kill: a file a
        # victim holds open now was not finished, whatever close the kernel reports for it after
        for v in victims:
            v.send(signal.SIGSTOP)
        open_at_kill = held_open(victims, Path(state.dir))
        t_kill = time.time()
        for v in victims:
            v.send(signal.SIGKILL)
        gone = all(wait_gone(v, 10.0) for v in victims)
        torn = None
        if point.kind == "torn":  # by the job's hands, from the folder's descriptor, through no link
            *dirs, name = hit.path.split("/")
            answer, _ = state.hands().call("truncate_half", {"real_root": state.dir, "dirs": dirs, "name": name})
            torn = {"path": hit.path, "error": answer["error"]} if "error" in answer else \
                {"path": hit.path, "size": answer["size"], "cut_to": answer["cut_to"]}
        crashed = Save(save.number, save.events + watch.events(0.0))  # and what the dying writers still finished
        judged = judge_crash(state.dir, params.checkpoint, crashed, torn, open_at_kill)
        kept = keep_after_crash(state, crashed, params.keep_copy) if state.keep else None
        return {"point": point.label(), "save": save.number, "watch": watch.mode, "gone": gone,
                "killed": [v.pid for v in victims], "scope": params.scope,
                "t_event": hit.t, "t_kill": t_kill, "lag_s": round(t_kill - hit.t, 6),
                "since_save_start_s": round(t_kill - save.started, 6), "file": hit.path, "torn": torn,
                "open_at_kill": sorted(open_at_kill),
                "events": [_rel(e, save.started) for e in crashed.events], "kept": kept, **judged}

    def confirm(self, target: ProcRef, params: KillDuringSaveParams, state: KillDuringSaveState) -> Evidence | None:
        outcome = self._outcome
        if outcome is None:
            return None
        outcome.done.wait(timeout=5.0)  # the controller asks again until its confirm_wait is spent
        if not outcome.done.is_set():
            return None
        if outcome.error:
            return Evidence(what="not fired", data={"unconfirmed": outcome.error})
        data = outcome.data
        if data.get("recorded"):
            return Evidence(what=f"recorded save #{data['save']} ({len(data['events'])} file events)", data=data)
        if not data.get("gone"):
            return None
        return Evidence(t=data["t_kill"], what=f"killed at '{data['point']}' of save #{data['save']}",
                        data=data)

    # --- heal --------------------------------------------------------------------------------
    def distrust(self, params: KillDuringSaveParams, state: KillDuringSaveState, scratch: Path | None, told: bool) -> str | None:
        """The folder put back is the checkpoint folder its params name; the copy it comes from
        is in a folder of this fault's under the agent's scratch folder."""
        if params.checkpoint is not None and not is_within(os.path.realpath(state.dir),
                                                           os.path.realpath(params.checkpoint.dir)):
            return f"its folder {state.dir} is not the checkpoint folder it names ({params.checkpoint.dir})"
        for copy in (state.before, state.keep):
            if copy is None:
                continue
            real = os.path.realpath(copy)
            if scratch is None or not is_within(real, os.path.realpath(scratch)) or \
                    not Path(real).parent.name.startswith("kill-during-save-"):
                return f"its copy {copy} is not in a folder of this fault's under the agent's scratch ({scratch})"
        return None

    def heal(self, target: ProcRef, params: KillDuringSaveParams, state: KillDuringSaveState) -> HealReport:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if not params.restore_after or state.before is None:
            return HealReport(healed=True, verified=True, detail="disarmed; the files stay as the crash left them"
                              + (f" (copy in {state.keep})" if state.keep and Path(state.keep).exists() else ""))
        return restore_folder(state)


def siblings(target: ProcRef) -> list[ProcRef]:
    """The other ranks its launcher runs on this node: the target's parent's other children."""
    proc = target.process()
    if proc is None:
        return []
    try:
        parent = proc.parent()
        return [ProcRef.of(p, node=target.node) for p in (parent.children() if parent else []) if p.pid != proc.pid]
    except Exception:
        return []


def held_open(victims: list[ProcRef], folder: Path) -> set[str]:
    """The files under ``folder`` (relative paths) that the victims hold open for writing:
    what the kill cuts short. Read from /proc/PID/fd and its flags."""
    root = os.path.realpath(folder)
    out: set[str] = set()
    for v in victims:
        for target, flags in open_fds(v.pid, flags=True):
            if flags is not None and flags & (os.O_WRONLY | os.O_RDWR) and target.startswith(root + os.sep):
                out.add(os.path.relpath(target, root))
    return out


def writer_of(path: Path, target: ProcRef) -> dict[str, Any]:
    """Which of the job's processes on this node holds ``path`` open as it is created: the
    target, or another child of the target's launcher (best effort: a file written and
    closed before we look has no writer to find)."""
    wanted = str(path)
    for ref in [target] + siblings(target):
        proc = ref.process()
        try:
            if proc is not None and any(f.path == wanted for f in proc.open_files()):
                return {"writer_pid": ref.pid, "by_target": ref.pid == target.pid}
        except Exception:
            continue
    return {}


def keep_after_crash(state: KillDuringSaveState, save: Save, what: str) -> str:
    """The post-mortem copy in ``state.keep``: the entries the cut-short save touched (or
    everything), read by the job's hands without following a link and unpacked by the agent
    (no owner, no link out, no device: tarfile's data filter), and a listing of the whole folder
    as the crash left it (path, size) in ``listing.json``."""
    keep = Path(state.keep or "")
    parent, name = os.path.split(state.dir)
    try:
        keep.mkdir(parents=True)
        answer, body = state.hands().call("pack", {"real_root": parent, "dirs": [], "name": name})
        if "error" in answer:
            return f"(copy failed: {answer['error']})"
        tops = None if what == "all" else save.tops()
        with tarfile.open(fileobj=io.BytesIO(body)) as tar:
            members = tar.getmembers()
            listing = {m.name: m.size for m in members if m.isfile()}
            (keep / "listing.json").write_text(json.dumps(listing, indent=1))
            skipped = []
            for m in members:
                if tops is not None and m.name.split("/", 1)[0] not in tops:
                    continue
                try:  # one member at a time: a link the filter refuses (absolute, out of the copy) is left out
                    tar.extract(m, keep, filter="data")
                except (tarfile.FilterError, OSError):
                    skipped.append(m.name)
            if skipped:
                (keep / "skipped.json").write_text(json.dumps(skipped, indent=1))
        return str(keep)
    except (OSError, tarfile.TarError) as exc:
        return f"(copy failed: {exc})"


def _rel(e: FileEvent, t0: float) -> dict[str, Any]:
    return {"t": round(e.t - t0, 6), "kind": e.kind, "path": e.path, "is_dir": e.is_dir, "size": e.size}


def judge_crash(ckpt_dir: str, spec: CheckpointSpec | None, save: Save, torn: dict | None,
                open_at_kill: set[str] | None = None) -> dict[str, Any]:
    """Right after the crash: which checkpoints the job could restore, which one the cut-short
    save left behind, and whether that one is complete.

    The cut-short save is complete only if every file it created was closed by its writer
    before the kill (a file a killed writer still held open is torn, although the kernel
    reports a close for it as the process dies), none was torn,
    the layout's marker (if any) is there, and it holds every file name the newest other
    complete checkpoint holds."""
    if spec is None:
        return {}
    found = scan(spec.model_copy(update={"dir": ckpt_dir}))
    open_at_kill = open_at_kill or set()
    tops = save.tops() | {p.split("/", 1)[0] for p in open_at_kill}
    published = {e.path for e in save.events if e.kind == "publish"}
    crashed = next((c for c in found if c.path.name in tops), None)
    files = save.files()
    unclosed = sorted(p for p, f in files.items() if not f["closed"] and p not in open_at_kill
                      and (Path(ckpt_dir) / p).exists())
    cut = sorted(p for p in open_at_kill if (Path(ckpt_dir) / p).exists())
    others = [c for c in found if c is not crashed and c.complete is not False]

    def names(path: Path) -> set[str]:
        return {str(p.relative_to(path)) for p in path.rglob("*") if p.is_file()} if path.is_dir() else {path.name}

    reasons: list[str] = []
    if crashed is not None:
        if unclosed:
            reasons.append(f"{', '.join(Path(u).name for u in unclosed)} still being written")
        if cut:
            reasons.append(f"{', '.join(Path(u).name for u in cut)} still open for writing by a killed writer "
                           "(the kernel closed it, the writer never finished it)")
        if torn and "cut_to" in torn:
            reasons.append(f"{Path(torn['path']).name} torn to {torn['cut_to']} of {torn['size']} bytes")
        if crashed.complete is False:
            reasons.append(f"no {crashed.marker.name if crashed.marker else 'marker'}")
        if others and crashed.path.is_dir():
            missing = sorted(names(others[0].path) - names(crashed.path))
            if missing:
                reasons.append(f"missing {', '.join(missing)} (in {others[0].name})")
    complete = [c for c in found if (c.step is not None or spec.layout == "file") and c.complete is not False
                and not (c is crashed and reasons)]
    # newest first: by step; a file rewritten in place has none, and scan() put the newest first
    best = (max(complete, key=lambda c: c.step or 0) if spec.layout != "file" else complete[0]) if complete else None
    return {"dir": ckpt_dir, "crashed": crashed.name if crashed else None,
            "crashed_step": crashed.step if crashed else None,
            "crashed_complete": None if crashed is None else not reasons,
            "crashed_why": "; ".join(reasons),
            "published": sorted(published),
            "best_complete": best.name if best else None,
            "best_complete_step": best.step if best else None,
            "checkpoints": [{"name": c.name, "step": c.step, "complete": c.complete if c is not crashed else not reasons}
                            for c in found]}


def restore_folder(state: KillDuringSaveState) -> HealReport:
    """Put the checkpoint folder back as ``state.before`` holds it, by the job's hands: unpacked
    beside it, exchanged with the folder there now, which stays beside it (the job's later files
    are moved aside, not deleted); verified file by file against the manifest (names, bytes).
    A folder that holds it which is no longer the one it was (moved, or a link now) is not
    written."""
    parent, name = os.path.split(state.dir)
    try:
        body = Path(state.before or "").read_bytes()
    except OSError as exc:
        return HealReport(healed=False, verified=False, detail=f"the copy to put back is missing ({exc.strerror})")
    answer, _ = state.hands().call("restore_folder", {"real_root": parent, "dirs": [], "name": name,
                                                      "expect": {"root": state.parent_id}, "mode": state.folder_mode,
                                                      "manifest": state.manifest}, body)
    if "error" in answer:
        return HealReport(healed=False, verified=False, detail=f"could not put {state.dir} back: {answer['error']} "
                                                              f"(the copy is kept at {state.before})")
    if answer["outcome"] != "restored":
        return HealReport(healed=False, verified=False, detail=f"{state.dir}: {answer['detail']} (the copy is kept at "
                                                              f"{state.before})")
    aside = f"; the job's later files are in {os.path.join(parent, answer['aside'])}" if answer.get("aside") else ""
    return HealReport(healed=True, verified=True, detail=f"put {state.dir} back as it was when armed{aside}")


def _empty_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w"):
        pass
    return buf.getvalue()
