"""Saves seen as file events (inotify and polling, on a real filesystem), the crash points of
one save, what a crash left (judge_crash), and how a restart is judged against it."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from drillbit.spec.checkpoints import CheckpointSpec
from drillbit.judging.checks.recovery import Measurements, _judge_crash_restore, crash_class
from drillbit.judging.checks.slo import _crash_invariants
from drillbit.core.dirwatch import DirWatch, FileEvent, inotify_available
from drillbit.core.jobhands import Hands
from drillbit.faults.ckptfile import acts_as
from drillbit.faults.kill_during_save import KillDuringSaveState, judge_crash, restore_folder
from drillbit.core.saves import CrashPoint, Save, SaveTracker, crash_points, pattern_of, sample

MODES = ["poll"] + (["inotify"] if inotify_available() else [])
# Polling sees a file closed only once it sat still for an interval: on a loaded machine the
# poller needs time between the save's steps, or a file closed and renamed within one poll is
# seen only as published (the poll tests once failed so under a full suite's load)
PAUSE = {"poll": 0.25, "inotify": 0.06}


def atomic_save(root: Path, step: int, pause: float = 0.06) -> None:
    """The reference job's save, in slow motion: temp folder, files, marker, rename."""
    tmp = root / f".tmp-step_{step:08d}-{os.getpid()}"
    tmp.mkdir(parents=True)
    for name, data in (("shard_0.pt", b"w" * 200), ("meta.json", b'{"step": %d}' % step), ("MANIFEST.json", b"{}"),
                       ("COMPLETE", b"ok\n")):
        (tmp / name).write_bytes(data)
        time.sleep(pause)
    os.rename(tmp, root / f"step_{step:08d}")


def watch_while(root: Path, mode: str, action) -> list[FileEvent]:
    watch = DirWatch(root, mode, interval=0.01)
    events: list[FileEvent] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            events.extend(watch.events(0.02))
    reader = threading.Thread(target=read)
    reader.start()
    try:
        action()
        time.sleep(0.15)
    finally:
        stop.set()
        reader.join()
        watch.close()
    return events


@pytest.mark.parametrize("mode", MODES)
def test_a_save_is_seen_file_by_file_and_its_rename_as_publish(tmp_path, mode):
    root = tmp_path / "ckpt"
    events = watch_while(root, mode, lambda: (root.mkdir(), time.sleep(0.05), atomic_save(root, 20, PAUSE[mode])))
    kinds = [(e.kind, e.path) for e in events]
    tmp = f".tmp-step_00000020-{os.getpid()}"
    assert kinds[0] == ("create", tmp)
    for name in ("shard_0.pt", "meta.json", "MANIFEST.json", "COMPLETE"):
        assert ("close", f"{tmp}/{name}") in kinds
    closes = [p for k, p in kinds if k == "close"]
    assert closes == [f"{tmp}/{n}" for n in ("shard_0.pt", "meta.json", "MANIFEST.json", "COMPLETE")]
    assert ("publish", "step_00000020") in kinds
    assert next(e for e in events if e.path.endswith("shard_0.pt") and e.kind == "close").size == 200


def test_polling_does_not_call_a_file_closed_while_its_writer_holds_it_open(tmp_path):
    """A writer that paused for many intervals (a loaded machine) has not closed its file:
    one close, at the final size, once the file is closed (this once came twice under load)."""
    root = tmp_path / "ckpt"
    root.mkdir()

    def act() -> None:
        with open(root / "shard_0.pt", "wb") as f:
            time.sleep(0.2)  # twenty poll intervals, still empty and open
            f.write(b"w" * 100)
            f.flush()
            time.sleep(0.2)
        time.sleep(0.1)
    events = watch_while(root, "poll", act)
    closes = [(e.path, e.size) for e in events if e.kind == "close"]
    assert closes == [("shard_0.pt", 100)]


