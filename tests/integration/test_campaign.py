"""A campaign on the real reference job: one launch, faults of two kinds one after another,
each recovered from before the next, every fault healed, one ledger, and the simulator's
prediction beside the measured goodput."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.cli import drill_cli

HERE = Path(__file__).parent / "drills"


@pytest.mark.slow
def test_campaign_on_the_reference_job(tmp_path):
    proc = drill_cli("campaign", str(HERE / "campaign-fast.yaml"), "--cluster", "local-process",
                     "--reports", str(tmp_path), "--json", timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["faults"] >= 2 and report["verdict"] == "pass", report["per_fault"]
    assert all(r["time_to_first_step"] is not None for r in report["per_fault"])
    run_dir = Path(report["run_dir"])
    events = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    kinds = [e["kind"] for e in events]
    assert kinds.count("job.launch") == 1  # one job for the whole campaign
    assert kinds.count("campaign.fault") == report["faults"] == kinds.count("fault.heal")
    led = report["ledger"]
    assert 0 < led["goodput"] <= 1 and report["predicted"]["simulated_goodput_p50"] > 0
    assert (run_dir / "campaign.md").exists() and "<svg" in (run_dir / "campaign.html").read_text()
