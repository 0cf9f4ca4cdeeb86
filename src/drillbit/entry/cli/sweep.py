"""``drill sweep``: kill the job at every crash point of one checkpoint save (src/drillbit/runs/sweep.py), or,
with ``--param``, grade one fault parameter over levels and find the job's detector's reach
(src/drillbit/runs/graded.py)."""
from __future__ import annotations

import click

from drillbit.entry.cli.common import drills_option, emit_json, err, json_option, out, wait_option
from drillbit.judging import exitcodes
from drillbit.judging.report.console import ConsoleUI


@click.command()
@click.argument("drill", default="kill-during-save")
@click.option("--cluster", help="cluster name from drill.yaml (default: its default_cluster, else local)")
@click.option("--job", "jobs", multiple=True, help="job profile (default: the drill's, else reference); with "
              "--param, repeat it to put several jobs' detectors on one curve and one table")
@click.option("--config", "config_path", help="drill.yaml path (default: ./drill.yaml or $DRILLBIT_CONFIG)")
@drills_option
@click.option("--reports", "reports_dir", help="where run folders go (default: reports/)")
@click.option("--sample", "n", type=click.IntRange(1, 1000), help="drill N crash points spread over the save "
                                                                   "(default: every one)")
@click.option("--point", "points", multiple=True, help="drill this crash point only ('torn shard_*.pt'); repeat "
                                                       "for several; skips the recording pass")
@click.option("--param", "param", help="grade this fault parameter over levels instead: NAME=V1,V2,… (slowdown=1%,"
                                      "2%,5%; a duration: 5s,15s) — a graded sweep (graded.md, .html, .svg, .png)")
@click.option("--repeats", type=click.IntRange(1, 1000), default=5, show_default=True,
              help="with --param: drills a level")
@click.option("--one-launch", is_flag=True, help="with --param: every drill a segment of one launch of the job, "
              "each after a quiet gap with no fault on (the null level); without it each drill is a launch of its own")
@click.option("--window", type=float, help="with --param: watch each drill this many seconds at most for the "
              "detector to speak (default: the drill's observe.window)")
@click.option("--gap", type=click.FloatRange(min=0.5), default=10.0, show_default=True,
              help="with --one-launch: seconds of quiet before each segment")
@click.option("--seed", type=int, default=0, show_default=True,
              help="with --one-launch: the draw that orders the levels within each round")
@wait_option
@json_option
def sweep(drill: str, cluster: str | None, jobs: tuple[str, ...], config_path: str | None,
          reports_dir: str | None, n: int | None, points: tuple[str, ...], param: str | None, repeats: int,
          one_launch: bool, window: float | None, gap: float, seed: int, as_json: bool) -> int:
    """Sweep the crash points of one checkpoint save: record one save's file events (a first
    drill that kills nothing), then one kill-during-save drill per point, each judged on its
    own — pass, silent (resumed from an incomplete checkpoint), hard-fail, lost-work — in one
    matrix (sweep.md, sweep.html, sweep.json). With --param, a graded sweep instead: the drill
    at each level of one fault parameter, --repeats times, and the job's detector's reach (the
    smallest level detected in >= 95% of repeats, and every larger one, with no false blame)."""
    from drillbit.core.errors import ConfigError
    from drillbit.core.saves import CrashPoint
    from drillbit.runs.session import resolve
    from drillbit.runs.sweep import markdown, run_sweep

    if param is not None:
        from drillbit.runs.graded import check_param, page, parse_levels, run_graded, together, write

        if points or n:
            raise ConfigError("--param grades a fault parameter; --point and --sample belong to a crash-point sweep")
        if window is not None and not (0 < window < float("inf")):
            raise ConfigError(f"--window {window}: say a number of seconds above 0")
        name, levels = parse_levels(param)
        every = [resolve(drill, cluster=cluster, job=job, config_path=config_path) for job in (jobs or (None,))]
        for resolved in every:  # every input error before anything runs
            check_param(resolved, name, levels)
        done: list[dict] = []
        with ConsoleUI(err) as ui:
            for resolved in every:
                done.append(run_graded(resolved, name, levels, repeats, reports_dir=reports_dir, ui=ui,
                                       one_launch=one_launch, window=window, gap=gap, seed=seed,
                                       write_report=False)[0])
                if done[-1].get("aborted"):
                    break  # the operator stopped it: no next job
        graded = together(done)
        folder = write(graded, reports_dir or every[0].config.reports_dir)
        if as_json:
            emit_json({**graded, "folder": str(folder)})
        else:
            out.print(page(graded).markdown(), markup=False, highlight=False)
            out.print(f"graded sweep: {folder}/graded.md, graded.html, graded.svg", markup=False)
        # a report, not a gate: it exits 0 once every drill ran (the reach is what it says); a sweep
        # the operator stopped is aborted (4), one a drillbit error cut short a harness error (5)
        if any(r.get("aborted") for r in done):
            return exitcodes.ABORTED
        if any(r.get("error_kind") == "config" for r in done):
            return exitcodes.USAGE
        if any(r.get("error") or r.get("error_kind") for r in done):
            return exitcodes.HARNESS
        return exitcodes.PASS

    if len(jobs) > 1 or one_launch:
        raise ConfigError("several --job and --one-launch belong to a graded sweep (--param)")
    try:
        chosen = [CrashPoint.parse(p) for p in points] or None
    except ValueError as exc:
        raise ConfigError(f"--point: {exc}") from None
    resolved = resolve(drill, cluster=cluster, job=jobs[0] if jobs else None, config_path=config_path)
    with ConsoleUI(err) as ui:
        report, folder = run_sweep(resolved, points=chosen, n=n, reports_dir=reports_dir, ui=ui)
    if as_json:
        emit_json({**report, "folder": str(folder)})
    else:
        out.print(markdown(report), markup=False, highlight=False)
        out.print(f"sweep report: {folder}/sweep.md, sweep.html", markup=False)
    return report["exit_code"]


COMMANDS = [sweep]
