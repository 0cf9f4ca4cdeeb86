"""One drill invocation: resolve spec, cluster and job, run the loop, write the outputs.

This is what ``drill run`` and the tests call; the CLI only parses and prints.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drillbit.agent.deadman import read_records
from drillbit.core.atomic import write_atomic
from drillbit.core import trust
from drillbit.judging import exitcodes
from drillbit.judging.checks import CheckResult, check
from drillbit.judging.checks.baseline import Baseline
from drillbit.judging.checks.predict import predict
from drillbit.core.errors import ConfigError, DrillError, Stopped
from drillbit.faults import get as get_fault
from drillbit.faults.base import PlanStep
from drillbit.judging.fleet.simulate import Scenario, load_scenario
from drillbit.core.history import Event, History
from drillbit.faults.loading import load_config, load_drill
from drillbit.loop import UI, DrillRunner, RunOutcome
from drillbit.loop.runner import job_params
from drillbit.loop.schedule import choose_targets, describe_trigger
from drillbit.judging.report import metrics, render
from drillbit.runs import notify, twin
from drillbit.judging.report import result as result_json
from drillbit.runs.store import Store, store_path
from drillbit.core.runfolder import new_folder
from drillbit.spec.config import DrillConfig, ProcessCluster, RayCluster
from drillbit.spec.load import choose, find_config, resolve_drill
from drillbit.spec.models import DrillSpec
from drillbit.transport import connect, node_netns
from drillbit.transport.nodes import refuse_shared_network


@dataclass
class Resolved:
    spec: DrillSpec
    config: DrillConfig
    cluster: str
    job: str


def resolve(drill: str, *, cluster: str | None = None, job: str | None = None, config_path: str | None = None,
            drills_dir: str | None = None) -> Resolved:
    config = load_config(find_config(config_path))
    spec = load_drill(resolve_drill(drill, drills_dir), config)
    job_name = job or spec.job or config.default_job
    cluster_name = choose(config, cluster, job_name)
    return Resolved(spec=spec, config=config, cluster=cluster_name, job=job_name)


def plan_text(r: Resolved) -> str:
    """What --dry-run prints; a config error (exit 2) where the cluster cannot take the fault."""
    refuse_shared_network(r.spec.fault.type, node_netns(r.config.clusters[r.cluster]), r.cluster)
    s = r.spec
    when = describe_trigger(s.fault.trigger)
    tg = s.fault.targets
    who = f"ranks {tg.ranks}" if tg.ranks is not None else f"{tg.count} rank(s), {tg.select}"
    slo = ", ".join(f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={json.dumps(v)}"
                    for k, v in s.slo.model_dump(exclude_none=True).items() if v not in ({}, []))
    job = r.config.jobs[r.job]
    launch = " ".join(job.launch.command) if job.launch else f"attach to pid {job.attach_pid}"
    cluster = r.config.clusters[r.cluster]
    shape = ""
    if isinstance(cluster, (ProcessCluster, RayCluster)):
        shape = (f", {cluster.nodes or 2} nodes that are network namespaces (10.77.0.x)" if cluster.topology == "netns"
                 else "") + (f", hostnames on a frontend of {cluster.frontend_mbit:g} Mbit/s (10.78.0.x, eth1)"
                             if cluster.frontend_mbit else "")
    return "\n".join([
        f"drill     {s.name} ({s.class_}): {s.summary}",
        f"cluster   {r.cluster} ({cluster.engine}{shape})",
        f"job       {r.job}: {launch}",
        f"steady    {s.steady.warmup_steps} steps",
        f"fault     {s.fault.type} {s.fault.params or ''} on {who}, "
        + (f"{s.grade.param} at {', '.join(str(v) for v in s.grade.levels)}, {s.grade.repeats} repeat(s) a level, "
           + (f"each a segment of one launch after {s.grade.gap:g} s with no fault on" if s.grade.one_launch
              else "each its own launch") if s.grade else when),
        f"observe   until {s.observe.until_steps_after_recovery} steps after recovery, window {s.observe.window:g} s"
        + (f", at least {s.observe.at_least:g} s" if s.observe.at_least else ""),
        f"slo       {slo or '(none)'}",
        f"abort     after {s.abort.max_duration:g} s",
    ] + _rules_text(r) + _predicted_text(r) + _steps_text(resolve_steps(r)))


def _rules_text(r: Resolved) -> list[str]:
    """What the fault loads or runs on the target's node (a network fault's table, the
    control plane it takes away), its params bound to the job profile as the drill binds them."""
    fault = get_fault(r.spec.fault.type)
    lines = fault.plan_lines(job_params(r.spec, r.config.jobs[r.job], Path("{run_dir}")))
    return [("rules     " if i == 0 else "          ") + line for i, line in enumerate(lines)]


def _predicted_text(r: Resolved) -> list[str]:
    """Detection predicted from the job's declared timeouts, and the SLOs it decides."""
    fault = get_fault(r.spec.fault.type)
    p = predict(fault.seen_by(job_params(r.spec, r.config.jobs[r.job], Path("{run_dir}"))), fault.verb,
                r.config.jobs[r.job].timeouts, r.spec.slo)
    if p is None:
        return ["predicted (declare the job's timeouts: in its profile to predict detection)"]
    head = ("never detected by a timeout" if p.never else "unknown" if p.detect_s is None
            else f"detected within {p.detect_s:g} s by {p.by}")
    lines = [f"predicted {head}: {p.why}"]
    lines += [f"          {s.name} ({s.limit:g} s) will {s.status}" for s in p.slos]
    lines += [f"warning   {w}" for w in p.warnings]
    return lines


