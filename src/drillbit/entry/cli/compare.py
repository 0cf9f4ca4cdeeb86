"""``drill compare``: one suite against several job profiles, in one table (src/drillbit/runs/compare.py)."""
from __future__ import annotations

import click
from rich.table import Table

from drillbit.entry.cli.common import drills_option, emit_json, err, json_option, out, pushgateway_option, wait_option
from drillbit.judging.report.console import ConsoleUI
from drillbit.spec.load import find_config
from drillbit.faults.loading import load_config


@click.command()
@click.option("--suite", "suite_name", default="stacks", show_default=True, help="suite name or file")
@click.option("--jobs", default="", help="comma-separated job profiles, e.g. torchft,nvrx,dlrover (a suite of "
                                         "known defects without it: each drill's affected and fixed profiles)")
@click.option("--cluster", help="cluster name (default: the suite's, else the config's default)")
@click.option("--config", "config_path", help="drill.yaml path")
@click.option("--reports", "reports_dir", help="where run folders go")
@click.option("--db", help="results store (default: <reports>/drills.db)")
@drills_option
@wait_option
@pushgateway_option
@json_option
def compare(suite_name: str, jobs: str, cluster: str | None, config_path: str | None, reports_dir: str | None,
            db: str | None, as_json: bool) -> int:
    """Run a suite against several job profiles and print one table: detect, first step, lost
    steps, goodput, whom the stack blamed, verdict (and compare.md / .html / .json)."""
    from drillbit.runs.compare import COLUMNS, NUMERIC, changes, rows, run_compare, to_json, versions_line, write_outputs
    from drillbit.core.errors import ConfigError
    from drillbit.spec.load import load_suite

    names = [j.strip() for j in jobs.split(",") if j.strip()]
    if jobs.strip() and not names:
        raise ConfigError("--jobs: give at least one job profile")
    config = load_config(find_config(config_path))
    spec = load_suite(suite_name, config)
    with ConsoleUI(err) as ui:
        comp = run_compare(spec, names, cluster=cluster, config_path=config_path,
                           reports_dir=reports_dir or config.reports_dir, db=db, ui=ui)
    folder = write_outputs(comp, reports_dir or config.reports_dir)
    if as_json:
        emit_json({**to_json(comp), "folder": str(folder)})
        return comp.exit_code
    table = Table(title=f"suite {spec.name} on {comp.cluster}", show_edge=False)
    shown = [c for c in COLUMNS if c != "why"]
    for col in shown:
        table.add_column(col, justify="right" if col in NUMERIC else "left")
    table_rows = rows(comp)
    for r in table_rows:
        table.add_row(*[r[c] for c in shown])
    out.print(table)
    for r in table_rows:  # the reasons in full, under the table
        out.print(f"{r['job']} / {r['drill']}: {r['why']}", markup=False, highlight=False)
    for c in changes(comp):  # two jobs: what changed from the first to the second
        out.print(f"{c['drill']}: {c['verdict'].replace('**', '')}; detect {c['detect s']}; first step "
                  f"{c['first step s']}; lost steps {c['lost steps']}; goodput {c['goodput']}", markup=False,
                  highlight=False)
    out.print("versions: " + versions_line(comp), markup=False)
    out.print(f"compare report: {folder}/compare.md, compare.html, compare.json", markup=False)
    return comp.exit_code


COMMANDS = [compare]
