"""``drill suite run | gate | gameday run | results | runbook``: many drills, and their record."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import click

from drillbit.judging import exitcodes
from drillbit.entry.cli.common import (drills_option, emit_json, err, json_option, listing, out, pushgateway_option,
                                       wait_option)
from drillbit.faults.loading import load_config
from drillbit.judging.report.console import ConsoleUI
from drillbit.judging.report import multirun
from drillbit.core.runfolder import new_folder
from drillbit.spec.load import find_config


def _suite_run(name: str, cluster: str | None, job: str | None, config_path: str | None, reports_dir: str | None,
               db: str | None, max_regression: float | None, before: Callable | None = None,
               after: Callable | None = None, confirm: int | None = None):
    from drillbit.spec.load import load_suite
    from drillbit.runs.suite import run_suite

    config = load_config(find_config(config_path))
    spec = load_suite(name, config)
    with ConsoleUI(err) as ui:
        return run_suite(spec, cluster=cluster, job=job, config_path=config_path,
                         reports_dir=reports_dir or config.reports_dir, db=db, ui=ui,
                         max_regression=max_regression, confirm=confirm, before=before, after=after), config


_suite_options = [
    click.option("--cluster", help="cluster name (default: the suite's, else local; env DRILLBIT_CLUSTER)"),
    click.option("--job", help="job profile for every drill (default: the suite's / each drill's)"),
    click.option("--config", "config_path", help="drill.yaml path"),
    click.option("--reports", "reports_dir", help="where run folders go"),
    click.option("--db", help="results store (default: <reports>/drills.db)"),
    drills_option,
    wait_option,
    pushgateway_option,
    json_option,
]


def suite_options(f):
    for option in reversed(_suite_options):
        f = option(f)
    return f


def _suite_json(run: Any, **extra: Any) -> dict[str, Any]:
    return {"suite": run.suite.name, "cluster": run.cluster, "verdict": run.verdict, "exit_code": run.exit_code,
            "complete": run.complete, "skipped": run.skipped, "drills": run.results, **extra}


@click.group()
def suite() -> None:
    """Suites: ordered lists of drills (drills/suites/*.yaml)."""


@suite.command(name="run")
@click.argument("name")
@suite_options
def suite_run(name: str, cluster: str | None, job: str | None, config_path: str | None, reports_dir: str | None,
              db: str | None, as_json: bool) -> int:
    """Run every drill of a suite in order."""
    from drillbit.runs.suite import summary_markdown

    run, _ = _suite_run(name, cluster, job, config_path, reports_dir, db, None)
    if as_json:
        emit_json(_suite_json(run))
    else:
        out.print(summary_markdown(run, f"Suite {name}"), markup=False, highlight=False)
    return run.exit_code


@click.command()
@click.option("--suite", "suite_name", default="pre-deploy", show_default=True)
@suite_options
@click.option("--max-regression", type=float, help="allowed worsening of detect / first-step vs the baseline (0.2 = 20%)")
@click.option("--confirm", type=click.IntRange(0, 10), help="re-run a drill that fails on regression alone up to N "
              "times; it fails the gate only if every re-run regresses (default: the suite's confirm)")
@click.option("--junit", "junit_path", help="also write junit.xml here")
@click.option("--summary", "summary_path", help="append the Markdown summary here (e.g. $GITHUB_STEP_SUMMARY)")
def gate(suite_name: str, cluster: str | None, job: str | None, config_path: str | None, reports_dir: str | None,
         db: str | None, as_json: bool, max_regression: float | None, confirm: int | None, junit_path: str | None,
         summary_path: str | None) -> int:
    """The pre-deploy gate: run a suite, compare with the baselines, write junit + summary."""
    from drillbit.judging.report import junit
    from drillbit.runs.suite import summary_markdown, write_gate_outputs

    run, config = _suite_run(suite_name, cluster, job, config_path, reports_dir, db, max_regression, confirm=confirm)
    folder = write_gate_outputs(run, reports_dir or config.reports_dir)
    text = summary_markdown(run, "Recovery gate")
    if junit_path:
        Path(junit_path).write_text(junit.to_xml(f"drillbit.{run.suite.name}", run.results))
    if summary_path:
        with open(summary_path, "a") as fh:
            fh.write(text)
    if as_json:
        emit_json(_suite_json(run, outputs=str(folder)))
    else:
        out.print(text, markup=False, highlight=False)
        out.print(f"gate outputs: {folder}/junit.xml, {folder}/summary.md")
    return run.exit_code


@click.group()
def gameday() -> None:
    """Game days: a suite walked through with operators, and the post-drill review."""


@gameday.command(name="run")
@click.argument("name", default="game-day")
@suite_options
@click.option("--yes", "assume_yes", is_flag=True, help="run unattended: no confirmations")
def gameday_run(name: str, cluster: str | None, job: str | None, config_path: str | None, reports_dir: str | None,
                db: str | None, as_json: bool, assume_yes: bool) -> int:
    """Announce, confirm and run each drill of a suite; write review.md."""
    from drillbit.runs.gameday import Host, review_page

    host = Host(out, assume_yes)
    run, config = _suite_run(name, cluster, job, config_path, reports_dir, db, None, before=host.before,
                             after=host.after)
    folder = new_folder(reports_dir or config.reports_dir, Path(name).stem if name.endswith((".yaml", ".yml")) else name,
                        kind="gameday")
    multirun.write(folder, review_page(run, host.specs, run.run_dirs), md="review.md", html="review.html")
    if as_json:
        emit_json(_suite_json(run, review=str(folder / "review.md")))
    else:
        out.print(f"post-drill review: {folder}/review.md")
    return run.exit_code if run.results else exitcodes.PASS


@click.command()
@click.argument("drill", required=False)
@click.option("--db", help="results store (default: reports/drills.db)")
@click.option("--limit", type=click.IntRange(min=1), default=30, show_default=True)
@click.option("--html", "html_path", help="write a self-contained trends page here: one plot per drill and "
              "measurement, pass/fail marked, the baseline shaded")
@click.option("--openmetrics", is_flag=True, help="print every drill's latest result and its runs by verdict as "
              "OpenMetrics (what reports/metrics.prom holds, for a scrape or a file)")
@click.option("--backfill", is_flag=True, help="OpenMetrics of every run, each sample stamped with the time "
              "its run ended, for promtool tsdb create-blocks-from openmetrics")
@json_option
def results(drill: str | None, db: str | None, limit: int, html_path: str | None, openmetrics: bool,
            backfill: bool, as_json: bool) -> int:
    """Past runs from the results store: verdicts, detect / recover times, lost steps, goodput.
    (One run's own record of events is its history.jsonl; this is the trend across runs.)"""
    from drillbit.core.errors import ConfigError
    from drillbit.runs.store import Store, store_path

    from drillbit.core.errors import Problem, SpecError
    from drillbit.spec.load import suggest, catalogue

    path = store_path(load_config(find_config(None)), db=db)
    known = set(catalogue())
    if not path.exists():
        if drill and drill not in known:
            raise SpecError([Problem(drill, None, "", "no such drill" + suggest(drill, sorted(known), "drill list"))])
        raise ConfigError(f"no results store at {path} yet; run a drill first")
    with Store(path) as store:
        if drill and drill not in known and drill not in store.drill_names():
            raise SpecError([Problem(drill, None, "", "no such drill, and no run of that name in the store"
                                     + suggest(drill, sorted(known | set(store.drill_names())), "drill list"))])
        if openmetrics or backfill:
            from drillbit.judging.report import metrics

            sys.stdout.write(metrics.history(store, drill=drill) if backfill else
                             metrics.from_store(store, openmetrics=True, drill=drill))
            return exitcodes.PASS
        rows = store.runs(drill, limit)
        if html_path:
            from drillbit.core.atomic import write_atomic
            from drillbit.judging.report.trends import page, rows_with_measurements

            full = [r for r in rows_with_measurements(store, max(limit, 500)) if drill is None or r["drill"] == drill]
            write_atomic(Path(html_path), page(full))
            if not as_json:
                out.print(f"trends: {html_path} ({len(full)} run(s))", markup=False)
    if as_json:
        emit_json([dict(r) for r in rows])
        return exitcodes.PASS
    fmt = lambda v, spec: "—" if v is None else format(v, spec)  # noqa: E731
    table = listing(("id", "drill", "cluster", "job", "verdict", "started", "detect s", "first step s", "lost",
                     "goodput"),
                    [[str(row["id"]), row["drill"], row["cluster"], row["job"], row["verdict"],
                      (row["started_at"] or "")[:19], fmt(row["time_to_detect"], ".2f"),
                      fmt(row["time_to_first_step"], ".2f"), fmt(row["lost_steps"], "d"), fmt(row["goodput"], ".2f")]
                     for row in reversed(rows)],
                    right=("id", "detect s", "first step s", "lost", "goodput"))
    out.print(table)
    return exitcodes.PASS


# the old name, kept so that scripts written against it still work
history = click.Command("history", callback=results.callback, params=results.params, hidden=True,
                        help="Old name of `drill results`.")


@click.command()
@click.argument("name")
@click.option("--db", help="results store for the last result (default: reports/drills.db)")
@drills_option
def runbook(name: str, db: str | None) -> int:
    """Render a drill's runbook with its parameters and its last result."""
    from drillbit.faults.loading import load_drill
    from drillbit.judging.report.runbook import render_runbook
    from drillbit.runs.store import Store, store_path
    from drillbit.spec.load import resolve_drill

    config = load_config(find_config(None))
    spec = load_drill(resolve_drill(name), config)
    path = store_path(config, db=db)
    last = None
    if path.exists():
        with Store(path) as store:
            last = store.last_result(spec.name)
    click.echo(render_runbook(spec, last))
    return exitcodes.PASS


COMMANDS = [suite, gate, gameday, results, history, runbook]
