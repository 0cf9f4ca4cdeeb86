"""Repeats: one drill run N times, each with a fresh job, judged as a whole.

Every drill is one sample of a random process (scheduling, a launcher's monitor interval);
a repeated drill reports each measurement's median, p90, min and max over its runs, and
passes only when every run passed — or at least ``min_pass_rate`` of them — listing each
failing run with its reason. The results store keeps every run.
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from drillbit.judging import exitcodes
from drillbit.judging.checks.verdict import interrupted, worst
from drillbit.judging.report import multirun
from drillbit.judging.report.multirun import Bullets, Page, Table
from drillbit.core.runfolder import new_folder
from drillbit.runs.graded import execute_drill as execute

# measurements summarised (numbers only)
STATS = ("time_to_detect", "time_to_restart", "time_to_restore", "time_to_first_step", "lost_steps", "restarts",
         "goodput", "baseline_step_s", "time_to_straggler", "slowdown", "time_to_escalate")


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]  # nearest rank


def never_recovered(payload: dict[str, Any]) -> bool:
    """A run that failed because the job never stepped again after a fault that stops or
    stalls it (nor escalated to a person): not a figure near a limit, a recovery that never came."""
    m = payload.get("measurements") or {}
    return (payload.get("verdict") == "fail" and m.get("expects") in ("crash", "stall")  # set once the fault took
            and m.get("time_to_first_step") is None and m.get("time_to_escalate") is None)


def aggregate(drill: str, payloads: list[dict[str, Any]], run_dirs: list[str],
              min_pass_rate: float | None = None) -> dict[str, Any]:
    n = len(payloads)
    passes = sum(1 for p in payloads if p["verdict"] == "pass")
    need = n if min_pass_rate is None else max(1, math.ceil(min_pass_rate * n - 1e-9))  # a pass needs one run passing
    kinds = [p.get("error_kind") or ("harness" if p.get("error") else None) for p in payloads]
    lost = [i + 1 for i, p in enumerate(payloads) if never_recovered(p)]
    stopped = bool(payloads) and interrupted(payloads[-1])  # the operator stopped it: the runs asked were not run
    if passes >= need and not any(kinds) and not lost and not stopped:
        verdict = "pass"
    else:
        verdict = worst(*[p["verdict"] for p in payloads if p["verdict"] != "pass"]) if passes < n else "pass"
    code = exitcodes.suite_exit_code([(verdict, k) for k in kinds]) if any(kinds) else exitcodes.BY_VERDICT[verdict]
    stats = {}
    for name in STATS:
        values = [float(v) for p in payloads if isinstance(v := (p.get("measurements") or {}).get(name), (int, float))]
        if values:
            stats[name] = {"n": len(values), "median": statistics.median(values), "p90": p90(values),
                           "min": min(values), "max": max(values)}
    failing = [{"run": i + 1, "run_dir": d, "verdict": p["verdict"], "reasons": p.get("reasons") or [],
                "error": p.get("error")} for i, (p, d) in enumerate(zip(payloads, run_dirs,
                    strict=False)) if p["verdict"] != "pass"]
    rule = "every run" if min_pass_rate is None else f"at least {min_pass_rate:.0%} of the runs ({need} of {n})"
    reasons = [] if verdict == "pass" else [f"{passes} of {n} runs passed; the drill needs {rule} to pass"]
    if stopped:
        reasons.insert(0, next(r for r in payloads[-1]["reasons"] if r.startswith("aborted: interrupted by"))
                       + f" (after {n} run(s))")
    if lost:
        reasons.append(f"the job never stepped again after the fault in {len(lost)} of {n} runs "
                       f"({len(lost) / n:.0%}: run{'s' if len(lost) > 1 else ''} {', '.join(map(str, lost))}): a "
                       "recovery that comes back only sometimes is a defect, whatever share of runs passed (a pass "
                       "rate allows for figures near a limit, not for a recovery that never came)")
    reasons += [f"run {f['run']}: {f['verdict']}: {_why(f)}" for f in failing]
    return {"drill": drill, "repeat": n, "passes": passes, "min_pass_rate": min_pass_rate, "verdict": verdict,
            "exit_code": code, "reasons": reasons, "stats": stats, "failing": failing, "run_dirs": run_dirs,
            "never_recovered": {"runs": lost, "rate": len(lost) / n if n else None}, "interrupted": stopped,
            "cluster": payloads[0]["cluster"] if payloads else None, "job": payloads[0]["job"] if payloads else None}


def _why(failing: dict[str, Any]) -> str:
    """A failing run's first reasons, and a known mechanism its evidence named (mechanisms.py)."""
    said = failing["reasons"][:2] + [r for r in failing["reasons"][2:] if "carries the mark of" in r][:1]
    return "; ".join(said) or failing["error"] or "-"


def page(agg: dict[str, Any]) -> Page:
    head = ("measurement", "median", "p90", "min", "max", "runs")
    rows = [[name, f"{st['median']:.3g}", f"{st['p90']:.3g}", f"{st['min']:.3g}", f"{st['max']:.3g}", str(st["n"])]
            for name, st in agg["stats"].items()]
    lost = agg.get("never_recovered") or {}
    if lost.get("runs") is not None:
        rows.append(["never stepped again", f"{len(lost['runs'])} of {agg['repeat']}", "", "", "", str(agg["repeat"])])
    blocks: list = [Table(head, rows, right=frozenset(head[1:]))]
    if agg["reasons"]:
        blocks.append(Bullets(list(agg["reasons"])))
    return Page(f"{agg['drill']} x {agg['repeat']}: {agg['verdict'].upper()} ({agg['passes']} of {agg['repeat']} "
                "passed)", blocks)


def summary_markdown(agg: dict[str, Any]) -> str:
    return page(agg).markdown()


def run_repeated(resolved, n: int, *, min_pass_rate: float | None = None, reports_dir: str | None = None,
                 db: str | None = None, ui=None) -> tuple[dict[str, Any], Path]:

    payloads, dirs = [], []
    for _ in range(n):
        payload, outcome = execute(resolved, reports_dir=reports_dir, db=db, ui=ui)
        payloads.append(payload)
        dirs.append(str(outcome.run_dir))
        if interrupted(payload):
            break
    agg = aggregate(resolved.spec.name, payloads, dirs, min_pass_rate)
    out = new_folder(reports_dir or resolved.config.reports_dir, resolved.spec.name, kind="repeat")
    multirun.write(out, page(agg), md="summary.md", html="summary.html", data=agg, json_name="repeat.json")
    return agg, out
