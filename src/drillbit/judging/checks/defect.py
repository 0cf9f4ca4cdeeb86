"""A failed drill that reproduces a published defect names it (``drills/known-defects/``).

The name is not taken on trust. The defect's ``signature`` is looked for in the job's own
error lines after the fault, or, for a defect that prints nothing (a hang, a silent wrong
restore), its ``check`` must be an SLO that failed. Found, the verdict quotes the line or
the SLO; not found, the verdict says the drill failed without the defect's mark, so something
else may be at work (a reproduction that drifted, or a new failure)."""
from __future__ import annotations

import re

from drillbit.judging.checks import mechanisms
from drillbit.judging.checks.recovery import Measurements
from drillbit.judging.checks.slo import SLOResult
from drillbit.core.events import Error, Kind, Restart
from drillbit.core.history import History
from drillbit.spec.models import Defect


def recognise(defect: Defect, m: Measurements, history: History, slos: list[SLOResult]) -> str:
    head = f"known defect {defect.id} ({defect.title})"
    if defect.mark is not None:
        mark = mechanisms.mark_of(defect.mark, history, m)
        if mark is not None:
            return f"{head}: {mark}"
        if defect.signature is None and defect.check is None:
            return (f"not clearly {defect.id}: the drill failed, but its evidence does not carry the mark of "
                    f"{defect.mark}; another failure may be at work")
    if defect.check is not None:
        failed = next((s for s in slos if s.name == defect.check and s.status == "fail"), None)
        if failed is not None:
            said = f"{head}: {failed.name} failed" + (f" ({failed.detail})" if failed.detail else "")
            return said + membership(m, history)
        if defect.signature is None:
            return (f"not clearly {defect.id}: the drill failed, but not on {defect.check}, the defect's mark; "
                    "another failure may be at work")
    assert defect.signature is not None
    pattern = re.compile(defect.signature)
    for error in m.job_errors:
        if (found := pattern.search(error.message)) is not None:
            who = error.quote().split(": ", 1)[0]  # attempts 1–3, rank 0
            return f"{head}: the job said, {who}: {excerpt(error.message, span=found.span())}"
    after = m.t_fault if m.t_fault is not None else float("-inf")
    until = m.t_observe_end if m.t_observe_end is not None else float("inf")  # not the heal's or teardown's lines
    for e in history.of("error"):
        message = Error.of(e).message
        if after <= e.t <= until and (found := pattern.search(message)) is not None:
            where = f"rank {e.rank}: " if e.rank is not None else ""
            return f"{head}: the job said, {where}{excerpt(message, span=found.span())}"
    return (f"not clearly {defect.id}: the drill failed, but none of the job's error lines after the fault "
            f"matched the defect's signature /{defect.signature}/; another failure may be at work")


def excerpt(message: str, most: int = 200, span: tuple[int, int] | None = None) -> str:
    """A long error line as evidence: the exception's name and the line's end, where a path
    names the file (``FileNotFoundError: …/checkpoint-10/trainer_state.json'``); or, where the
    signature matched (``span``) before that end, the words around the match (torch's
    "PytorchStreamReader failed reading zip archive" is followed by a long generic tail)."""
    if len(message) <= most:
        return message
    name = message.split(": ", 1)[0] if ": " in message[:80] else ""
    keep = most - len(name) - 3
    if span is not None and span[0] < len(message) - keep:
        # the words around the match, then the line's end (a path there names the file)
        lead = len(name) + 2 if name else 0  # the text after "Name: "
        start = max(lead, span[0] - 20)
        end = max(span[1], start + keep // 2)
        tail = max(0, keep - (end - start) - 2)
        if end + tail >= len(message):
            return (f"{name}: " if name else "") + ("…" if start > lead else "") + message[start:]
        return (f"{name}: " if name else "") + ("…" if start > lead else "") + message[start:end] + " … " \
            + (message[-tail:] if tail else "")
    return f"{name}: …{message[-keep:]}" if name else f"…{message[-most:]}"


def membership(m: Measurements, history: History) -> str:
    """A launcher's own word that it restarted healthy workers for a node that joined (torchrun's
    "Detected N new nodes from group_rank=G; will restart worker group"): uncounted restarts."""
    after = m.t_fault if m.t_fault is not None else float("-inf")
    seen = [Restart.of(e) for e in history.of(Kind.RESTART) if e.t >= after and Restart.of(e).waiting is not None]
    if not seen:
        return ""
    said = seen[0]
    group = (said.model_extra or {}).get("group_rank", "?")
    return (f"; the launcher of group rank {group} restarted its healthy workers for {said.waiting} node(s) that "
            "joined, and counted no attempt")
