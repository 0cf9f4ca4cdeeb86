"""The uninterrupted run of matches_uninterrupted (issue 59): after a drill whose spec asks
for it, the same job (the same profile, so the same seed and command) launched once more on
the same cluster, with no fault, until it makes the last step the drill saw; its step lines
are recorded into the drill's history as ``uninterrupted.step`` events, and the drill is
judged again with them (judging/checks/twin.py compares the two runs step by step).

The uninterrupted run has a folder of its own, ``uninterrupted/`` in the drill's: a job
whose checkpoint folder is under ``{run_dir}`` starts from nothing there. One that restores
a checkpoint anyway (a folder outside the run's) is recorded as such, and the comparison
says unknown."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from drillbit.core.events import Step
from drillbit.core.history import History
from drillbit.judging.checks import check
from drillbit.judging.checks.twin import first_restore, twin_steps_of
from drillbit.loop import DrillRunner, RunOutcome
from drillbit.loop.nemesis import HARNESS
from drillbit.transport import connect


class UntilStep:
    """The uninterrupted run's one 'fault': never due; it waits until the job has made
    ``until`` steps (or ended), and the run then stops the job."""

    label = ""

    def __init__(self, spec, until: int) -> None:
        self.spec, self.until = spec, until

    def due(self, runner: DrillRunner) -> bool:
        runner.ui.phase("uninterrupted", f"the same job without the fault, to step {self.until}")
        while reached(runner.history) < self.until and runner.job_ended() is None:
            runner.ui.status(f"uninterrupted: step {reached(runner.history)} of {self.until}")
            runner.tick(0.2)
        return False

    def watch(self, runner: DrillRunner) -> None:  # never due: nothing to watch
        return None

    def settle(self, runner: DrillRunner, confirmed: bool) -> None:
        return None


def reached(history) -> int:
    return max((Step.of(e).n for e in history.of("step")), default=0)


def wanted(outcome: RunOutcome, spec) -> bool:
    """A drill that asks for it, that held the cluster and reached its end by itself (not a
    config error, not stopped by the operator)."""
    if spec.slo.matches_uninterrupted is None or not outcome.leased:
        return False
    if outcome.error_kind in ("config", "busy") or outcome.result.verdict == "aborted":
        return False
    return outcome.history.first("interrupt.held") is None and outcome.history.first("step") is not None


def add_uninterrupted(resolved, runner: DrillRunner, outcome: RunOutcome, ui=None) -> RunOutcome:
    """Make the uninterrupted run, record its steps into the drill's history, judge again."""
    until = reached(outcome.history)
    folder = outcome.run_dir / "uninterrupted"
    folder.mkdir(exist_ok=True)
    cluster = resolved.config.clusters[resolved.cluster]
    twin = DrillRunner(resolved.spec, resolved.cluster, cluster, resolved.job, resolved.config.jobs[resolved.job],
                       folder, ui, nodes=connect(resolved.cluster, cluster, folder))
    error = None
    try:
        done = twin.run(lambda _runner: [UntilStep(resolved.spec, until)])
        events = list(done.history)
        error = done.error
    except Exception as exc:  # noqa: BLE001 — the drill's verdict stands; the comparison says why it is unknown
        events, error = list(twin.history), f"{exc.__class__.__name__}: {exc}"
    got = reached(History(events=events))
    if error is None and got < until:
        exit_ = next((e for e in events if e.kind == "job.exit"), None)
        error = (f"it reached step {got} of {until}"
                 + (f": the job exited (code {exit_.data.get('code')})" if exit_ is not None else ""))
    restored, restored_from = first_restore(events)
    # the operator stopped it: the drill is aborted (exit 4), as a Ctrl-C in the drill itself is
    stopped = next((str(e.data.get("reason")) for e in events if e.kind == "abort"
                    and str(e.data.get("reason", "")).startswith("interrupted by")), None)
    history = History(Path(outcome.run_dir) / "history.jsonl", events=list(outcome.history))
    try:
        said: dict[str, Any] = {"run_dir": str(folder), "until_step": until, "reached": got}
        if restored:
            said |= {"restored": restored, "restored_from": str(restored_from)}
        if error:
            said["error"] = error
        history.record(HARNESS, "uninterrupted", **said)
        if stopped is not None:
            history.record(HARNESS, "abort", reason=f"{stopped} during the uninterrupted run")
        for payload in twin_steps_of(events):
            history.record(HARNESS, "uninterrupted.step", **payload)
    finally:
        history.close()
    result = check(resolved.spec, history, baseline=runner.baseline, scenarios=runner.scenarios)
    return dataclasses.replace(outcome, history=history, result=result)
