"""bench/fleet_scale.py runs at N = 8, as its users run it: the real drill loop against 8
simulated nodes (the real agent code in a host process of its own, a job whose 64 ranks print
their own step lines, real processes under each node's launcher). kill-rank and kill-node pass
with every phase measured and no step dropped; the log path's own rate is measured; the
report is written. Verdicts only: the bench's figures are for bench/, never asserted here."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow]


def test_fleet_scale_bench_at_8_nodes(tmp_path):
    before = {p.pid for p in psutil.process_iter()}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "fleet_scale.py"), "--nodes", "8", "--drills",
                           "kill-rank,kill-node", "--repeats", "1", "--step-s", "0.5", "--steps", "5", "--out",
                           str(tmp_path / "out"), "--tmp", str(tmp_path)], capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "fleet_scale.json").read_text())
    for drill in ("kill-rank", "kill-node"):
        summary = results["drills"][drill]["8"]
        assert summary["ok"] == 1, summary.get("errors")
        assert summary["verdicts"] == ["pass"], results["raw"]
        assert summary["figures"]["restarts"] == 1 and summary["figures"]["time_to_detect"] is not None
        assert all(summary["phases"][p]["cpu"] is not None for p in summary["phases"]), summary["phases"]
        assert summary["dropped_steps"] == 0 and summary["step_events"] > 0
    ingest = results["ingest"][0]
    assert ingest["read"] == ingest["lines"] == 8 * 8 * 5 and ingest["dropped"] == 0, ingest
    md = (tmp_path / "out" / "fleet_scale.md").read_text()
    assert "preflight+handshake" in md and "Log ingestion" in md
    # nothing it started is left: the job's ranks and launchers, the agents' hosts
    left = [p for p in psutil.process_iter(["pid", "cmdline"]) if p.pid not in before
            and (any("fleetsim" in a or "fleetnode" in a for a in (p.info["cmdline"] or []))
                 or (p.info["cmdline"] or [])[:2] == ["sleep", "1000000"])]
    assert not left, [p.info for p in left]