@pytest.mark.parametrize("mode", MODES)
def test_files_written_after_a_rename_are_reported_under_the_new_name(tmp_path, mode):
    root = tmp_path / "ckpt"
    root.mkdir()

    def act() -> None:
        atomic_save(root, 10, pause=0.03)
        time.sleep(0.05)
        (root / "step_00000010" / "late.txt").write_text("x")
    events = watch_while(root, mode, act)
    assert ("close", "step_00000010/late.txt") in [(e.kind, e.path) for e in events]


def test_the_tracker_cuts_saves_at_quiet_spells_and_deletes_never_start_one():
    t = 1000.0
    tracker = SaveTracker(settle_s=0.5)
    assert tracker.feed(FileEvent(t, "delete", "step_1", True)) is None
    a = tracker.feed(FileEvent(t + 1, "create", "step_2", True))
    tracker.feed(FileEvent(t + 1.1, "close", "step_2/x", False, 5))
    tracker.feed(FileEvent(t + 1.2, "delete", "step_0", True))  # pruning, inside the save
    assert tracker.ended(t + 1.8) and not tracker.ended(t + 1.3)
    b = tracker.feed(FileEvent(t + 3, "create", "step_3", True))
    assert (a.number, b.number) == (1, 2) and len(a.events) == 3
    assert a.files() == {"step_2/x": {"size": 5, "closed": True}}


def test_a_pause_inside_the_folder_the_save_made_does_not_cut_it_in_two():
    """The Hugging Face Trainer writes checkpoint-5/config.json, then (on a loaded machine, a
    second later) checkpoint-5/model.safetensors: one save, not two (a CI run killed 'save #2'
    inside checkpoint-5, the first). A new folder after the pause is the next save."""
    t = 1000.0
    tracker = SaveTracker(settle_s=0.5)
    a = tracker.feed(FileEvent(t, "create", "checkpoint-5", True))
    tracker.feed(FileEvent(t + 0.1, "close", "checkpoint-5/config.json", False, 5))
    same = tracker.feed(FileEvent(t + 1.4, "create", "checkpoint-5/model.safetensors", False, 0))
    tracker.feed(FileEvent(t + 1.5, "close", "checkpoint-5/model.safetensors", False, 9))
    b = tracker.feed(FileEvent(t + 4, "create", "checkpoint-10", True))
    later = tracker.feed(FileEvent(t + 9, "create", "checkpoint-5/late.txt", False, 0))  # not this save's folder
    assert same is a and b is not a and later is not b
    assert [s.number for s in tracker.saves] == [1, 2, 3]


def test_a_late_flush_stays_in_its_save_and_the_next_folder_begins_the_next_one():
    """An asynchronous save (DCP's async_save) writes its shards at once and its .metadata a
    while later, just before the next save begins: the .metadata is still step_10's save,
    and step_20, a moment after it, is the next save (not chained into the first)."""
    t = 1000.0
    tracker = SaveTracker(settle_s=0.5)
    first = tracker.feed(FileEvent(t, "create", "step_10", True))
    tracker.feed(FileEvent(t + 0.05, "close", "step_10/__0_0.distcp", False, 9))
    tracker.feed(FileEvent(t + 0.06, "publish", "latest", False, 0))
    late = tracker.feed(FileEvent(t + 1.5, "close", "step_10/.metadata", False, 3))
    second = tracker.feed(FileEvent(t + 1.6, "create", "step_20", True))
    shard = tracker.feed(FileEvent(t + 1.65, "close", "step_20/__0_0.distcp", False, 9))
    tracker.feed(FileEvent(t + 3.1, "close", "step_20/.metadata", False, 3))
    third = tracker.feed(FileEvent(t + 3.2, "create", "step_30", True))
    assert late is first and second is not first and shard is second and third is not second
    assert [s.number for s in tracker.saves] == [1, 2, 3]