def resolve_steps(r: Resolved) -> list[PlanStep] | str:
    """The exact processes and files the fault would touch, found by the agents without
    touching anything — possible when the job is already running (attach_pid); a job the
    drill launches has no ranks yet, so say how they will be chosen."""
    job = r.config.jobs[r.job]
    if job.attach_pid is None:
        return "targets are resolved after launch (the job's ranks do not exist yet)"
    cluster = r.config.clusters[r.cluster]
    if cluster.engine == "ray" and cluster.address is None:
        return "targets are resolved once the embedded cluster is up (a dry run starts nothing)"
    import tempfile

    with tempfile.TemporaryDirectory(prefix="drillbit-plan-") as tmp:
        nodes = connect(r.cluster, r.config.clusters[r.cluster], Path(tmp))
        try:
            nodes.clients = nodes.connect()
            for client in nodes.clients.values():
                client.handshake()
            attach = nodes.attach_root(job.attach_pid, job.attach_start_time)
            fault = get_fault(r.spec.fault.type)
            bound = job_params(r.spec, job, Path(tmp), nodes.node_launch_values())
            targets = choose_targets(nodes, job, r.spec, attach, type(fault).max_targets,
                                     on_nodes=fault.target_nodes(bound))
            params = bound.model_dump()
            return [nodes.plan(r.spec.fault.type, t, params) for t in targets]
        except DrillError as exc:
            return f"targets not resolved: {exc}"
        finally:
            nodes.close()


def _steps_text(steps: list[PlanStep] | str) -> list[str]:
    if isinstance(steps, str):
        return [f"targets   {steps}"]
    lines = []
    for step in steps:
        lines.append(f"target    node {step.node} pid {step.pid} rank {step.rank}: {step.cmdline}")
        lines.append(f"          {step.action}" + (f"; files: {', '.join(step.files)}" if step.files else ""))
    return lines


def new_run_dir(reports: Path, drill: str) -> Path:
    return new_folder(reports, drill)


def scenarios_for(spec: DrillSpec) -> dict[str, Scenario]:
    names = {s.scenario for s in (spec.slo.project, spec.slo.cadence) if s is not None and s.scenario}
    return {name: load_scenario(name) for name in names}


