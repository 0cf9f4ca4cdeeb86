"""What the history keeps beside its events (each event's time, each step line read once) and
what the checks read from it instead of the events (the window, the step lines, fidelity's
Lines) answer exactly as a plain pass over the events does: out of order, NaN and inf times,
ranks on the envelope or in a group, figures printed, named empty or missing."""
from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from drillbit.core import events
from drillbit.core.history import Event, History, StepLine, of, steps_of
from drillbit.judging.checks import fidelity
from drillbit.judging.checks.fidelity import FIGURE_KEYS, Lines, one_rank
from drillbit.judging.checks.recovery import measure

KINDS = ["step", "metrics", "restart", "restore", "detect", "observe.end", "uninterrupted", "fault.inject", "error"]
TIMES = st.one_of(st.floats(0, 100, allow_nan=False), st.sampled_from([math.nan, math.inf, -math.inf]))


def _data(kind: str, draw) -> dict:
    if kind == "step":
        data = {"n": draw(st.integers(0, 20))}
        for key in draw(st.lists(st.sampled_from([*FIGURE_KEYS, "rank", "dt"]), unique=True, max_size=4)):
            data[key] = draw(st.one_of(st.none(), st.integers(0, 5), st.floats(0, 2), st.just("x")))
        return data
    if kind in ("restart", "detect", "error"):
        return {"message": "m"} if kind == "error" else {}
    return {}


@st.composite
def histories(draw) -> History:
    """Events appended as drill report merges them (times as they were, NaN and inf too, out of
    order), each of a kind the checks read."""
    history = History()
    for seq in range(draw(st.integers(0, 60))):
        kind = draw(st.sampled_from(KINDS))
        rank = draw(st.one_of(st.none(), st.integers(0, 4)))
        history.append(Event(seq=seq, t=draw(TIMES), source="test", kind=kind, rank=rank, data=_data(kind, draw)))
    return history


@settings(max_examples=300, deadline=None)
@given(histories(), st.one_of(st.none(), TIMES), st.lists(st.sampled_from(KINDS), max_size=3))
def test_a_window_is_the_events_to_its_end_and_those_of_its_kinds_and_asks_by_kind_as_a_plain_pass_does(history, end,
                                                                                                    also):
    window = history.window(end, tuple(also))
    plain = [e for e in history if end is None or e.t <= end or e.kind in also]
    assert [e.seq for e in window] == [e.seq for e in plain]
    for kinds in ([k] for k in KINDS):
        assert [e.seq for e in of(window, *kinds)] == [e.seq for e in plain if e.kind in kinds]
    assert [e.seq for e in of(window, "step", "restart", "metrics")] == \
        [e.seq for e in plain if e.kind in ("step", "restart", "metrics")]


@settings(max_examples=200, deadline=None)
@given(histories(), st.integers(0, 60))
def test_the_step_lines_are_each_step_read_once_as_it_was_recorded_in_the_history_order(history, cut):
    events = list(history)
    first, rest = History(), events[cut:]
    for e in events[:cut]:
        first.append(e)
    early = first.steps()  # asked for part way, as the watch's polls ask
    for e in rest:
        first.append(e)
    lines = first.steps()
    assert lines[:len(early)] == early
    assert lines == [StepLine.of(e) for e in events if e.kind == "step"]
    assert [s.event for s in lines] == of(events, "step")
    for s in lines:
        rank = s.event.rank if s.event.rank is not None else s.event.data.get("rank")
        assert s.line_rank == fidelity.rank_of(s.event) == (rank if isinstance(rank, int) else None)
        assert s.named == set(s.event.data)
        assert s.printed == {k for k, v in s.event.data.items() if v is not None}


@settings(max_examples=300, deadline=None)
@given(histories())
def test_fidelity_reads_the_history_s_step_lines_as_it_reads_the_events(history):
    steps = steps_of(list(history))
    lines, plain = Lines.of_steps(steps), [s.event for s in steps]
    for key in (None, *FIGURE_KEYS):
        assert one_rank(lines, key) == one_rank(plain, key)
        if key is not None:
            assert fidelity._names(lines, key) == fidelity._names(plain, key)
            assert _same(fidelity._series(lines, key), fidelity._series(plain, key))
            assert _same(fidelity._first(lines, key), fidelity._first(plain, key))
    again = Lines(plain)  # the events alone, read the same way
    for key in (None, *FIGURE_KEYS):
        assert one_rank(again, key) == one_rank(plain, key)


def _same(a: dict[int, float], b: dict[int, float]) -> bool:
    return a.keys() == b.keys() and all(v == b[n] or (math.isnan(v) and math.isnan(b[n])) for n, v in a.items())


