"""Checkers: pure functions from (spec, history) to measurements, SLO results and a verdict.

A checker that throws yields ``inconclusive`` with the error as its reason, never ``pass``
(Jepsen's habit). Nothing here touches processes, files or clocks.
"""
from __future__ import annotations

from pydantic import BaseModel

from drillbit.checks.goodput import goodput
from drillbit.checks.recovery import Measurements, measure
from drillbit.checks.slo import SLOResult, evaluate
from drillbit.checks.verdict import Verdict, combine
from drillbit.history import History
from drillbit.spec.models import DrillSpec


class CheckResult(BaseModel):
    verdict: Verdict
    reasons: list[str]
    measurements: Measurements
    slos: list[SLOResult]


def check(spec: DrillSpec, history: History) -> CheckResult:
    try:
        m = measure(history)
        m = m.model_copy(update={"goodput": goodput(history, m)})
        slos, slo_reasons = evaluate(spec.slo, m, history)
        verdict, reasons = combine(history, m, slos, slo_reasons)
        return CheckResult(verdict=verdict, reasons=reasons, measurements=m, slos=slos)
    except Exception as exc:  # a checker bug must never turn into a pass
        return CheckResult(verdict="inconclusive", reasons=[f"checker error: {exc.__class__.__name__}: {exc}"],
                           measurements=Measurements(), slos=[])
