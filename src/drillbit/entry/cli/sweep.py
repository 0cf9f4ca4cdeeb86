"""``drill sweep``: kill the job at every crash point of one checkpoint save (src/drillbit/runs/sweep.py)."""
from __future__ import annotations

import click

from drillbit.entry.cli.common import drills_option, emit_json, err, json_option, out, wait_option
from drillbit.judging.report.console import ConsoleUI


@click.command()
@click.argument("drill", default="kill-during-save")
@click.option("--cluster", help="cluster name from drill.yaml (default: its default_cluster, else local)")
@click.option("--job", help="job profile (default: the drill's, else reference)")
@click.option("--config", "config_path", help="drill.yaml path (default: ./drill.yaml or $DRILLBIT_CONFIG)")
@drills_option
@click.option("--reports", "reports_dir", help="where run folders go (default: reports/)")
@click.option("--sample", "n", type=click.IntRange(1, 1000), help="drill N crash points spread over the save "
                                                                   "(default: every one)")
@click.option("--point", "points", multiple=True, help="drill this crash point only ('torn shard_*.pt'); repeat "
                                                       "for several; skips the recording pass")
@wait_option
@json_option
def sweep(drill: str, cluster: str | None, job: str | None, config_path: str | None,
          reports_dir: str | None, n: int | None, points: tuple[str, ...], as_json: bool) -> int:
    """Sweep the crash points of one checkpoint save: record one save's file events (a first
    drill that kills nothing), then one kill-during-save drill per point, each judged on its
    own — pass, silent (resumed from an incomplete checkpoint), hard-fail, lost-work — in one
    matrix (sweep.md, sweep.html, sweep.json)."""
    from drillbit.core.errors import ConfigError
    from drillbit.core.saves import CrashPoint
    from drillbit.runs.session import resolve
    from drillbit.runs.sweep import markdown, run_sweep

    try:
        chosen = [CrashPoint.parse(p) for p in points] or None
    except ValueError as exc:
        raise ConfigError(f"--point: {exc}") from None
    resolved = resolve(drill, cluster=cluster, job=job, config_path=config_path)
    with ConsoleUI(err) as ui:
        report, folder = run_sweep(resolved, points=chosen, n=n, reports_dir=reports_dir, ui=ui)
    if as_json:
        emit_json({**report, "folder": str(folder)})
    else:
        out.print(markdown(report), markup=False, highlight=False)
        out.print(f"sweep report: {folder}/sweep.md, sweep.html", markup=False)
    return report["exit_code"]


COMMANDS = [sweep]
