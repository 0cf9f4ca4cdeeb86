"""The ``drill`` command: parse, call, print; one entry point keeps the exit-code contract.

:func:`main` (the installed ``drill`` script and ``python -m drillbit.cli``) runs the click
group without click's own exit handling and maps every way out to DESIGN.md's codes:
usage and config errors (anywhere they are found) 2, a harness error or bug 5 (never a
traceback on the terminal; it goes to ``$DRILLBIT_HOME/last-error.txt``), Ctrl-C at a
prompt 4; a command that ran drills returns its own code from :mod:`drillbit.exitcodes`.

Commands live in three modules: drills (run, report, validate, list, faults, probe plan),
suites (suite, gate, gameday, results, runbook) and fleet (cadence, simulate).
"""
from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

import click

from drillbit import exitcodes
from drillbit.cli.common import err, show_problems
from drillbit.errors import ConfigError, DrillError, SpecError


@click.group(name="drill")
@click.version_option(package_name="drillbit")
def cli() -> None:
    """drillbit: break a training job on purpose and judge its recovery."""


def _register() -> None:
    from drillbit.cli import campaign, compare, drills, fleet, probe, suites, sweep

    for module in (drills, fleet, probe, suites, campaign, sweep, compare):
        for command in module.COMMANDS:
            cli.add_command(command)


_register()


def _bug_report(exc: BaseException) -> Path:
    from drillbit.atomic import write_private
    from drillbit.statedir import private_dir

    try:
        path = private_dir(os.environ.get("DRILLBIT_HOME") or None) / "drillbit-last-error.txt"
        write_private(path, "".join(traceback.format_exception(exc)))
    except (OSError, DrillError):  # no folder of our own to write it to: the message still names the error
        return Path("(not written: no private state folder)")
    return path


def run_cli(argv: list[str] | None = None) -> int:
    """Run one ``drill`` command line; the exit code, whatever happened."""
    try:
        rv = cli.main(args=argv, prog_name="drill", standalone_mode=False)
        return rv if isinstance(rv, int) else exitcodes.PASS
    except click.exceptions.Exit as exc:  # --help, --version
        return exc.exit_code
    except click.exceptions.Abort:
        err.print("aborted")
        return exitcodes.ABORTED
    except click.ClickException as exc:  # a bad option or argument
        exc.show()
        return exitcodes.USAGE
    except SpecError as exc:
        show_problems(exc.problems)
        return exitcodes.USAGE
    except ConfigError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        return exitcodes.USAGE
    except DrillError as exc:
        err.print(f"[bold red]harness error:[/] {exc}", highlight=False)
        return exitcodes.HARNESS
    except KeyboardInterrupt:
        err.print("interrupted")
        return exitcodes.ABORTED
    except Exception as exc:  # a bug in drillbit: one line here, the traceback in a file
        where = _bug_report(exc)
        err.print(f"[bold red]harness error (a drillbit bug):[/] {exc.__class__.__name__}: {exc} "
                  f"[dim](traceback in {where})[/]", highlight=False)
        return exitcodes.HARNESS


def main(argv: list[str] | None = None) -> None:
    sys.exit(run_cli(argv))
