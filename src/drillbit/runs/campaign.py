"""Campaigns: one long job, many faults.

A drill breaks a job once; a real run meets a stream of faults. A campaign launches the job
once and injects faults one after another — any catalogue fault, drawn by weight — as an
arrival process: a fixed interval, or exponential inter-arrival times with a mean time
between interruptions. ``sequential`` (the default) waits for the job to recover before the
next gap begins; ``overlapping`` keeps the process's own clock and cuts an observation short
when the next fault is due. Heal and safety rules are a drill's: each fault is healed
before the next one, and everything at the end, whatever happens.

Each fault is a segment of the campaign's one history, from the end of the previous
segment to the end of its own observation, and is measured and judged as a drill is (the
campaign's SLOs on each). The segments partition the campaign's window, so their goodput
ledgers add up to one ledger of the whole run. The fleet simulator, fed the campaign's own
fault rate, mix and mean measured recovery times, predicts its goodput: measured against
simulated, with the error (:func:`predicted`).
"""
from __future__ import annotations

import random
import statistics
import time
from pathlib import Path
from typing import Any, Iterator, Literal

from pydantic import Field, model_validator

from drillbit.judging.checks import CheckResult, check
from drillbit.judging.checks.goodput import BUCKETS, Ledger
from drillbit.judging.checks.projection import save_stats
from drillbit.judging.checks.recovery import recovered
from drillbit.judging.checks.verdict import worst
from drillbit.core.errors import Problem, SpecError
from drillbit.faults import get as get_fault
from drillbit.judging.fleet.simulate import Cause, Scenario, SimParams, load_scenario, simulate
from drillbit.core.events import Kind, Save, SteadyReached, Step
from drillbit.core.history import Event, History
from drillbit.faults.loading import fault_problems, load_config
from drillbit.loop.runner import DrillRunner
from drillbit.judging.report import multirun
from drillbit.judging.report.multirun import Bullets, Figure, Page, Table
from drillbit.runs.session import new_run_dir, refuse_unstarted
from drillbit.spec.load import line_of, suggest, choose, find_config, read_yaml, validate
from drillbit.spec.models import (
    SLO,
    Abort,
    BlastRadius,
    DrillSpec,
    Duration,
    FaultSpec,
    Observe,
    Span,
    Steady,
    Strict,
    Targets,
    Trigger,
)
from drillbit.transport import connect


class CampaignFault(Strict):
    type: str
    """a fault plugin, as in a drill's fault.type"""
    weight: float = Field(1.0, gt=0)
    """how often it is drawn, against the others"""
    targets: Targets = Field(default_factory=Targets)
    """which rank processes it hits"""
    params: dict[str, Any] = Field(default_factory=dict)
    """the fault's own parameters"""


class Arrival(Strict):
    process: Literal["fixed", "exponential"] = "exponential"
    """faults come at fixed intervals, or as a Poisson process (exponential gaps)"""
    interval: Span | None = Field(None, description="fixed: seconds between faults")
    mtbi: Span | None = Field(None, description="exponential: the mean time between interruptions")
    seed: int = 0
    """the draw's seed"""

    @model_validator(mode="after")
    def _one(self) -> "Arrival":
        if self.process == "fixed" and not self.interval:
            raise ValueError("a fixed arrival process needs interval")
        if self.process == "exponential" and not self.mtbi:
            raise ValueError("an exponential arrival process needs mtbi")
        return self

    def gap(self, rng: random.Random) -> float:
        return float(self.interval or 0.0) if self.process == "fixed" else rng.expovariate(1.0 / float(self.mtbi or 1.0))


class CauseMix(Strict):
    """The fault mix of a fleet scenario (faults/scenarios): each cause of interruption is
    drilled as one of the campaign's faults, weighted by how often the fleet met it."""

    scenario: str = Field(description="a fleet scenario, e.g. llama3-405b")
    map: dict[str, str] = Field(default_factory=dict, description="cause -> fault type (one of faults:); "
                                "unmapped causes follow DEFAULT_CAUSE_FAULTS")


# How a cause of interruption is drilled, unless the spec says otherwise: a hang is a hung
# collective, silent data corruption a damaged checkpoint, a slow or hot GPU a slow rank,
# and everything that takes a GPU, host, link or process down is a lost rank.
DEFAULT_CAUSE_FAULTS = (("nccl", "hang-collective"), ("hang", "hang-collective"), ("silent-data", "corrupt-checkpoint"),
                        ("thermal", "slow-rank"), ("", "kill-rank"))


