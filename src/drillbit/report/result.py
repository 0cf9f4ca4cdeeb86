"""result.json: the contract in DESIGN.md, built from a run's outcome."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from drillbit.atomic import write_atomic
from drillbit.checks import CheckResult
from drillbit.exitcodes import exit_code
from drillbit.history import History



def _iso(t: float | None) -> str | None:
    return datetime.fromtimestamp(t, tz=timezone.utc).isoformat() if t else None


def build(*, drill: str, cluster: str, job: str, fault_type: str, params: dict, history: History,
          result: CheckResult, error: str | None = None, error_kind: str | None = None) -> dict[str, Any]:
    start = history.first("drill.start")
    end = history.last("drill.end")
    injects = history.of("fault.inject")
    confirmed = history.first("fault.confirmed")
    heals = history.of("fault.heal")
    m = result.measurements
    return {
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
    }


def write(run_dir: Path, payload: dict[str, Any]) -> Path:
    return write_atomic(run_dir / "result.json", json.dumps(payload, indent=2) + "\n")
