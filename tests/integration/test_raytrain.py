"""The second real recovery stack: the reference job on Ray Train (TorchTrainer, CPU,
gloo, FailureConfig) on the embedded Ray cluster, found through pid files. kill-rank and
stall-nccl pass with the failure budget and the collective timeout in place, and fail
without them (stall-nccl in the extended tier)."""
from __future__ import annotations

from pathlib import Path

import pytest

from drillbit.runs.session import execute, resolve
from tests.integration.short import short_window

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]  # one Ray cluster at a time under -n
HERE = Path(__file__).parent / "drills"


def run(drill: str, job: str, tmp_path: Path, window: float | None = None) -> dict:
    resolved = resolve(str(HERE / f"{drill}.yaml"), cluster="local", job=job)
    payload, _ = execute(short_window(resolved, window) if window else resolved, reports_dir=str(tmp_path))
    return payload


def test_kill_rank_on_ray_train(tmp_path):
    result = run("kill-rank-fast", "raytrain", tmp_path)
    assert result["verdict"] == "pass", result["reasons"]
    m = result["measurements"]
    assert m["restarts"] == 1
    # the newest save, or nothing when the kill beat the controller's poll of that report
    # (docs/stacks/reference.md): Ray Train never restores a step it was not told of
    assert m["newest_save_step"] == 10 and m["restored_step"] in (0, 10), m


def test_kill_rank_fails_ray_train_without_a_failure_budget(tmp_path):
    result = run("kill-rank-fast", "raytrain-nofailover", tmp_path)
    assert result["verdict"] == "fail"


# the stall pair is the extended tier's: the collective timeout's gate is drilled in the CI tier on
# the reference job (test_reference_drills.py) and on two Ray nodes (test_ray.py)
@pytest.mark.extended
def test_stall_nccl_on_ray_train_caught_by_the_collective_timeout(tmp_path):
    result = run("stall-nccl-raytrain", "raytrain", tmp_path)
    assert result["verdict"] == "pass", result["reasons"]
    assert all(h["verified"] for h in result["fault"]["heals"])  # resumed, or killed by Ray Train with its group


@pytest.mark.extended
def test_stall_nccl_missed_by_ray_train_with_the_default_timeout(tmp_path):
    result = run("stall-nccl-fast", "raytrain-notimeout", tmp_path, window=15)
    assert result["verdict"] == "fail"
    assert "the stall was never detected" in result["reasons"][0]