def cause_weights(c: "CampaignSpec") -> tuple[list[float], dict[str, Any]]:
    """The weight of each of the campaign's faults, and how the scenario's causes fell."""
    if c.mix is None:
        return [f.weight for f in c.faults], {}

    scenario = load_scenario(c.mix.scenario)
    listed = {f.type for f in c.faults}
    by_fault: dict[str, float] = {}
    undrilled: dict[str, float] = {}
    for cause, info in scenario.causes.items():
        fault = c.mix.map.get(cause) or next(t for key, t in DEFAULT_CAUSE_FAULTS if key in cause)
        if fault in listed:
            by_fault[fault] = by_fault.get(fault, 0) + info.count
        else:
            undrilled[cause] = info.count
    total = sum(i.count for i in scenario.causes.values())
    weights = [float(by_fault.get(f.type, 0)) / max(1, sum(1 for g in c.faults if g.type == f.type))
               for f in c.faults]
    rate_h = scenario.rate() / 24.0  # interruptions per GPU-hour
    return weights, {"scenario": scenario.name, "interruptions": total,
                     "share": {t: round(n / total, 4) for t, n in sorted(by_fault.items())},
                     "not_drilled": {k: v for k, v in sorted(undrilled.items())}, "causes": sorted(scenario.causes),
                     "fleet_mtbi_per_gpu_h": round(1.0 / rate_h, 1) if rate_h else None}


