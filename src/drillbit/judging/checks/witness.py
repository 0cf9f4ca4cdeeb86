"""Did the job load the checkpoint the harness damaged? Three witnesses, judged together.

corrupt-checkpoint and restore-hang damage one checkpoint; their defining invariant is that
the restart does not load it. Each witness answers yes, no or cannot tell:

- **reads**: the ``ckpt.read`` events the fault's agent recorded on the node that holds the
  file (which process read which file, from the damage on). A rank whose last checkpoint read
  before training resumed was the damaged one loaded it; one that went on to read another
  checkpoint rejected it; a job that never opened it on a local filesystem cannot have
  loaded it.
- **resumed**: the step training resumed from — the first step after the restart, less one.
- **restore line**: the job's own restore line, its path compared by containment (a restore
  from the folder that holds the damaged checkpoint, at its step, *is* that checkpoint) and
  by step, never by name.

All that speak agree: that is the answer. None speaks: unknown, with what each lacked.
They disagree: unknown, saying so — unless the job never opened the damaged checkpoint on a
local filesystem while the same watch placed other reads (it was listening), which settles it
(no process can load bytes it never read). Silence alone proves nothing: a watch that placed
no read at all, or reported reads outside the folder it watched (its paths and the
checkpoint's named differently), cannot veto anything. Every path compared here is absolute
and resolved where it entered (:mod:`drillbit.core.paths`). A "no" is
unknown too when the job saved a newer checkpoint between the fault's choice and the kill and
resumed past the damaged one: that restart never had to choose between the damaged checkpoint
and an older one, so it shows nothing of whether the job would skip it. Pure.
"""
from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel

from drillbit.core.evidence import FileDamage
from drillbit.core.events import CkptRead, Restore, Step
from drillbit.core.history import Event
from drillbit.core.paths import is_within


class Witness(BaseModel):
    name: Literal["reads", "resumed", "restore line"]
    loaded: bool | None        # did the job load the damaged checkpoint, in this witness's view
    says: str                  # in words, naming the evidence


class DamagedRestore(BaseModel):
    """The judgement of restore_skipped_corrupted, with every witness."""

    checkpoint: str            # the damaged checkpoint's path (a folder, or the file itself)
    step: int | None
    loaded: bool | None
    resumed: bool              # training stepped again after the fault
    witnesses: list[Witness]
    why: str


def _norm(path: str) -> str:
    return os.path.normpath(path).rstrip("/") or "/"


def _under(path: str, folder: str) -> bool:
    p, f = _norm(path), _norm(folder)
    return p == f or p.startswith(f if f.endswith("/") else f + "/")


def within(path: str, folder: str) -> bool:
    """``path`` is ``folder`` or inside it. Both must be absolute: a relative path is within
    nothing (it cannot be placed; :mod:`drillbit.core.paths`), never matched by its tail."""
    return is_within(path, folder)


def relation(path: str, checkpoint: str) -> Literal["same", "parent", "other"]:
    """What a restore line's path is to the damaged checkpoint: the checkpoint itself (or a
    file in it), a folder above it (Megatron names its load folder), or something else. A
    relative path is matched by its trailing components."""
    if not os.path.isabs(checkpoint):  # known by its name only (an older record): the tail, else the step decides
        p, ck = _norm(path), _norm(checkpoint)
        return "same" if p == ck or p.endswith("/" + ck) else "parent"
    if not os.path.isabs(path):  # a line read with no job folder to place it: by its leading components
        tail, ck = _norm(path), _norm(checkpoint)
        parts = tail.split("/")
        for i in range(len(parts), 0, -1):  # 'out/step-20/model.pth' is a file in '/x/out/step-20'
            head = "/".join(parts[:i])
            if ck == head or ck.endswith("/" + head):
                return "same"
        return "parent" if os.path.dirname(ck).endswith("/" + tail) else "other"
    if within(path, checkpoint):
        return "same"
    if within(checkpoint, path):
        return "parent"
    return "other"


def _short(path: str, root: str | None) -> str:
    if root and within(path, root) and _norm(path) != _norm(root):
        return os.path.relpath(path, root)
    return path


def _who(e: Event) -> str:
    if e.rank is not None:
        return f"rank {e.rank}"
    pid = CkptRead.of(e).pid
    return f"pid {pid}" if pid else "a process (inotify names no reader)"


