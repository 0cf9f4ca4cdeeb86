"""Real drills on the real reference job (torchrun, gloo, 4 ranks) — each takes 20-60 s."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from drillbit.runs.session import execute, resolve
from tests.integration.short import short_window

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent / "drills"


def run(drill: str, job: str, tmp_path: Path, window: float | None = None) -> dict:
    resolved = resolve(str(HERE / f"{drill}.yaml"), job=job)
    payload, outcome = execute(short_window(resolved, window) if window else resolved, reports_dir=str(tmp_path))
    saved = json.loads((outcome.run_dir / "result.json").read_text())
    assert saved["verdict"] == payload["verdict"]
    lines = (outcome.run_dir / "history.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["kind"] == "drill.start" and json.loads(lines[-1])["kind"] == "drill.end"
    return payload


def test_kill_rank_passes_on_the_reference_stack(tmp_path):
    result = run("kill-rank-fast", "reference", tmp_path)
    assert result["verdict"] == "pass", result["reasons"]
    assert result["exit_code"] == 0
    m = result["measurements"]
    for key in ("time_to_detect", "time_to_restart", "time_to_restore", "time_to_first_step"):
        assert m[key] is not None and m[key] > 0, key
    assert m["time_to_detect"] <= m["time_to_restart"] <= m["time_to_restore"] <= m["time_to_first_step"]
    assert m["restored_step"] in (10, 15) and m["lost_steps"] == m["step_at_fault"] - m["restored_step"]
    assert result["fault"]["confirmed"] and result["fault"]["healed"]
    assert result["fault"]["targets"][0]["rank"] == 1


def test_kill_rank_fails_without_a_restart_budget(tmp_path):
    result = run("kill-rank-fast-short", "reference-norestarts", tmp_path)
    assert result["verdict"] == "fail", result["reasons"]
    assert result["exit_code"] == 1
    assert result["measurements"]["restarts"] == 0 and result["measurements"]["time_to_first_step"] is None
    assert "the job never made a step again; the job exited (code 1)" in result["reasons"][0]
    first = next(s for s in result["slos"] if s["name"] == "first_step_within")
    assert first["status"] == "fail" and first["measured"] is None
    assert result["fault"]["confirmed"] and result["fault"]["healed"]


def test_kill_rank_without_the_store_fix_is_judged_by_what_the_restart_did(tmp_path):
    # The stale store is a real race: which side of each gloo pair connects follows the ports
    # the restarted ranks were given, so now and then every pair comes out right and the
    # restart truly works (won in two CI runs of 2026-12-01, lost 7 of 7 times alone on the
    # development machine). A gate cannot be shown failing on a race; the deterministic broken
    # path is the test above. This one holds the verdict to the job's own record either way.
    result = run("kill-rank-fast", "reference-nostorefix", tmp_path, window=30)
    m = result["measurements"]
    if result["verdict"] == "pass":
        assert m["restarts"] == 1 and m["time_to_first_step"] is not None
        assert result["exit_code"] == 0
        return
    assert result["verdict"] == "fail" and result["exit_code"] == 1
    restarts = next(s for s in result["slos"] if s["name"] == "limits.restarts.max")
    if m["time_to_first_step"] is None:
        assert "no restart ever produced a step" in result["reasons"][0]
        first = next(s for s in result["slos"] if s["name"] == "first_step_within")
        assert first["status"] == "fail" and first["measured"] is None
        # a restart that said why it failed (gloo's connectFullMesh against a dead worker's
        # address, when it gives up within the window) is quoted in the verdict
        for error in [e for e in m["job_errors"] if any(a >= 1 for a in e["attempts"])][:3]:
            assert error["message"][:60] in result["reasons"][0], (error, result["reasons"])
    else:
        assert restarts["status"] == "fail" and restarts["measured"] > 1
        assert any("after one fault (each failed restart spends the restart budget)" in r for r in result["reasons"])


def test_stall_nccl_passes_with_the_watchdog(tmp_path):
    result = run("stall-nccl-fast", "reference", tmp_path)
    assert result["verdict"] == "pass", result["reasons"]
    m = result["measurements"]
    assert 5 < m["time_to_detect"] < 30  # the reference watchdog's deadline is 10 s
    assert (m["predicted_by"], m["predicted_detect_s"]) == ("watchdog", 10.0)  # from the profile's timeouts
    assert m["time_to_first_step"] > m["time_to_detect"]


def test_stall_nccl_fails_with_the_watchdog_off(tmp_path):
    result = run("stall-nccl-fast", "reference-nowatchdog", tmp_path, window=15)
    assert result["verdict"] == "fail"
    assert "the stall was never detected" in result["reasons"][0]
    detect = next(s for s in result["slos"] if s["name"] == "detect_within")
    assert detect["status"] == "fail"
    assert result["measurements"]["predicted_by"] == "collective"  # predicted: gloo's 30 min, past any SLO
    # where: the stopped rank named as such, by its own frame (or among the others, where it froze in the
    # same one), never placed on the waiting rank's frame unnamed
    [stuck] = [r for r in result["reasons"] if r.startswith("where the job was stuck")]
    assert "ranks 0–1 of the first attempt" in stuck, stuck
    assert "rank 1, the one the fault stopped, in " in stuck or "(rank 1 the one the fault stopped) stuck in" in stuck, stuck
    # the heal resumed the stopped rank before teardown
    heal = result["fault"]["heals"][0]
    assert heal["verified"] and "resumed" in heal["detail"]


def _drill_cli(tmp_path: Path, drill: str, job: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "drillbit.entry.cli", "run", str(HERE / f"{drill}.yaml"), "--job", job,
         "--reports", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_for_kind(tmp_path: Path, kind: str, timeout: float = 120) -> Path:
    deadline = time.time() + timeout
    while time.time() < deadline:
        for history in tmp_path.glob("*/history.jsonl"):
            if f'"kind":"{kind}"' in history.read_text():
                return history
        time.sleep(0.2)
    raise AssertionError(f"no {kind} event within {timeout} s")


def _stopped_pids(history: Path) -> list[int]:
    rows = [json.loads(line) for line in history.read_text().splitlines()]
    pids = [r["data"]["pid"] for r in rows if r["kind"] == "fault.inject"]
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() == psutil.STATUS_STOPPED]


def test_sigint_mid_stall_heals_aborts_and_exits_4(tmp_path):
    proc = _drill_cli(tmp_path, "stall-nccl-fast", "reference-nowatchdog")
    history = _wait_for_kind(tmp_path, "fault.confirmed")
    assert _stopped_pids(history), "the fault should be active now"
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 4, out
    result = json.loads((history.parent / "result.json").read_text())
    assert result["verdict"] == "aborted" and "interrupted by SIGINT" in result["reasons"][0]
    assert result["fault"]["healed"]
    assert _stopped_pids(history) == []


def test_sigkilled_controller_is_healed_by_the_dead_mans_switch(tmp_path):
    proc = _drill_cli(tmp_path, "stall-nccl-fast", "reference-nowatchdog")
    history = _wait_for_kind(tmp_path, "fault.confirmed")
    [stopped] = _stopped_pids(history)
    proc.kill()
    proc.communicate()
    deadline = time.time() + 30
    while time.time() < deadline and psutil.pid_exists(stopped):
        if psutil.Process(stopped).status() != psutil.STATUS_STOPPED:
            break
        time.sleep(0.1)
    deadman = list(history.parent.glob("*.deadman.jsonl"))
    assert deadman, "the guardian left no record"
    deadline = time.time() + 60  # it lets the job run job_grace (5 s on local-process), then stops it
    rows: list[dict] = []
    while time.time() < deadline and not (rows and rows[-1]["kind"] == "orphan.done"):
        rows = [json.loads(line) for line in deadman[0].read_text().splitlines()]
        time.sleep(0.2)
    assert [r["kind"] for r in rows] == ["agent.lost", "fault.heal", "job.stop", "orphan.done"]
    heal = rows[1]["data"]
    assert heal["pid"] == stopped and heal["verified"] and heal["by"] == "dead-man"
