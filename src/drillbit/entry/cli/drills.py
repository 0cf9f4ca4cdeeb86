"""``drill run | report | validate | list | faults``: one drill, its folder, the catalogue."""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from drillbit.judging import exitcodes
from drillbit.entry.cli.common import (drills_option, emit_json, err, json_option, listing, out, problems_header,
                                 pushgateway_option, show_problems, wait_option)
from drillbit.core.errors import Problem, SpecError
from drillbit.judging.report.console import ConsoleUI, summary
from drillbit.spec.load import catalogue, find_config, read_yaml, unknown
from drillbit.faults.loading import config_warnings, load_config, load_drill
from drillbit.spec.config import DrillConfig


@click.command()
@click.argument("drill")
@click.option("--cluster", help="cluster name from drill.yaml (default: its default_cluster, else local; env DRILLBIT_CLUSTER)")
@click.option("--job", help="job profile (default: the drill's, else reference)")
@click.option("--config", "config_path", help="drill.yaml path (default: ./drill.yaml or $DRILLBIT_CONFIG)")
@drills_option
@click.option("--reports", "reports_dir", help="where run folders go (default: reports/)")
@click.option("--dry-run", is_flag=True, help="print the plan (the exact targets where they can be found) and stop")
@click.option("--repeat", type=click.IntRange(1, 1000), default=1, help="run the drill N times, a fresh job each "
              "time; it passes only if every run does (or --min-pass-rate)")
@click.option("--min-pass-rate", type=click.FloatRange(0, 1, min_open=True),
              help="with --repeat: the share of runs that must pass (above 0)")
@wait_option
@pushgateway_option
@json_option
def run(drill: str, cluster: str | None, job: str | None, config_path: str | None,
        reports_dir: str | None, dry_run: bool, repeat: int, min_pass_rate: float | None,
        as_json: bool) -> int:
    """Run one drill (a name from the catalogue, or a spec file)."""
    from drillbit.runs.graded import execute_drill as execute
    from drillbit.runs.session import plan_text, resolve

    resolved = resolve(drill, cluster=cluster, job=job, config_path=config_path)
    if dry_run:
        out.print(plan_text(resolved), markup=False, highlight=False)
        out.print("dry run: nothing was launched or touched")
        return exitcodes.PASS
    if repeat > 1 or min_pass_rate is not None:
        from drillbit.runs.repeat import run_repeated, summary_markdown

        with ConsoleUI(err) as ui:
            agg, folder = run_repeated(resolved, repeat, min_pass_rate=min_pass_rate, reports_dir=reports_dir, ui=ui)
        if as_json:
            emit_json({**agg, "folder": str(folder)})
        else:
            out.print(summary_markdown(agg), markup=False, highlight=False)
            out.print(f"runs and summary: {folder}", markup=False)
        return agg["exit_code"]
    with ConsoleUI(err) as ui:
        payload, outcome = execute(resolved, reports_dir=reports_dir, ui=ui)
    if as_json:
        emit_json(payload)
    else:
        summary(out, payload, str(outcome.run_dir))
    return payload["exit_code"]


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@json_option
def report(run_dir: str, as_json: bool) -> int:
    """Re-judge a run folder from its history (merging what the agents' dead-man's switches
    recorded there) and re-render result.json and the reports."""
    from drillbit.runs.graded import report_folder

    payload = report_folder(Path(run_dir))
    if as_json:
        emit_json(payload)
    elif "graded_report" in payload:  # a one-launch graded sweep's folder
        from drillbit.runs.graded import page  # noqa: F811

        out.print(page(payload["graded_report"]).markdown(), markup=False, highlight=False)
        out.print(f"wrote {run_dir}/graded.md, graded.html, graded.svg, graded.json", markup=False)
    else:
        summary(out, payload, run_dir)
        out.print(f"wrote {run_dir}/report.html, report.md, junit.xml, result.json")
    return payload["exit_code"]


def _is_config(path: Path) -> bool:
    """A drill.yaml, not a drill spec: its top level has config keys and no fault."""
    try:
        data, _ = read_yaml(path)
    except SpecError:
        return path.name in ("drill.yaml", "drill.yml")
    return isinstance(data, dict) and "fault" not in data and bool(set(data) & set(DrillConfig.model_fields))


