"""Every real drill the integration suite runs is also a test of the goodput ledger: after
each test, every result.json it left is checked — no negative category, and the categories
sum to the window exactly (#13: the ledger must partition the window).

The reference job steps every 150 ms here instead of 250 ms (``DRILLBIT_REFERENCE_STEP_MS``,
its default for ``--step-ms``): every drill waits on steps — warm-up, the trigger step, the
steps after recovery — and the suite must fit CI's time. It runs 2 ranks instead of 4
(``DRILLBIT_REFERENCE_NPROC``, the job's ranks over all its nodes: 2 on one node, one a node on
two; the Ray Train job's workers follow it too): a rank's start is mostly ``import torch`` and
DDP's import of ``torch._dynamo`` (1.9 CPU-s of its 2.2), and with 3 ranks the reference job's
ranks were still 34 % of the suite's CPU (process accounting over a whole run, ci12). Rank 1
stands for "a rank that is not rank 0". Its stand-in compute sleeps in 5 ms slices instead
of 1 ms (``DRILLBIT_REFERENCE_SLICE_MS``: 0.95 % of a core a rank instead of 2.1 %, and some
ten ranks are alive at any time of a run); only a stop of a few ms needs 1 ms. The fail-slow
tests keep 250 ms, 1 ms slices and 4 ranks: a fleet median needs a fleet."""
from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("DRILLBIT_REFERENCE_STEP_MS", "150")
os.environ.setdefault("DRILLBIT_REFERENCE_NPROC", "2")
os.environ.setdefault("DRILLBIT_REFERENCE_SLICE_MS", "5")
# one OpenMP thread a process for every job the tests start (torchrun sets it only where a node
# runs more than one process): several jobs share two cores, and torch's threads spin waiting
# for each other's share of them
os.environ.setdefault("OMP_NUM_THREADS", "1")

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