def publish(run_dir: Path, spec: DrillSpec, cluster: str, job: str, params: dict, history: History,
            result: CheckResult, error: str | None, baseline_run: int | None,
            error_kind: str | None = None) -> dict[str, Any]:
    """Build result.json and write every report of a run folder."""
    payload = result_json.build(drill=spec.name, cluster=cluster, job=job, fault_type=spec.fault.type,
                                params=params, history=history, result=result, error=error, error_kind=error_kind,
                                baseline_run=baseline_run)
    render.write_all(run_dir, payload, history)
    return payload


def execute(r: Resolved, *, reports_dir: str | None = None, db: str | None = None,
            ui: UI | None = None, pushgateway: str | None = None) -> tuple[dict[str, Any], RunOutcome]:
    """Run one drill and publish it: its run folder, the webhooks, and (a verdict only) a row of
    the results store and the metrics. A drill refused with exit 2 (a config error found by the
    loop, a file another drill claims) reached no verdict: its run folder and the webhooks say
    why, and the store and the metrics do not count it (before #57 it was recorded as aborted
    and fed the aborted figures)."""
    reports = Path(reports_dir or r.config.reports_dir)
    trust.check(reports, "reports folder")  # said as such before the store in it is opened
    with Store(store_path(r.config, reports_dir, db)) as store:
        run_dir = new_run_dir(reports, r.spec.name)
        (run_dir / "spec.json").write_text(r.spec.model_dump_json(by_alias=True, indent=2))
        found = store.baseline(r.spec.name, r.cluster, r.job)
        if found:
            (run_dir / "baseline.json").write_text(json.dumps(found.to_json()))
        cluster = r.config.clusters[r.cluster]
        runner = DrillRunner(r.spec, r.cluster, cluster, r.job, r.config.jobs[r.job], run_dir, ui,
                             nodes=connect(r.cluster, cluster, run_dir), baseline=found,
                             scenarios=scenarios_for(r.spec))
        outcome = runner.run()
        refuse_unstarted(outcome, run_dir, r.cluster)
        if twin.wanted(outcome, r.spec):  # matches_uninterrupted: the same job once more, without the fault
            outcome = twin.add_uninterrupted(r, runner, outcome, ui)
        payload = publish(run_dir, r.spec, r.cluster, r.job, runner.params.model_dump(), outcome.history,
                          outcome.result, outcome.error, found.runs[0] if found else None, outcome.error_kind)
        if payload["exit_code"] != exitcodes.USAGE:  # a refusal is no verdict: no row, no figure
            store.record(payload, str(run_dir))
            publish_metrics(run_dir.parent, store, pushgateway or os.environ.get("DRILLBIT_PUSHGATEWAY"))
    for sent in notify.notify_all(r.config.notify, payload, run_dir):
        if not sent.get("sent"):
            print(f"drillbit: the webhook at {sent['host']} was not told of {r.spec.name}'s {payload['verdict']}: "
                  f"{sent.get('error')}", file=sys.stderr)
    return payload, outcome


def refuse_unstarted(outcome: RunOutcome, run_dir: Path, cluster: str) -> None:
    """A drill that never held the cluster touched nothing there: no run folder, no row of an
    aborted drill. Busy (another drill holds the lease, and no ``--wait`` outlasted it): a
    ConfigError, exit 2, naming the holder. Stopped by the operator before it took the lease
    (while it waited for it): Stopped, exit 4."""
    if outcome.error_kind == "busy":
        shutil.rmtree(run_dir, ignore_errors=True)
        raise ConfigError(f"{outcome.error}; nothing was started (run it once that drill is done)")
    if not outcome.leased and outcome.error_kind is None and outcome.result.verdict == "aborted":
        shutil.rmtree(run_dir, ignore_errors=True)
        abort = outcome.history.last("abort")
        why = abort.data.get("reason", "stopped") if abort is not None else "stopped"
        raise Stopped(f"{why} before the drill took cluster {cluster!r}: nothing was started")


