from __future__ import annotations

import json
import math

from drillbit.core.history import History


def test_history_is_flushed_per_event_and_reloads(tmp_path):
    path = tmp_path / "history.jsonl"
    history = History(path)
    history.record("harness", "drill.start", drill="x")
    # flushed before close: a crash after this line loses nothing
    assert json.loads(path.read_text().splitlines()[0])["kind"] == "drill.start"
    history.record("probe:progress", "step", rank=0, n=3)
    history.close()
    again = History.load(path)
    assert [(e.seq, e.kind) for e in again] == [(0, "drill.start"), (1, "step")]
    assert again.first("step").data == {"n": 3}


def test_a_batch_is_recorded_in_order_in_one_write_and_a_bad_payload_is_kept_and_named(tmp_path):
    """record_many: what AgentLogProbe records a fetched batch with. The same events, in the
    same order, as one record each would give, the invalid one followed by event.invalid, and
    the listeners told of each in order; NaN and inf in a payload are kept in memory and
    written as null (JSON has neither), as one record writes them."""
    path = tmp_path / "history.jsonl"
    history = History(path)
    heard = []
    history.subscribe(lambda e: heard.append((e.seq, e.kind)))
    history.record("harness", "drill.start", drill="d", cluster="c", job="j", fault="kill-rank")
    rows = [("step", 10.0, "n0", 0, {"n": 1, "t_source": "read"}),
            ("step", 9.0, "n0", 1, {"n": "two"}),  # out of order, and not a step number
            ("metrics", 11.0, "n1", None, {"loss": float("nan"), "lr": float("inf"), "t_source": "line"}),
            ("step", 12.0, "n1", 0, {"n": 3})]
    out = history.record_many("probe:n0", rows)
    history.record_many("probe:n0", [])  # nothing to write
    history.close()
    assert [e.seq for e in out] == [1, 2, 4, 5]
    kinds = [(e.seq, e.kind) for e in history]
    assert kinds == [(0, "drill.start"), (1, "step"), (2, "step"), (3, "event.invalid"), (4, "metrics"), (5, "step")]
    assert heard == kinds
    invalid = history.of("event.invalid")[0].data
    assert invalid["recorded_as"] == "step" and invalid["seq"] == 2
    reloaded = History.load(path)
    assert [(e.seq, e.kind, e.t) for e in reloaded] == [(e.seq, e.kind, e.t) for e in history]
    assert [e.t for e in reloaded.of("step")] == [10.0, 9.0, 12.0]  # as recorded: ordering is the checks' job
    metrics = history.of("metrics")[0].data
    assert metrics["loss"] != metrics["loss"] and metrics["lr"] == float("inf")
    assert reloaded.of("metrics")[0].data == {"loss": None, "lr": None, "t_source": "line"}


def test_a_time_that_is_not_a_number_is_recorded_at_the_time_of_recording_named_and_the_file_still_loads(tmp_path):
    """helper-20: an agent's NaN or inf time was written as null, and History.load then refused
    the file ("not an event"), so `drill report` could not read the run."""
    path = tmp_path / "history.jsonl"
    history = History(path)
    history.record("harness", "fault.heal", t=float("nan"), node="n0", rank=1, pid=7, fault="kill-rank", healed=True,
                   verified=True, detail="x", attempt=1)
    history.record_many("probe:n0", [("step", float("inf"), "n0", 0, {"n": 1}), ("step", 5.0, "n0", 0, {"n": 2}),
                                     ("step", float("-inf"), "n0", 0, {"n": "x"})])
    history.close()
    reloaded = History.load(path)
    assert [e.kind for e in reloaded] == ["fault.heal", "event.invalid", "step", "event.invalid", "step", "step",
                                          "event.invalid"]
    assert all(math.isfinite(e.t) for e in reloaded) and reloaded.of("step")[1].t == 5.0
    problems = [e.data["problem"] for e in reloaded.of("event.invalid")]
    assert "t: nan is not a time" in problems[0] and "t: inf is not a time" in problems[1]
    assert "n:" in problems[2] and "t: -inf is not a time" in problems[2]  # both said
