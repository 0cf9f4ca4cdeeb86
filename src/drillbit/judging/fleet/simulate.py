"""Fleet Monte Carlo: what one drill's recovery times mean for a whole training run.

One trial is one run of ``days`` on ``gpus`` GPUs. Unexpected interruptions arrive as a
Poisson process at the scenario's rate per GPU-day, each with a cause drawn by the
scenario's counts; bursts take several hosts down at once. Each interruption costs the
detection time D, the restart + restore time R, the work since the last checkpoint
(uniform over the interval tau), and — when it needs a host replaced and the spare pool
is empty — the wait until a spare comes back. Checkpointing costs C/tau of the rest.

    goodput = (1 - C/tau) - sum(losses) / wall time

which is the first-order model of judging/fleet/cadence.py (Young 1974, Daly 2006) when there are no spare waits.
"""
from __future__ import annotations

import heapq
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field, ValidationError

from drillbit.core.errors import Problem, SpecError
from drillbit.spec.load import project_dirs, read_yaml, validate
from drillbit.spec.models import Duration, Span, Strict

HOUR = 3600.0


class Cause(Strict):
    count: float = Field(gt=0)
    replace: bool = False


class CheckpointParams(Strict):
    save: Duration | None = None
    interval: Duration | None = None


class RecoveryParams(Strict):
    detect: Span | None = None
    restart: Span | None = None


class Spares(Strict):
    hosts: int = Field(ge=0)
    replacement_delay: Span


class Bursts(Strict):
    count: float = Field(gt=0, description="bursts over the whole run")
    hosts: int = Field(ge=2)


class Scenario(Strict):
    name: str
    description: str = ""
    sources: list[str] = Field(default_factory=list)
    gpus: int = Field(gt=0)
    gpus_per_host: int = 8
    days: float = Field(gt=0)
    planned: int = 0
    rate_per_gpu_day: float | None = Field(None, gt=0)
    causes: dict[str, Cause]
    checkpoint: CheckpointParams = Field(default_factory=CheckpointParams)
    recovery: RecoveryParams = Field(default_factory=RecoveryParams)
    spares: Spares | None = None
    bursts: Bursts | None = None

    def rate(self) -> float:
        """Unexpected interruptions per GPU-day."""
        if self.rate_per_gpu_day is not None:
            return self.rate_per_gpu_day
        return sum(c.count for c in self.causes.values()) / (self.gpus * self.days)


class SimParams(BaseModel):
    """Everything one simulation needs, after overrides."""

    gpus: int = Field(gt=0)
    days: float = Field(gt=0)
    rate_per_gpu_day: float = Field(ge=0)
    save_s: float = Field(ge=0)
    interval_s: float = Field(gt=0)
    detect_s: float = Field(ge=0)
    restart_s: float = Field(ge=0)
    gpus_per_host: int = Field(8, gt=0)
    spares: int | None = Field(None, ge=0)
    replacement_delay_s: float = Field(0.0, ge=0)
    burst_per_day: float = 0.0
    burst_hosts: int = 0


class SimResult(BaseModel):
    scenario: str
    trials: int
    seed: int
    params: SimParams
    goodput_p50: float
    goodput_p5: float
    goodput_mean: float
    interruptions_mean: float
    interruptions_p5: float
    interruptions_p95: float
    host_losses_per_day: float
    spare_wait_hours_mean: float
    gpu_hours_lost_by_cause: dict[str, float]
    goodput_histogram: list[tuple[float, int]]


def params_for(scenario: Scenario, **overrides: float | int | None) -> SimParams:
    """Scenario values, replaced by any override that is not None; all must end up known."""
    values = {
        "gpus": scenario.gpus, "days": scenario.days, "rate_per_gpu_day": scenario.rate(),
        "save_s": scenario.checkpoint.save, "interval_s": scenario.checkpoint.interval,
        "detect_s": scenario.recovery.detect, "restart_s": scenario.recovery.restart,
        "gpus_per_host": scenario.gpus_per_host,
        "spares": scenario.spares.hosts if scenario.spares else None,
        "replacement_delay_s": scenario.spares.replacement_delay if scenario.spares else 0.0,
        "burst_per_day": scenario.bursts.count / scenario.days if scenario.bursts else 0.0,
        "burst_hosts": scenario.bursts.hosts if scenario.bursts else 0,
    }
    values.update({k: v for k, v in overrides.items() if v is not None})
    missing = [k for k in ("save_s", "interval_s", "detect_s", "restart_s") if values[k] is None]
    if missing:
        names = {"save_s": "--save-seconds", "interval_s": "--interval", "detect_s": "--detect (or --from)",
                 "restart_s": "--restart (or --from)"}
        raise ValueError(f"scenario {scenario.name!r} does not give {', '.join(missing)}; "
                         f"pass {', '.join(names[m] for m in missing)}")
    try:
        return SimParams.model_validate(values)
    except ValidationError as exc:  # e.g. a duration of 0 for the interval
        names = {"save_s": "--save-seconds", "interval_s": "--interval", "detect_s": "--detect", "restart_s": "--restart",
                 "replacement_delay_s": "--replacement-delay"}
        raise ValueError("; ".join(f"{names.get(str(e['loc'][0]), '--' + str(e['loc'][0]))}: {e['msg'].lower()}"
                                   for e in exc.errors())) from None