def test_crash_points_of_a_recorded_save_in_order():
    t = 0.0
    save = Save(1, [FileEvent(t, "create", ".tmp-step_20-77", True), FileEvent(t, "create", ".tmp-step_20-77/shard_0.pt"),
                    FileEvent(t, "close", ".tmp-step_20-77/shard_0.pt", size=9),
                    FileEvent(t, "create", ".tmp-step_20-77/shard_1.pt"),
                    FileEvent(t, "close", ".tmp-step_20-77/shard_1.pt", size=9),
                    FileEvent(t, "delete", ".tmp-step_20-77", True), FileEvent(t, "publish", "step_20", True)])
    labels = [p.label() for p in crash_points(save)]
    assert labels == ["create .tmp-step_*-*", "create shard_*.pt", "close shard_*.pt", "torn shard_*.pt",
                      "create shard_*.pt #2", "close shard_*.pt #2", "torn shard_*.pt #2", "publish step_*"]
    assert [CrashPoint.parse(label) for label in labels] == crash_points(save)
    assert pattern_of("checkpoint-120") == "checkpoint-*"
    assert pattern_of(".tmpuOfxnN") == ".tmp*" and pattern_of(".tmp-step_00000020-77") == ".tmp-step_*-*"
    assert [p.label() for p in sample(crash_points(save), 3)] == ["create .tmp-step_*-*", "create shard_*.pt #2",
                                                                  "publish step_*"]


def test_a_crash_point_matches_its_nth_occurrence_only():
    point = CrashPoint.parse("close shard_*.pt #2")
    seen: dict = {}
    first = FileEvent(0, "close", "d/shard_0.pt")
    second = FileEvent(0, "close", "d/shard_1.pt")
    assert not point.matches(first, seen) and point.matches(second, seen)
    assert not CrashPoint.parse("torn meta.json").matches(FileEvent(0, "create", "d/meta.json"), {})
    assert CrashPoint.parse("torn meta.json").matches(FileEvent(0, "close", "d/meta.json"), {})
    with pytest.raises(ValueError, match="KIND PATTERN"):
        CrashPoint.parse("explode shard")


def _folder(root: Path, name: str, files: dict[str, bytes]) -> None:
    (root / name).mkdir(parents=True)
    for f, data in files.items():
        (root / name / f).write_bytes(data)


FULL = {"shard_0.pt": b"w" * 8, "meta.json": b"{}", "MANIFEST.json": b"{}"}
INPLACE = CheckpointSpec(dir="x", layout="custom", glob="step_*", step_regex=r"step_(\d+)", metadata="meta.json")


def test_judge_crash_in_place_save_left_incomplete(tmp_path):
    _folder(tmp_path, "step_00000010", FULL)
    _folder(tmp_path, "step_00000020", {"shard_0.pt": b"w" * 8})
    save = Save(1, [FileEvent(0, "create", "step_00000020", True), FileEvent(0, "create", "step_00000020/shard_0.pt"),
                    FileEvent(0, "close", "step_00000020/shard_0.pt", size=8)])
    judged = judge_crash(str(tmp_path), INPLACE, save, None)
    assert judged["crashed"] == "step_00000020" and judged["crashed_complete"] is False
    assert "missing MANIFEST.json, meta.json" in judged["crashed_why"]
    assert judged["best_complete_step"] == 10


def test_judge_crash_atomic_save_left_nothing_visible(tmp_path):
    _folder(tmp_path, "step_00000010", {**FULL, "COMPLETE": b"ok"})
    _folder(tmp_path, ".tmp-step_00000020-5", {"shard_0.pt": b"w"})
    save = Save(1, [FileEvent(0, "create", ".tmp-step_00000020-5", True),
                    FileEvent(0, "create", ".tmp-step_00000020-5/shard_0.pt")])
    judged = judge_crash(str(tmp_path), CheckpointSpec(dir="x", layout="reference"), save, None)
    assert judged["crashed"] is None and judged["crashed_complete"] is None
    assert judged["best_complete"] == "step_00000010"


