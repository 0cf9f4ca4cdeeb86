"""result.json: the contract in DESIGN.md, built from a run's outcome.

``RunResult`` is what result.json is: ``build`` validates every payload through it before it
is written, and ``RunResult.load`` reads one back (``drill simulate --from`` does; the other
readers still take the plain dict). ``payload()`` is the dict the reports are written from.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from drillbit.core.atomic import write_atomic
from drillbit.judging.checks import CheckResult
from drillbit.judging.checks.slo import SLOResult
from drillbit.judging.checks.verdict import Verdict
from drillbit.judging.exitcodes import exit_code
from drillbit.core.history import History


class FaultTarget(BaseModel):
    node: str | None = None
    rank: int | None = None
    pid: int | None = None


class FaultHealed(BaseModel):
    rank: int | None = None
    pid: int | None = None
    detail: str | None = None
    verified: bool | None = None


class FaultOutcome(BaseModel):
    type: str
    params: dict[str, Any]
    targets: list[FaultTarget]
    injected_at: str | None
    confirmed: bool
    confirmed_at: str | None
    healed: bool
    heals: list[FaultHealed]


class LedgerSummary(BaseModel):
    wall_s: float
    goodput: float
    categories: dict[str, float]


class RunResult(BaseModel):
    """One drill's result, as result.json holds it."""

    model_config = ConfigDict(extra="allow")  # a newer drillbit's fields are kept, not refused

    drill: str
    cluster: str
    job: str
    verdict: Verdict
    exit_code: int
    reasons: list[str]
    error: str | None
    error_kind: str | None
    started_at: str | None
    finished_at: str | None
    fault: FaultOutcome
    measurements: dict[str, Any]
    slos: list[SLOResult]
    ledger: LedgerSummary | None
    projection: dict[str, Any] | None
    cadence: dict[str, Any] | None
    baseline_run: int | None = None

    @classmethod
    def load(cls, path: Path) -> "RunResult":
        return cls.model_validate_json(Path(path).read_text())

    def payload(self) -> dict[str, Any]:
        return self.model_dump()



def _iso(t: float | None) -> str | None:
    return datetime.fromtimestamp(t, tz=timezone.utc).isoformat() if t else None


def build(*, drill: str, cluster: str, job: str, fault_type: str, params: dict, history: History,
          result: CheckResult, error: str | None = None, error_kind: str | None = None,
          baseline_run: int | None = None) -> dict[str, Any]:
    """result.json's payload, typed through RunResult on the way (a field of the wrong shape
    is a harness bug caught here, not a report that another tool cannot read)."""
    start = history.first("drill.start")
    end = history.last("drill.end")
    injects = history.of("fault.inject")
    confirmed = history.first("fault.confirmed")
    heals = history.of("fault.heal")
    m = result.measurements
    return RunResult.model_validate({
        "drill": drill,
        "cluster": cluster,
        "job": job,
        "verdict": result.verdict,
        "exit_code": exit_code(result.verdict, (error_kind or "harness") if error else None),
        "reasons": result.reasons,
        "error": error,
        "error_kind": (error_kind or "harness") if error else None,
        "started_at": _iso(start.t if start else None),
        "finished_at": _iso(end.t if end else None),
        "fault": {
            "type": fault_type,
            "params": params,
            "targets": [{"node": e.node, "rank": e.rank, "pid": e.data.get("pid")} for e in injects],
            "injected_at": _iso(injects[0].t) if injects else None,
            "confirmed": confirmed is not None,
            "confirmed_at": _iso(confirmed.t) if confirmed else None,
            "healed": bool(injects) and len(heals) == len(injects) and all(h.data.get("healed") for h in heals),
            "heals": [{"rank": h.rank, "pid": h.data.get("pid"), "detail": h.data.get("detail"),
                       "verified": h.data.get("verified")} for h in heals],
        },
        "measurements": {k: (round(v, 4) if isinstance(v, float) else v)
                         for k, v in m.model_dump().items() if k not in ("t_fault", "t_observe_end")},
        "slos": [s.model_dump() for s in result.slos],
        "ledger": None if result.ledger is None else {
            "wall_s": round(result.ledger.wall_s, 4),
            "goodput": round(result.ledger.goodput, 4),
            "categories": {k: round(v, 4) for k, v in result.ledger.categories().items()},
        },
        "projection": None if result.projection is None else result.projection.model_dump(),
        "cadence": None if result.cadence is None else result.cadence.model_dump(),
        "baseline_run": baseline_run,
    }).payload()


def write(run_dir: Path, payload: dict[str, Any]) -> Path:
    return write_atomic(run_dir / "result.json", json.dumps(payload, indent=2) + "\n")