@click.command()
@click.argument("files", nargs=-1, type=click.Path())
@click.option("--config", "config_path", help="drill.yaml to validate too")
@drills_option
@json_option
def validate(files: tuple[str, ...], config_path: str | None, as_json: bool) -> int:
    """Check drill specs (default: the whole catalogue) and drill.yaml; every error at once.
    A drill.yaml given as a file is checked as the config."""
    problems: list[Problem] = []
    configs = [Path(f) for f in files if Path(f).is_file() and _is_config(Path(f))]
    config_file = configs[0] if configs else find_config(config_path)
    try:
        config = load_config(config_file)
    except SpecError as exc:
        problems += exc.problems
        config = load_config(None)
    for extra in configs[1:]:
        try:
            load_config(extra)
        except SpecError as exc:
            problems += exc.problems
    warnings: list[Problem] = []
    for yaml_file in ([config_file] if config_file else []) + configs[1:]:
        with contextlib.suppress(SpecError):  # an unreadable file: its problems are said above
            warnings += config_warnings(yaml_file)
    known = catalogue()
    named = [f for f in files if Path(f) not in configs]
    paths = [Path(f) if Path(f).exists() or f not in known else known[f] for f in named]
    if not files:
        paths = list(known.values())
    for path in paths:
        if not path.is_file():
            what = "a directory, not a drill spec" if path.is_dir() else "no such file, and no drill of that name"
            problems.append(Problem(str(path), None, "", what))
            continue
        try:
            load_drill(path, config)
        except SpecError as exc:
            problems += exc.problems
    for warning in warnings:  # said, never refused: the exit code is the problems'
        err.print(f"[yellow]warning:[/] {escape(str(warning))}", highlight=False)
    if as_json:
        emit_json({"ok": not problems, "specs": [str(p) for p in paths], "config": str(config_file) if config_file else None,
                   "problems": [str(p) for p in problems], "warnings": [str(w) for w in warnings],
                   **({"error": problems_header(problems).rstrip(":"), "exit": exitcodes.USAGE} if problems else {})})
        if problems:
            show_problems(problems)
    elif problems:
        show_problems(problems)
    else:
        checked = f"{len(paths)} drill spec(s)" + (f" and {config_file}" if config_file else "")
        out.print(f"ok: {checked} valid")
    return exitcodes.USAGE if problems else exitcodes.PASS


@click.command(name="list")
@click.option("--suites", "what", flag_value="suites", help="the suites (drill suite run NAME, drill gate --suite NAME)")
@click.option("--jobs", "what", flag_value="jobs", help="the job profiles (--job NAME): drill.yaml's and the built-ins")
@click.option("--clusters", "what", flag_value="clusters", help="the clusters (--cluster NAME): drill.yaml's and the "
              "built-ins")
@click.option("--known-defects", "what", flag_value="defects", help="the published defects each drill of "
              "drills/known-defects/ reproduces: the stack and version, how, the evidence that names it, the fix drilled")
@click.option("--config", "config_path", help="drill.yaml path (default: ./drill.yaml or $DRILLBIT_CONFIG)")
@drills_option
@json_option
def list_(what: str | None, config_path: str | None, as_json: bool) -> int:
    """The drill catalogue (or, with a flag, the suites, job profiles, clusters or known defects)."""
    if what == "defects":
        return _list_defects(as_json)
    if what:
        return _list_names(what, config_path, as_json)
    specs, problems = _catalogue_specs()
    rows = [{"drill": name, "class": spec.class_, "fault": spec.fault.type, "summary": spec.summary}
            for name, spec in specs]
    if as_json:
        emit_json({"drills": rows, "problems": [str(p) for p in problems]})
    else:
        out.print(listing(("drill", "class", "fault", "summary"), [list(r.values()) for r in rows]))
        if problems:
            show_problems(problems)
    return exitcodes.USAGE if problems else exitcodes.PASS


def _catalogue_specs() -> tuple[list[tuple[str, Any]], list[Problem]]:
    """Every catalogue drill loaded, in order, and the problems of those that do not load."""
    specs, problems = [], []
    for name, path in catalogue().items():
        try:
            specs.append((name, load_drill(path)))
        except SpecError as exc:
            problems += exc.problems
    return specs, problems


def _list_defects(as_json: bool) -> int:
    """Every drill with a ``defect:`` block, in the catalogue's order; the evidence that names
    it (signature, check or mark) and the fixed profile drilled beside it."""
    specs, problems = _catalogue_specs()
    rows = []
    for name, spec in specs:
        d = spec.defect
        if d is None:
            continue
        evidence = (f"signature /{d.signature}/" if d.signature else f"check {d.check}" if d.check
                    else f"mark {d.mark}" if d.mark else "—")
        rows.append({"defect": d.id, "stack": d.stack, "reproduced": d.reproduced, "drill": name,
                     "affected": spec.job or "—", "evidence": evidence, "fixed": d.fixed or "no fix published",
                     "url": d.url, "title": d.title, "version": d.version, "mechanism": d.mechanism, "fix": d.fix})
    if as_json:
        emit_json({"defects": rows, "problems": [str(p) for p in problems]})
    else:
        columns = ("defect", "stack", "reproduced", "drill", "affected", "evidence", "fixed")
        out.print(listing(columns, [[str(r[c]).split(" (")[0] if c == "stack" else str(r[c]) for c in columns]
                                    for r in rows]))
        ids = {r["defect"] for r in rows}
        at_version = {r["defect"] for r in rows if r["reproduced"] == "at-version"}
        out.print(f"{len(ids)} published defects in {len(rows)} drills, {len(at_version)} reproduced at the stack's own "
                  "version; `drill compare --suite known-defects` drills the suite's, affected and fixed")
        if problems:
            show_problems(problems)
    return exitcodes.USAGE if problems else exitcodes.PASS


