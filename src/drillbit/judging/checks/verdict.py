"""The tri-state verdict (plus aborted) and the reasons a human can act on.

Combining ranks fail > aborted > inconclusive > pass.
"""
from __future__ import annotations

from drillbit.judging.checks import mechanisms
from drillbit.judging.checks.recovery import Measurements, quiet_after_fault
from drillbit.judging.checks.slo import SLOResult
from drillbit.core.events import Abort, EventInvalid, FaultUnconfirmed, HealFailed, Inconclusive, Kind, Payload, Stacks
from drillbit.core.history import Event, History
from drillbit.core.verdicts import RANK, Verdict, worst

__all__ = ["RANK", "Verdict", "worst", "combine", "interrupted"]


def _diagnosis(history: History, m: Measurements) -> str | None:
    """One sentence on what went wrong in the recovery, from the measurements."""
    if m.time_to_first_step is not None or m.expects == "slow":
        return None
    quiet = quiet_after_fault(history, m)
    if m.time_to_detect is None and m.restarts == 0:
        return (f"no step for {quiet:.0f} s after the fault; the stall was never detected"
                if quiet is not None else "the fault was never detected")
    parts = []
    if m.time_to_detect is not None:
        parts.append(f"detected after {m.time_to_detect:.1f} s")
    if m.restarts:
        parts.append(f"restarted {m.restarts} time{'s' if m.restarts > 1 else ''}")
    said = ", ".join(parts)
    tail = "but no restart ever produced a step" if m.restarts else "but the job never made a step again"
    if m.job_exit_s is not None:
        tail += f"; the job exited (code {m.job_exit_code}) {m.job_exit_s:.0f} s after the fault"
    return f"{said} {tail}".strip() + _quoted(m)


def _quoted(m: Measurements, most: int = 3) -> str:
    """The job's own words for why its attempts failed: the restarts' errors where it
    restarted (the run the fault hit fails by design), else that run's."""
    errors = ([e.model_copy(update={"attempts": [a for a in e.attempts if a >= 1]}) for e in m.job_errors
               if any(a >= 1 for a in e.attempts)] if m.restarts else m.job_errors)
    if not errors:
        return ""
    said = "; ".join(e.quote() for e in errors[:most])
    more = f" (and {len(errors) - most} more)" if len(errors) > most else ""
    return f". The job said — {said}{more}"


def _said(event: Event, model: type[Payload], name: str, default: str) -> str:
    """One field of an event, for a reason's words: typed where its payload reads, else as it
    was recorded. The events the verdict rests on (a heal that failed, an abort) must decide it
    even when drillbit recorded one wrong; its event.invalid names that bug."""
    try:
        value = getattr(model.of(event), name)
    except ValueError:  # the payload does not read (pydantic's ValidationError)
        value = event.data.get(name)
    return default if value is None else str(value)


def _left_in_place(event: Event) -> str:
    where = f"rank {event.rank} on {event.node}" if event.rank is not None else f"node {event.node or '?'}"
    return f"{_said(event, HealFailed, 'fault', 'a fault')} on {where}: {_said(event, HealFailed, 'detail', 'heal failed')}"


def interrupted(payload: dict) -> bool:
    """The operator stopped this drill (Ctrl-C, SIGTERM): a suite, repeat or sweep stops
    too, rather than start the next drill."""
    return payload.get("verdict") == "aborted" and any(r.startswith("aborted: interrupted by")
                                                        for r in payload.get("reasons", []))


def _untrusted(verdict: Verdict, history: History, m: Measurements, reasons: list[str], left: bool) -> Verdict:
    """What drillbit could not measure (a measurer that failed left its figures unknown) or
    could not read (an event recorded with a payload its kind does not have), by its own bug.
    An SLO reading an unknown figure as "never came" would fail on that bug: neither pass nor
    fail stands on them (a fault left in place still fails the drill: that was seen, not
    measured)."""
    invalid = [EventInvalid.of(e) for e in history.of(Kind.EVENT_INVALID)]
    if m.measure_errors:
        reasons.append("could not measure " + "; ".join(f"{name} ({error})" for name, error in m.measure_errors.items())
                       + " — a drillbit bug: those figures are unknown (report the run's history.jsonl)")
    if invalid:
        said = "; ".join(f"{e.recorded_as} (event {e.seq}: {e.problem})" for e in invalid[:3])
        reasons.append(f"drillbit recorded {len(invalid)} event(s) it cannot read: {said} — a drillbit bug (report "
                       "the run's history.jsonl)")
    if (m.measure_errors or invalid) and not left and verdict in ("pass", "fail"):
        return "inconclusive"
    return verdict


def combine(history: History, m: Measurements, slos: list[SLOResult], slo_reasons: list[str]) -> tuple[Verdict, list[str]]:
    reasons: list[str] = []
    verdict: Verdict = "pass"
    left = history.of("heal.failed")
    if left:  # a drill that leaves its fault behind has failed, whatever the job did
        verdict = "fail"
        reasons += [f"fault left in place: {_left_in_place(e)}" for e in left]
    aborts = history.of("abort")
    if aborts:
        verdict = worst(verdict, "aborted")
        reasons += [f"aborted: {_said(a, Abort, 'reason', 'unknown')}" for a in aborts]
    undecided = history.of("inconclusive")
    if undecided:
        verdict = worst(verdict, "inconclusive")
        reasons += [f"inconclusive: {_said(e, Inconclusive, 'reason', 'unknown')}" for e in undecided]
    if history.first("steady") is None:
        verdict = worst(verdict, "inconclusive")
        reasons.append("the job never reached steady state, so there is no baseline")
    unconfirmed = history.of("fault.unconfirmed")
    if m.t_fault is None:
        verdict = worst(verdict, "inconclusive")
        if m.measure_errors:  # the fault's own record could not be read: that is what is unknown
            return _untrusted(verdict, history, m, reasons, left=bool(left)), reasons
        if unconfirmed:
            reasons += [f"the fault could not be confirmed: {_said(e, FaultUnconfirmed, 'reason', 'unknown')}"
                        for e in unconfirmed]
        elif history.first("fault.inject") is not None:
            reasons.append("the fault was injected but never confirmed to take effect")
        elif not aborts and history.first("steady") is not None:
            reasons.append("the fault was never injected")
        return verdict, reasons
    failed = [s for s in slos if s.status == "fail"]
    unknown = [s for s in slos if s.status == "unknown"]
    if failed:
        verdict = worst(verdict, "fail")
        diagnosis = _diagnosis(history, m)
        if diagnosis:
            reasons.append(diagnosis)
        reasons += slo_reasons
    if unknown:
        verdict = worst(verdict, "inconclusive")
        reasons += [f"{s.name}: not measured ({s.detail or 'signal missing'})" for s in unknown]
    if not history.of("step"):
        verdict = worst(verdict, "inconclusive")
        reasons.append("no step signal was ever read from the job")
    verdict = _untrusted(verdict, history, m, reasons, left=bool(left))
    if verdict in ("fail", "inconclusive"):
        reasons += _stuck(history, m)
    return verdict, reasons


def _stuck(history: History, m: Measurements) -> list[str]:
    """Where the job was stuck when the window closed, and a known mechanism whose mark that
    shows (judging/checks/mechanisms.py)."""
    stuck = history.last("stacks")
    where = _said(stuck, Stacks, "where", "") if stuck is not None else ""
    said = [f"where the job was stuck when the window closed: {where} (stacks.json)"] if where else []
    return said + mechanisms.named(history, m)