def _never_read(evidence: FileDamage, seen: list[tuple[Event, str | None]], name: str, until: float | None) -> Witness:
    """The reads witness when no read of the damaged checkpoint was seen: a "no" only where
    the watch shows it was listening (it placed other reads) on a local filesystem."""
    how, root = evidence.reads, evidence.root
    if evidence.reads_local is False:
        return Witness(name="reads", loaded=None, says=f"no read of {name} seen here ({evidence.reads_why})")
    if until is None and not any(where for _, where in seen):
        return Witness(name="reads", loaded=None, says="the restart read no checkpoint at all and never trained "
                                                       "again: it never reached its restore")
    if not seen:  # silence proves nothing unless the watch shows it was listening
        return Witness(name="reads", loaded=None, says=f"the read watch ({how}) placed no read at all after the "
                                                       f"damage, of {name} or of anything else in the folder: its "
                                                       "silence shows nothing")
    placed = seen[0][1] or CkptRead.of(seen[0][0]).file
    return Witness(name="reads", loaded=False, says=f"no process opened {name} after it was damaged ({how}), "
                                                    f"while the same watch placed {len(seen)} other read(s), "
                                                    f"e.g. of {_short(str(placed), root)}")


def _reads_witness(evidence: FileDamage, reads: list[Event], checkpoint: str, until: float | None) -> Witness:
    how = evidence.reads
    root = evidence.root
    name = _short(checkpoint, root)
    if how == "none":
        return Witness(name="reads", loaded=None, says=f"not watched ({evidence.reads_why or 'no read watch'})")
    unplaced = [p for p in (checkpoint, root) if p is not None and not os.path.isabs(p)]
    if unplaced:  # an older record, or a harness bug: a relative path cannot be compared with the kernel's
        return Witness(name="reads", loaded=None, says=f"the fault recorded {unplaced[0]!r} as a relative path, so "
                                                       "no read can be placed against it")
    others = {p: s for p, s in evidence.checkpoints.items() if not within(p, checkpoint)
              and not within(checkpoint, p)}

    def ckpt_of(path: str) -> str | None:
        if within(path, checkpoint):
            return checkpoint
        return max((p for p in others if within(path, p)), key=len, default=None)

    # each read with the checkpoint it belongs to (None: a file of no checkpoint, the tracker)
    seen = [(e, ckpt_of(CkptRead.of(e).file)) for e in reads if until is None or e.t <= until]
    # the watch watched the checkpoint folder and nothing else: a read it places outside that folder means
    # the two were named differently (relative against absolute, a link against its target) — a harness
    # inconsistency, never evidence either way
    astray = [CkptRead.of(e).file for e, _ in seen if root is not None and not within(CkptRead.of(e).file, root)]
    if astray:
        return Witness(name="reads", loaded=None, says=f"the read watch on {root} reported {len(astray)} read(s) "
                                                       f"outside it ({astray[0]}): its paths and the checkpoint's do "
                                                       "not agree, so its reads are not judged (a harness "
                                                       "inconsistency)")
    if not any(where == checkpoint for _, where in seen):
        return _never_read(evidence, seen, name, until)
    by_reader: dict[object, list[tuple[Event, str]]] = {}
    for e, where in seen:
        if where is not None:
            by_reader.setdefault(e.rank if e.rank is not None else CkptRead.of(e).pid, []).append((e, where))
    loaded_by: dict[str, list[Event]] = {}    # what they read -> the readers (the first damaged read each)
    rejected_by: dict[str, list[Event]] = {}
    for events in by_reader.values():
        events.sort(key=lambda ew: ew[0].t)
        first_damaged = next((e for e, where in events if where == checkpoint), None)
        if first_damaged is None:
            continue
        last, where = events[-1]
        # the file the fault damaged, where this reader read it; else the first file of that checkpoint it read
        # (a Trainer reads config.json before the damaged model.safetensors: the reason names the damaged one)
        touched = next((e for e, _ in events if within(CkptRead.of(e).file, evidence.file)), first_damaged)
        read = _short(CkptRead.of(touched).file, root)
        if where == checkpoint:
            loaded_by.setdefault(read, []).append(first_damaged)
        else:
            step = others.get(where or "")
            then = f"{read}, then {_short(CkptRead.of(last).file, root)}" + (f" (step {step})" if step is not None else "")
            rejected_by.setdefault(then, []).append(first_damaged)
    if loaded_by:
        return Witness(name="reads", loaded=True, says="; ".join(f"{_readers(who)} read {what}" for what, who in
                                                                  loaded_by.items())
                       + " after it was damaged, and no other checkpoint after that")
    return Witness(name="reads", loaded=False, says="; ".join(f"{_readers(who)} read {what}" for what, who in
                                                               rejected_by.items()) + ": the damaged one was rejected")


def _readers(events: list[Event]) -> str:
    ranks = sorted({e.rank for e in events if e.rank is not None})
    if ranks and len(ranks) == len(events):
        if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
            return f"ranks {ranks[0]}–{ranks[-1]}"
        return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))
    return ", ".join(_who(e) for e in events)