def publish_metrics(reports: Path, store: Store, pushgateway: str | None = None) -> None:
    """reports/metrics.prom for node-exporter's textfile collector, rewritten whole after
    every run; and the same to a Pushgateway when one is named. Neither ever changes a
    verdict: a failure is said on stderr and left at that."""
    try:
        metrics.write_textfile(reports / "metrics.prom", store)
    except OSError as exc:
        print(f"drillbit: could not write {reports / 'metrics.prom'}: {exc}", file=sys.stderr)
    if pushgateway:
        why = metrics.push_quietly(pushgateway, metrics.from_store(store))
        if why:
            print(f"drillbit: the Pushgateway did not take the metrics: {why}", file=sys.stderr)


def rerender(run_dir: Path) -> dict[str, Any]:
    """Re-judge and re-render a run folder from its history (``drill report``); one root must
    not write in (another user's, or in a folder another user can change) is refused, exit 2,
    before anything in it is read."""

    run_dir = Path(run_dir)
    trust.check(run_dir, "run folder")
    try:
        spec = DrillSpec.model_validate_json(read_file(run_dir / "spec.json"))
        history = History.load(run_dir / "history.jsonl")
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{run_dir} is not a run folder: {exc}") from exc
    unreadable = history.unreadable()
    if unreadable:
        e, problem = unreadable[0]
        raise ConfigError(f"{run_dir}: its history.jsonl was written by another version of drillbit: {len(unreadable)} "
                          f"event(s) do not read as this version's (line {e.seq + 1}, {e.kind}: {problem}); run the "
                          f"drill again, or report it with the drillbit that wrote it")
    merge_deadman_records(run_dir, history)
    if history.first("graded.start") is not None:  # a one-launch graded sweep (runs/graded.py judges it)
        raise ConfigError(f"{run_dir} is a one-launch graded sweep's folder: its report is judged by "
                          "runs/graded.py's report_folder (drill report does that)")
    baseline = None
    if (run_dir / "baseline.json").exists():
        baseline = Baseline.from_json(json.loads(read_file(run_dir / "baseline.json")))
    result = check(spec, history, baseline=baseline, scenarios=scenarios_for(spec))
    start = history.first("drill.start")
    if start is None:
        raise DrillError(f"{run_dir}: its history has no drill.start; it is not a drill's run folder")
    end = history.last("drill.end")
    inject = history.first("fault.inject")  # the params the drill really used (paths filled in)
    params = inject.data.get("params", spec.fault.params) if inject else spec.fault.params
    return publish(run_dir, spec, start.data["cluster"], start.data["job"], params, history, result,
                   end.data.get("error") if end else None, baseline.runs[0] if baseline else None,
                   end.data.get("error_kind") if end else None)


def read_file(path: Path) -> str:
    """A run's file, read without following a link at its name (OSError for a link, a FIFO, a
    folder)."""
    with os.fdopen(trust.open_file(path), encoding="utf-8") as fh:
        return fh.read()


def merge_deadman_records(run_dir: Path, history: History) -> int:
    """Append to ``history.jsonl`` what the agents' dead-man's switches wrote in the run
    folder and the history does not hold yet (the controller died before it could collect
    them). Returns how many were added. The history is rewritten only in a run folder root may
    write in (ConfigError, exit 2, otherwise), through the folder opened once: a folder swapped
    meanwhile is not written."""

    seen = {(e.kind, e.node, round(e.t, 6)) for e in history if e.source.startswith("agent:")}
    with trust.folder(run_dir, "run folder") as folder:
        added = []
        for path in sorted(run_dir.glob("agent-*.deadman.jsonl")):
            for rec in read_records(folder.path / path.name):
                if (rec.kind, rec.node, round(rec.t, 6)) not in seen:
                    added.append(rec)
        if not added:
            return 0
        for rec in sorted(added, key=lambda r: r.t):
            history.append(Event(seq=len(history), t=rec.t, source=f"agent:{rec.node}", kind=rec.kind, node=rec.node,
                                 rank=rec.rank, data=rec.data))
        # rewritten whole, atomically (a torn last line goes too), in the folder that was checked
        write_atomic("history.jsonl", "".join(e.model_dump_json() + "\n" for e in history), dir_fd=folder.fd)
    return len(added)


__all__ = ["DrillError", "Resolved", "execute", "plan_text", "resolve"]
