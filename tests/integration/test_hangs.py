"""dataloader-hang and restore-hang on the real reference job: caught by progress watched
from outside (the watchdog), missed without it."""
from __future__ import annotations

from pathlib import Path

import pytest

from drillbit.runs.session import execute, resolve
from tests.integration.short import short_window

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent / "drills"


def run(drill: str, job: str, tmp_path: Path, window: float | None = None) -> dict:
    resolved = resolve(str(HERE / f"{drill}.yaml"), job=job)
    payload, _ = execute(short_window(resolved, window) if window else resolved, reports_dir=str(tmp_path))
    return payload


def test_dataloader_hang_caught_by_the_watchdog(tmp_path):
    result = run("dataloader-hang-fast", "reference", tmp_path)
    assert result["verdict"] == "pass", result["reasons"]
    assert 5 < result["measurements"]["time_to_detect"] < 30
    assert all(h["verified"] for h in result["fault"]["heals"])


def test_dataloader_hang_missed_without_the_watchdog(tmp_path):
    result = run("dataloader-hang-fast", "reference-nowatchdog", tmp_path, window=15)
    assert result["verdict"] == "fail"
    assert "the stall was never detected" in result["reasons"][0]


def test_restore_hang_quarantined_and_fallen_back(tmp_path):
    result = run("restore-hang-fast", "reference", tmp_path)
    assert result["verdict"] == "pass", result["reasons"]
    m = result["measurements"]
    assert m["restored_step"] == 10 and m["rejected_corrupted"]  # the hung checkpoint was skipped
    [heal] = result["fault"]["heals"]
    assert heal["verified"] and "byte for byte" in heal["detail"]
    [folder] = [p for p in tmp_path.iterdir() if p.name.endswith("restore-hang-fast")]
    assert not (folder / "stacks.json").exists()  # a run that recovered takes no dumps


def test_restore_hang_waits_forever_without_the_watchdog(tmp_path):
    result = run("restore-hang-fast", "reference-nowatchdog", tmp_path, window=20)
    assert result["verdict"] == "fail"
    first = next(s for s in result["slos"] if s["name"] == "first_step_within")
    assert first["status"] == "fail"
    assert "never made a step again" in result["reasons"][0] or "no restart ever produced a step" in result["reasons"][0]
    # where: the live ranks' stacks, dumped before the heal: both ranks of the new attempt in the FIFO's read.
    # The rank the fault named was attempt 0's; attempt 1's rank 1 is another process, and is not named
    stuck = [r for r in result["reasons"] if r.startswith("where the job was stuck")]
    assert stuck and "ranks 0–1 of attempt 1 " in stuck[0], result["reasons"]
    assert "… → newest_valid → verify → sha256_file" in stuck[0], result["reasons"]
    assert "the one the fault" not in stuck[0]
    [folder] = [p for p in tmp_path.iterdir() if p.name.endswith("restore-hang-fast")]
    assert (folder / "stacks.json").exists()
