"""Schedule: when the fault fires (the trigger) and at whom (target choice)."""
from __future__ import annotations

import random
import time
from typing import Callable

from drillbit.errors import DrillError
from drillbit.loop.watch import Progress
from drillbit.proc import ProcRef
from drillbit.spec.models import Targets, Trigger


def select_targets(ranks: list[ProcRef], targets: Targets) -> list[ProcRef]:
    pool = [r for r in ranks if r.rank not in set(targets.exclude_ranks) and r.node not in set(targets.exclude_nodes)]
    if targets.ranks is not None:
        wanted = set(targets.ranks)
        chosen = [r for r in pool if r.rank in wanted]
        missing = wanted - {r.rank for r in chosen}
        if missing:
            raise DrillError(f"target ranks {sorted(missing)} not found; the job has ranks "
                             f"{sorted(r.rank for r in ranks)}")
        return chosen
    if len(pool) < targets.count:
        raise DrillError(f"{targets.count} targets wanted but only {len(pool)} eligible ranks were found")
    if targets.select == "first":
        return pool[: targets.count]
    if targets.select == "last":
        return pool[-targets.count:]
    return sorted(random.Random(targets.seed).sample(pool, targets.count), key=lambda r: r.rank or 0)


def describe_trigger(trigger: Trigger) -> str:
    return f"at step {trigger.at_step}" if trigger.at_step is not None else f"{trigger.after:g} s after steady state"


def wait_trigger(trigger: Trigger, progress: Progress, job_exited: Callable[[], int | None]) -> None:
    """Return when the trigger fires; raise if the job exits first. ``progress.tick``
    bounds the wait by the drill's max_duration."""
    if trigger.at_step is not None:
        while True:
            last = progress.last
            if last is not None and last.data["n"] >= trigger.at_step:
                return
            code = job_exited()
            if code is not None:
                raise JobExited(code, f"the job exited (code {code}) before the trigger step {trigger.at_step}")
            progress.tick(0.02)
    assert trigger.after is not None
    until = time.time() + trigger.after
    while time.time() < until:
        progress.tick(0.05)


class JobExited(DrillError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
