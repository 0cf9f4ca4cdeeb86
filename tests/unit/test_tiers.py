"""Multi-tier checkpoints without JAX: what each tier held (tier_steps, on real folders in
Orbax's layout), the restore-tier measurement and SLO from scripted histories, and
lose-local-tier on a real process and folder — killed, taken away, put back.
(tests/integration/test_jax.py drills the real thing.)"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from drillbit.checkpoints import CheckpointSpec, tier_steps
from drillbit.checks import check
from drillbit.checks.recovery import measure
from drillbit.faults.lose_local_tier import LoseLocalTier, LoseLocalTierParams
from drillbit.history import History
from drillbit.proc import ProcRef
from drillbit.spec.models import DrillSpec

TIERS = {"local": CheckpointSpec(dir="{run_dir}/local/p{rank}", layout="orbax"),
         "persistent": CheckpointSpec(dir="{run_dir}/persistent", layout="orbax")}


def orbax_step(folder: Path, step: int, complete: bool = True) -> None:
    (folder / str(step)).mkdir(parents=True)
    if complete:
        (folder / str(step) / "_CHECKPOINT_METADATA").write_text("{}")


def test_tier_steps_reads_each_copy_of_each_tier_and_skips_unfinished_saves(tmp_path):
    for step in (5, 10, 15):
        orbax_step(tmp_path / "local" / "p0", step)
        orbax_step(tmp_path / "local" / "p1", step, complete=step != 15)
    orbax_step(tmp_path / "persistent", 10)
    got = tier_steps(TIERS, {"run_dir": str(tmp_path)})
    assert got == {"local": {f"{tmp_path}/local/p0": 15, f"{tmp_path}/local/p1": 10},
                   "persistent": {f"{tmp_path}/persistent": 10}}


SPEC = DrillSpec.model_validate({
    "name": "t", "class": "fail-stop", "summary": "s", "fault": {"type": "kill-rank", "trigger": {"at_step": 5}},
    "slo": {"restore_tier": {"max_steps_behind_best": 0}}})


def drilled(restored: int, tier: str, lost: str | None = None) -> History:
    h = History()
    t = 1000.0
    for n in range(1, 18):
        h.record("probe", "step", t=t + n * 0.25, n=n)
    h.record("harness", "steady", t=t + 1.0, baseline_step_s=0.25, step=4)
    h.record("harness", "ckpt.tiers", t=t + 4.3, tiers={"local": {"/r/local/p0": 15, "/r/local/p1": 15},
                                                          "persistent": {"/r/persistent": 10}})
    evidence = [{"t": t + 4.4, "what": "gone", "data": {"lost": lost} if lost else {}}]
    h.record("harness", "fault.confirmed", t=t + 4.4, expects="crash", evidence=evidence)
    h.record("probe", "restart", t=t + 5.0, attempt=1, by="torchrun")
    h.record("probe", "restore", t=t + 12.0, step=restored, tier=tier)
    h.record("probe", "step", t=t + 13.0, n=restored + 1)
    h.record("harness", "observe.end", t=t + 14.0, reason="recovered")
    return h


def test_a_restore_from_the_best_copy_left_passes():
    h = drilled(15, "local", lost="/r/local/p1")
    m = measure(h)
    assert (m.restored_from, m.best_available_step, m.best_available_tier) == ("local", 15, "local")
    assert m.lost_copies == ["/r/local/p1"] and m.steps_behind_best == 0
    assert check(SPEC, h).verdict == "pass"


def test_falling_back_to_persistent_past_a_surviving_local_copy_fails_with_the_steps_lost():
    result = check(SPEC, drilled(10, "persistent"))
    assert result.verdict == "fail"
    assert any("restored step 10 from persistent while step 15 survived in the local tier: 5 step(s) behind"
               in r for r in result.reasons), result.reasons


def test_with_every_local_copy_lost_persistent_is_the_best_left():
    h = drilled(10, "persistent", lost="/r/local/p1")
    h2 = History()
    for e in h:  # both local copies lost: only persistent is left
        data = dict(e.data)
        if e.kind == "ckpt.tiers":
            data["tiers"] = {"local": {"/r/local/p1": 15}, "persistent": {"/r/persistent": 10}}
        h2.record(e.source, e.kind, t=e.t, node=e.node, rank=e.rank, **data)
    m = measure(h2)
    assert (m.best_available_step, m.best_available_tier, m.steps_behind_best) == (10, "persistent", 0)
    assert check(SPEC, h2).verdict == "pass"


def test_lose_local_tier_kills_takes_the_folder_away_and_puts_back_what_the_job_did_not_rewrite(tmp_path):
    local = tmp_path / "local" / "p1"
    for step in (5, 10):
        orbax_step(local, step)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        target = ProcRef.of(__import__("psutil").Process(proc.pid), rank=1, node="n")
        fault = LoseLocalTier(tmp_path / "scratch")
        params = LoseLocalTierParams(folder=str(tmp_path / "local" / "p{rank}"))
        state = fault.act(target, params, fault.prepare(target, params))
        assert proc.wait(10) == -9
        evidence = fault.confirm(target, params, state)
        assert evidence is not None and evidence.data["lost"] == str(local) and os.listdir(local) == []
        orbax_step(local, 10)  # the restarted job saved step 10 again: its copy stays
        (local / "10" / "new").write_text("the job's")
        report = fault.heal(target, params, state)
        assert report.healed and report.verified, report
        assert sorted(os.listdir(local)) == ["10", "5"] and (local / "10" / "new").exists()
        assert "older ones in" in report.detail and Path(state.aside, "10").exists()  # nothing taken is lost
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