def _list_names(what: str, config_path: str | None, as_json: bool) -> int:
    from drillbit.spec.load import load_suite, suite_catalogue

    config = load_config(find_config(config_path))
    rows: list[list[str]] = []
    problems: list[Problem] = []
    if what == "suites":
        columns: tuple[str, ...] = ("suite", "drills", "file")
        for name, path in suite_catalogue().items():
            try:
                suite = load_suite(str(path), config)
            except SpecError as exc:
                problems += exc.problems
                continue
            rows.append([name, str(len(suite.entries())), str(path)])
    elif what == "jobs":
        columns = ("job", "launch")
        for name, job in sorted(config.jobs.items()):
            rows.append([name, " ".join(job.launch.command) if job.launch else f"attach to pid {job.attach_pid}"])
    else:
        columns = ("cluster", "engine", "nodes")
        for name, cluster in sorted(config.clusters.items()):
            rows.append([name, cluster.engine, str(getattr(cluster, "nodes", None) or "")])
    if as_json:
        emit_json({what: [dict(zip(columns, r, strict=False)) for r in rows], "problems": [str(p) for p in problems]})
    else:
        out.print(listing(columns, rows))
        if problems:
            show_problems(problems)
    return exitcodes.USAGE if problems else exitcodes.PASS


@click.command()
@json_option
def faults(as_json: bool) -> int:
    """The failure catalogue, grouped by class, with real-world rates and sources."""
    from drillbit.faults.catalogue import by_class, load_catalogue

    entries = load_catalogue()
    groups = by_class(entries)
    if as_json:
        emit_json({cls: [e.model_dump() for e in members] for cls, members in groups.items()})
        return exitcodes.PASS
    for cls, members in groups.items():
        out.print(f"[bold]{cls}[/]" + ("" if members else "  [dim](none yet)[/]"))
        for e in members:
            out.print(f"  [bold cyan]{e.name}[/] — {e.models}")
            for rate in e.rates:
                out.print(f"      {rate.what}: {rate.value}  [dim]({rate.source})[/]")
            out.print(f"      [dim]confirm:[/] {e.confirm}\n      [dim]heal:[/] {e.heal}\n"
                      f"      [dim]drill:[/] drill run {e.drill}   [dim]runbook:[/] drill runbook {e.drill}")
    return exitcodes.PASS


@click.command()
@click.argument("run_dir", required=False, type=click.Path(exists=True, file_okay=False))
@click.option("--cluster", help="every run folder of this cluster under --reports that still holds a fault")
@click.option("--reports", "reports_dir", help="where run folders are (default: reports/)")
@click.option("--force", is_flag=True, help="heal even where the drill's controller still seems to run")
@click.option("--abandon", metavar="REASON", help="give the faults up instead of healing them (you will undo them "
              "by hand): recorded with REASON, and no dead-man's switch retries them")
@json_option
def heal(run_dir: str | None, cluster: str | None, reports_dir: str | None, force: bool, abandon: str | None,
         as_json: bool) -> int:
    """Undo what a half-finished drill left: read every agent registry in the run folder,
    heal what is still active, stop a job it launched, and record it in the history. With
    --cluster, each node heals its own registries where they are: over SSH (engine ssh),
    by a task pinned to each node (a running Ray cluster). A registry written on another
    host is left alone, naming it."""
    from drillbit.agent.leftovers import Leftover, heal_folder
    from drillbit.core import trust
    from drillbit.core.errors import ConfigError
    from drillbit.runs.session import merge_deadman_records
    from drillbit.transport import heal_where_written
    from drillbit.transport.netcluster import sweep

    if (run_dir is None) == (cluster is None):
        raise ConfigError("give a run folder or --cluster NAME (one of them)")
    if abandon is not None and not abandon.strip():
        raise ConfigError("--abandon needs a reason (it is recorded with the faults given up)")
    folders, ours, looked, entry = _heal_targets(run_dir, cluster, reports_dir)
    done: list[Leftover] = []
    unreached: list[str] = []
    healed_there = False
    if entry is not None:  # the registries may be where the engine keeps them: heal there
        remote, unreached, healed_there = heal_where_written(cluster or "", entry, ours, force=force, abandon=abandon)
        done += [Leftover.model_validate(d) for d in remote]
    refused: list[str] = []
    for folder in folders:
        if not healed_there:
            done += heal_folder(folder, force, abandon)
        if (folder / "history.jsonl").exists() and (folder / "spec.json").exists():
            from drillbit.core.history import History

            try:  # a run folder root must not write in keeps its history as it is (#57)
                trust.check(folder, "run folder")
                merge_deadman_records(folder, History.load(folder / "history.jsonl"))
            except (ConfigError, OSError, ValueError) as exc:  # ValueError: a line that is not an event
                refused.append(f"{folder}: its history was not merged: {exc}")
    # a namespace cluster whose controller and reaper were both killed: its namespaces go too
    swept = sweep() if os.geteuid() == 0 else []
    if as_json:
        emit_json([d.model_dump() for d in done] + [{"node": u.split(":", 1)[0], "unreached": u} for u in unreached])
    else:
        _show_healed(done, unreached, swept, looked, abandon, len(folders))
    for why in refused:
        err.print(f"[red]error:[/] {escape(why)}", highlight=False)
    return max(_heal_exit(done, unreached), exitcodes.USAGE if refused else exitcodes.PASS)


