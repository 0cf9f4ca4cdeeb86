"""What the command modules share: the consoles, problem lists, JSON output."""
from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console

from drillbit.errors import Problem

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

json_option = click.option("--json", "as_json", is_flag=True, help="print the result as JSON on stdout")


def show_problems(problems: list[Problem]) -> None:
    err.print(f"[bold red]{len(problems)} problem(s):[/]")
    for p in problems:
        err.print(f"  {p}", markup=False, highlight=False)


def emit_json(payload: Any) -> None:
    click.echo(json.dumps(payload, indent=2, default=str))


def human(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"
