"""The whole drill loop against a fake transport and a fake job (tests/fakes/fake_cluster.py):
pass, fail, every phase raising, SIGINT mid-observe, a heal that hangs — and in each, every
fault the agent still held is healed, the job is stopped and the lease released."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from drillbit.judging.exitcodes import exit_code
from drillbit.judging.probes.logs import EventsProbe
from drillbit.loop import DrillRunner
from drillbit.judging.report.result import build
from drillbit.spec.signals import Signal
from tests.fakes.fake_cluster import CLUSTER, JOB, FakeAgent, FakeJob, FakeNodes, FakeProbe, fake_probes, spec


def drill(tmp_path, *, job: FakeJob | None = None, cluster=CLUSTER, drill_spec=None, heal_timeout: float = 0.3,
          **agent_kw):
    job = job or FakeJob()
    agent = FakeAgent("n0", job, **agent_kw)
    nodes = FakeNodes(tmp_path, agent)
    runner = DrillRunner(drill_spec or spec(), "fake", cluster, "fake-job", JOB, tmp_path, nodes=nodes,
                         probes=fake_probes(job), heal_timeout=heal_timeout)
    outcome = runner.run()
    agent.release.set()
    return outcome, agent, nodes


def kinds(outcome) -> list[str]:
    return [e.kind for e in outcome.history]


def assert_left_clean(agent, nodes, launched: bool = True) -> None:
    assert agent.active == {}, "a fault was left active"
    assert nodes.lease.released
    if launched:
        assert agent.stopped, "the job was not stopped"


def test_a_job_that_recovers_passes(tmp_path):
    t0 = time.time()
    outcome, agent, nodes = drill(tmp_path)
    assert outcome.result.verdict == "pass", outcome.result.reasons
    assert time.time() - t0 < 5
    k = kinds(outcome)
    for kind in ("drill.start", "agent.ready", "agent.clock", "steady", "fault.plan", "fault.inject",
                 "fault.confirmed", "detect", "restart", "restore", "observe.end", "fault.heal", "job.stop",
                 "drill.end"):
        assert kind in k, kind
    assert outcome.history.first("observe.end").data["reason"] == "recovered"
    m = outcome.result.measurements
    assert m.restored_step % 5 == 0 and m.step_at_fault >= 8  # the fake job checkpoints every 5 steps
    assert m.lost_steps == m.step_at_fault - m.restored_step
    assert_left_clean(agent, nodes)


BROKEN = {"observe": {"until_steps_after_recovery": 3, "window": "0.5s"},
          "slo": {"detect_within": "0.3s", "first_step_within": "0.4s"}}


def test_a_job_that_never_recovers_fails(tmp_path):
    outcome, agent, nodes = drill(tmp_path, job=FakeJob(recovers=False), drill_spec=spec(**BROKEN))
    assert outcome.result.verdict == "fail"
    assert any("never made a step again" in r for r in outcome.result.reasons), outcome.result.reasons
    assert outcome.history.first("observe.end").data["reason"] == "window elapsed"
    assert outcome.error is None
    assert_left_clean(agent, nodes)


@pytest.mark.parametrize("method, phase", [
    ("launch", "launch"), ("find_ranks", "inject"), ("inject", "inject"), ("confirm", "inject"),
    ("job_status", "observe"), ("stop_job", "teardown"), ("heal", "heal"), ("plan", "inject"),
])
def test_every_phase_raising_still_heals_and_stops(tmp_path, method, phase):
    outcome, agent, nodes = drill(tmp_path, fail_on={method})
    end = outcome.history.last("drill.end")
    assert end is not None
    if method == "plan":  # a plan that cannot be resolved is described, not fatal
        assert outcome.result.verdict == "pass", outcome.result.reasons
        return
    if method == "heal":  # a fault that cannot be healed fails the drill, whatever the job did
        assert outcome.result.verdict == "fail"
        assert any("fault left in place" in r for r in outcome.result.reasons)
        assert "heal.failed" in kinds(outcome)
        return
    assert outcome.error is not None and outcome.error_kind == "harness"
    assert f"fake failure in {method}" in outcome.error
    assert exit_code(outcome.result.verdict, outcome.error_kind) == 5
    if phase != "teardown":  # a teardown error comes after the job's recovery was judged
        assert outcome.result.verdict in ("aborted", "inconclusive")
    assert_left_clean(agent, nodes, launched=method not in ("launch", "stop_job"))


def test_preflight_refusal_is_a_config_error_and_touches_nothing(tmp_path):
    outcome, agent, nodes = drill(tmp_path, cluster=CLUSTER.model_copy(update={"protected": True}))
    assert outcome.error_kind == "config" and "protected" in outcome.error
    assert "launch" not in agent.calls and "inject" not in agent.calls


def test_job_exiting_before_steady_state(tmp_path):
    job = FakeJob()
    job.exit_code = 3
    outcome, agent, nodes = drill(tmp_path, job=job)
    assert "the job exited (code 3) before steady state" in outcome.error
    assert outcome.error_kind == "inconclusive" and outcome.result.verdict == "inconclusive"
    assert any(r.startswith("inconclusive: the job exited (code 3)") for r in outcome.result.reasons)
    assert exit_code(outcome.result.verdict, outcome.error_kind) == 3
    assert_left_clean(agent, nodes)


class LateQuorumJob(FakeJob):
    """A stack that trains with whoever joined: one member until step ``whole_at``, then two."""

    def __init__(self, whole_at: int | None) -> None:
        super().__init__()
        self.whole_at = whole_at
        self._emit("members", members=[{"id": "train_1", "rank": 1}], by="fake-lighthouse")

    def _emit(self, kind, **data):
        super()._emit(kind, **data)
        if kind == "step" and data["n"] == self.whole_at:
            super()._emit("members", members=[{"id": "train_0", "rank": 0}, {"id": "train_1", "rank": 1}],
                          by="fake-lighthouse")


QUORUM_JOB = JOB.model_copy(update={"signals": [
    Signal(kind="members", pattern="quorum (?P<members>.*)", lists={"members": r"id=(?P<id>\w+)"})]})


def quorum_drill(tmp_path, job: FakeJob, profile=QUORUM_JOB):
    tmp_path.mkdir(parents=True, exist_ok=True)
    agent = FakeAgent("n0", job)
    nodes = FakeNodes(tmp_path, agent)
    runner = DrillRunner(spec(steady={"warmup_steps": 3, "members": 2, "timeout": "1s"}), "fake", CLUSTER,
                         "fake-job", profile, tmp_path, nodes=nodes, probes=fake_probes(job), heal_timeout=0.3)
    outcome = runner.run()
    agent.release.set()
    return outcome, agent, nodes


def test_steady_state_waits_for_every_member_the_spec_asks_for(tmp_path):
    outcome, agent, nodes = quorum_drill(tmp_path, LateQuorumJob(whole_at=6))
    assert outcome.result.verdict == "pass", outcome.result.reasons
    steady = outcome.history.first("steady")
    whole = [e for e in outcome.history if e.kind == "members" and len(e.data["members"]) == 2]
    assert whole and steady.t >= whole[0].t and steady.data["step"] >= 6  # not at the 3 steps alone
    assert_left_clean(agent, nodes)


def test_a_quorum_that_never_fills_is_inconclusive_and_a_job_without_membership_is_refused(tmp_path):
    outcome, agent, nodes = quorum_drill(tmp_path / "a", LateQuorumJob(whole_at=None))
    assert outcome.error_kind == "inconclusive" and outcome.result.verdict == "inconclusive"
    assert "the newest membership (fake-lighthouse) held 1 of the 2 members steady.members asks for" \
        in outcome.error, outcome.error
    assert "inject" not in agent.calls
    assert_left_clean(agent, nodes)
    outcome, agent, nodes = quorum_drill(tmp_path / "b", FakeJob(), profile=JOB)
    assert outcome.error_kind == "config" and "steady.members needs a membership signal" in outcome.error
    assert "launch" not in agent.calls and "inject" not in agent.calls


def test_job_exiting_before_the_trigger_is_inconclusive(tmp_path):
    job = FakeJob()
    job.exit_at(10, 2)
    outcome, agent, nodes = drill(tmp_path, drill_spec=spec(fault={"type": "kill-rank", "targets": {"ranks": [1]},
                                                                   "trigger": {"at_step": 500}}), job=job)
    assert outcome.error_kind == "inconclusive" and "before the trigger step 500" in outcome.error
    assert outcome.result.verdict == "inconclusive" and exit_code(outcome.result.verdict, outcome.error_kind) == 3
    assert "inject" not in agent.calls
    assert_left_clean(agent, nodes)


def test_sigint_mid_observe_aborts_and_heals(tmp_path):
    job = FakeJob(recovers=False)

    def interrupt_once_observing():
        deadline = time.time() + 5
        while time.time() < deadline:
            if any(kind == "detect" for _, kind, _ in job.drain(0)):
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.01)

    threading.Thread(target=interrupt_once_observing, daemon=True).start()
    outcome, agent, nodes = drill(tmp_path, job=job, drill_spec=spec(observe={"until_steps_after_recovery": 3,
                                                                                    "window": "5s"}))
    assert outcome.result.verdict == "aborted"
    assert any("interrupted by SIGINT" in r for r in outcome.result.reasons)
    k = kinds(outcome)
    assert "observe.end" not in k and "fault.heal" in k and k.index("abort") < k.index("job.stop")
    assert_left_clean(agent, nodes)


def test_a_heal_that_hangs_once_is_retried(tmp_path):
    outcome, agent, nodes = drill(tmp_path, heal_hangs=1.0, heal_hangs_times=1)
    assert "heal.retry" in kinds(outcome) and "heal.failed" not in kinds(outcome)
    assert outcome.history.last("fault.heal").data["attempt"] == 2
    assert outcome.result.verdict == "pass", outcome.result.reasons
    assert_left_clean(agent, nodes)


def test_a_heal_that_never_finishes_fails_the_drill(tmp_path):
    outcome, agent, nodes = drill(tmp_path, heal_hangs=30.0, heal_hangs_times=99)
    assert outcome.result.verdict == "fail"
    assert any(r.startswith("fault left in place: kill-rank on rank 1") for r in outcome.result.reasons)
    # the nodes do not release an agent that still holds a fault: its dead-man's switch heals
    assert "disarm" not in agent.calls


def test_harness_error_in_a_drill_that_also_breached_an_slo_exits_5(tmp_path):
    outcome, agent, nodes = drill(tmp_path, job=FakeJob(recovers=False), fail_on={"stop_job"},
                                  drill_spec=spec(**BROKEN))
    assert outcome.result.verdict == "fail"  # the SLO breach stands in the verdict ...
    payload = build(drill="fake-kill", cluster="fake", job="fake-job", fault_type="kill-rank", params={},
                    history=outcome.history, result=outcome.result, error=outcome.error,
                    error_kind=outcome.error_kind)
    assert payload["exit_code"] == 5 == exit_code("fail", "harness")  # ... but the harness broke: 5, not 1


def test_an_interrupt_inside_an_in_process_agent_call_is_the_operators_stop_not_a_harness_error(tmp_path):
    """SIGTERM landed while the controller was inside the in-process agent's confirm: the
    service's catch-all turned it into "harness error: confirm failed: Interrupted", so the
    verdict was not "interrupted" and a sweep went on to its next drill."""
    from drillbit.agent.service import AgentService
    from drillbit.loop.runner import Interrupted

    service = AgentService("n0", tmp_path)

    def stopped(_req):
        raise Interrupted("interrupted by SIGTERM")
    service._handlers["info"] = stopped
    with pytest.raises(Interrupted):
        service.dispatch("info", {})
    assert service.dispatch("no-such-method", {})["error"]["kind"] == "unknown-method"  # the agent lives on


def test_resources_are_given_back_in_the_reverse_order_they_were_taken(tmp_path, monkeypatch):
    """#46: each resource's giving back sits beside its taking (loop/runner.py): the ending is
    recorded first, then the faults are healed while the job runs, the job is stopped, the
    agents are closed, and the lease goes last."""
    order: list[str] = []
    job = FakeJob(recovers=False)
    agent = FakeAgent("n0", job)
    nodes = FakeNodes(tmp_path, agent)
    close, release = nodes.close, nodes.lease.release
    monkeypatch.setattr(nodes, "close", lambda: (order.append("close"), close())[1])
    monkeypatch.setattr(nodes.lease, "release", lambda: (order.append("lease"), release())[1])
    runner = DrillRunner(spec(**BROKEN), "fake", CLUSTER, "fake-job", JOB, tmp_path, nodes=nodes,
                         probes=fake_probes(job), heal_timeout=0.3)
    runner.history.subscribe(lambda e: order.append(e.kind) if e.kind in ("observe.end", "fault.heal", "job.stop")
                             else None)
    runner.run()
    agent.release.set()
    assert order == ["observe.end", "fault.heal", "job.stop", "close", "lease"], order


def test_an_engine_that_fails_to_take_the_lease_is_still_closed(tmp_path, monkeypatch):
    """An engine may start something before acquire fails (the embedded Ray cluster before its
    lease): closing runs for whatever got that far, and nothing was launched or injected."""
    from drillbit.core.errors import LeaseError

    job = FakeJob()
    agent = FakeAgent("n0", job)
    nodes = FakeNodes(tmp_path, agent)
    closed: list[bool] = []
    close = nodes.close
    monkeypatch.setattr(nodes, "close", lambda: (closed.append(True), close())[1])
    monkeypatch.setattr(nodes, "acquire", lambda holder: (_ for _ in ()).throw(LeaseError("held by another drill")))
    runner = DrillRunner(spec(), "fake", CLUSTER, "fake-job", JOB, tmp_path, nodes=nodes, probes=fake_probes(job))
    outcome = runner.run()
    assert closed == [True] and outcome.error_kind == "busy" and not nodes.lease.released
    assert "job.launch" not in kinds(outcome) and "fault.inject" not in kinds(outcome)


def test_a_line_written_before_the_fault_is_read_before_it(tmp_path):
    """A line without a time of its own is stamped when it is read. The runner reads the logs
    to their end just before it injects, so a save the job printed after the trigger step but
    before the kill is stamped before the fault, though the probe's own thread would not have
    read it until the drill's end (it polls once a minute here; under load a 0.1 s poll lagged
    56 ms behind a DLRover kill, and restore_tier missed the save)."""
    log = tmp_path / "job.log"
    log.write_text("")

    class SavingJob(FakeJob):
        def _emit(self, kind, **data):
            if kind == "step" and data.get("n") == 7:  # the trigger is step 8
                with log.open("a") as out:
                    out.write("saved step=7 tier=memory\n")
            super()._emit(kind, **data)

    job = SavingJob(step_s=0.05)
    saves = [Signal(kind="ckpt.save", pattern=r"^saved step=(?P<step>\d+) tier=(?P<tier>\w+)$", ints=["step"])]

    def probes(history, profile, logs, values):
        return [FakeProbe(history, job), EventsProbe(history, [log], saves, poll=60.0)]

    agent = FakeAgent("n0", job)
    nodes = FakeNodes(tmp_path, agent)
    outcome = DrillRunner(spec(), "fake", CLUSTER, "fake-job", JOB, tmp_path, nodes=nodes, probes=probes,
                          heal_timeout=0.3).run()
    agent.release.set()
    # the first save of step 7 (the restart from step 5 saves it again)
    save = next(e for e in outcome.history if e.kind == "ckpt.save" and e.source == "probe:events")
    inject = outcome.history.first("fault.inject")
    assert save.data["step"] == 7 and save.data["t_source"] == "read"
    assert save.t < inject.t, (save.t, inject.t)
    assert_left_clean(agent, nodes)