class CampaignSpec(Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    """the campaign's name"""
    summary: str = ""
    """one line: what it drills"""
    job: str | None = None
    """the job profile (--job overrides it)"""
    faults: list[CampaignFault] = Field(min_length=1)
    """the faults drawn from"""
    mix: CauseMix | None = Field(None, description="weight the faults by a fleet scenario's causes instead of "
                                                    "their own weights")
    arrival: Arrival
    """when faults arrive"""
    duration: Duration = Field(description="faults arrive until then; the last one is still observed")
    mode: Literal["sequential", "overlapping"] = "sequential"
    """sequential: the next fault waits for the last recovery; overlapping: it does not"""
    steady: Steady = Field(default_factory=Steady)
    """what the job must do before the first fault"""
    recovery: Observe = Field(default_factory=lambda: Observe(until_steps_after_recovery=5, window=120.0))
    """how long each fault's recovery is watched"""
    slo: SLO = Field(default_factory=SLO)
    """judged on each fault's segment"""
    abort: Abort = Field(default_factory=lambda: Abort(max_duration=3600.0))
    """the campaign's safeguard"""
    blast_radius: BlastRadius = Field(default_factory=BlastRadius)
    """how much of the job one fault may hit"""


def drill_spec_for(c: CampaignSpec, f: CampaignFault) -> DrillSpec:
    """One fault of the campaign, as the drill it is measured as."""
    return DrillSpec.model_validate({
        "name": c.name, "class": get_fault(f.type).fault_class, "summary": c.summary or f"campaign {c.name}",
        "job": c.job, "fault": FaultSpec(type=f.type, targets=f.targets, params=f.params,
                                         trigger=Trigger(at_step=1)).model_dump(),
        "steady": c.steady.model_dump(), "observe": c.recovery.model_dump(), "slo": c.slo.model_dump(),
        "abort": c.abort.model_dump(), "blast_radius": c.blast_radius.model_dump()})


def segment(history: History, start: float, end: float, baseline_step_s: float | None) -> History:
    """One fault's part of the campaign history, shaped as a drill's: the steps before it
    (for the step at the fault and the high-water mark), a steady mark at its start, its own
    events, and the end of its observation."""
    events: list[Event] = [e for e in history if e.kind == "step" and e.t <= start]
    events.append(Event(seq=0, t=start, source="campaign", kind="steady",
                        data={"baseline_step_s": baseline_step_s, "step": Step.of(events[-1]).n if events else 0}))
    events += [e for e in history if start < e.t <= end and e.kind not in ("steady", "observe.end")]
    events.append(Event(seq=0, t=end, source="campaign", kind="observe.end", data={"reason": "segment end"}))
    return History(events=[e.model_copy(update={"seq": i}) for i, e in enumerate(events)])


class CampaignFaults:
    """A campaign as a stream of faults for the drill runner (one launch, one steady state):
    each fault due at its arrival, drawn from the cause mix, watched until it recovers (or,
    overlapping, until the next arrives), healed before the next; the segments it measured
    are kept for the judge."""

    def __init__(self, campaign: CampaignSpec) -> None:
        self.campaign = campaign
        self.segments: list[dict[str, Any]] = []

    def __call__(self, runner: DrillRunner) -> Iterator["CampaignStep"]:
        c = self.campaign
        weights, mix = cause_weights(c)
        if mix:
            runner.record("campaign.mix", **mix)
        rng = random.Random(c.arrival.seed)
        start = time.time()
        end = start + float(c.duration)
        due = start + c.arrival.gap(rng)
        runner.ui.phase("campaign", f"{len(c.faults)} fault kind(s), {c.arrival.process} arrivals, until "
                                    f"{float(c.duration):g} s")
        index = 0
        while due < end:
            f = rng.choices(c.faults, weights=weights)[0]
            nxt = due + c.arrival.gap(rng)
            step = CampaignStep(self, index, f, due, nxt if c.mode == "overlapping" else None)
            yield step  # the runner takes it; a step that never began ended the stream (and said so)
            index += 1
            if runner.history.first("job.exit") is not None:
                break  # no job left to break
            due = nxt if c.mode == "overlapping" else time.time() + c.arrival.gap(rng)
        runner.record("campaign.end", faults=index)


class CampaignStep:
    """One fault of a campaign, for the runner: due at its arrival, watched as its segment."""

    def __init__(self, stream: CampaignFaults, index: int, fault: CampaignFault, due: float,
                 cut: float | None) -> None:
        self.stream, self.index, self.campaign_fault, self.at, self.cut = stream, index, fault, due, cut
        self.spec = drill_spec_for(stream.campaign, fault)
        self.label = f"#{index + 1}: "
        self.t_start = 0.0

    def due(self, runner: DrillRunner) -> bool:
        while time.time() < self.at:
            if runner.job_ended() is not None:  # the job ended before this fault came: the campaign ends
                runner.record("campaign.end", faults=self.index)
                return False
            runner.ui.status(f"fault {self.index + 1} in {self.at - time.time():4.1f} s")
            runner.tick(0.1)
        self.t_start = time.time()
        runner.record("campaign.fault", index=self.index, fault=self.campaign_fault.type)
        return True

    def watch(self, runner: DrillRunner) -> None:
        obs = self.stream.campaign.recovery
        segments = self.stream.segments
        confirmed = runner.history.last("fault.confirmed")
        t0 = confirmed.t if confirmed else self.t_start
        steady = runner.history.first("steady")
        base = SteadyReached.of(steady).baseline_step_s if steady else None
        begin = segments[-1]["t_end"] if segments else (steady.t if steady else self.t_start)
        seen = -1
        while True:
            now = time.time()
            if len(runner.history) != seen:
                seen = len(runner.history)
                if recovered(segment(runner.history, begin, now, base), obs.until_steps_after_recovery):
                    return
            if runner.job_ended() is not None:  # the job gave up (a restart budget spent): this fault's recovery failed
                return
            if now - t0 >= obs.window or (self.cut is not None and now >= self.cut):
                return
            runner.ui.status(f"fault {self.index + 1}: +{now - t0:5.1f} s")
            runner.tick(0.2)

    def settle(self, runner: DrillRunner, confirmed: bool) -> None:
        runner.nemesis.heal()
        self.stream.segments.append({"index": self.index, "fault": self.campaign_fault.type, "t_start": self.t_start,
                                     "t_end": time.time(), "confirmed": confirmed,
                                     "targets": [t.rank for t in runner.targets]})
        runner.record("campaign.segment.end", index=self.index, fault=self.campaign_fault.type)


def judge(campaign: CampaignSpec, history: History, segments: list[dict[str, Any]]) -> dict[str, Any]:
    """Each fault measured and judged as a drill; one ledger for the whole campaign."""
    steady = history.first("steady")
    base = SteadyReached.of(steady).baseline_step_s if steady else None
    rows, total = [], Ledger(wall_s=0.0)
    verdicts = []
    prev_end = steady.t if steady else None
    for seg in segments:
        begin = prev_end if prev_end is not None else seg["t_start"]
        sub = segment(history, begin, seg["t_end"], base)
        spec = drill_spec_for(campaign, CampaignFault(type=seg["fault"]))
        result: CheckResult = check(spec, sub)
        verdicts.append(result.verdict)
        m = result.measurements
        rows.append({"index": seg["index"] + 1, "fault": seg["fault"], "targets": seg["targets"],
                     "t": round(seg["t_start"] - (steady.t if steady else 0), 1), "verdict": result.verdict,
                     "reasons": result.reasons, "time_to_detect": m.time_to_detect,
                     "time_to_first_step": m.time_to_first_step, "lost_steps": m.lost_steps,
                     "restarts": m.restarts})
        if result.ledger is not None:
            total.wall_s += result.ledger.wall_s
            for name in BUCKETS:
                setattr(total, f"{name}_s", getattr(total, f"{name}_s") + getattr(result.ledger, f"{name}_s"))
        prev_end = seg["t_end"]
    ttr = [r["time_to_first_step"] for r in rows if r["time_to_first_step"] is not None]
    return {
        "campaign": campaign.name, "faults": len(rows), "kinds": sorted({r["fault"] for r in rows}),
        "verdict": worst(*verdicts) if verdicts else "inconclusive", "per_fault": rows,
        "time_to_recover": ({"n": len(ttr), "median": statistics.median(ttr), "p90": sorted(ttr)[max(0,
            -(-9 * len(ttr) // 10) - 1)],
                             "min": min(ttr), "max": max(ttr)} if ttr else None),
        "ledger": total.model_dump() | {"goodput": total.goodput} if total.wall_s else None,
        "baseline_step_s": base,
        "mix": mix.data if (mix := history.first("campaign.mix")) is not None else None,
    }


def predicted(report: dict[str, Any], history: History, trials: int = 2000) -> dict[str, Any] | None:
    """The fleet simulator fed this campaign: its fault rate and mix, its mean measured
    detection and recovery times, its checkpoint cadence; measured goodput against the
    simulated median, and the error. The job is one unit of the simulated fleet (goodput does
    not depend on how the fault rate is split over GPUs)."""
    ranks = 1

    rows, led = report["per_fault"], report["ledger"]
    detect = [r["time_to_detect"] for r in rows if r["time_to_detect"] is not None]
    ttr = [r["time_to_first_step"] for r in rows if r["time_to_first_step"] is not None]
    if not rows or not led or not ttr:
        return None
    save_s, interval_s = save_stats(history) or (0.0, 0.0)
    # the simulator's interval is training time between checkpoints (the work a fault loses is
    # uniform over it): steps between saves x the step time, not the wall time, which holds
    # the campaign's own disruptions
    saves = [step for e in history.of(Kind.CKPT_SAVE) if (step := Save.of(e).step) is not None]
    gaps = [b - a for a, b in zip(saves, saves[1:], strict=False) if b > a]
    if gaps and report.get("baseline_step_s"):
        interval_s = statistics.median(gaps) * float(report["baseline_step_s"])
    wall = led["wall_s"]
    days = wall / 86400.0
    counts: dict[str, float] = {}
    for r in rows:
        counts[r["fault"]] = counts.get(r["fault"], 0.0) + 1.0
    scenario = Scenario(name=f"campaign-{report['campaign']}", gpus=ranks, gpus_per_host=ranks, days=days,
                        causes={k: Cause(count=v) for k, v in counts.items()})
    # the simulator charges every interruption the same D and R, and its loss is linear in them:
    # the means carry a mix of causes (a 0.4 s kill and a 10 s hang), where medians would not
    d = statistics.fmean(detect) if detect else 0.0
    params = SimParams(gpus=ranks, days=days, rate_per_gpu_day=len(rows) / (ranks * days), save_s=save_s or 0.0,
                       interval_s=interval_s or wall, detect_s=d, restart_s=max(0.0, statistics.fmean(ttr) - d),
                       gpus_per_host=ranks)
    sim = simulate(scenario, params, trials=trials, seed=0)
    measured = led["goodput"]
    return {"measured_goodput": measured, "simulated_goodput_p50": sim.goodput_p50,
            "simulated_goodput_p5": sim.goodput_p5, "error": measured - sim.goodput_p50,
            "inputs": {"faults": len(rows), "wall_s": wall, "detect_s": d, "restart_s": params.restart_s,
                       "save_s": params.save_s, "interval_s": params.interval_s}}


def page(report: dict[str, Any], predicted_: dict[str, Any] | None, figure: str = "") -> Page:
    fmt = lambda v: "—" if v is None else (f"{v:.2f}" if isinstance(v, float) else str(v))  # noqa: E731
    head = ("#", "t (s)", "fault", "rank(s)", "verdict", "detect s", "first step s", "lost steps", "restarts")
    faults = report["per_fault"]
    blocks: list = [f"{report['faults']} fault(s) of {len(report['kinds'])} kind(s) ({', '.join(report['kinds'])}).",
                    Table(head, [[str(r["index"]), str(r["t"]), r["fault"], str(r["targets"]), r["verdict"],
                                  fmt(r["time_to_detect"]), fmt(r["time_to_first_step"]), fmt(r["lost_steps"]),
                                  fmt(r["restarts"])] for r in faults],
                          right=frozenset({"#", "t (s)", "detect s", "first step s", "lost steps", "restarts"}),
                          tones=[r["verdict"] for r in faults])]
    if figure:
        blocks.append(Figure(figure))
    mix = report.get("mix")
    if mix:
        share = ", ".join(f"{t} {v:.1%}" for t, v in mix["share"].items())
        skipped = ", ".join(f"{k} ({v:g})" for k, v in mix["not_drilled"].items()) or "none"
        blocks.append(f"Fault mix from scenario {mix['scenario']} ({mix['interruptions']:g} interruptions): {share}; "
                      f"causes not drilled: {skipped}. At that fleet's rate one GPU meets an interruption every "
                      f"{mix['fleet_mtbi_per_gpu_h']:g} GPU-hours; the campaign compresses it to its arrival process.")
    ttr = report["time_to_recover"]
    if ttr:
        blocks.append(f"Time to recover (first step after the fault): median {ttr['median']:.2f} s, p90 "
                      f"{ttr['p90']:.2f} s, min {ttr['min']:.2f} s, max {ttr['max']:.2f} s over {ttr['n']} fault(s).")
    led = report["ledger"]
    if led:
        parts = ", ".join(f"{k} {led[f'{k}_s']:.1f} s" for k in BUCKETS)
        blocks.append(f"Goodput over the campaign: **{led['goodput']:.1%}** of {led['wall_s']:.0f} s ({parts}).")
    if predicted_:
        blocks.append(f"Measured against simulated: measured {predicted_['measured_goodput']:.1%}, the fleet "
                      f"simulator fed this campaign's fault process and recovery times predicts "
                      f"{predicted_['simulated_goodput_p50']:.1%} (p5 {predicted_['simulated_goodput_p5']:.1%}); "
                      f"error {predicted_['error'] * 100:+.1f} points.")
    failing = [r for r in faults if r["verdict"] != "pass"]
    if failing:
        blocks.append(Bullets([f"fault {r['index']} ({r['fault']}): {'; '.join(r['reasons'][:2])}" for r in failing]))
    return Page(f"Campaign {report['campaign']}: {report['verdict'].upper()}", blocks)


def markdown(report: dict[str, Any], predicted_: dict[str, Any] | None) -> str:
    return page(report, predicted_).markdown()


def timeline_svg(history: History, segments: list[dict[str, Any]], width: int = 900, height: int = 220) -> str:
    """Steps against time with every fault marked (a red line at each injection)."""
    steps = [(e.t, Step.of(e).n) for e in history.of(Kind.STEP)]
    if not steps:
        return ""
    t0, t1 = steps[0][0], max(steps[-1][0], max((s["t_end"] for s in segments), default=steps[-1][0]))
    n1 = max(n for _, n in steps) or 1
    x = lambda t: 40 + (width - 60) * (t - t0) / max(t1 - t0, 1e-9)  # noqa: E731
    y = lambda n: height - 30 - (height - 50) * n / n1  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">',
             f'<rect width="{width}" height="{height}" fill="#fff"/>']
    for s in segments:
        parts.append(f'<rect x="{x(s["t_start"]):.1f}" y="10" width="{max(x(s["t_end"]) - x(s["t_start"]), 1):.1f}" '
                     f'height="{height - 40}" fill="#fee2e2"/>')
        parts.append(f'<line x1="{x(s["t_start"]):.1f}" y1="10" x2="{x(s["t_start"]):.1f}" y2="{height - 30}" '
                     f'stroke="#dc2626"><title>{s["fault"]}</title></line>')
        parts.append(f'<text x="{x(s["t_start"]) + 2:.1f}" y="22" font-size="10" fill="#991b1b">'
                     f'{s["index"] + 1}</text>')
    pts = " ".join(f"{x(t):.1f},{y(n):.1f}" for t, n in steps)
    parts.append(f'<polyline points="{pts}" fill="none" stroke="#2563eb" stroke-width="1.5"/>')
    parts.append(f'<text x="4" y="{height - 8}" font-size="11">0 s</text><text x="{width - 60}" y="{height - 8}" '
                 f'font-size="11">{t1 - t0:.0f} s</text><text x="4" y="20" font-size="11">step {n1}</text></svg>')
    return "".join(parts)


def write(run_dir: Path, report: dict[str, Any], predicted_: dict[str, Any] | None, history: History,
          segments: list[dict[str, Any]]) -> None:
    multirun.write(run_dir, page(report, predicted_, timeline_svg(history, segments)), md="campaign.md",
                   html="campaign.html", data={**report, "predicted": predicted_}, json_name="campaign.json")


def load_campaign(path: str | Path, config=None) -> CampaignSpec:
    """A campaign spec with every problem at once, by file and line: its fields, each fault's
    type and params, its job."""

    path = Path(path)
    data, lines = read_yaml(path)
    if not isinstance(data, dict):
        raise SpecError([Problem(str(path), 1, "", "a campaign spec is a mapping (name:, faults:, arrival:, ...)")])
    spec, problems = validate(CampaignSpec, data, path, lines)
    for i, f in enumerate(data.get("faults") or []):
        if isinstance(f, dict):
            problems += fault_problems(f, path, lines, ("faults", i))
    if config is not None and isinstance(data.get("job"), str) and data["job"] not in config.jobs:
        problems.append(Problem(str(path), line_of(lines, ("job",)), "job",
                                f"unknown job profile {data['job']!r}"
                                + suggest(data["job"], list(config.jobs), "drill list --jobs")))
    if spec is not None and spec.mix is not None:
        problems += _mix_problems(spec, path, lines)
    if spec is not None and spec.slo.matches_uninterrupted is not None:
        problems.append(Problem(str(path), line_of(lines, ("slo", "matches_uninterrupted")), "slo.matches_uninterrupted",
                                "a campaign's faults follow one another in one launch: there is no uninterrupted run "
                                "to compare a restore with (a drill of its own can)"))
    if problems:
        raise SpecError(sorted(problems, key=lambda p: (p.line or 0, p.path)))
    return spec


def _mix_problems(spec: CampaignSpec, path: Path, lines) -> list:

    assert spec.mix is not None
    where = line_of(lines, ("mix",))
    listed = {f.type for f in spec.faults}
    out = [Problem(str(path), line_of(lines, ("mix", "map", cause)), f"mix.map.{cause}",
                   f"{fault!r} is not one of the campaign's faults ({', '.join(sorted(listed))})")
           for cause, fault in spec.mix.map.items() if fault not in listed]
    try:
        weights, mix = cause_weights(spec)
    except SpecError as exc:
        return out + [Problem(str(path), where, "mix.scenario", p.message) for p in exc.problems]
    unknown = sorted(set(spec.mix.map) - set(mix["causes"]))
    if unknown:
        out.append(Problem(str(path), where, "mix.map", f"cause(s) {unknown} are not in scenario {spec.mix.scenario}"))
    if not out and not any(weights):
        out.append(Problem(str(path), where, "mix", f"none of scenario {spec.mix.scenario}'s causes maps to the "
                                                   "campaign's faults"))
    return out


def execute(campaign: CampaignSpec, *, cluster: str | None = None, job: str | None = None,
            config_path: str | None = None, reports_dir: str | None = None, ui=None) -> tuple[dict[str, Any], Path]:
    """Run a campaign on a cluster: one launch, many faults; write campaign.json, .md, .html
    beside the run's history and reports."""

    config = load_config(find_config(config_path))
    job_name = job or campaign.job or config.default_job
    cluster_name = choose(config, cluster, job_name)
    run_dir = new_run_dir(Path(reports_dir or config.reports_dir), f"campaign-{campaign.name}")
    spec = config.clusters[cluster_name]
    runner = DrillRunner(drill_spec_for(campaign, campaign.faults[0]), cluster_name, spec, job_name,
                         config.jobs[job_name], run_dir, ui, nodes=connect(cluster_name, spec, run_dir))
    faults = CampaignFaults(campaign)
    outcome = runner.run(faults)
    refuse_unstarted(outcome, run_dir, cluster_name)  # busy, or stopped while it waited: no campaign folder
    history = History.load(run_dir / "history.jsonl")
    report = judge(campaign, history, faults.segments)
    pred = predicted(report, history)
    report |= {"cluster": cluster_name, "job": job_name, "run_dir": str(run_dir), "error": outcome.error,
               "error_kind": outcome.error_kind}
    write(run_dir, report, pred, history, faults.segments)
    return {**report, "predicted": pred}, run_dir
