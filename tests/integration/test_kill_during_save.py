"""kill-during-save on real processes: the reference job (atomic save: temp folder, manifest,
COMPLETE, rename) passes; reference-nonatomic (files straight into step_N/, restored
unchecked) resumes silently from the half-written save, or cannot resume at all from a torn
file. The files stay as the crash left them, and a copy of the folder right after the crash
is kept in the run folder. A sweep records one save and drills its crash points."""
from __future__ import annotations

import filecmp
import json
from pathlib import Path

import pytest

from drillbit.core.saves import CrashPoint
from drillbit.runs.session import execute, resolve
from drillbit.runs.sweep import run_sweep, with_params

pytestmark = pytest.mark.slow


def run(job: str, tmp_path: Path, **params) -> tuple[dict, Path]:
    resolved = resolve("kill-during-save", cluster="local-process", job=job)
    payload, outcome = execute(with_params(resolved, **params) if params else resolved, reports_dir=str(tmp_path))
    return payload, outcome.run_dir


def kept_copy(run_dir: Path) -> Path:
    found = list(run_dir.glob("scratch-*/kill-during-save-*/after-crash"))
    assert len(found) == 1, found
    return found[0]


def test_the_atomic_save_survives_a_crash_after_its_first_file(tmp_path):
    result, run_dir = run("reference-slowsave", tmp_path)
    assert result["verdict"] == "pass", result["reasons"]
    m = result["measurements"]
    assert m["crash_point"] == "close *" and m["crashed_checkpoint"] is None  # the temp folder was never published
    assert m["best_complete"] == "step_00000010" and m["restored_step"] == 10
    assert m["restored_incomplete"] is False and m["fell_back_further_than_needed"] is False
    copy = kept_copy(run_dir)
    assert [p.name for p in copy.glob(".tmp-step_00000020-*/*")] == ["shard_0.pt"]  # what the crash left
    listing = json.loads((copy / "listing.json").read_text())  # and the whole folder, by name and size
    assert "step_00000010/COMPLETE" in listing and not (copy / "step_00000010").exists()


def test_the_nonatomic_job_resumes_silently_from_the_half_written_save(tmp_path):
    result, run_dir = run("reference-nonatomic", tmp_path)
    assert result["verdict"] == "fail"
    m = result["measurements"]
    assert (m["crashed_checkpoint"], m["crashed_complete"], m["restored_step"]) == ("step_00000020", False, 20)
    assert m["restored_incomplete"] is True and m["time_to_first_step"] is not None
    assert any("resumed from step_00000020, which the crash at 'close *' left incomplete (missing MANIFEST.json, "
               "meta.json" in r for r in result["reasons"])
    # the heal left the job's files as the crash left them: the incomplete folder is still the kept copy
    copy = kept_copy(run_dir) / "step_00000020"
    live = run_dir / "job" / "ckpt" / "step_00000020"
    assert sorted(p.name for p in live.iterdir()) == sorted(p.name for p in copy.iterdir()) == ["shard_0.pt"]
    assert filecmp.cmp(live / "shard_0.pt", copy / "shard_0.pt", shallow=False)
    heal = result["fault"]["heals"][0]
    assert heal["verified"] and "stay as the crash left them" in heal["detail"]


def test_a_torn_shard_stops_the_nonatomic_job_for_good(tmp_path):
    result, _ = run("reference-nonatomic", tmp_path, point="torn shard_*.pt")
    assert result["verdict"] == "fail"
    m = result["measurements"]
    assert m["crashed_why"].startswith("shard_0.pt torn to") and m["time_to_first_step"] is None
    assert m["job_exit_code"] not in (None, 0)  # every restart raised on load until the budget was spent


def test_a_sweep_records_one_save_and_drills_its_points(tmp_path):
    resolved = resolve("kill-during-save", cluster="local-process", job="reference-nonatomic")
    report, folder = run_sweep(resolved, n=1, reports_dir=str(tmp_path))
    recorded = report["recorded"]
    paths = [(e["kind"], e["path"]) for e in recorded["events"]]
    assert [k for k, p in paths if p.endswith("meta.json")] == ["create", "close"]
    # a writer is named only when the file was still open as it was seen (best effort); if so, rank 0
    assert all(e.get("by_target", True) for e in recorded["events"])
    assert recorded["points"] == 10  # create step_*; create, close, torn of each of its three files
    # one point sampled: the save's last, the manifest torn after it was written; the unchecked
    # loader reads the shard, never the manifest, and trains on
    [row] = report["rows"]
    assert (row["point"], row["class"], row["restored_step"]) == ("torn MANIFEST.json", "silent", 20)
    assert report["exit_code"] == 1
    text = (folder / "sweep.md").read_text()
    assert "| torn MANIFEST.json | SILENT |" in text
    assert "torch" in json.loads((folder / "sweep.json").read_text())["versions"]
    assert CrashPoint.parse(row["point"]).kind == "torn"