def test_judge_crash_a_torn_or_unclosed_file_is_incomplete(tmp_path):
    _folder(tmp_path, "step_00000010", FULL)
    _folder(tmp_path, "step_00000020", FULL)
    save = Save(1, [FileEvent(0, "create", "step_00000020/shard_0.pt"), FileEvent(0, "close", "step_00000020/shard_0.pt"),
                    FileEvent(0, "create", "step_00000020/meta.json"), FileEvent(0, "close", "step_00000020/meta.json"),
                    FileEvent(0, "create", "step_00000020/MANIFEST.json")])
    judged = judge_crash(str(tmp_path), INPLACE, save, None)
    assert judged["crashed_complete"] is False and "MANIFEST.json still being written" in judged["crashed_why"]
    save.events.append(FileEvent(0, "close", "step_00000020/MANIFEST.json"))
    assert judge_crash(str(tmp_path), INPLACE, save, None)["crashed_complete"] is True
    torn = {"path": "step_00000020/shard_0.pt", "size": 8, "cut_to": 4}
    judged = judge_crash(str(tmp_path), INPLACE, save, torn)
    assert judged["crashed_complete"] is False and "shard_0.pt torn to 4 of 8 bytes" in judged["crashed_why"]
    assert judged["best_complete_step"] == 10


def crash(**kw) -> Measurements:
    base = dict(crash_point="close shard_*.pt", crashed_checkpoint="step_00000020", crashed_step=20,
                crashed_complete=False, crashed_why="missing meta.json", best_complete_step=10,
                best_complete="step_00000010", t_fault=1.0, observed_s=30.0)
    return Measurements(**{**base, **kw})


def test_a_restart_that_loads_the_incomplete_checkpoint_is_silent():
    m = crash(restored_path="/c/step_00000020", restored_step=20, time_to_first_step=5.0)
    _judge_crash_restore(m, restarted=True)
    assert m.restored_incomplete is True and m.fell_back_further_than_needed is False
    assert crash_class(m, "fail") == "silent"
    reasons: list[str] = []
    results = {r.name: r.status for r in _crash_invariants(m, reasons)}
    assert results == {"restored_incomplete": "fail", "fell_back_further_than_needed": "pass"}
    assert "resumed from step_00000020, which the crash at 'close shard_*.pt' left incomplete (missing meta.json)" \
        in reasons[0]


def test_a_restart_from_scratch_past_a_complete_checkpoint_lost_work():
    m = crash(crashed_checkpoint=None, crashed_step=None, crashed_complete=None, restored_step=0,
              time_to_first_step=5.0)
    _judge_crash_restore(m, restarted=True)
    assert m.restored_incomplete is False and m.fell_back_further_than_needed is True
    assert crash_class(m, "fail") == "lost-work"
    reasons: list[str] = []
    _crash_invariants(m, reasons)
    assert "restored step 0, but step_00000010 (step 10) was complete when it crashed: 10 steps" in reasons[0]


def test_never_stepping_again_is_a_hard_fail_and_the_right_restore_passes():
    m = crash()
    _judge_crash_restore(m, restarted=False)
    assert m.restored_incomplete is None and crash_class(m, "fail") == "hard-fail"
    ok = crash(restored_path="/c/step_00000010", restored_step=10, time_to_first_step=4.0)
    _judge_crash_restore(ok, restarted=True)
    assert (ok.restored_incomplete, ok.fell_back_further_than_needed) == (False, False)
    assert crash_class(ok, "pass") == "pass"


