"""The ``drill`` command: parse, call, print; one entry point keeps the exit-code contract.

:func:`main` (the installed ``drill`` script and ``python -m drillbit.entry.cli``) runs the click
group without click's own exit handling and maps every way out to DESIGN.md's codes:
usage and config errors (anywhere they are found) and a cluster another drill holds 2, a
harness error or bug 5 (never a traceback on the terminal; it goes to
``$DRILLBIT_HOME/last-error.txt``), Ctrl-C at a prompt or while waiting for the cluster 4;
a command that ran drills returns its own code from :mod:`drillbit.judging.exitcodes`.

Commands live in three modules: drills (run, report, validate, list, faults, probe plan),
suites (suite, gate, gameday, results, runbook) and fleet (cadence, simulate).
"""
from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

import click

from drillbit.judging import exitcodes
from drillbit.entry.cli.common import emit_json, problems_header, show_error
from drillbit.core.errors import ConfigError, DrillError, SpecError, Stopped
from drillbit.core.lease import LEASE_WAIT
from drillbit.spec.load import EXTRA_DRILLS


@click.group(name="drill", context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="drillbit")
def cli() -> None:
    """drillbit: break a training job on purpose and judge its recovery."""


def _register() -> None:
    from drillbit.entry.cli import campaign, compare, drills, fleet, probe, suites, sweep

    for module in (drills, fleet, probe, suites, campaign, sweep, compare):
        for command in module.COMMANDS:
            cli.add_command(command)


_register()


def _bug_report(exc: BaseException) -> Path:
    from drillbit.core.atomic import write_private
    from drillbit.core.statedir import private_dir

    try:
        path = private_dir(os.environ.get("DRILLBIT_HOME") or None) / "drillbit-last-error.txt"
        write_private(path, "".join(traceback.format_exception(exc)))
    except (OSError, DrillError):  # no folder of our own to write it to: the message still names the error
        return Path("(not written: no private state folder)")
    return path


def _wants_json(argv: list[str]) -> bool:
    return "--json" in argv[: argv.index("--")] if "--" in argv else "--json" in argv


def _fail(code: int, message: str, as_json: bool, problems: list | None = None, hint: str | None = None) -> int:
    """One error style on stderr; with ``--json`` also one JSON object on stdout."""
    show_error(message, problems, hint)
    if as_json:
        text = message.rstrip(":") + (f": {problems[0]}" if problems and len(problems) == 1 else "")
        emit_json({"error": text, "exit": code, "problems": [str(p) for p in problems or []]})
    return code


def run_cli(argv: list[str] | None = None) -> int:
    """Run one ``drill`` command line; the exit code, whatever happened."""
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = _wants_json(argv)
    # what options set for this command line only (a test or a program may call this twice)
    drills_token = EXTRA_DRILLS.set(None)
    wait_token = LEASE_WAIT.set(None)
    pushgateway = os.environ.get("DRILLBIT_PUSHGATEWAY")
    try:
        return _run(argv, as_json)
    finally:
        EXTRA_DRILLS.reset(drills_token)
        LEASE_WAIT.reset(wait_token)
        if pushgateway is None:
            os.environ.pop("DRILLBIT_PUSHGATEWAY", None)
        else:
            os.environ["DRILLBIT_PUSHGATEWAY"] = pushgateway


def _run(argv: list[str], as_json: bool) -> int:
    try:
        rv = cli.main(args=argv, prog_name="drill", standalone_mode=False)
        return rv if isinstance(rv, int) else exitcodes.PASS
    except click.exceptions.Exit as exc:  # --help, --version
        return exc.exit_code
    except click.exceptions.Abort:
        return _fail(exitcodes.ABORTED, "aborted", as_json)
    except click.ClickException as exc:  # a bad option or argument
        ctx = getattr(exc, "ctx", None)
        hint = f"see '{ctx.command_path} --help'" if ctx is not None else "see 'drill --help'"
        return _fail(exitcodes.USAGE, exc.format_message(), as_json, hint=hint)
    except SpecError as exc:
        return _fail(exitcodes.USAGE, problems_header(exc.problems), as_json, exc.problems)
    except ConfigError as exc:  # a busy cluster too (LeaseError): naming who holds it
        return _fail(exitcodes.USAGE, str(exc), as_json)
    except Stopped as exc:  # Ctrl-C before the command took the cluster: nothing was started
        return _fail(exitcodes.ABORTED, str(exc), as_json)
    except DrillError as exc:
        return _fail(exitcodes.HARNESS, f"harness: {exc}", as_json)
    except KeyboardInterrupt:
        return _fail(exitcodes.ABORTED, "interrupted", as_json)
    except Exception as exc:  # a bug in drillbit: one line here, the traceback in a file
        where = _bug_report(exc)
        return _fail(exitcodes.HARNESS, f"a drillbit bug: {exc.__class__.__name__}: {exc} (traceback in {where})",
                     as_json)


def main(argv: list[str] | None = None) -> None:
    sys.exit(run_cli(argv))
