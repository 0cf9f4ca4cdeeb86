"""What the command modules share: the consoles, one error style, JSON output, name lookups."""
from __future__ import annotations

import json
import os
import sys
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from drillbit.core.errors import Problem
from drillbit.core.lease import LEASE_WAIT, LeaseWait

# off a terminal (a pipe, a CI log) a line is as wide as it needs: rich would wrap every table
# cell at 80 columns there. $COLUMNS, where the user set it, still rules.
OFF_TERMINAL_WIDTH = 10_000


def console(stderr: bool = False) -> Console:
    """A console for the command's output: the terminal's width on a terminal, $COLUMNS where
    it is set, else (a pipe, a file, a CI log) full width: no table cell wrapped."""
    stream = sys.stderr if stderr else sys.stdout
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # a closed or odd stream: not a terminal
        tty = False
    wide = not tty and not (os.environ.get("COLUMNS") or "").isdigit()
    return Console(stderr=stderr, soft_wrap=True, width=OFF_TERMINAL_WIDTH if wide else None)


out = console()
err = console(stderr=True)

json_option = click.option("--json", "as_json", is_flag=True, help="print the result as JSON on stdout (an error "
                           "too: {\"error\", \"exit\", \"problems\"})")


def _use_drills(ctx: click.Context, param: click.Parameter, value: str | None) -> None:  # noqa: ARG001
    if value is not None:
        from drillbit.spec.load import EXTRA_DRILLS

        EXTRA_DRILLS.set(value)


# every command that looks drills (or suites) up takes it; the folder must exist
drills_option = click.option("--drills", type=click.Path(exists=True, file_okay=False), callback=_use_drills,
                             expose_value=False, help="another folder of drill specs (and suites/), looked up "
                             "before ./drills and the catalogue")


def _use_pushgateway(ctx: click.Context, param: click.Parameter, value: str | None) -> None:  # noqa: ARG001
    if value:
        import os

        os.environ["DRILLBIT_PUSHGATEWAY"] = value  # every run of a --repeat, a suite or a game day reads it


pushgateway_option = click.option(
    "--pushgateway", metavar="URL", callback=_use_pushgateway, expose_value=False,
    help="also send the results' metrics (reports/metrics.prom) to this Prometheus Pushgateway after every drill "
    "(env DRILLBIT_PUSHGATEWAY)")


def _use_wait(ctx: click.Context, param: click.Parameter, value: str | None) -> None:  # noqa: ARG001
    if value is None:
        return
    if value == "":
        LEASE_WAIT.set(LeaseWait())
        return
    from drillbit.spec.models import parse_duration

    try:
        LEASE_WAIT.set(LeaseWait(parse_duration(value)))
    except ValueError as exc:
        raise click.BadParameter(f"{exc}; a bare --wait waits without a limit, but it takes the word after it as "
                                 "the limit: put it last, or write --wait=10m", ctx, param) from None


# every command that takes the cluster's lease takes it (drill run, probe, suite run, gate,
# gameday run, sweep, compare, campaign): a busy cluster is waited for, not refused
wait_option = click.option(
    "--wait", metavar="[DURATION]", is_flag=False, flag_value="", default=None, callback=_use_wait,
    expose_value=False, help="when another drill holds the cluster, wait for it (at most DURATION: 30s, 10m, 2h; "
    "bare: without a limit) instead of exit 2; Ctrl-C while waiting is exit 4, nothing started")


def problems_header(problems: list[Problem]) -> str:
    return f"{len(problems)} problem{'' if len(problems) == 1 else 's'}:"


def show_error(message: str, problems: list[Problem] | None = None, hint: str | None = None) -> None:
    """Every error the CLI prints, one style: ``error: <what>``, then one indented line per
    problem (file:line: field: message), then a hint where one helps."""
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)  # it may quote the job's own lines
    for p in problems or []:
        err.print(f"  {p}", markup=False, highlight=False)
    if hint:
        err.print(f"[dim]{escape(hint)}[/]", highlight=False)


def show_problems(problems: list[Problem]) -> None:
    show_error(problems_header(problems), problems)


def listing(columns: tuple[str, ...], rows: list[list[str]], right: tuple[str, ...] = (),
            title: str | None = None) -> Table:
    """A listing whose names (the first column, and any column of single words: the
    names users copy) are never cut or wrapped at any terminal width; prose wraps instead."""
    table = Table(show_edge=False, title=title)
    for i, col in enumerate(columns):
        values = [str(r[i]) for r in rows]
        name = i == 0 or not any(" " in v for v in values)  # an identifier: kept whole
        width = max([len(col)] + [len(v) for v in values])
        table.add_column(col, no_wrap=name, min_width=width if name else None, overflow="ellipsis" if name else "fold",
                         justify="right" if col in right else "left")
    for row in rows:
        table.add_row(*(str(v) for v in row))
    return table


def emit_json(payload: Any) -> None:
    click.echo(json.dumps(payload, indent=2, default=str))


def human(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"
