"""Never touch what is not the target, never leave a fault behind: refusals before anything
is touched (blast radius, one file per target, allowed hosts), the operator's second
Ctrl-C while healing, a lost lease, and the lease actor's rules — on the fake transport."""
from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from drillbit.loop import DrillRunner
from drillbit.transport.raycluster import LeaseActor
from tests.fakes.fake_cluster import CLUSTER, JOB, FakeAgent, FakeJob, FakeNodes, fake_probes, spec


def run(tmp_path, drill_spec, *, cluster=CLUSTER, job=None, nodes_hook=None, **agent_kw):
    job = job or FakeJob()
    agent = FakeAgent("n0", job, **agent_kw)
    nodes = FakeNodes(tmp_path, agent)
    if nodes_hook:
        nodes_hook(nodes)
    outcome = DrillRunner(drill_spec, "fake", cluster, "fake-job", JOB, tmp_path, nodes=nodes,
                          probes=fake_probes(job), heal_timeout=0.3).run()
    agent.release.set()
    return outcome, agent


def with_fault(**fault):
    base = {"type": "kill-rank", "targets": {"ranks": [1]}, "trigger": {"at_step": 8}}
    return spec(fault={**base, **fault})


def test_a_selection_wider_than_the_blast_radius_is_refused_before_anything_is_touched(tmp_path):
    outcome, agent = run(tmp_path, with_fault(targets={"ranks": [0, 1, 2]}))
    assert outcome.error_kind == "config"
    assert "3 of the job's 4 ranks, blast_radius.max_share is 0.5" in outcome.error
    assert "inject" not in agent.calls and agent.stopped


def test_a_wider_blast_radius_must_be_asked_for(tmp_path):
    drill = with_fault(targets={"ranks": [0, 1, 2]}).model_copy(
        update={"blast_radius": spec().blast_radius.model_copy(update={"max_share": 0.75})})
    outcome, agent = run(tmp_path, drill)
    assert outcome.error is None and agent.calls.count("inject") == 3


def test_a_file_fault_with_two_targets_is_refused(tmp_path):
    outcome, agent = run(tmp_path, with_fault(type="corrupt-checkpoint", targets={"count": 2, "select": "first"},
                                              params={"checkpoint": {"dir": str(tmp_path)}}))
    assert outcome.error_kind == "config"
    assert "corrupt-checkpoint touches one file for all its targets" in outcome.error
    assert "inject" not in agent.calls


def test_hosts_outside_allowed_hosts_are_refused_before_launch(tmp_path):
    outcome, agent = run(tmp_path, spec(), cluster=CLUSTER.model_copy(update={"allowed_hosts": ["gpu-*"]}))
    assert outcome.error_kind == "config" and "not in the cluster's allowed_hosts" in outcome.error
    assert "launch" not in agent.calls


def test_a_second_ctrl_c_while_healing_leaves_the_faults_in_place_and_says_so(tmp_path):
    job = FakeJob()

    def press_twice_while_healing():
        deadline = time.time() + 10
        while time.time() < deadline and "heal" not in agent_calls():
            time.sleep(0.005)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    box = {}
    agent_calls = lambda: box["agent"].calls if "agent" in box else []  # noqa: E731
    threading.Thread(target=press_twice_while_healing, daemon=True).start()
    outcome, agent = run(tmp_path, spec(), job=job, heal_hangs=5.0,
                         nodes_hook=lambda n: box.setdefault("agent", n.agent))
    kinds = [e.kind for e in outcome.history]
    assert kinds.count("interrupt.held") == 2
    left = outcome.history.last("heal.failed")
    assert left is not None and "the operator chose to leave the faults in place" in left.data["detail"]
    assert outcome.result.verdict == "fail"
    assert any(r.startswith("fault left in place") for r in outcome.result.reasons)


def test_a_lost_lease_stops_the_drill(tmp_path):
    def lose_lease_soon(nodes):
        threading.Timer(0.3, lambda: setattr(nodes, "problem", "the cluster lease on 'fake' was lost")).start()

    outcome, agent = run(tmp_path, spec(observe={"until_steps_after_recovery": 3, "window": "5s"}),
                         job=FakeJob(recovers=False), nodes_hook=lose_lease_soon)
    assert outcome.result.verdict == "aborted"
    assert any("lease on 'fake' was lost" in r for r in outcome.result.reasons)
    assert agent.active == {} and agent.stopped


def test_the_lease_actor_keeps_its_own_expiry_and_its_holders_token():
    lease = LeaseActor(ttl=30.0)
    assert lease.acquire({"holder": "drill a", "pid": 1, "host": "h", "since": 0, "token": "secret-a"}) is None
    who = lease.acquire({"holder": "thief", "pid": 2, "host": "h", "since": 0, "token": "t"}, 0.0)  # ttl=0 ignored
    assert who["holder"] == "drill a" and "token" not in who and who["ttl"] == 30.0
    assert lease.renew("t") is False and lease.renew("secret-a") is True
    lease.renewed -= 31  # a holder stopped past the expiry ...
    assert lease.acquire({"holder": "drill b", "pid": 3, "host": "h", "since": 0, "token": "secret-b"}) is None
    assert lease.renew("secret-a") is False  # ... learns at its next renewal that it lost the cluster


def test_a_heal_that_waits_for_the_job_comes_after_teardown(tmp_path):
    """kill-during-save's restore_after puts the whole checkpoint folder back: healed while
    the job still ran, it moved the live folder (and the job's newer checkpoints) from under
    it. Such a handle (after_job) is healed after the job is stopped, and recorded healed."""
    outcome, agent = run(tmp_path, with_fault(), after_job=True)
    assert outcome.error is None, outcome.error
    calls = [c for c in agent.calls if c in ("stop_job", "heal")]
    assert calls == ["stop_job", "heal"], agent.calls
    kinds = [json.loads(line)["kind"] for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert kinds.index("job.stop") < kinds.index("fault.heal"), kinds


def test_restore_after_on_an_attached_job_is_refused_before_anything_is_touched(tmp_path):
    from drillbit.core.errors import ConfigError
    from drillbit.loop.runner import job_params

    attached = JOB.model_copy(update={"launch": None, "attach_pid": 1, "checkpoint": None})
    drill = spec(fault={"type": "kill-during-save", "trigger": {"at_step": 8},
                        "params": {"restore_after": True, "checkpoint": {"dir": str(tmp_path)}}})
    with pytest.raises(ConfigError, match="a drill never stops a job it attached to"):
        job_params(drill, attached, tmp_path)
