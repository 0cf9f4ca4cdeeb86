"""Schedule: when the fault fires (the trigger) and at whom (target choice)."""
from __future__ import annotations

import random
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable


from drillbit.core.events import Step
from drillbit.core.errors import ConfigError, Inconclusive
from drillbit.loop.watch import Progress
from drillbit.core.proc import ProcRef
from drillbit.spec.config import JobProfile
from drillbit.core.dirwatch import DirWatch
from drillbit.core.saves import SaveTracker
from drillbit.spec.models import BlastRadius, DrillSpec, DuringSave, Targets, Trigger

if TYPE_CHECKING:
    from drillbit.transport.nodes import Nodes


def select_targets(ranks: list[ProcRef], targets: Targets, on_nodes: list[str] | None = None) -> list[ProcRef]:
    """The fault's targets among the job's ranks; ``on_nodes``: only ranks on these nodes (a
    fault that acts on one node's process through a rank there: kill-control-plane)."""
    pool = [r for r in ranks if r.rank not in set(targets.exclude_ranks) and r.node not in set(targets.exclude_nodes)]
    if on_nodes is not None:
        pool = [r for r in pool if r.node in set(on_nodes)]
        if not pool:
            raise ConfigError(f"the fault acts on node(s) {', '.join(on_nodes)}, and the job has no rank there that "
                              f"the drill may target (ranks on {', '.join(sorted({r.node or '?' for r in ranks}))})")
    if targets.ranks is not None:
        wanted = set(targets.ranks)
        chosen = [r for r in pool if r.rank in wanted]
        missing = wanted - {r.rank for r in chosen}
        if missing:  # the drill's targets do not fit this job: a description problem (exit 2)
            raise ConfigError(f"target ranks {sorted(missing)} not found; the job has ranks "
                              f"{sorted(r.rank for r in ranks if r.rank is not None)} (set the drill's targets for this job)")
        return chosen
    if len(pool) < targets.count:
        raise ConfigError(f"{targets.count} target(s) wanted but only {len(pool)} eligible rank(s) were found: the job "
                          f"has ranks {sorted(r.rank for r in ranks if r.rank is not None)}, and the drill excludes ranks "
                          f"{sorted(targets.exclude_ranks)} and nodes {sorted(targets.exclude_nodes)} (set the drill's "
                          "targets for this job, e.g. targets: {ranks: [0]})")
    if targets.select == "first":
        return pool[: targets.count]
    if targets.select == "last":
        return pool[-targets.count:]
    return sorted(random.Random(targets.seed).sample(pool, targets.count), key=lambda r: r.rank or 0)


def check_blast_radius(targets: list[ProcRef], ranks: list[ProcRef], radius: BlastRadius, fault: str,
                       max_targets: int | None) -> None:
    """Refuse, before anything is touched, a selection wider than the drill allows."""
    problems = []
    if len(targets) > radius.max_ranks:
        problems.append(f"{len(targets)} ranks, blast_radius.max_ranks is {radius.max_ranks}")
    nodes = sorted({t.node or "?" for t in targets})
    if len(nodes) > radius.max_nodes:
        problems.append(f"ranks on {len(nodes)} nodes ({', '.join(nodes)}), blast_radius.max_nodes is "
                        f"{radius.max_nodes}")
    if ranks and len(targets) / len(ranks) > radius.max_share:
        problems.append(f"{len(targets)} of the job's {len(ranks)} ranks, blast_radius.max_share is "
                        f"{radius.max_share:g}")
    if max_targets is not None and len(targets) > max_targets:
        problems.append(f"{fault} touches one file for all its targets, so it takes at most {max_targets} "
                        f"target(s), not {len(targets)}")
    if problems:
        raise ConfigError("target selection refused, nothing was touched: " + "; ".join(problems))


def choose_targets(nodes: "Nodes", job: JobProfile, spec: DrillSpec, attach: ProcRef | None,
                   max_targets: int | None, found: Callable[[list[ProcRef]], object] | None = None,
                   on_nodes: list[str] | None = None) -> list[ProcRef]:
    """Find the job's ranks on every node and pick the fault's targets, refusing a choice
    wider than the drill's blast radius — the same for a drill and for its --dry-run."""
    discovery = job.ranks
    if discovery.pidfiles:
        discovery = discovery.model_copy(update={"pidfiles": nodes.expand(discovery.pidfiles)})
    ranks = nodes.find_ranks(discovery, attach)
    if found is not None:
        found(ranks)
    targets = select_targets(ranks, spec.fault.targets, on_nodes)
    check_blast_radius(targets, ranks, spec.blast_radius, spec.fault.type, max_targets)
    return targets


def describe_trigger(trigger: Trigger) -> str:
    if trigger.during_save is not None:
        ds = trigger.during_save
        return (f"during save #{ds.save}" + (f", after {ds.files} file(s)" if ds.files else "")
                + (f", +{ds.delay:g} s" if ds.delay else ""))
    return f"at step {trigger.at_step}" if trigger.at_step is not None else f"{trigger.after:g} s after steady state"


def wait_trigger(trigger: Trigger, progress: Progress, job_exited: Callable[[], int | None],
                 ckpt_dir: Path | None = None, armed_by_fault: bool = False) -> None:
    """Return when the trigger fires; raise if the job exits first. ``progress.tick``
    bounds the wait by the drill's max_duration. A during_save trigger of a fault that
    watches the saves itself, on the node (``armed_by_fault``), fires at once."""
    if trigger.during_save is not None:
        if not armed_by_fault:
            wait_during_save(trigger.during_save, progress, job_exited, ckpt_dir)
        return
    if trigger.at_step is not None:
        while True:
            last = progress.last
            if last is not None and Step.of(last).n >= trigger.at_step:
                return
            code = job_exited()
            if code is not None:
                raise JobExited(code, f"the job exited (code {code}) before the trigger step {trigger.at_step}")
            progress.tick(0.02)
    assert trigger.after is not None
    wait_for(progress, trigger.after)


def wait_for(progress: Progress, seconds: float) -> None:
    """``seconds`` of the loop's waiting (probes keep reading, max_duration still applies)."""
    until = time.time() + seconds
    while time.time() < until:
        progress.tick(0.05)


def wait_during_save(ds: DuringSave, progress: Progress, job_exited: Callable[[], int | None],
                     ckpt_dir: Path | None) -> None:
    """The ``save``-th save after now: from the checkpoint folder when this machine sees it
    (its first file event, then ``files`` files written), else from the save signal."""
    def exited() -> None:
        code = job_exited()
        if code is not None:
            raise JobExited(code, f"the job exited (code {code}) before save #{ds.save}")

    if ds.watch == "signal" or ckpt_dir is None:
        since, seen = time.time(), 0
        while seen < ds.save:
            seen = sum(1 for e in progress.history.of("ckpt.save") if e.t >= since)
            exited()
            progress.tick(0.02)
    else:
        tracker = SaveTracker(ds.settle)
        with DirWatch(ckpt_dir, ds.watch, 0.02) as watch:
            fired = False
            while not fired:
                for event in watch.events(0.05):
                    save = tracker.feed(event)
                    if save is not None and save.number == ds.save and \
                            sum(f["closed"] for f in save.files().values()) >= ds.files:
                        fired = True
                        break
                if not fired:
                    exited()
                    progress.tick(0.0)
    wait_for(progress, ds.delay)


class JobExited(Inconclusive):
    """The job ended before the fault was due: nothing was injected, nothing established."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
