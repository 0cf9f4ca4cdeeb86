"""JAX with Orbax's multi-tier (emergency) checkpoints, for real on CPU: two JAX processes
under torchrun (drillbit.fixtures.stacks.jax_job), a local tier per process every 5 steps and a
persistent tier every 10. Where the restore came from is read from Orbax's own lines
(``emergency.CheckpointManager: restoring step=N from local|persistent checkpoint``), and
judged against the best copy any tier still held when the fault hit (``ckpt.tiers``, less
what the fault took away)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from drillbit.core import netns
from tests.integration.cli import drill_script

pytestmark = [pytest.mark.slow, pytest.mark.jax, pytest.mark.xdist_group("jax")]
HERE = Path(__file__).parent / "drills"


def drill(tmp_path: Path, spec: str, job: str, timeout: float = 300, isolated: bool = False) -> tuple[int, dict]:
    """`drill run SPEC --job JOB --json`; isolated: in a private network namespace with only lo
    (Orbax's P2P server binds every interface)."""
    pytest.importorskip("orbax.checkpoint")
    if isolated and not netns.available():
        pytest.skip("Orbax's P2P server binds every interface; no private network namespace here (needs root)")
    tmp_path.mkdir(parents=True, exist_ok=True)
    wrap = [sys.executable, "-m", "drillbit.core.netns"] if isolated else []
    proc = subprocess.run([*wrap, drill_script(), "run", str(HERE / spec), "--job", job, "--cluster", "local-process",
                           "--reports", str(tmp_path / "reports"), "--json"], capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout)


def test_a_killed_rank_restores_the_newest_local_step(tmp_path):
    code, r = drill(tmp_path, "restore-tier-kill-fast.yaml", "jax-orbax")
    m = r["measurements"]
    assert code == 0 and r["verdict"] == "pass", r["reasons"]
    assert m["restored_from"] == "local" and m["best_available_tier"] == "local"
    assert m["restored_step"] == m["best_available_step"] and m["restored_step"] % 5 == 0
    assert m["steps_behind_best"] == 0


def test_a_lost_local_tier_restores_from_persistent_the_best_copy_left_and_is_put_back(tmp_path):
    """Orbax's emergency manager saves the local tier on the non-primary replica slice only
    (here process 1; the primary slice writes the persistent tier): with process 1's host
    gone, persistent is the best copy left, and restoring it is right."""
    code, r = drill(tmp_path, "lose-local-tier-fast.yaml", "jax-orbax")
    m = r["measurements"]
    assert code == 0 and r["verdict"] == "pass", r["reasons"]
    lost = m["lost_copies"]
    assert len(lost) == 1 and lost[0].endswith(os.path.join("local", "p1"))
    assert m["restored_from"] == "persistent" and m["best_available_tier"] == "persistent"
    assert m["restored_step"] == m["best_available_step"] and m["restored_step"] % 10 == 0
    heal = r["fault"]["heals"][0]
    assert heal["verified"], heal
    assert not list(Path(lost[0]).parent.glob(".p1.drillbit-lost-*")) or "older ones in" in heal["detail"]


def test_restoring_from_persistent_while_a_newer_local_copy_exists_fails(tmp_path):
    code, r = drill(tmp_path, "restore-tier-kill-fast.yaml", "jax-orbax-persistent")
    m = r["measurements"]
    assert code == 1 and r["verdict"] == "fail", r["reasons"]
    assert m["restored_from"] == "persistent" and m["steps_behind_best"] > 0
    assert any(f"restored step {m['restored_step']} from persistent while step {m['best_available_step']} "
               "survived in the local tier" in reason for reason in r["reasons"]), r["reasons"]


def test_a_stall_is_caught_by_the_coordination_heartbeat_and_missed_with_the_default(tmp_path):
    code, r = drill(tmp_path / "fast", "stall-jax-fast.yaml", "jax-orbax")
    m = r["measurements"]
    assert code == 0 and r["verdict"] == "pass", r["reasons"]
    assert 4 <= m["time_to_detect"] < 15  # JAX gave up on the peer within its 10 s heartbeat timeout
    # torchrun stops the stopped worker with SIGTERM and waits out its 30 s grace before SIGKILL
    assert m["time_to_restart"] - m["time_to_detect"] >= 25
    code, r = drill(tmp_path / "default", "stall-jax-broken-fast.yaml", "jax-orbax-slowheartbeat")
    assert code == 1 and r["verdict"] == "fail", r["reasons"]
    assert any("no detection within 30 s" in reason for reason in r["reasons"]), r["reasons"]


def test_a_lost_local_tier_is_fetched_from_a_peer_with_orbax_p2p(tmp_path):
    """Orbax's P2P manager: every process keeps a local copy and serves it to its peers. With
    process 1's host gone, process 1 fetches process 0's copy over TCP: the newest local step,
    not the older persistent one."""
    code, r = drill(tmp_path, "lose-local-tier-fast.yaml", "jax-orbax-p2p", isolated=True)
    m = r["measurements"]
    assert code == 0 and r["verdict"] == "pass", r["reasons"]
    assert m["restored_from"] == "peer" and m["best_available_tier"] == "local"
    assert m["restored_step"] == m["best_available_step"] and m["steps_behind_best"] == 0
    assert m["restored_step"] % 5 == 0 and m["lost_copies"][0].endswith(os.path.join("local", "p1"))
    assert r["fault"]["heals"][0]["verified"]


def test_peers_that_cannot_reach_each_other_hang_the_restore_and_fail(tmp_path):
    """Found by drilling it: when process 1's fetch from its peer fails, Orbax 0.12.8's P2P
    manager never reaches its persistent fallback — process 0, which found its own copy,
    waits in the restore's barrier while process 1 waits in the fallback vote. The restart
    never steps again."""
    code, r = drill(tmp_path, "lose-local-tier-p2p-broken-fast.yaml", "jax-orbax-p2p-unreachable", isolated=True)
    assert code == 1 and r["verdict"] == "fail", r["reasons"]
    assert any(reason.startswith("no first step after recovery within 25 s") for reason in r["reasons"]), r["reasons"]
    assert r["measurements"]["restored_from"] is None, r["measurements"]
    tier = next(s for s in r["slos"] if s["name"] == "restore_tier")
    assert tier["status"] == "unknown" and "never stepped again" in tier["detail"], tier
    assert r["fault"]["heals"][0]["verified"]


def test_a_corrupted_orbax_checkpoint_crash_loops_the_plain_manager_and_is_put_back(tmp_path):
    """corrupt-checkpoint on Orbax's layout: the flipped bytes land in the merged OCDBT data
    file a restore reads (step/default/d/…). Orbax notices (tensorstore: "Data corruption
detected") but its plain manager
    retries the same newest step on every restart instead of falling back to the one before:
    the restart budget runs out and the job never steps again."""
    code, r = drill(tmp_path, "corrupt-checkpoint-jax-fast.yaml", "jax-orbax-plain")
    m = r["measurements"]
    assert code == 1 and r["verdict"] == "fail", r["reasons"]
    assert m["corrupted_checkpoint"] == "20" and m["time_to_first_step"] is None and m["restarts"] >= 2
    heal = r["fault"]["heals"][0]
    assert heal["verified"] and "byte for byte" in heal["detail"], heal
    assert os.path.join("20", "default", "d") in heal["detail"], heal  # the merged tree's data, not a leftover
    [launcher] = (tmp_path / "reports").glob("*-corrupt-checkpoint-jax-fast/job/launcher.log")
    assert "Data corruption detected" in launcher.read_text(errors="replace")
    history = (launcher.parent.parent / "history.jsonl").read_text().splitlines()
    failed = [e for e in map(json.loads, history) if e["kind"] == "restore.failed"]
    assert failed and failed[0]["data"]["reason"] == "Data corruption detected", failed[:1]


def test_a_hung_orbax_restore_fails_and_heals(tmp_path):
    code, r = drill(tmp_path, "restore-hang-jax-fast.yaml", "jax-orbax-plain")
    assert code == 1 and r["verdict"] == "fail", r["reasons"]
    assert any(reason.startswith("no first step after recovery within 20 s") for reason in r["reasons"]), r["reasons"]
    heal = r["fault"]["heals"][0]
    assert heal["verified"], heal