def test_a_history_recorded_with_an_end_measures_as_the_same_events_read_back(tmp_path):
    """The window cut from the kept times (events after observe.end left out) measures as one
    filtered from the events: the same history loaded from its file, judged from nothing."""
    path = tmp_path / "history.jsonl"
    history = History(path)

    def rec(kind: str, *, t: float, rank: int | None = None, **data: object) -> None:
        history.record("test", kind, t=t, rank=rank, **{**events.stand_ins(kind, data), **data})

    rec("steady", t=1.0, baseline_step_s=1.0)
    for n in range(1, 9):
        for rank in range(4):
            rec("step", t=float(n) + rank / 10, rank=rank, n=n, loss=1.0 / n)
    rec("fault.inject", t=8.5, rank=2, fault="kill-rank")
    rec("fault.confirmed", t=8.6, expects="death", hurts="rank", verb="killed", evidence=[])
    rec("detect", t=9.0)
    rec("restart", t=10.0, attempt=1)
    rec("restore", t=11.0, step=6, path="/ckpt/6")
    for n in range(7, 12):
        for rank in range(4):
            rec("step", t=11.0 + n + rank / 10, rank=rank, n=n, loss=1.0 / n)
    rec("observe.end", t=30.0)
    rec("step", t=31.0, rank=0, n=12, loss=0.1)  # after the watch: not in the window
    rec("fault.heal", t=31.5)
    history.close()
    m, again = measure(history), measure(History.load(path))
    assert m.model_dump() == again.model_dump()
    assert (m.step_at_fault, m.restored_step, m.first_step, m.lost_steps) == (8, 6, 7, 2)
    assert m.steps_after_recovery == 4  # 7..11: the step after observe.end is not counted
    assert m.fidelity is not None and m.fidelity.status == "pass"


def test_a_step_whose_payload_does_not_read_leaves_the_window_unknown_and_never_raises():
    """A step line without its step number (an older drillbit's history, a bug): every figure
    that needs the window is unknown, named in measure_errors, as before the history kept lines."""
    history = History.build([(1.0, "steady", {"baseline_step_s": 1.0}), (2.0, "step", {"n": 1}),
                             (3.0, "fault.confirmed", {"expects": "death"}), (4.0, "step", {"n": 2})])
    history.append(Event(seq=len(history), t=5.0, source="test", kind="step", data={"loss": 1.0}))
    m = measure(history)
    assert "window" in m.measure_errors and "n" in m.measure_errors["window"]
    assert m.time_to_first_step is None and m.step_at_fault is None


def test_a_history_is_read_back_with_the_heap_frozen_and_nothing_stays_frozen_after(tmp_path, monkeypatch):
    """History.load keeps every event it reads: the collector's walks over the heap while it
    reads find nothing to free, and in a drill's process at 1,024 nodes they doubled its cost."""
    import gc

    from drillbit.core import history as history_mod

    path = tmp_path / "history.jsonl"
    written = History(path)
    for n in range(3):
        written.record("test", "step", t=float(n), n=n)
    written.close()
    seen: list[int] = []
    real = history_mod.Event.model_validate_json

    def spying(*args, **kwargs):
        seen.append(gc.get_freeze_count())
        return real(*args, **kwargs)

    monkeypatch.setattr(history_mod.Event, "model_validate_json", spying)
    assert [e.data["n"] for e in History.load(path)] == [0, 1, 2]
    assert seen and min(seen) > 0 and gc.get_freeze_count() == 0
    path.write_text(path.read_text() + "not an event\n" + '{"torn":')  # a bad line, then a torn last line
    try:
        History.load(path)
    except ValueError as exc:
        assert ":4: not an event" in str(exc)
    else:
        raise AssertionError("a bad line that is not the last was read")
    assert gc.get_freeze_count() == 0


def test_a_step_it_cannot_read_after_the_watch_is_named_and_judged_around_as_before():
    """A step line recorded after observe.end whose step number does not read: the verdict is
    inconclusive for that bug alone, every figure still measured (the ledger and the stall's
    diagnosis read the history's whole step record, and once raised a checker error on it)."""
    from drillbit.judging.checks import check
    from tests.unit.test_checks import kill_pass_history, spec

    history = kill_pass_history()
    end = history.first("observe.end")
    assert end is not None
    history.record("probe", "step", t=end.t + 1, n="x")
    result = check(spec(), history)
    assert result.verdict == "inconclusive"
    assert [r.split(":")[0] for r in result.reasons] == ["drillbit recorded 1 event(s) it cannot read"]
    assert result.measurements.time_to_first_step is not None and result.measurements.goodput is not None
    # as an older drillbit wrote it (no event.invalid beside the line): judged, the line left out
    older = History(events=[e for e in history if e.kind != "event.invalid"])
    assert check(spec(), older).verdict == "pass"


