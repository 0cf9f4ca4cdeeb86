"""Known mechanisms of a restart that never came back, named from the evidence that shows them.

A drill that failed because no restart ever stepped again says where the ranks were stuck and
what the job said; where that evidence carries the mark of a mechanism known to cause it (a
launcher's or a library's defect, at the versions people run), the verdict names it and links
its fix. Nothing is named on suspicion: the mark must be in the job's own error lines from a
restarted attempt, or in a restarted attempt's stuck frames (stacks.json), and only when the
restart never produced a step.

Pure: a history and its measurements in, sentences out.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from drillbit.core.events import FaultConfirmed, Kind, Restart, Stacks
from drillbit.core.history import History
from drillbit.judging.checks.recovery import Measurements


@dataclass(frozen=True)
class Mechanism:
    id: str
    what: str            # the mechanism, in a sentence
    fix: str             # what makes the restart come back
    see: str             # where the fix is shown (the docs) and the public record
    errors: str          # a regex over the job's error lines from a restarted attempt
    frames: str          # a regex over a restarted attempt's innermost frames (stacks.json)
    launcher: str        # the restart lines that must come from this launcher (Restart.by)


KNOWN: tuple[Mechanism, ...] = (
    Mechanism(
        id="torchrun-shared-store",
        what="torchrun's c10d rendezvous (its default on one node since torch 2.x) shares one TCPStore between the "
             "agent and the workers, made at the first rendezvous and kept across restarts (torch 2.13); the "
             "workers' process-group keys carry no attempt, so a restarted worker can read a dead one's address: "
             "gloo's connectFullMesh is refused, or init_process_group waits for ever (pytorch/pytorch#135712: the "
             "shared store hands out the previous attempt's data after a restart)",
        fix="set TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in torchrun's environment (the profile's launch.env, or the "
            "job's own launch script), so that each rendezvous round gives the workers a store of their own",
        see="docs/own-job.md, 'torchrun restarts'; https://github.com/pytorch/pytorch/issues/135712",
        errors=r"connectFullMesh failed|socketPollConnect: connect to .* returned Connection refused",
        frames=r"^(init_process_group|_new_process_group_helper|_store_based_barrier|TCPStore\.\w+|rendezvous) ",
        launcher="torchrun",
    ),
)


def named(history: History, m: Measurements) -> list[str]:
    """A sentence for each known mechanism whose mark the failed restart carries."""
    if m.time_to_first_step is not None or not m.restarts or m.t_fault is None:
        return []
    out = []
    for mech in KNOWN:
        mark = _mark(mech, history, m)
        if mark:
            out.append(f"the restart carries the mark of {mech.id}: {mark}. {mech.what[0].upper()}{mech.what[1:]}. "
                       f"Fix: {mech.fix} (see {mech.see})")
    return out


def mark_of(mechanism: str, history: History, m: Measurements) -> str | None:
    """The mark of the known mechanism named ``mechanism`` in a failed restart's evidence, in
    words, or None (none there, the restart came back, or no such mechanism)."""
    if m.time_to_first_step is not None or not m.restarts or m.t_fault is None:
        return None
    mech = next((k for k in KNOWN if k.id == mechanism), None)
    return _mark(mech, history, m) if mech is not None else None


def _mark(mech: Mechanism, history: History, m: Measurements) -> str | None:
    t0 = m.t_fault or 0.0
    launchers = {Restart.of(e).by for e in history.of(Kind.RESTART) if e.t >= t0}
    if mech.launcher not in launchers:
        return None
    errors = re.compile(mech.errors)
    # the job's own errors of a restarted attempt, within the watch (job_errors: up to observe.end)
    restarted = [e for e in m.job_errors if any(a >= 1 for a in e.attempts)]
    said = next((e for e in restarted if errors.search(e.message)), None)
    if said is not None:
        return f"the job said, {said.quote()}"
    confirmed = history.first("fault.confirmed")
    if confirmed is None or FaultConfirmed.of(confirmed).hurts == "node":
        return None  # survivors of a node that is gone wait in init_process_group for it: no mark in frames alone
    frames = re.compile(mech.frames)
    for e in reversed(history.of(Kind.STACKS)):
        stacks = Stacks.of(e)
        if stacks.attempt < 1 or (m.t_observe_end is not None and e.t > m.t_observe_end + 30):
            continue
        ranks = [r for r in stacks.ranks if isinstance(r, dict)]
        stuck = [r for r in ranks if r.get("ok") and r.get("frames") and any(frames.search(str(f)) for f in r["frames"][:3])]
        if stuck and len(stuck) == len(ranks):  # every rank of the attempt read, every one waiting there
            where = [str(f) for f in stuck[0]["frames"][:3] if frames.search(str(f))][-1]  # the caller's name
            return f"every rank of attempt {stacks.attempt} was waiting in {where}"
    return None
