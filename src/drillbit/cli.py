"""The ``drill`` command: parse, call, print. Exit codes as in DESIGN.md."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from drillbit.errors import DrillError, SpecError
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
@click.option("--cluster", help="cluster name from drill.yaml (default: local)")
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
    paths = [Path(f) for f in files] or list(catalogue().values())
    for path in paths:
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


if __name__ == "__main__":
    try:
        main()
    except DrillError as exc:
        err.print(f"error: {exc}")
        sys.exit(EXIT_HARNESS)
