"""A crash-point sweep: kill the job at every point of one checkpoint save, one drill each.

First pass: the drill runs with ``record: true`` — the agent watches one save and reports its
file events (names, sizes, order, and whether the target rank held each file open) and kills
nothing. Those events give the save's crash points (:func:`drillbit.core.saves.crash_points`: the
create, close, torn and publish of every file); then one drill per point (or ``sample``
points spread over the save, or the points given), each with a fresh job, each judged on
its own and put in one word (:func:`drillbit.judging.checks.recovery.crash_class`): pass, silent
(resumed from a checkpoint the crash left incomplete), hard-fail (never stepped again),
lost-work (fell back further than needed), fail (another SLO); not-reached when the save
never came to the point (nothing to judge). The matrix goes to
``sweep.md``, ``sweep.html`` and ``sweep.json`` in the sweep's folder.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from drillbit.judging import exitcodes
from drillbit.judging.checks.recovery import Measurements, crash_class
from drillbit.judging.checks.verdict import interrupted, worst
from drillbit.core.dirwatch import FileEvent
from drillbit.core.errors import ConfigError
from drillbit.core.evidence import SaveRecorded, effects
from drillbit.judging.report import multirun
from drillbit.judging.report.multirun import Page, Table
from drillbit.core.runfolder import new_folder
from drillbit.core.saves import CrashPoint, Save, crash_points, sample
from drillbit.runs.session import execute

CLASSES = ("pass", "silent", "hard-fail", "lost-work", "fail", "not-reached", "error")


def with_params(resolved, name: str | None = None, window: float | None = None, **params: Any):
    """The resolved drill with fault params (and optionally its name and window) changed."""
    spec = resolved.spec
    fault = spec.fault.model_copy(update={"params": {**spec.fault.params, **params}})
    update: dict[str, Any] = {"fault": fault}
    if name:
        update["name"] = name
    if window is not None:
        update["observe"] = spec.observe.model_copy(update={"window": window})
    return replace(resolved, spec=spec.model_copy(update=update))


def record_save(resolved, *, reports_dir: str | None, db: str | None, ui=None) -> tuple[Save, Path]:
    """The first pass: one save's file events, watched and not touched."""

    payload, outcome = execute(with_params(resolved, name=f"{resolved.spec.name}-record", window=1.0, record=True),
                               reports_dir=reports_dir, db=db, ui=ui)
    confirmed = outcome.history.first("fault.confirmed")
    recorded = next((e for e in effects(confirmed.data) if isinstance(e, SaveRecorded)), None) if confirmed else None
    if recorded is None:
        why = next((e.data.get("reason") for e in outcome.history.of("fault.unconfirmed")), None)
        raise ConfigError(f"the first pass saw no save to record ({why or payload.get('error') or payload['verdict']}); "
                          f"see {outcome.run_dir}")
    save = Save(recorded.save, [FileEvent(e["t"], e["kind"], e["path"], e["is_dir"], e["size"])
                                for e in recorded.events])
    return save, outcome.run_dir


def run_sweep(resolved, *, points: list[CrashPoint] | None = None, n: int | None = None,
              reports_dir: str | None = None, db: str | None = None, ui=None) -> tuple[dict[str, Any], Path]:

    if resolved.spec.fault.type != "kill-during-save":
        raise ConfigError(f"a sweep drives kill-during-save; {resolved.spec.name} injects {resolved.spec.fault.type}")
    recorded: dict[str, Any] | None = None
    if points is None:
        save, record_dir = record_save(resolved, reports_dir=reports_dir, db=db, ui=ui)
        every = crash_points(save)
        points = sample(every, n)
        recorded = {"run_dir": str(record_dir), "points": len(every),
                    "events": [e.as_dict() for e in save.events]}
    rows = []
    for point in points:
        payload, outcome = execute(with_params(resolved, point=point.label()), reports_dir=reports_dir, db=db, ui=ui)
        m = Measurements.model_validate(payload["measurements"])
        if payload.get("error_kind") == "inconclusive":
            cls = "not-reached"  # the job ended before the save came to this point: nothing to judge
        elif payload.get("error"):
            cls = "error"  # the harness broke: nothing to judge
        elif m.crash_point is None:
            cls = "not-reached"  # the save never came to this point: nothing to judge
        else:
            cls = crash_class(m, payload["verdict"])
        rows.append({"point": point.label(), "class": cls, "verdict": payload["verdict"],
                     "reasons": payload["reasons"] or ([payload["error"]] if payload.get("error") else []),
                     "crashed": m.crashed_checkpoint, "crashed_complete": m.crashed_complete,
                     "crashed_why": m.crashed_why, "best_complete_step": m.best_complete_step,
                     "restored_step": m.restored_step, "time_to_detect": m.time_to_detect,
                     "time_to_first_step": m.time_to_first_step, "lost_steps": m.lost_steps,
                     "crash_lag_s": m.crash_lag_s, "run_dir": str(outcome.run_dir),
                     "error_kind": payload.get("error_kind")})
        if interrupted(payload):
            break  # the operator stopped it: no more crash points
    counts = {c: sum(1 for r in rows if r["class"] == c) for c in CLASSES}
    kinds = [(r["verdict"], r["error_kind"]) for r in rows]
    code = exitcodes.suite_exit_code(kinds)  # 1 only when a crash point failed an SLO
    report = {"drill": resolved.spec.name, "cluster": resolved.cluster, "job": resolved.job,
              "verdict": worst(*[r["verdict"] for r in rows]) if rows else "inconclusive", "exit_code": code,
                  "counts": counts, "rows": rows,
              "recorded": recorded, "versions": versions()}
    out = new_folder(reports_dir or resolved.config.reports_dir, resolved.job, kind="sweep")
    multirun.write(out, page(report), md="sweep.md", html="sweep.html", data=report, json_name="sweep.json")
    return report, out


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("drillbit", "torch", "transformers", "accelerate", "lightning"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            continue
    return out


def _num(v: Any, fmt: str = ".2f") -> str:
    return "-" if v is None else format(v, fmt) if isinstance(v, float) else str(v)


HEAD = ("crash point", "verdict", "left behind", "newest complete", "restored", "detect s", "first step s",
        "lost", "why")


def _cells(r: dict[str, Any]) -> list[str]:
    left = "nothing visible" if r["crashed"] is None else (
        f"{r['crashed']} (complete)" if r["crashed_complete"] else f"{r['crashed']} ({r['crashed_why'] or 'incomplete'})")
    return [r["point"], r["class"].upper(), left, _num(r["best_complete_step"]), _num(r["restored_step"]),
            _num(r["time_to_detect"]), _num(r["time_to_first_step"]), _num(r["lost_steps"]),
            "; ".join(r["reasons"][:2]) or "-"]


def page(report: dict[str, Any]) -> Page:
    counts = ", ".join(f"{n} {c}" for c, n in report["counts"].items() if n)
    blocks: list = []
    if report.get("recorded"):
        blocks.append(f"One save recorded: {len(report['recorded']['events'])} file events, "
                      f"{report['recorded']['points']} crash points; {len(report['rows'])} drilled.")
    blocks.append(Table(HEAD, [_cells(r) for r in report["rows"]], tones=[r["class"] for r in report["rows"]]))
    blocks.append("Versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()))
    return Page(f"Crash-point sweep: {report['drill']} on {report['job']} ({report['cluster']}): "
                f"{report['verdict'].upper()} — {counts}", blocks)


def markdown(report: dict[str, Any]) -> str:
    return page(report).markdown()
