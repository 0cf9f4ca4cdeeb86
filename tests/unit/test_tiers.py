"""Multi-tier checkpoints without JAX: what each tier held (tier_steps, on real folders in
Orbax's layout), the restore-tier measurement and SLO from scripted histories, Orbax's
P2P lines (as Orbax 0.12.8 printed them here) read as restores from a tier, and
lose-local-tier on a real process and folder — killed, taken away, put back.
(tests/integration/test_jax.py drills the real thing.)"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from drillbit.spec.checkpoints import CheckpointSpec, tier_steps
from drillbit.judging.checks import check
from drillbit.judging.checks.recovery import measure, restored_tier
from drillbit.faults.lose_local_tier import LoseLocalTier, LoseLocalTierParams
from drillbit.core.history import History
from drillbit.judging.probes.preset import load, matcher
from drillbit.core.proc import ProcRef
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
    evidence = [{"t": t + 4.4, "what": "gone", "kind": "tier-lost", "data": {"lost": lost, "tier": "local", "entries": []}}
                if lost else {"t": t + 4.4, "what": "gone", "kind": "process-gone", "data": {"pid": 1}}]
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


# Orbax 0.12.8's P2P CheckpointManager, two processes restarting after process 1's host was
# lost: process 0 finds its own copy, process 1 fetches process 0's over TCP.
P2P_PEER = """INFO:absl:P2P latest_step=165
INFO:absl:Targeting restore step: 165
INFO:absl:Attempting to restore step 165 from local or P2P.
INFO:absl:Step 165 found in local storage.
INFO:absl:Attempting to restore step 165 from local or P2P.
WARNING:absl:Local scan: No steps found in /tmp/p2p/job/local/p1.
INFO:absl:Step 165 not found locally, fetching from P2P.
INFO:absl:P2P transfer complete: 0.00 MB in 0.04s (0.09 MB/s) | Step: 165
INFO:absl:Restoration finished using P2P in 0.10s
INFO:absl:Restoration finished using P2P in 0.11s"""
# the same with peers that advertise an address the other cannot reach
P2P_UNREACHABLE = """INFO:absl:Step 430 found in local storage.
INFO:absl:Step 430 not found locally, fetching from P2P.
ERROR:absl:Failed to connect to or communicate with 192.0.2.1:48351 for opcode=1: [Errno 101] Network is unreachable
ERROR:absl:Local/P2P restore for step 430 failed: Failed to fetch step 430 from P2P network."""


def read_lines(text: str, t0: float = 2000.0) -> History:
    m = matcher(load("orbax").signals)
    h = History()
    for i, line in enumerate(text.splitlines()):
        for kind, _t, data in m.match(line):
            h.record("probe:logs", kind, t=t0 + i * 0.01, **data)
    return h


def test_orbax_p2p_lines_name_the_tier_each_process_restored_from():
    h = read_lines(P2P_PEER)
    got = [(e.kind, e.data["step"], e.data["tier"]) for e in h]
    assert got == [("restore", 165, "local"), ("restore", 165, "peer")]
    first = next(iter(h))
    # one process took its own copy, the other a peer's: the job's state came from a peer
    assert restored_tier(list(h), first, None, ["local", "persistent"]) == "peer"


def test_a_persistent_fallback_is_farther_than_a_peer_and_a_failed_fetch_is_no_restore():
    h = read_lines(P2P_UNREACHABLE)
    events = list(h)
    assert [(e.kind, e.data.get("tier")) for e in events] == [
        ("restore", "local"), ("restore", "peer"), ("restore.failed", "peer")]
    # the fetch failed and nothing came after: no tier restored the job
    assert restored_tier(events, events[0], None, ["local", "persistent"]) is None
    h.record("probe:logs", "restore", t=2001.0, step=430, tier="persistent")
    h.record("probe", "step", t=2002.0, n=431)
    assert restored_tier(list(h), events[0], 2002.0, ["local", "persistent"]) == "persistent"


def test_a_signal_sets_constant_fields_and_a_group_of_the_same_name_wins():
    from drillbit.spec.signals import Signal

    m = matcher([Signal(kind="restore", pattern=r"from (?P<tier>\w+) at (?P<step>\d+)", ints=["step"],
                        fields={"tier": "peer", "src": "line"})])
    assert m.match("from disk at 3")[0][2] == {"tier": "disk", "step": 3, "src": "line", "t_source": "read"}
    m = matcher([Signal(kind="restore", pattern=r"fetching (?P<step>\d+)", ints=["step"], fields={"tier": "peer"})])
    assert m.match("fetching 4")[0][2]["tier"] == "peer"


def flash_drilled(restored: int, tier: str, hurts: str = "rank", late_save: int | None = None) -> History:
    """DLRover's flash checkpoints: memory every 2 steps (known only from the job's save lines),
    disk every 10 (a folder); killed at step 17. ``late_save``: a memory save whose line (no
    time of its own) was read just after the kill was confirmed."""
    h = History()
    t = 3000.0
    for n in range(1, 18):
        h.record("probe", "step", t=t + n * 0.25, n=n)
        if n % 10 == 0:
            h.record("probe", "ckpt.save", t=t + n * 0.25 + 0.01, step=n, tier="disk")
        elif n % 2 == 0:
            h.record("probe", "ckpt.save", t=t + n * 0.25 + 0.01, step=n, tier="memory")
    h.record("harness", "steady", t=t + 1.0, baseline_step_s=0.25, step=4)
    h.record("harness", "ckpt.tiers", t=t + 4.3, tiers={"memory": {}, "disk": {"/r/ckpt": 10}},
             saved={"memory": "node"})
    h.record("harness", "fault.confirmed", t=t + 4.4, expects="crash", hurts=hurts, evidence=[])
    if late_save is not None:
        h.record("probe", "ckpt.save", t=t + 4.456, step=late_save, tier="memory", t_source="read")
    h.record("probe", "restart", t=t + 5.0, attempt=1, by="torchrun")
    h.record("probe", "restore", t=t + 8.0, step=restored, tier=tier)
    h.record("probe", "step", t=t + 9.0, n=restored + 1)
    h.record("harness", "observe.end", t=t + 10.0, reason="recovered")
    return h


def test_a_tier_known_from_saves_holds_the_newest_step_saved_there_and_outlives_a_killed_process():
    m = measure(flash_drilled(16, "memory"))
    assert (m.restored_from, m.best_available_step, m.best_available_tier, m.steps_behind_best) == (
        "memory", 16, "memory", 0)
    assert check(SPEC, flash_drilled(16, "memory")).verdict == "pass"
    result = check(SPEC, flash_drilled(10, "disk"))  # the old resume code: torch.load of the newest file
    assert result.verdict == "fail"
    assert any("restored step 10 from disk while step 16 survived in the memory tier: 6 step(s) behind" in r
               for r in result.reasons), result.reasons


def test_a_save_line_read_after_the_kill_is_a_copy_the_restore_could_take():
    """The save of step 18 was printed before the kill and read 56 ms after it was confirmed
    (a line without a time is stamped when read; test_stacks.py's DLRover drill on a loaded
    machine): the restore that took 18 from memory is 0 steps behind, and one that took 16
    is 2 behind — not the other way round."""
    m = measure(flash_drilled(18, "memory", late_save=18))
    assert (m.best_available_step, m.best_available_tier, m.steps_behind_best) == (18, "memory", 0)
    assert check(SPEC, flash_drilled(18, "memory", late_save=18)).verdict == "pass"
    m = measure(flash_drilled(16, "memory", late_save=18))
    assert (m.best_available_step, m.steps_behind_best) == (18, 2)
    assert check(SPEC, flash_drilled(16, "memory", late_save=18)).verdict == "fail"


def test_a_fault_that_takes_the_node_takes_a_shared_memory_tier_with_it():
    m = measure(flash_drilled(10, "disk", hurts="node"))
    assert m.lost_copies == ["memory (the job's saves)"]
    assert (m.best_available_step, m.best_available_tier, m.steps_behind_best) == (10, "disk", 0)


def test_a_restore_that_never_led_to_a_step_restored_from_no_tier():
    """One process of a hung restart named its own copy, and the restart never stepped: the
    job's state came from nowhere (Orbax's P2P restore that deadlocks, tests/integration/
    test_jax.py); with a first step after it, that tier is where it came from."""
    from tests.unit.test_checks import T_FAULT, prelude, steps

    def history(stepped: bool) -> History:
        rows = prelude()
        rows += [(T_FAULT - 0.01, "fault.inject"), (T_FAULT, "fault.confirmed"),
                 (T_FAULT + 1, "restart", {"attempt": 1}), (T_FAULT + 2, "restore", {"step": 20, "tier": "local"})]
        rows += steps(21, 30, T_FAULT + 3) if stepped else []
        rows += [(T_FAULT + 30, "observe.end"), (T_FAULT + 30.5, "drill.end")]
        return History.build(rows)

    assert measure(history(stepped=False)).restored_from is None
    assert measure(history(stepped=True)).restored_from == "local"
