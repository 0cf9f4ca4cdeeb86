"""corrupt-checkpoint on real checkpoint folders: every mode is rejected by the reference
job's verifier, and heal restores every file byte for byte."""
from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from drillbit.agent import NodeAgent
from drillbit.faults.corrupt_checkpoint import CorruptParams
from drillbit.core.proc import ProcRef
from drillbit.fixtures.reference import checkpoint

MODES = ["flip-bytes", "truncate", "delete-shard", "drop-marker", "corrupt-metadata"]


def tree_hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def ckpts(tmp_path):
    root = tmp_path / "ckpt"
    for step in (10, 20):
        checkpoint.write_checkpoint(root, step, {"shard_0.pt": bytes(range(256)) * 64 + str(step).encode()},
                                    {"world_size": 4})
    return root


@pytest.fixture
def rank():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_is_rejected_and_healed_byte_for_byte(tmp_path, ckpts, rank, mode):
    before = tree_hashes(ckpts)
    agent = NodeAgent("n0", tmp_path / "reg.json")
    target = ProcRef.of(psutil.Process(rank.pid), rank=2)
    t_inject = time.time()
    handle = agent.inject("corrupt-checkpoint", target, CorruptParams(mode=mode, checkpoint={"dir": str(ckpts)}).model_dump())
    t_killed_by = time.time()
    rank.wait(timeout=10)  # then_kill
    evidence = agent.confirm(handle)
    assert evidence is not None and evidence.data["checkpoint"].endswith("step_00000020")
    # the fault's moment is the damage and the kill, not the confirm that looked later (ci: a
    # launcher that saw the dead rank first had its detection dropped as before the fault)
    assert t_inject <= evidence.t <= t_killed_by
    assert tree_hashes(ckpts) != before
    found, rejected = checkpoint.newest_valid(ckpts)
    assert found is not None and found.step == 10, "the verifier must fall back to the older checkpoint"
    assert rejected[0][0].name == "step_00000020"
    report = agent.heal(handle)
    assert report.healed and report.verified, report.detail
    assert tree_hashes(ckpts) == before  # byte for byte
    assert checkpoint.newest_valid(ckpts)[0].step == 20


def test_heal_never_overwrites_a_checkpoint_the_job_rewrote(tmp_path, ckpts, rank):
    agent = NodeAgent("n0", tmp_path / "reg.json")
    target = ProcRef.of(psutil.Process(rank.pid), rank=2)
    handle = agent.inject("corrupt-checkpoint", target,
                          CorruptParams(mode="flip-bytes", checkpoint={"dir": str(ckpts)}).model_dump())
    newer = b"the job's own newer step 20"
    checkpoint.write_checkpoint(ckpts, 20, {"shard_0.pt": newer}, {"world_size": 4})
    report = agent.heal(handle)
    assert report.healed and "replaced or removed by the job" in report.detail
    assert (ckpts / "step_00000020" / "shard_0.pt").read_bytes() == newer


def test_too_few_checkpoints_is_a_clear_error(tmp_path, rank):
    from drillbit.core.errors import FaultError

    agent = NodeAgent("n0", tmp_path / "reg.json")
    target = ProcRef.of(psutil.Process(rank.pid), rank=2)
    with pytest.raises(FaultError, match="only 0 checkpoint"):
        agent.inject("corrupt-checkpoint", target, CorruptParams(checkpoint={"dir": str(tmp_path / "none")}).model_dump())
    assert rank.poll() is None  # nothing was killed


# --- the drill on the real reference job -----------------------------------------------------

SPEC = Path(__file__).parent / "drills" / "corrupt-checkpoint-fast.yaml"


def drill_with_mode(tmp_path: Path, mode: str, job: str) -> dict:
    from drillbit.runs.session import execute, resolve

    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.read_text().replace("params: {mode: flip-bytes}", f"params: {{mode: {mode}}}"))
    payload, _ = execute(resolve(str(spec), job=job), reports_dir=str(tmp_path / "reports"))
    return payload


# flip-bytes on `reference` (PASS) and on `reference-noverify` (FAIL) run through the installed CLI from a
# user's project folder, under three run-folder shapes: tests/integration/test_users_path.py
@pytest.mark.slow
def test_drill_falls_back_and_heals_end_to_end(tmp_path):
    result = drill_with_mode(tmp_path, "drop-marker", "reference")
    assert result["verdict"] == "pass", result["reasons"]
    m = result["measurements"]
    assert (m["corrupted_checkpoint"], m["restored_step"], m["rejected_corrupted"]) == ("step_00000020", 10, True)
    [heal] = result["fault"]["heals"]
    assert heal["verified"] and "byte for byte" in heal["detail"], heal["detail"]