def _spare_waits(times: np.ndarray, needs: np.ndarray, spares: int, delay: float) -> np.ndarray:
    """Seconds each interruption waits for a spare host (sequential: the pool has state)."""
    waits = np.zeros(len(times))
    returns: list[float] = []  # when each host in repair comes back into the pool
    free = spares
    for i in np.flatnonzero(needs):
        t = times[i]
        while returns and returns[0] <= t:
            heapq.heappop(returns)
            free += 1
        start = t
        for _ in range(int(needs[i])):
            if free > 0:
                free -= 1
            else:
                start = max(start, heapq.heappop(returns))  # wait for the next repaired host
            heapq.heappush(returns, start + delay)
        waits[i] = start - t
    return waits


def simulate(scenario: Scenario, params: SimParams, *, trials: int = 1000, seed: int = 0) -> SimResult:
    rng = np.random.default_rng(seed)
    horizon = params.days * 86400.0
    names = list(scenario.causes)
    weights = np.array([scenario.causes[n].count for n in names], dtype=float)
    weights /= weights.sum()
    replace = np.array([scenario.causes[n].replace for n in names])
    n_causes = len(names)

    lam = params.rate_per_gpu_day * params.gpus * params.days
    counts = rng.poisson(lam, size=trials)
    bursts = rng.poisson(params.burst_per_day * params.days, size=trials) if params.burst_hosts else np.zeros(trials, int)
    total = counts + bursts
    n_all = int(total.sum())
    trial_of = np.repeat(np.arange(trials), total)
    # cause index; bursts get an extra "burst" cause at index n_causes
    cause = np.empty(n_all, dtype=int)
    is_burst = np.zeros(n_all, dtype=bool)
    offsets = np.concatenate(([0], np.cumsum(total)))
    single = rng.choice(n_causes, size=int(counts.sum()), p=weights)
    k = 0
    for i in range(trials):
        a, c = offsets[i], counts[i]
        cause[a:a + c] = single[k:k + c]
        k += c
        cause[a + c:offsets[i + 1]] = n_causes
        is_burst[a + c:offsets[i + 1]] = True
    loss = params.detect_s + params.restart_s + rng.uniform(0.0, params.interval_s, size=n_all)

    # hosts each interruption takes out of service (0: no replacement needed)
    needs = np.where(is_burst, params.burst_hosts, replace[np.minimum(cause, n_causes - 1)].astype(int))
    if params.spares is not None and params.replacement_delay_s > 0:
        times = rng.uniform(0.0, horizon, size=n_all)
        waits = np.zeros(n_all)
        for i in range(trials):
            a, b = offsets[i], offsets[i + 1]
            if b > a:
                order = np.argsort(times[a:b])
                w = _spare_waits(times[a:b][order], needs[a:b][order], params.spares, params.replacement_delay_s)
                waits[a:b][order] = w
        loss = loss + waits
    else:
        waits = np.zeros(n_all)

    lost_per_trial = np.bincount(trial_of, weights=loss, minlength=trials)
    goodput = np.clip((1.0 - params.save_s / params.interval_s) - lost_per_trial / horizon, 0.0, 1.0)
    by_cause = np.bincount(cause, weights=loss, minlength=n_causes + 1) * params.gpus / HOUR / trials
    lost = {names[i]: float(by_cause[i]) for i in range(n_causes)}
    if params.burst_hosts:
        lost["burst"] = float(by_cause[n_causes])
    host_losses = needs.sum() / trials / params.days
    hist, edges = np.histogram(goodput, bins=20)
    return SimResult(
        scenario=scenario.name, trials=trials, seed=seed, params=params,
        goodput_p50=float(np.percentile(goodput, 50)), goodput_p5=float(np.percentile(goodput, 5)),
        goodput_mean=float(goodput.mean()), interruptions_mean=float(total.mean()),
        interruptions_p5=float(np.percentile(total, 5)), interruptions_p95=float(np.percentile(total, 95)),
        host_losses_per_day=float(host_losses),
        spare_wait_hours_mean=float(waits.sum() / trials / HOUR),
        gpu_hours_lost_by_cause=dict(sorted(lost.items(), key=lambda kv: -kv[1])),
        goodput_histogram=[(float(edges[i]), int(hist[i])) for i in range(len(hist))],
    )


def scenario_dirs() -> list[Path]:

    return project_dirs("faults/scenarios")


def load_scenario(name_or_path: str) -> Scenario:

    path = Path(name_or_path)
    if not path.suffix:
        found = {p.stem: p for d in reversed(scenario_dirs()) for p in d.glob("*.yaml")}
        if name_or_path not in found:
            raise SpecError([Problem(name_or_path, None, "", f"no such scenario; known: {', '.join(sorted(found))}")])
        path = found[name_or_path]
    data, lines = read_yaml(path)
    scenario, problems = validate(Scenario, data, path, lines)
    if problems:
        raise SpecError(problems)
    return scenario


def svg_histogram(result: SimResult, width: int = 480, height: int = 200) -> str:
    """A self-contained SVG bar chart of the goodput distribution."""
    bins = result.goodput_histogram
    top = max((c for _, c in bins), default=1) or 1
    bw = (width - 40) / max(len(bins), 1)
    bars = []
    for i, (edge, count) in enumerate(bins):
        h = (height - 40) * count / top
        bars.append(f'<rect x="{30 + i * bw:.1f}" y="{height - 20 - h:.1f}" width="{bw - 2:.1f}" '
                    f'height="{h:.1f}" fill="#3b82f6"><title>{edge:.4f}: {count}</title></rect>')
    lo, hi = bins[0][0], bins[-1][0]
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
            f'font-size="11"><text x="30" y="14">goodput, {result.scenario}, {result.trials} trials '
            f'(p50 {result.goodput_p50:.4f}, p5 {result.goodput_p5:.4f})</text>{"".join(bars)}'
            f'<text x="30" y="{height - 5}">{lo:.4f}</text><text x="{width - 60}" y="{height - 5}">{hi:.4f}</text></svg>')
