"""The ``drill`` command: parse, call, print. Exit codes as in DESIGN.md."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from drillbit.errors import DrillError, Problem, SpecError
from drillbit.report.console import ConsoleUI, summary
from drillbit.report.result import EXIT_HARNESS, EXIT_USAGE
from drillbit.session import execute, plan_text, resolve
from drillbit.spec.load import catalogue, find_config, load_config, load_drill

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def _fail_input(exc: DrillError) -> None:
    if isinstance(exc, SpecError):
        err.print(f"[bold red]{len(exc.problems)} problem(s):[/]")
        for p in exc.problems:
            err.print(f"  {p}", markup=False, highlight=False)
    else:
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
    sys.exit(EXIT_USAGE)


@click.group()
@click.version_option(package_name="drillbit")
def main() -> None:
    """drillbit: break a training job on purpose and judge its recovery."""


@main.command()
@click.argument("drill")
@click.option("--cluster", help="cluster name from drill.yaml (default: its default_cluster, else local; env DRILLBIT_CLUSTER)")
@click.option("--job", help="job profile (default: the drill's, else reference)")
@click.option("--config", "config_path", help="drill.yaml path (default: ./drill.yaml or $DRILLBIT_CONFIG)")
@click.option("--drills", "drills_dir", help="extra directory of drill specs")
@click.option("--reports", "reports_dir", help="where run folders go (default: reports/)")
@click.option("--dry-run", is_flag=True, help="print the plan and stop; nothing is touched")
@click.option("--json", "as_json", is_flag=True, help="print result.json to stdout")
def run(drill: str, cluster: str | None, job: str | None, config_path: str | None, drills_dir: str | None,
        reports_dir: str | None, dry_run: bool, as_json: bool) -> None:
    """Run one drill (a name from the catalogue, or a spec file)."""
    try:
        resolved = resolve(drill, cluster=cluster, job=job, config_path=config_path, drills_dir=drills_dir)
    except DrillError as exc:
        _fail_input(exc)
        return
    if dry_run:
        out.print(plan_text(resolved), markup=False, highlight=False)
        out.print("dry run: nothing was launched or touched")
        return
    ui = ConsoleUI(err)
    try:
        payload, outcome = execute(resolved, reports_dir=reports_dir, ui=ui)
    finally:
        ui.close()
    if as_json:
        click.echo(json.dumps(payload, indent=2))
    else:
        summary(out, payload, str(outcome.run_dir))
    sys.exit(payload["exit_code"])


@main.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
def report(run_dir: str) -> None:
    """Re-judge a run folder from its history and re-render result.json and the reports."""
    from drillbit.session import rerender

    try:
        payload = rerender(Path(run_dir))
    except DrillError as exc:
        _fail_input(exc)
        return
    summary(out, payload, run_dir)
    out.print(f"wrote {run_dir}/report.html, report.md, junit.xml, result.json")


@main.command()
@click.argument("files", nargs=-1, type=click.Path())
@click.option("--config", "config_path", help="drill.yaml to validate too")
def validate(files: tuple[str, ...], config_path: str | None) -> None:
    """Check drill specs (default: the whole catalogue) and drill.yaml; every error at once."""
    problems = []
    try:
        config = load_config(find_config(config_path))
    except SpecError as exc:
        problems += exc.problems
        config = load_config(None)
    known = catalogue()
    paths = [Path(f) if Path(f).exists() or f not in known else known[f] for f in files] or list(known.values())
    for path in paths:
        if not path.exists():
            problems.append(Problem(str(path), None, "", "no such file, and no drill of that name in the catalogue"))
            continue
        try:
            load_drill(path, config)
        except SpecError as exc:
            problems += exc.problems
    if problems:
        err.print(f"[bold red]{len(problems)} problem(s):[/]")
        for p in problems:
            err.print(f"  {p}", markup=False, highlight=False)
        sys.exit(EXIT_USAGE)
    out.print(f"ok: {len(paths)} drill spec(s) valid")


@main.command(name="list")
def list_() -> None:
    """The drill catalogue."""
    table = Table(show_edge=False)
    for col in ("drill", "class", "fault", "summary"):
        table.add_column(col)
    problems = []
    for name, path in catalogue().items():
        try:
            spec = load_drill(path)
        except SpecError as exc:
            problems += exc.problems
            continue
        table.add_row(name, spec.class_, spec.fault.type, spec.summary)
    out.print(table)
    for p in problems:
        err.print(f"  {p}", markup=False, highlight=False)
    if problems:
        sys.exit(EXIT_USAGE)


@main.command()
def faults() -> None:
    """The failure catalogue, grouped by class, with real-world rates and sources."""
    from drillbit.catalogue import by_class, load_catalogue

    try:
        entries = load_catalogue()
    except DrillError as exc:
        _fail_input(exc)
        return
    for cls, members in by_class(entries).items():
        out.print(f"[bold]{cls}[/]" + ("" if members else "  [dim](none yet)[/]"))
        for e in members:
            out.print(f"  [bold cyan]{e.name}[/] — {e.models}")
            for rate in e.rates:
                out.print(f"      {rate.what}: {rate.value}  [dim]({rate.source})[/]")
            out.print(f"      [dim]confirm:[/] {e.confirm}\n      [dim]heal:[/] {e.heal}\n"
                      f"      [dim]drill:[/] drill run {e.drill}   [dim]runbook:[/] drill runbook {e.drill}")


@main.command()
@click.option("--save-seconds", type=float, required=True, help="cost of one checkpoint save, seconds (C)")
@click.option("--mtbf", "mtbf_text", required=True, help="mean time between failures of the job: 168h, 6h, 90m (M)")
@click.option("--detect", "detect_text", default="0s", help="detection time D, for the goodput estimate")
@click.option("--restart", "restart_text", default="0s", help="restart + restore time R, for the goodput estimate")
@click.option("--interval", "interval_text", help="the job's actual save interval, to compare")
def cadence(save_seconds: float, mtbf_text: str, detect_text: str, restart_text: str, interval_text: str | None) -> None:
    """Young's and Daly's optimal checkpoint intervals, overhead and expected lost work."""
    from drillbit.model.cadence import cadence as compute
    from drillbit.spec.models import parse_duration

    try:
        mtbf, d, r = parse_duration(mtbf_text), parse_duration(detect_text), parse_duration(restart_text)
        interval = parse_duration(interval_text) if interval_text else None
        c = compute(save_seconds, mtbf, detect_s=d, restart_s=r, actual_interval_s=interval)
    except ValueError as exc:
        _fail_input(DrillError(str(exc)))
        return
    table = Table(show_edge=False, title=f"C = {save_seconds:g} s, M = {_human(mtbf)}")
    table.add_column("")
    table.add_column("interval", justify="right")
    table.add_row("Young  sqrt(2CM)", _human(c.young_s))
    table.add_row("Daly, first order", _human(c.daly_first_s))
    table.add_row("Daly, higher order (optimum)", _human(c.daly_s))
    if c.actual_interval_s:
        table.add_row("yours", f"{_human(c.actual_interval_s)} ({c.ratio_to_optimum:.2f}x optimum)")
    out.print(table)
    out.print(f"at the optimum: save overhead {c.save_overhead:.2%}, expected lost work per failure "
              f"{_human(c.lost_work_per_failure_s)}, expected goodput {c.expected_goodput:.2%}"
              + (f"; at yours {c.actual_goodput:.2%}" if c.actual_goodput is not None else ""))


def _human(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"


@main.command()
@click.option("--scenario", required=True, help="llama3-405b, opt-175b, bloom-176b, or a scenario YAML")
@click.option("--from", "from_run", help="a run folder: take D and R from its result.json")
@click.option("--detect", "detect_text", help="detection time D (overrides the scenario / --from)")
@click.option("--restart", "restart_text", help="restart + restore time R")
@click.option("--save-seconds", type=float, help="checkpoint save cost C")
@click.option("--interval", "interval_text", help="checkpoint interval tau")
@click.option("--gpus", type=int, help="scale the fleet (the per-GPU-day rate is kept)")
@click.option("--days", type=float, help="length of the run")
@click.option("--spares", type=int, help="spare hosts")
@click.option("--replacement-delay", "replacement_text", help="time to bring a replaced host back")
@click.option("--trials", type=int, default=1000, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--svg", type=click.Path(), help="write the goodput histogram as SVG")
@click.option("--json", "as_json", is_flag=True)
def simulate(scenario: str, from_run: str | None, detect_text: str | None, restart_text: str | None,
             save_seconds: float | None, interval_text: str | None, gpus: int | None, days: float | None,
             spares: int | None, replacement_text: str | None, trials: int, seed: int, svg: str | None,
             as_json: bool) -> None:
    """Monte Carlo of a whole training run: goodput, interruptions, GPU-hours lost by cause."""
    from drillbit.checks.projection import recovery_split
    from drillbit.checks.recovery import Measurements
    from drillbit.model.simulate import load_scenario, params_for, simulate as run_sim, svg_histogram
    from drillbit.spec.models import parse_duration

    try:
        sc = load_scenario(scenario)
        d = r = None
        if from_run:
            result = json.loads((Path(from_run) / "result.json").read_text())
            known = {k: v for k, v in result["measurements"].items() if k in Measurements.model_fields}
            split = recovery_split(Measurements.model_validate(known))
            if split is None:
                raise DrillError(f"{from_run}: the run measured no detection or no first step after recovery")
            d, r = split
        dur = lambda text: parse_duration(text) if text else None  # noqa: E731
        d = dur(detect_text) if detect_text else d
        r = dur(restart_text) if restart_text else r
        params = params_for(sc, detect_s=d, restart_s=r, save_s=save_seconds, interval_s=dur(interval_text),
                            gpus=gpus, days=days, spares=spares, replacement_delay_s=dur(replacement_text))
    except (DrillError, ValueError, OSError, KeyError) as exc:
        _fail_input(exc if isinstance(exc, DrillError) else DrillError(str(exc)))
        return
    res = run_sim(sc, params, trials=trials, seed=seed)
    if svg:
        Path(svg).write_text(svg_histogram(res))
    if as_json:
        click.echo(res.model_dump_json(indent=2))
        return
    p = res.params
    out.print(f"[bold]{sc.name}[/]: {p.gpus:,} GPUs, {p.days:g} days, {p.rate_per_gpu_day:.2e} interruptions "
              f"per GPU-day; D {_human(p.detect_s)}, R {_human(p.restart_s)}, C {_human(p.save_s)}, "
              f"tau {_human(p.interval_s)}; {trials} trials, seed {seed}")
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


@main.command()
@click.argument("drill", required=False)
@click.option("--db", help="results store (default: reports/drills.db)")
@click.option("--limit", type=int, default=30, show_default=True)
def history(drill: str | None, db: str | None, limit: int) -> None:
    """The trend of past runs: verdicts, detect / recover times, lost steps, goodput."""
    from drillbit.report.store import Store, store_path

    path = store_path(load_config(find_config(None)), db=db)
    if not path.exists():
        err.print(f"no results store at {path} yet; run a drill first")
        sys.exit(EXIT_USAGE)
    with Store(path) as store:
        rows = store.runs(drill, limit)
    table = Table(show_edge=False)
    for col in ("id", "drill", "cluster", "job", "verdict", "started", "detect s", "first step s", "lost", "goodput"):
        table.add_column(col, justify="right" if col in ("id", "detect s", "first step s", "lost", "goodput") else "left")
    fmt = lambda v, spec: "—" if v is None else format(v, spec)  # noqa: E731
    for row in reversed(rows):
        table.add_row(str(row["id"]), row["drill"], row["cluster"], row["job"], row["verdict"],
                      (row["started_at"] or "")[:19], fmt(row["time_to_detect"], ".2f"),
                      fmt(row["time_to_first_step"], ".2f"), fmt(row["lost_steps"], "d"), fmt(row["goodput"], ".2f"))
    out.print(table)


@main.group()
def suite() -> None:
    """Suites: ordered lists of drills (drills/suites/*.yaml)."""


def _suite_run(name: str, cluster: str | None, job: str | None, config_path: str | None, reports_dir: str | None,
               db: str | None, max_regression: float | None, before=None, after=None):
    from drillbit.spec.load import load_suite
    from drillbit.suite import run_suite

    config = load_config(find_config(config_path))
    try:
        spec = load_suite(name, config)
    except DrillError as exc:
        _fail_input(exc)
        raise
    ui = ConsoleUI(err)
    try:
        return run_suite(spec, cluster=cluster, job=job, config_path=config_path,
                         reports_dir=reports_dir or config.reports_dir, db=db, ui=ui,
                         max_regression=max_regression, before=before, after=after)
    except DrillError as exc:
        ui.close()
        _fail_input(exc)
        raise
    finally:
        ui.close()


_suite_options = [
    click.option("--cluster", help="cluster name (default: the suite's, else local; env DRILLBIT_CLUSTER)"),
    click.option("--job", help="job profile for every drill (default: the suite's / each drill's)"),
    click.option("--config", "config_path", help="drill.yaml path"),
    click.option("--reports", "reports_dir", help="where run folders go"),
    click.option("--db", help="results store (default: <reports>/drills.db)"),
]


def suite_options(f):
    for option in reversed(_suite_options):
        f = option(f)
    return f


@suite.command(name="run")
@click.argument("name")
@suite_options
def suite_run(name: str, cluster: str | None, job: str | None, config_path: str | None, reports_dir: str | None,
              db: str | None) -> None:
    """Run every drill of a suite in order."""
    from drillbit.suite import summary_markdown

    run = _suite_run(name, cluster, job, config_path, reports_dir, db, None)
    out.print(summary_markdown(run, f"Suite {name}"), markup=False, highlight=False)
    sys.exit(run.exit_code)


@main.command()
@click.option("--suite", "suite_name", default="pre-deploy", show_default=True)
@suite_options
@click.option("--max-regression", type=float, help="allowed worsening of detect / first-step vs the baseline (0.2 = 20%)")
@click.option("--junit", "junit_path", help="also write junit.xml here")
@click.option("--summary", "summary_path", help="append the Markdown summary here (e.g. $GITHUB_STEP_SUMMARY)")
def gate(suite_name: str, cluster: str | None, job: str | None, config_path: str | None, reports_dir: str | None,
         db: str | None, max_regression: float | None, junit_path: str | None, summary_path: str | None) -> None:
    """The pre-deploy gate: run a suite, compare with the baselines, write junit + summary."""
    from drillbit.report import junit
    from drillbit.suite import summary_markdown, write_gate_outputs

    run = _suite_run(suite_name, cluster, job, config_path, reports_dir, db, max_regression)
    config = load_config(find_config(config_path))
    folder = write_gate_outputs(run, reports_dir or config.reports_dir)
    text = summary_markdown(run, "Recovery gate")
    if junit_path:
        Path(junit_path).write_text(junit.to_xml(f"drillbit.{run.suite.name}", run.results))
    if summary_path:
        with open(summary_path, "a") as fh:
            fh.write(text)
    out.print(text, markup=False, highlight=False)
    out.print(f"gate outputs: {folder}/junit.xml, {folder}/summary.md")
    sys.exit(run.exit_code)


@main.group()
def gameday() -> None:
    """Game days: a suite walked through with operators, and the post-drill review."""


@gameday.command(name="run")
@click.argument("name", default="game-day")
@suite_options
@click.option("--yes", "assume_yes", is_flag=True, help="run unattended: no confirmations")
def gameday_run(name: str, cluster: str | None, job: str | None, config_path: str | None, reports_dir: str | None,
                db: str | None, assume_yes: bool) -> None:
    """Announce, confirm and run each drill of a suite; write review.md."""
    import time as _time

    from drillbit.gameday import Host, review_markdown

    host = Host(out, assume_yes)
    run = _suite_run(name, cluster, job, config_path, reports_dir, db, None, before=host.before, after=host.after)
    config = load_config(find_config(config_path))
    folder = Path(reports_dir or config.reports_dir) / f"gameday-{_time.strftime('%Y%m%d-%H%M%S')}-{name}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "review.md").write_text(review_markdown(run, host.specs, run.run_dirs))
    out.print(f"post-drill review: {folder}/review.md")
    sys.exit(run.exit_code if run.results else 0)


@main.command()
@click.argument("name")
@click.option("--db", help="results store for the last result (default: reports/drills.db)")
def runbook(name: str, db: str | None) -> None:
    """Render a drill's runbook with its parameters and its last result."""
    from drillbit.report.runbook import render_runbook
    from drillbit.report.store import Store, store_path
    from drillbit.spec.load import resolve_drill

    config = load_config(find_config(None))
    try:
        spec = load_drill(resolve_drill(name), config)
        path = store_path(config, db=db)
        last = None
        if path.exists():
            with Store(path) as store:
                last = store.last_result(spec.name)
        click.echo(render_runbook(spec, last))
    except DrillError as exc:
        _fail_input(exc)


if __name__ == "__main__":
    try:
        main()
    except DrillError as exc:
        err.print(f"error: {exc}")
        sys.exit(EXIT_HARNESS)
