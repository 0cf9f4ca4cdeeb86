"""``drill cadence | simulate``: checkpoint cadence and the fleet Monte Carlo."""
from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from drillbit.judging import exitcodes
from drillbit.entry.cli.common import emit_json, human, json_option, out
from drillbit.core.errors import ConfigError, DrillError
from drillbit.judging.report.result import RunResult


def _duration(text: str | None, what: str) -> float | None:
    from drillbit.spec.models import parse_duration

    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise ConfigError(f"{what}: {exc}") from None


@click.command()
@click.option("--save-seconds", type=click.FloatRange(min=0, min_open=True), required=True,
              help="cost of one checkpoint save, seconds (C)")
@click.option("--mtbf", "mtbf_text", required=True, help="mean time between failures of the job: 168h, 6h, 90m (M)")
@click.option("--detect", "detect_text", default="0s", help="detection time D, for the goodput estimate")
@click.option("--restart", "restart_text", default="0s", help="restart + restore time R, for the goodput estimate")
@click.option("--interval", "interval_text", help="the job's actual save interval, to compare")
@json_option
def cadence(save_seconds: float, mtbf_text: str, detect_text: str, restart_text: str, interval_text: str | None,
            as_json: bool) -> int:
    """Young's and Daly's optimal checkpoint intervals, overhead and expected lost work."""
    from drillbit.judging.fleet.cadence import cadence as compute

    mtbf = _duration(mtbf_text, "--mtbf") or 0.0
    try:
        c = compute(save_seconds, mtbf, detect_s=_duration(detect_text, "--detect") or 0.0,
                    restart_s=_duration(restart_text, "--restart") or 0.0,
                    actual_interval_s=_duration(interval_text, "--interval"))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if as_json:
        emit_json(c.model_dump())
        return exitcodes.PASS
    table = Table(show_edge=False, title=f"C = {save_seconds:g} s, M = {human(mtbf)}")
    table.add_column("")
    table.add_column("interval", justify="right")
    table.add_row("Young  sqrt(2CM)", human(c.young_s))
    table.add_row("Daly, first order", human(c.daly_first_s))
    table.add_row("Daly, higher order (optimum)", human(c.daly_s))
    if c.actual_interval_s:
        table.add_row("yours", f"{human(c.actual_interval_s)} ({c.ratio_to_optimum:.2f}x optimum)")
    out.print(table)
    out.print(f"at the optimum: save overhead {c.save_overhead:.2%}, expected lost work per failure "
              f"{human(c.lost_work_per_failure_s)}, expected goodput {c.expected_goodput:.2%}"
              + (f"; at yours {c.actual_goodput:.2%}" if c.actual_goodput is not None else ""))
    return exitcodes.PASS


@click.command()
@click.option("--scenario", required=True, help="llama3-405b, opt-175b, bloom-176b, or a scenario YAML")
@click.option("--from", "from_run", help="a run folder: take D and R from its result.json")
@click.option("--detect", "detect_text", help="detection time D (overrides the scenario / --from)")
@click.option("--restart", "restart_text", help="restart + restore time R")
@click.option("--save-seconds", type=click.FloatRange(min=0), help="checkpoint save cost C, seconds")
@click.option("--interval", "interval_text", help="checkpoint interval tau")
@click.option("--gpus", type=click.IntRange(min=1), help="scale the fleet (the per-GPU-day rate is kept)")
@click.option("--days", type=click.FloatRange(min=0, min_open=True), help="length of the run, days")
@click.option("--spares", type=click.IntRange(min=0), help="spare hosts")
@click.option("--replacement-delay", "replacement_text", help="time to bring a replaced host back")
@click.option("--trials", type=click.IntRange(1, 1_000_000), default=1000, show_default=True, help="runs simulated")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--svg", type=click.Path(), help="write the goodput histogram as SVG")
@json_option
def simulate(scenario: str, from_run: str | None, detect_text: str | None, restart_text: str | None,
             save_seconds: float | None, interval_text: str | None, gpus: int | None, days: float | None,
             spares: int | None, replacement_text: str | None, trials: int, seed: int, svg: str | None,
             as_json: bool) -> int:
    """Monte Carlo of a whole training run: goodput, interruptions, GPU-hours lost by cause."""
    from drillbit.judging.checks.projection import recovery_split
    from drillbit.judging.checks.recovery import Measurements
    from drillbit.judging.fleet.simulate import load_scenario, params_for, svg_histogram
    from drillbit.judging.fleet.simulate import simulate as run_sim

    sc = load_scenario(scenario)
    d = r = None
    if from_run:
        try:
            known = RunResult.load(Path(from_run) / "result.json").measurements
        except (OSError, ValueError) as exc:  # a pydantic ValidationError is a ValueError
            raise ConfigError(f"--from {from_run}: not a run folder with a result.json "
                              f"({str(exc).splitlines()[0]})") from None
        split = recovery_split(Measurements.model_validate(known))
        if split is None:
            raise ConfigError(f"{from_run}: the run measured no detection or no first step after recovery")
        d, r = split
    d = _duration(detect_text, "--detect") if detect_text else d
    r = _duration(restart_text, "--restart") if restart_text else r
    try:
        params = params_for(sc, detect_s=d, restart_s=r, save_s=save_seconds,
                            interval_s=_duration(interval_text, "--interval"), gpus=gpus, days=days, spares=spares,
                            replacement_delay_s=_duration(replacement_text, "--replacement-delay"))
    except (ValueError, DrillError) as exc:
        raise ConfigError(str(exc)) from None
    res = run_sim(sc, params, trials=trials, seed=seed)
    if svg:
        Path(svg).write_text(svg_histogram(res))
    if as_json:
        emit_json(res.model_dump())
        return exitcodes.PASS
    p = res.params
    out.print(f"[bold]{sc.name}[/]: {p.gpus:,} GPUs, {p.days:g} days, {p.rate_per_gpu_day:.2e} interruptions "
              f"per GPU-day; D {human(p.detect_s)}, R {human(p.restart_s)}, C {human(p.save_s)}, "
              f"tau {human(p.interval_s)}; {trials} trials, seed {seed}")
    out.print(f"goodput      p50 {res.goodput_p50:.2%}   p5 {res.goodput_p5:.2%}   mean {res.goodput_mean:.2%}")
    out.print(f"interruptions mean {res.interruptions_mean:.1f} (p5 {res.interruptions_p5:.0f}, "
              f"p95 {res.interruptions_p95:.0f}); host losses {res.host_losses_per_day:.2f}/day; "
              f"spare waits {res.spare_wait_hours_mean:.1f} h per run")
    table = Table(title="GPU-hours lost per run, by cause", show_edge=False)
    table.add_column("cause")
    table.add_column("GPU-hours", justify="right")
    for cause, hours in res.gpu_hours_lost_by_cause.items():
        table.add_row(cause, f"{hours:,.0f}")
    out.print(table)
    top = max(c for _, c in res.goodput_histogram) or 1
    for edge, count in res.goodput_histogram:
        out.print(f"{edge:8.4f} {'█' * round(40 * count / top)} {count}")
    if svg:
        out.print(f"[dim]histogram written to {svg}[/]")
    return exitcodes.PASS


COMMANDS = [cadence, simulate]