def test_restore_after_puts_the_folder_back_and_keeps_the_jobs_later_files(tmp_path):
    folder = tmp_path / "ckpt"
    _folder(folder, "step_00000010", FULL)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    hands = Hands.mine()
    answer, body = hands.call("pack", {"real_root": str(tmp_path), "dirs": [], "name": "ckpt"})
    (scratch / "before.tar").write_bytes(body)
    parent = os.stat(tmp_path)
    state = KillDuringSaveState(dir=str(folder), before=str(scratch / "before.tar"), manifest=answer["manifest"],
                                parent_id=[parent.st_dev, parent.st_ino], **acts_as(hands))
    (folder / "step_00000010" / "shard_0.pt").write_bytes(b"half")
    _folder(folder, "step_00000020", FULL)
    report = restore_folder(state)
    assert report.healed and report.verified, report
    assert sorted(p.name for p in folder.iterdir()) == ["step_00000010"]
    assert (folder / "step_00000010" / "shard_0.pt").read_bytes() == b"w" * 8
    [aside] = tmp_path.glob(".ckpt.drillbit-replaced-*")  # beside it: the job's user may write only there
    assert (aside / "step_00000020" / "shard_0.pt").exists() and str(aside) in report.detail


def test_a_during_save_trigger_fires_after_the_nth_file_of_the_save(tmp_path):
    from drillbit.core.history import History
    from drillbit.loop.schedule import describe_trigger, wait_during_save
    from drillbit.loop.watch import Progress
    from drillbit.spec.models import DuringSave, Trigger

    root = tmp_path / "ckpt"
    root.mkdir()
    closed: list[float] = []

    def save() -> None:
        time.sleep(0.2)
        tmp = root / "step_1"
        tmp.mkdir()
        for name in ("a", "b", "c"):
            (tmp / name).write_bytes(b"x")
            closed.append(time.time())
            time.sleep(0.3)
    writer = threading.Thread(target=save)
    writer.start()
    history = History()
    progress = Progress(history, lambda d: time.sleep(d))
    ds = DuringSave(save=1, files=2)
    wait_during_save(ds, progress, lambda: None, root)
    fired = time.time()
    writer.join()
    assert closed[1] <= fired < closed[2]  # after the second file, before the third
    assert describe_trigger(Trigger(during_save=ds)) == "during save #1, after 2 file(s)"


def test_a_during_save_trigger_follows_the_save_signal_where_the_folder_is_not_seen():
    from drillbit.core.history import History
    from drillbit.loop.schedule import JobExited, wait_during_save
    from drillbit.loop.watch import Progress
    from drillbit.spec.models import DuringSave

    history = History()
    progress = Progress(history, lambda d: time.sleep(d))
    threading.Timer(0.2, lambda: history.record("job", "ckpt.save", step=10)).start()
    t0 = time.time()
    wait_during_save(DuringSave(save=1), progress, lambda: None, None)
    assert time.time() - t0 >= 0.2
    with pytest.raises(JobExited, match="before save #1"):
        wait_during_save(DuringSave(save=1, watch="signal"), progress, lambda: 3, None)


def test_scope_ranks_takes_every_child_of_the_targets_launcher(tmp_path):
    import subprocess
    import sys

    import psutil

    from drillbit.faults.kill_during_save import siblings
    from drillbit.core.proc import ProcRef

    launcher = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time\n"
                                 "ps = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']) "
                                 "for _ in range(3)]\nprint('up', flush=True)\ntime.sleep(60)"],
                                stdout=subprocess.PIPE, text=True)
    try:
        assert launcher.stdout.readline().strip() == "up"
        ranks = psutil.Process(launcher.pid).children()
        target = ProcRef.of(ranks[0], rank=0)
        assert sorted(r.pid for r in siblings(target)) == sorted(p.pid for p in ranks[1:])
    finally:
        for p in psutil.Process(launcher.pid).children():
            p.kill()
        launcher.kill()
        launcher.wait()