def _resumed_past(step: int | None, restore: Event | None, first_step: Event | None) -> int | None:
    """The step the restart resumed from, where it is newer than the damaged checkpoint's."""
    if step is None:
        return None
    said = Restore.of(restore).step if restore is not None else None
    resumed = said if said is not None else (Step.of(first_step).n - 1 if first_step is not None else None)
    return resumed if resumed is not None and resumed > step else None


def judge_damaged_restore(events: list[Event], t_damage: float, evidence: FileDamage, restore: Event | None,
                          first_step: Event | None, restarted: bool, first_at: float | None) -> DamagedRestore:
    """restore_skipped_corrupted's three witnesses and their answer (module docstring);
    ``t_damage``: when the fault was injected; ``first_at``: when ``first_step`` was made (None
    without one), no earlier than the line that began its attempt where its own stamp is
    coarser (recovery.py). The reads that count are those before it: a whole-second stamp
    would cut off the restart's own reads of the checkpoint it loaded."""
    checkpoint = evidence.checkpoint
    step = evidence.step
    root = evidence.root
    name = _short(checkpoint, root)
    reads = [e for e in events if e.kind == "ckpt.read" and e.t >= t_damage - 1.0]
    witnesses = [_reads_witness(evidence, reads, checkpoint, first_at)]
    if first_step is not None and (restarted or restore is not None):
        resumed = Step.of(first_step).n - 1
        if step is None:
            witnesses.append(Witness(name="resumed", loaded=None, says=f"training resumed from step {resumed}; the "
                                     f"damaged checkpoint's layout names no step"))
        else:
            witnesses.append(Witness(name="resumed", loaded=resumed == step,
                                     says=f"training resumed from step {resumed} (the damaged one is step {step})"))
    else:
        witnesses.append(Witness(name="resumed", loaded=None, says="training never stepped again after a restart"))
    if restore is None:
        witnesses.append(Witness(name="restore line", loaded=None, says="the job printed no restore line we read"))
    else:
        path, rstep = Restore.of(restore).path, Restore.of(restore).step
        rel = relation(path, checkpoint) if path else None
        if rel == "same":
            loaded: bool | None = True
        elif rel == "other":
            loaded = False
        elif rstep is not None and step is not None:  # a folder above it, or no path: the step decides
            loaded = rstep == step
        else:
            loaded = None
        said = " ".join(x for x in (f"from {_short(str(path), root)}" if path else "",
                                    f"at step {rstep}" if rstep is not None else "") if x)
        witnesses.append(Witness(name="restore line", loaded=loaded, says=f"restored {said or '(no path, no step)'}"
                                 + (f", which holds {name}" if rel == "parent" and loaded else "")))
    yes = [w for w in witnesses if w.loaded is True]
    no = [w for w in witnesses if w.loaded is False]
    resumed_ok = first_step is not None
    first = witnesses[0]  # the reads witness, always first
    past = _resumed_past(step, restore, first_step)
    if no and not yes and evidence.saved_since and past is not None:
        saved = ", ".join(f"{_short(p, root)}" + (f" (step {s})" if s is not None else "")
                          for p, s in sorted(evidence.saved_since.items()))
        return DamagedRestore(checkpoint=checkpoint, step=step, loaded=None, resumed=resumed_ok, witnesses=witnesses,
                              why=f"the job saved {saved} after the fault chose {name} and before the kill, and "
                                  f"resumed from step {past}, newer than the damaged one: this restart never had to "
                                  f"choose between the damaged checkpoint and an older one, so it shows nothing of "
                                  f"whether the job skips it (trigger the fault sooner after a save)")
    silent = "".join(f"; {w.name} could not tell: {w.says}" for w in witnesses if w.loaded is None)
    if yes and not no:
        answer: bool | None = True
        why = "; ".join(w.says for w in yes) + silent
    elif no and not yes:
        answer, why = False, "; ".join(w.says for w in no) + silent
    elif yes and no and first.loaded is False and first.says.startswith("no process opened"):
        answer = False
        why = f"{first.says}, so it cannot have loaded it (although " + "; ".join(f"{w.name}: {w.says}" for w in yes) + ")"
    elif yes and no:
        answer = None
        why = ("the witnesses disagree: " + "; ".join(f"{w.name} says {'loaded' if w.loaded else 'not loaded'} "
                                                      f"({w.says})" for w in yes + no))
    else:
        answer = None
        why = ("nothing shows what the restart loaded: " + "; ".join(f"{w.name}: {w.says}" for w in witnesses)
               + ". Give the job a restore signal with its path or step (a preset, or signals: in the profile), "
                 "a step signal, or run the agent as root so fanotify can name the readers")
    return DamagedRestore(checkpoint=checkpoint, step=step, loaded=answer, resumed=resumed_ok, witnesses=witnesses,
                          why=why)
