"""Campaigns against the fake transport and job: one launch, faults arriving one after
another, each healed before the next and measured as a drill; the segments' ledgers add up
to the campaign's window; the simulator's prediction sits beside the measured goodput.
Bad campaign specs are refused with every problem at once. (The real reference job runs a
campaign in tests/integration/test_campaign.py.)"""
from __future__ import annotations

import pytest

from drillbit.runs.campaign import CampaignFaults, CampaignSpec, drill_spec_for, judge, load_campaign, markdown, predicted
from drillbit.loop import DrillRunner
from drillbit.judging.checks.goodput import BUCKETS
from drillbit.core.errors import SpecError
from tests.fakes.fake_cluster import CLUSTER, JOB, FakeAgent, FakeJob, FakeNodes, fake_probes


def campaign(**over) -> CampaignSpec:
    data = {"name": "fake-campaign", "faults": [{"type": "kill-rank", "targets": {"ranks": [1]}}],
            "arrival": {"process": "fixed", "interval": "0.4s"}, "duration": "2.5s",
            "steady": {"warmup_steps": 3, "timeout": "5s"},
            "recovery": {"until_steps_after_recovery": 3, "window": "2s"},
            "slo": {"detect_within": "1s", "first_step_within": "1.5s"}, "abort": {"max_duration": "20s"}}
    data.update(over)
    return CampaignSpec.model_validate(data)


def test_a_campaign_injects_heals_and_measures_each_fault(tmp_path):
    job = FakeJob()
    agent = FakeAgent("n0", job)
    c = campaign()
    faults = CampaignFaults(c)  # a campaign is a stream of faults the drill runner takes, not a runner of its own
    runner = DrillRunner(drill_spec_for(c, c.faults[0]), "fake", CLUSTER, "fake-job", JOB, tmp_path,
                         nodes=FakeNodes(tmp_path, agent),
                         probes=fake_probes(job), heal_timeout=0.3)
    outcome = runner.run(faults)
    agent.release.set()
    assert outcome.error is None and agent.active == {} and agent.stopped
    segs = faults.segments
    assert len(segs) >= 3 and all(s["confirmed"] for s in segs)
    assert all(a["t_end"] <= b["t_start"] for a, b in zip(segs, segs[1:], strict=False))  # sequential: one fault at a time
    report = judge(c, outcome.history, segs)
    assert report["faults"] == len(segs) and report["verdict"] == "pass", report["per_fault"]
    assert all(r["lost_steps"] is not None and r["lost_steps"] < 5 for r in report["per_fault"])
    led = report["ledger"]
    parts = [led[f"{k}_s"] for k in BUCKETS]
    assert min(parts) >= 0 and sum(parts) == pytest.approx(led["wall_s"], abs=1e-6)
    assert report["time_to_recover"]["n"] == len(segs)
    pred = predicted(report, outcome.history)
    assert pred is not None and 0 <= pred["simulated_goodput_p50"] <= 1
    assert pred["error"] == pytest.approx(pred["measured_goodput"] - pred["simulated_goodput_p50"])
    text = markdown(report, pred)
    assert "Measured against simulated" in text and f"| {len(segs)} |" in text


def test_bad_campaign_specs_are_refused_with_every_problem(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("name: c\nfaults:\n  - {type: kil-rank}\n  - {type: kill-rank, params: {signal: SIGFOO}}\n"
                   "arrival: {process: fixed}\nduration: 1m\n")
    with pytest.raises(SpecError) as info:
        load_campaign(bad)
    text = str(info.value)
    assert "c.yaml:3: faults.0.type: unknown fault 'kil-rank' (did you mean 'kill-rank'?)" in text
    assert "c.yaml:4: faults.1.params.signal" in text
    assert "c.yaml:5: arrival" in text and "needs interval" in text
    assert load_campaign("campaigns/mixed-faults.yaml").duration == 600


def test_a_fleet_scenarios_causes_weight_the_faults():
    from drillbit.runs.campaign import cause_weights

    c = campaign(faults=[{"type": "kill-rank"}, {"type": "hang-collective"}, {"type": "corrupt-checkpoint"}],
                 mix={"scenario": "llama3-405b"})
    weights, mix = cause_weights(c)
    # Llama 3 405B's 419 unexpected interruptions: 7 NCCL watchdog timeouts, 6 silent data
    # corruptions, 6 thermal (not drilled: no slow-rank listed), the other 400 lose a rank
    assert weights == [400.0, 7.0, 6.0]
    assert mix["not_drilled"] == {"gpu-thermal": 6.0} and mix["share"]["kill-rank"] == pytest.approx(400 / 419, 1e-3)
    mapped = campaign(faults=[{"type": "kill-rank"}, {"type": "slow-rank"}],
                      mix={"scenario": "llama3-405b", "map": {"faulty-gpu": "slow-rank"}})
    weights, _ = cause_weights(mapped)
    assert weights == [400.0 - 148.0, 148.0 + 6.0]
    report = {"campaign": "x", "verdict": "pass", "faults": 0, "kinds": [], "per_fault": [], "time_to_recover": None,
              "ledger": None, "mix": mix}
    assert "Fault mix from scenario llama3-405b (419 interruptions): corrupt-checkpoint 1.4%, hang-collective 1.7%, " \
           "kill-rank 95.5%; causes not drilled: gpu-thermal (6)" in markdown(report, None)


def test_a_bad_cause_mix_is_refused_with_every_problem(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: bad-mix\nfaults:\n  - {type: kill-rank}\n"
                    "mix: {scenario: llama3-405b, map: {faulty-gpu: slow-rank, no-such-cause: kill-rank}}\n"
                    "arrival: {process: exponential, mtbi: 30s}\nduration: 2m\n")
    with pytest.raises(SpecError) as info:
        load_campaign(path)
    text = str(info.value)
    assert "c.yaml:4: mix.map: cause(s) ['no-such-cause'] are not in scenario llama3-405b" in text
    assert "mix.map.faulty-gpu: 'slow-rank' is not one of the campaign's faults (kill-rank)" in text
    path.write_text(path.read_text().replace("llama3-405b, map: {faulty-gpu: slow-rank, no-such-cause: kill-rank}",
                                             "no-such-fleet"))
    with pytest.raises(SpecError, match="no such scenario"):
        load_campaign(path)


def test_a_job_that_ends_between_faults_ends_the_campaign_and_says_so(tmp_path):
    job = FakeJob()
    agent = FakeAgent("n0", job)
    c = campaign(arrival={"process": "fixed", "interval": "5s"}, duration="30s")
    faults = CampaignFaults(c)
    job.exit_at(10, 1)  # before the first fault is due
    runner = DrillRunner(drill_spec_for(c, c.faults[0]), "fake", CLUSTER, "fake-job", JOB, tmp_path,
                         nodes=FakeNodes(tmp_path, agent), probes=fake_probes(job), heal_timeout=0.3)
    outcome = runner.run(faults)
    agent.release.set()
    assert faults.segments == [] and "inject" not in agent.calls
    [end] = outcome.history.of("campaign.end")
    assert end.data["faults"] == 0 and outcome.history.first("job.exit").data["code"] == 1