def test_an_armed_fault_that_never_fires_is_unconfirmed_with_its_reason_and_heals(tmp_path):
    import subprocess
    import sys

    import psutil

    from drillbit.faults.kill_during_save import KillDuringSave
    from drillbit.core.proc import ProcRef

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        target = ProcRef.of(psutil.Process(proc.pid), rank=0)
        fault = KillDuringSave(scratch=tmp_path)
        params = fault.Params(point="close *", arm_timeout_s=0.5, restore_after=True,
                              checkpoint=CheckpointSpec(dir=str(tmp_path / "ckpt"), layout="reference"))
        (tmp_path / "ckpt").mkdir()
        (tmp_path / "ckpt" / "keep.txt").write_text("before")
        state = fault.act(target, params, fault.prepare(target, params))
        evidence = fault.confirm(target, params, state)
        assert evidence is not None and "no save reached 'close *' within 0.5 s" in evidence.data["unconfirmed"]
        (tmp_path / "ckpt" / "keep.txt").write_text("changed by the job")
        report = fault.heal(target, params, state)
        assert report.healed and report.verified
        assert (tmp_path / "ckpt" / "keep.txt").read_text() == "before"  # restore_after: as it was when armed
        assert proc.poll() is None  # nothing was killed
    finally:
        proc.kill()
        proc.wait()


def test_a_file_its_killed_writer_still_held_open_is_torn_although_the_kernel_closed_it(tmp_path):
    """A `create` point of a one-file save: the writer is killed right after creating the file;
    the kernel then closes it (inotify reports a close-write for the dead writer's fd). Complete
    means the writer finished: a file a victim held open for writing at the kill is torn."""
    import signal
    import subprocess
    import sys

    import psutil

    from drillbit.faults.kill_during_save import held_open
    from drillbit.core.proc import ProcRef

    (tmp_path / "step_00000005.pt").write_bytes(b"an older, finished save")
    writer = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1], 'wb'); f.write(b'half');"
                               " f.flush(); print('open', flush=True); time.sleep(60)", str(tmp_path / "step_00000010.pt")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "open"
        ref = ProcRef.of(psutil.Process(writer.pid))
        ref.send(signal.SIGSTOP)
        held = held_open([ref], tmp_path)
        ref.send(signal.SIGKILL)
        writer.wait(timeout=10)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert held == {"step_00000010.pt"}
    spec = CheckpointSpec(dir=str(tmp_path), layout="glob", glob="step_*.pt", step_regex=r"step_(\d+)")
    save = Save(1, [FileEvent(0, "create", "step_00000010.pt"), FileEvent(1, "close", "step_00000010.pt", size=4)])
    assert judge_crash(str(tmp_path), spec, save, None)["crashed_complete"] is True  # what a close alone says
    judged = judge_crash(str(tmp_path), spec, save, None, held)
    assert judged["crashed_complete"] is False and "killed writer" in judged["crashed_why"], judged
    assert judged["best_complete_step"] == 5


def test_polling_calls_a_file_closed_only_after_it_held_still_for_an_interval_of_time(tmp_path):
    """Two listings a moment apart are not an interval: a file open() has just truncated shows
    its new size before the opener's descriptor is in /proc (ci: the rewrite test saw a
    create and a close of ckpt.pt at size 0 in one millisecond, then the real rewrite)."""
    root = tmp_path / "ckpt"
    root.mkdir()
    (root / "ckpt.pt").write_bytes(b"0" * 1000)
    watch = DirWatch(root, "poll", interval=0.3)
    (root / "ckpt.pt").write_bytes(b"")  # truncated; nobody holds it open (yet)
    assert [(e.kind, e.size) for e in watch._read()] == [("create", 0)]
    assert watch._read() == []  # the same stat again at once: not yet still
    time.sleep(0.35)
    assert [(e.kind, e.size) for e in watch._read()] == [("close", 0)]


