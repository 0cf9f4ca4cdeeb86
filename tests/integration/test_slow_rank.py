"""slow-rank on the real reference job: a 3% slower rank must be named; NVRx's rule misses it."""
from __future__ import annotations

from pathlib import Path

import pytest

from drillbit.runs.session import execute, resolve
from tests.integration.short import short_window

pytestmark = [pytest.mark.slow]
# step times 3% apart: nothing else runs beside the tests that judge them (one xdist group for
# every alone test, so they run one after another and the machine drains once for them)
SPEC = Path(__file__).parent / "drills" / "slow-rank-fast.yaml"


@pytest.fixture(autouse=True)
def catalogue_step_time(monkeypatch):
    """A 3% slowdown of a 250 ms step, as the catalogue drills it (conftest shortens steps and
    coarsens the stand-in compute's slices)."""
    monkeypatch.setenv("DRILLBIT_REFERENCE_STEP_MS", "250")
    monkeypatch.setenv("DRILLBIT_REFERENCE_NPROC", "4")
    monkeypatch.delenv("DRILLBIT_REFERENCE_SLICE_MS")


def run(job: str, tmp_path: Path, window: float | None = None) -> dict:
    resolved = resolve(str(SPEC), job=job)
    payload, _ = execute(short_window(resolved, window) if window else resolved, reports_dir=str(tmp_path))
    return payload


@pytest.mark.alone
@pytest.mark.xdist_group("alone")
def test_three_percent_slow_rank_is_named(tmp_path):
    result = run("reference", tmp_path)
    assert result["verdict"] == "pass", result["reasons"]
    m = result["measurements"]
    assert m["straggler_rank"] == 2 and m["straggler_correct"]
    assert abs(m["slowdown_achieved"] - 0.03) < 0.02  # measured within a few points of the target
    assert m["fleet_tax"] is not None  # measured; its size is a figure for bench/, not a test
    assert "slowdown" in result["ledger"]["categories"]
    assert all(h["verified"] for h in result["fault"]["heals"])


@pytest.mark.alone  # another drill's load could slow a healthy rank past NVRx's rule: it would name one
@pytest.mark.xdist_group("alone")
def test_nvrx_rule_never_names_it(tmp_path):
    result = run("reference-nvrx", tmp_path, window=15)
    assert result["verdict"] == "fail"
    assert "was never named" in result["reasons"][0]


def test_without_a_detector_it_fails(tmp_path):  # nothing names a rank, whatever the load: not alone
    result = run("reference-nostraggler", tmp_path, window=15)
    assert result["verdict"] == "fail"