def test_the_stop_test_on_a_step_it_cannot_read_after_the_watch_answers_and_never_raises():
    from drillbit.judging.checks.recovery import recovered
    from tests.unit.test_checks import T_FAULT, prelude, steps

    rows = [r if r[1] != "job.launch" else (r[0], "job.launch", {"reads": ["step", "restore"]}) for r in prelude()]
    rows += [(T_FAULT - 0.01, "fault.inject"), (T_FAULT, "fault.confirmed"), (T_FAULT + 0.2, "detect"),
             (T_FAULT + 3, "restart", {"attempt": 1})]
    rows += steps(26, 40, T_FAULT + 3.5)  # survivors step on from the step at the fault; no restore yet
    rows += [(T_FAULT + 10, "observe.end")]
    history = History.build(rows)
    history.record("probe", "step", t=T_FAULT + 11, n="twelve")
    assert recovered(history, 5) is False  # waiting for the restarted process's restore, as before


def test_a_window_s_step_lines_are_its_own_step_events_while_a_probe_records():
    """A step recorded while the window is cut is in both its events and its step lines, or in
    neither: the stop test never sees a first step the events it measures beside do not hold."""
    from tests.unit.test_checks import T_FAULT, prelude

    rows = prelude() + [(T_FAULT, "fault.confirmed"), (T_FAULT + 0.2, "detect"), (T_FAULT + 3, "restart", {"attempt": 1})]
    history = History.build(rows)
    real = StepLine.of
    recorded: list[int] = []

    def recording(event: Event) -> StepLine:  # a probe's thread records while the lines are read
        if not recorded:
            recorded.append(1)
            history.record("probe", "step", t=T_FAULT + 4, n=26)
        return real(event)

    try:
        StepLine.of = recording  # type: ignore[method-assign]
        window = history.window(None)
    finally:
        StepLine.of = real  # type: ignore[method-assign]
    assert recorded
    assert [s.seq for s in window.steps or []] == [e.seq for e in of(window, "step")]
    assert window.steps and window.steps[-1].n == 26


def test_the_step_lines_are_read_outside_the_history_s_lock():
    """A probe's thread records while the step lines are read (the watch's first poll reads the
    thousands of lines since the drill began): its record does not wait for them."""
    import threading

    history = History()
    for n in range(50):
        history.record("probe", "step", t=float(n), n=n)
    real = StepLine.of
    done = threading.Event()
    blocked: list[bool] = []

    def reading(event: Event) -> StepLine:
        if not blocked:
            probe = threading.Thread(target=lambda: (history.record("probe", "detect", t=99.0), done.set()))
            probe.start()
            blocked.append(not done.wait(30))  # held up only if the lock were held while reading
            probe.join(30)
        return real(event)

    try:
        StepLine.of = reading  # type: ignore[method-assign]
        lines = history.steps()
    finally:
        StepLine.of = real  # type: ignore[method-assign]
    assert blocked == [False] and len(lines) == 50 and history.of("detect")


JSON_VALUES = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(),
                                     st.text(max_size=5)),
                           lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner,
                                                                                                  max_size=3)), max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(
    st.fixed_dictionaries({"seq": st.integers(0, 9), "t": st.floats(), "source": st.text(max_size=3),
                           "kind": st.sampled_from(KINDS)},
                          optional={"node": st.one_of(st.none(), st.text(max_size=3)), "rank": JSON_VALUES,
                                    "data": st.dictionaries(st.text(max_size=4), JSON_VALUES, max_size=4),
                                    "extra": JSON_VALUES}).map(json.dumps),
    st.text(max_size=20)), min_size=1, max_size=6))
def test_a_history_file_reads_back_as_json_and_the_model_read_it_line_by_line(lines):
    """Lines read by pydantic's JSON reader first, json's after: the same events, NaN and
    Infinity tokens, big numbers and bad lines alike; a bad line is named by json's words, and a
    bad last line is a torn write, left out."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "history.jsonl"
        path.write_text("\n".join(lines) + "\n")
        kept = [line for line in path.read_text().splitlines() if line.strip()]
        want: list[Event] = []
        error = None
        for i, line in enumerate(kept):
            try:
                want.append(Event.model_validate(json.loads(line)))
            except ValueError as exc:
                if i < len(kept) - 1:
                    error = f"{path}:{i + 1}: not an event: {exc}"
                break
        try:
            got = list(History.load(path))
        except ValueError as exc:
            assert str(exc) == error
        else:
            assert error is None
            assert [e.model_dump_json() for e in got] == [e.model_dump_json() for e in want]
