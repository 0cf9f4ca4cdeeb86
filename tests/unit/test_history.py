from __future__ import annotations

import json

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