def _heal_targets(run_dir: str | None, cluster: str | None,
                  reports_dir: str | None) -> tuple[list[Path], list[Path], str, Any]:
    """The run folders to heal (with a registry), every run folder of the cluster, what was
    looked at (in words), and the cluster's entry (None for one run folder)."""
    from drillbit.agent.leftovers import registries
    from drillbit.core import trust
    from drillbit.core.errors import ConfigError
    from drillbit.core.paths import entered_path
    from drillbit.transport import registries_on_hosts

    if run_dir is not None:
        folder = entered_path(run_dir)
        return [folder], [], f"looked in {folder}: {len(registries(folder))} registr(ies)", None
    config = load_config(find_config(None))
    if cluster not in config.clusters:  # never "nothing left" for a name that means nothing
        raise SpecError([unknown("--cluster", "cluster", cluster or "", list(config.clusters), "drill list --clusters")])
    base = entered_path(reports_dir or config.reports_dir)
    entry = config.clusters[cluster or ""]
    if not base.is_dir() and not registries_on_hosts(entry):  # they may be on the hosts, not here
        raise ConfigError(f"--reports: {base} is not a folder: no run folder was looked at (give the reports "
                          "folder the drills wrote, or the run folder itself)")
    if base.is_dir():
        trust.check(os.path.abspath(reports_dir or config.reports_dir), "reports folder")
    ours = [d for d in sorted(base.glob("*")) if d.is_dir() and _cluster_of(d) == cluster] if base.is_dir() else []
    folders = [d for d in ours if registries(d)]
    looked = f"looked in {base}: {len(ours)} run folder(s) of cluster {cluster!r}, {len(folders)} with a registry"
    return folders, ours, looked, entry


def _show_healed(done: list, unreached: list[str], swept: list[str], looked: str, abandon: str | None,
                 folders: int) -> None:
    for what in unreached:
        err.print(f"[red]could not reach {what}[/]; its faults are where they were")
    for d in done:
        if d.skipped:
            out.print(f"{d.node}: skipped — {d.skipped}")
            continue
        for what in d.healed:
            out.print(f"{d.node}: healed {what}")
        for what in d.failed:
            err.print(f"[red]{d.node}: NOT healed[/] {what}")
        for what in d.abandoned:
            err.print(f"[yellow]{d.node}: abandoned[/] {what} ({abandon}); undo it by hand")
        if d.job_stopped:
            out.print(f"{d.node}: stopped the job the drill had launched")
    for ns in swept:
        out.print(f"removed network namespace {ns} (its drill's controller is gone)")
    if looked:
        out.print(looked, markup=False)
    if not unreached and not swept and not any(d.healed or d.failed or d.job_stopped or d.abandoned or d.skipped
                                               for d in done):
        out.print(f"nothing left in place in {folders} run folder(s)")


def _heal_exit(done: list, unreached: list[str]) -> int:
    from drillbit.agent.leftovers import UNTRUSTED

    if any(d.failed for d in done) or unreached:
        return exitcodes.HARNESS
    # a registry of another host was not reached: run it there (its faults are still in place); one not
    # trusted was not obeyed: whatever it names is as it was
    return exitcodes.USAGE if any(d.skipped and ("written on host" in d.skipped or d.skipped.startswith(UNTRUSTED))
                                  for d in done) else exitcodes.PASS


def _cluster_of(folder: Path) -> str | None:
    from drillbit.core.trust import open_file

    try:
        with os.fdopen(open_file(folder / "history.jsonl"), encoding="utf-8") as fh:
            first = fh.readline()
        return json.loads(first)["data"].get("cluster")
    except (OSError, ValueError, KeyError):
        return None


COMMANDS = [run, report, validate, list_, faults, heal]
__all__ = ["COMMANDS", "json"]
