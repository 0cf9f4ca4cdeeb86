"""The recovery stacks teams deploy, drilled for real on CPU: torchft 0.2.0 (a lighthouse and
two replica groups under torchrun), NVIDIA's Resiliency Extension 0.4.1 (ft_launcher and
rank-monitor heartbeats) and DLRover 0.6.1 (dlrover-run with its job master). Each run is
the `drill` CLI inside a private network namespace with only loopback up
(`python -m drillbit.core.netns`): torchft's manager and DLRover's master bind every interface.

What the stacks did here is what these tests pin (README, "Comparing stacks"): torchft heals
a killed replica from its peer and blames only it; torchft's DDP wrapper takes the survivor
down with it; NVRx's rank monitors blame the rank blocked in the all-reduce along with the
stopped one; DLRover notices no stopped rank at all."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from drillbit.core import netns
from tests.integration.cli import drill_script

pytestmark = [pytest.mark.slow, pytest.mark.stacks, pytest.mark.xdist_group("stacks")]  # DLRover keeps fixed /tmp folders
HERE = Path(__file__).parent / "drills"
ISOLATED = netns.available()


def drill(tmp_path: Path, *args: str, timeout: float = 300) -> tuple[int, dict]:
    """`drill ARGS --json` in its own network namespace (where this machine allows one)."""
    wrap = [sys.executable, "-m", "drillbit.core.netns"] if ISOLATED else []
    tmp_path.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([*wrap, drill_script(), *args, "--reports", str(tmp_path / "reports"), "--json"],
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout)


def binds_everywhere() -> None:
    if not ISOLATED:
        pytest.skip("this stack's servers bind every interface; no private network namespace here (needs root)")


def test_compare_torchft_heals_and_blames_one_rank_its_ddp_wrapper_does_not(tmp_path):
    pytest.importorskip("torchft")
    binds_everywhere()
    code, out = drill(tmp_path, "compare", "--suite", str(HERE / "suites" / "stacks-fast.yaml"),
                      "--jobs", "torchft,torchft-ddp")
    cells = {c["job"]: c for c in out["cells"]}
    assert [c["drill"] for c in out["cells"]] == ["blame-kill-rank-fast"] * 2
    assert set(out["versions"]) >= {"torchft", "torch"}

    ft = cells["torchft"]
    m = ft["result"]["measurements"]
    assert ft["verdict"] == "pass", ft["note"]
    assert m["attribution"]["correct"] and m["attribution"]["blamed"] == [1]
    assert "torchft-lighthouse" in m["attribution"]["by"]
    assert m["lost_steps"] == 0  # healed from the peer replica: nothing rolled back
    assert m["restored_from"] == "peer"
    assert m["restored_step"] >= m["step_at_fault"] - 1

    ddp = cells["torchft-ddp"]
    assert ddp["verdict"] == "fail" and ddp["known_defect"]
    assert ddp["result"]["measurements"]["attribution"]["blamed"] == [0, 1]
    assert any("the stack blamed ranks 0 and 1" in r and "only rank 1 was killed" in r
               for r in ddp["result"]["reasons"]), ddp["result"]["reasons"]

    assert code == 0, "the FAIL is a known defect of the suite; nothing else failed"
    folder = Path(out["folder"])
    md = (folder / "compare.md").read_text()
    assert "| torchft | blame-kill-rank-fast |" in md and "fail (known)" in md
    assert "<table>" in (folder / "compare.html").read_text()


def test_nvrx_detects_a_stopped_rank_by_heartbeat_and_the_verdict_follows_whether_it_blamed_the_blocked_one(
        tmp_path):
    """Whether NVRx also blames the rank blocked behind the stopped one is a race inside NVRx
    0.4.1, not in the drill: each rank's monitor checks its own rank's heartbeat on its own 1 s
    loop, and both heartbeats stopped at the same step. When the stopped rank's monitor fires
    first it SIGKILLs that rank; the blocked rank's all-reduce then raises, and it closes its
    monitor connection (its monitor no longer judges it) and exits with an error, which
    ft_launcher names only if its next poll of the workers comes after that exit. Most runs name
    both ranks (a FAIL: a false blame); 1 run in about 8 here named only the stopped one (a true
    PASS). The test holds each outcome to its evidence."""
    pytest.importorskip("nvidia_resiliency_ext")
    code, r = drill(tmp_path, "run", str(HERE / "blame-stall-nvrx-fast.yaml"), "--job", "nvrx", "--cluster",
                    "local-process")
    m = r["measurements"]
    assert 9 <= m["time_to_detect"] <= 15  # the 10 s heartbeat timeout
    assert m["restarts"] == 1 and m["time_to_first_step"] is not None
    assert "nvrx-rank-monitor" in m["attribution"]["blamed_by"]["1"]
    assert r["fault"]["healed"]
    if m["attribution"]["blamed"] == [1]:  # only the stopped rank named: exact, and nothing else breached
        assert m["attribution"]["correct"] and m["attribution"]["false_blames"] == []
        assert code == 0 and r["verdict"] == "pass", r["reasons"]
        return
    assert code == 1 and r["verdict"] == "fail", r["reasons"]
    assert m["attribution"]["blamed"] == [0, 1] and m["attribution"]["false_blames"] == [0]
    # rank 0 is blamed by its own monitor (its heartbeat, sent from the loop, stops while it
    # waits in the all-reduce), by ft_launcher naming it the failed worker, or both
    assert set(m["attribution"]["blamed_by"]["0"]) <= {"nvrx-rank-monitor", "torchrun"}
    [reason] = r["reasons"]
    assert reason.startswith("the stack blamed ranks 0 and 1 (0: ") and reason.endswith(
        "only rank 1 was stopped — it must blame exactly the hurt rank(s)"), reason


def test_dlrover_never_notices_a_stopped_rank(tmp_path):
    pytest.importorskip("dlrover")
    binds_everywhere()
    fixed = ("/tmp/dlrover", "/tmp/ckpt_sock")  # DLRover 0.6.1's hard-coded folders
    before = {d: sorted(os.listdir(d)) if os.path.isdir(d) else None for d in fixed}
    code, r = drill(tmp_path, "run", str(HERE / "blame-stall-fast.yaml"), "--job", "dlrover", "--cluster",
                    "local-process")
    m = r["measurements"]
    assert code == 1 and r["verdict"] == "fail"
    assert m["time_to_detect"] is None and m["time_to_first_step"] is None and m["attribution"] is None
    assert any("no detection within 15 s" in reason for reason in r["reasons"]), r["reasons"]
    assert any("the stack blamed no rank" in reason for reason in r["reasons"]), r["reasons"]
    assert r["fault"]["healed"]
    # the job's launcher took back what DLRover wrote there
    assert {d: sorted(os.listdir(d)) if os.path.isdir(d) else None for d in fixed} == before


def test_dlrover_flash_checkpoints_restore_from_memory_and_old_resume_code_falls_back_to_disk(tmp_path):
    """DLRover's flash checkpoints: the state in the agent's shared memory every 2 steps, on
    disk every 10. A killed worker comes back from memory — the newest step any tier held.
    The same job with its old resume code (torch.load of the newest file on disk) restores
    step 10 while memory held 16: restore_tier FAILs."""
    pytest.importorskip("dlrover")
    binds_everywhere()
    from drillbit.fixtures.stacks.dlrover_job import SHM_DIR, _shm_ours

    fixed = ("/tmp/dlrover", "/tmp/ckpt_sock")
    before = {d: sorted(os.listdir(d)) if os.path.isdir(d) else None for d in fixed}
    shm_before = {n for n in os.listdir(SHM_DIR) if _shm_ours(n)}
    spec = str(Path(__file__).parent / "drills" / "restore-tier-kill-fast.yaml")
    code, r = drill(tmp_path / "flash", "run", spec, "--job", "dlrover-flash", "--cluster", "local-process")
    m = r["measurements"]
    assert code == 0 and r["verdict"] == "pass", r["reasons"]
    assert m["restored_from"] == "memory" and m["best_available_tier"] == "memory"
    # the trigger is step 17; a kill that lands a step or two later (a loaded machine) finds a newer
    # memory save, and the restore must follow it there
    assert m["restored_step"] == m["best_available_step"] >= 16 and m["steps_behind_best"] == 0
    code, r = drill(tmp_path / "disk", "run", spec, "--job", "dlrover-flash-diskonly", "--cluster", "local-process")
    m = r["measurements"]
    assert code == 1 and r["verdict"] == "fail", r["reasons"]
    best = m["best_available_step"]
    assert (m["restored_from"], m["restored_step"], m["best_available_tier"]) == ("disk", 10, "memory") and best >= 16
    assert m["steps_behind_best"] == best - 10
    assert any(f"restored step 10 from disk while step {best} survived in the memory tier" in reason
               for reason in r["reasons"]), r["reasons"]
    # the job's launcher took back what DLRover wrote there, its shared memory included
    assert {d: sorted(os.listdir(d)) if os.path.isdir(d) else None for d in fixed} == before
    assert {n for n in os.listdir(SHM_DIR) if _shm_ours(n)} == shm_before