@pytest.mark.parametrize("mode", MODES)
def test_a_file_rewritten_in_place_is_a_save_of_its_own(tmp_path, mode):
    """ckpt.pt opened with truncate and written again on every save creates no file: the first
    write after its close begins the rewrite (a create), its close ends it; each is one save
    with its crash points."""
    from drillbit.core.saves import SaveTracker, crash_points

    root = tmp_path / "ckpt"
    root.mkdir()
    (root / "ckpt.pt").write_bytes(b"0" * 1000)

    def rewrite() -> None:
        for _ in range(2):
            with open(root / "ckpt.pt", "wb") as fh:
                for _ in range(5):
                    fh.write(b"x" * 1000)
                    fh.flush()
                    time.sleep(0.02)
            time.sleep(0.5)
    events = watch_while(root, mode, rewrite)
    assert [(e.kind, e.path) for e in events] == [("create", "ckpt.pt"), ("close", "ckpt.pt")] * 2
    tracker = SaveTracker(0.3)
    for e in events:
        tracker.feed(e)
    assert len(tracker.saves) == 2
    assert [p.label() for p in crash_points(tracker.saves[1])] == ["create ckpt.pt", "close ckpt.pt", "torn ckpt.pt"]
    assert tracker.saves[1].files() == {"ckpt.pt": {"size": tracker.saves[1].events[-1].size, "closed": True}}


def test_a_restore_line_naming_the_load_folder_is_judged_by_containment_and_step():
    """Megatron's 'successfully loaded checkpoint from {load_dir} … at iteration 20' names the
    folder above iter_0000020: by basename it was another checkpoint (restored_incomplete False,
    a false pass); it is the crashed one by containment and step. A job with one checkpoint only
    (a file rewritten in place) restored that one whenever it restored."""
    m = crash(crashed_checkpoint="iter_0000020", restored_path="/runs/r/ckpt", restored_step=20,
              time_to_first_step=5.0)
    _judge_crash_restore(m, restarted=True, crash_dir="/runs/r/ckpt")
    assert m.restored_incomplete is True
    m = crash(crashed_checkpoint="iter_0000020", restored_path="/runs/r/ckpt", restored_step=10,
              time_to_first_step=5.0)
    _judge_crash_restore(m, restarted=True, crash_dir="/runs/r/ckpt")
    assert m.restored_incomplete is False
    m = crash(crashed_checkpoint="snapshot.pt", crashed_step=None, restored_path=None, restored_step=15,
              best_complete_step=None, best_complete=None, time_to_first_step=5.0)
    _judge_crash_restore(m, restarted=True, crash_dir="/runs/r/snap", crash_names=["snapshot.pt"])
    assert m.restored_incomplete is True and crash_class(m, "fail") == "silent"


def test_a_file_rewritten_in_place_faster_than_the_quiet_spell_is_one_save_per_rewrite():
    """#42: torch.save to ckpt.pt every step (0.2 s apart, under the 0.5 s quiet spell) was one
    save that never ended, and the sweep's record pass gave up. Each rewrite of a file the save
    already closed begins the next save."""
    from drillbit.core.dirwatch import FileEvent
    from drillbit.core.saves import SaveTracker, crash_points

    tracker = SaveTracker(settle_s=0.5)
    for i in range(5):
        tracker.feed(FileEvent(10 + 0.2 * i, "create", "ckpt.pt", False, 0))
        tracker.feed(FileEvent(10 + 0.2 * i + 0.01, "close", "ckpt.pt", False, 264973))
    assert len(tracker.saves) == 5 and all(len(s.events) == 2 for s in tracker.saves)
    assert [p.label() for p in crash_points(tracker.saves[0])] == ["create ckpt.pt", "close ckpt.pt", "torn ckpt.pt"]
    # a save of several files, each written once, stays one save
    tracker = SaveTracker(settle_s=0.5)
    for i, name in enumerate(["a.pt", "b.pt", ".metadata"]):
        tracker.feed(FileEvent(20 + 0.05 * i, "create", name, False, 0))
        tracker.feed(FileEvent(20 + 0.05 * i + 0.01, "close", name, False, 10))
    assert len(tracker.saves) == 1
