"""Every real drill the integration suite runs is also a test of the goodput ledger: after
each test, every result.json it left is checked — no negative category, and the categories
sum to the window exactly (#13: the ledger must partition the window)."""
from __future__ import annotations

import json

import pytest

@pytest.fixture(autouse=True)
def ledger_partitions_every_real_window(tmp_path):
    yield
    for path in tmp_path.rglob("result.json"):
        ledger = json.loads(path.read_text()).get("ledger")
        if not ledger:
            continue
        parts = ledger["categories"]  # each rounded to 0.1 ms in result.json
        assert min(parts.values()) >= 0, (path, parts)
        assert sum(parts.values()) == pytest.approx(ledger["wall_s"], abs=1e-3), (path, parts, ledger["wall_s"])
