"""A graded sweep: one fault parameter over levels, several drills a level, and the smallest
level the job's own detector catches: its **reach** (issue 58).

    drill sweep slow-rank --param slowdown=1%,2%,3%,5%,10%,20% --repeats 5

Each level runs ``repeats`` drills of the real job, each a launch of its own, with the fault's
parameter set to that level. The verdict of each is read from what the drill measured
(result.json), never from a timing assert:

- **detected**: the job's detector said so within the drill's window: a ``straggler`` line
  for a fail-slow fault (``time_to_straggler``), else the job's ``detect`` (``time_to_detect``);
- **time to detect**: that figure, median and p90 over the detected repeats;
- **attribution**: the straggler named the slowed rank (``straggler_correct``), and the
  ranks the stack blamed that the fault never touched (``attribution.false_blames``): a
  *false blame*, per 10,000 steps the job took;
- **fleet tax**: the job's throughput lost against its own unfaulted steps (``fleet_tax``).

Per level: the detection rate with its 95% Wilson interval (the interval says how little
five repeats can tell), and the rest. The **reach** is the smallest level from which every
larger level was detected in at least 95% of its repeats with no false blame; none when even
the largest was not. A repeat that reached no verdict on the detector (aborted, refused,
the fault not confirmed) counts in no rate, and is listed.

Written to ``graded.md``, ``graded.html`` (with the curve), ``graded.svg`` and
``graded.json`` in the sweep's folder, and ``graded.png`` where a headless chromium can
draw the SVG.
"""
from __future__ import annotations

import json
import math
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from drillbit.core.errors import ConfigError
from drillbit.spec.levels import Level, level_problems, parse_levels, same_level

__all__ = ["Level", "parse_levels", "run_graded", "build", "page", "curve_svg", "outcome", "wilson"]
from drillbit.core.events import Step, SteadyReached
from drillbit.core.history import History
from drillbit.judging.checks import check
from drillbit.judging.checks.ownslow import MIN_STEPS, false_names
from drillbit.judging.checks.verdict import interrupted
from drillbit.judging.checks.recovery import recovered
from drillbit.runs.campaign import segment
from drillbit.core.runfolder import new_folder
from drillbit.faults import get as get_fault
from drillbit.core import trust
from drillbit.judging import exitcodes
from drillbit.loop.runner import DrillRunner
from drillbit.runs import notify
from drillbit.runs.session import (execute, new_run_dir, publish_metrics, read_file, refuse_unstarted, rerender,
                                   scenarios_for)
from drillbit.runs.store import Store, store_path
from drillbit.spec.models import DrillSpec
from drillbit.transport import connect
from drillbit.judging.report import multirun
from drillbit.judging.report.multirun import Figure, Page, Table

BAR = 0.95  # "detected in >= 95% of repeats"
FAIL_SLOW = {"slow-rank", "throttle-clocks", "lossy-link", "slow-link"}


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """The 95% Wilson score interval of k successes in n (None for n = 0)."""
    if n <= 0:
        return None
    p = k / n
    d = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, centre - half), min(1.0, centre + half)


def _finite(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def outcome(payload: dict[str, Any], pause_s: float | None = None, survives_s: float | None = None) -> dict[str, Any]:
    """One repeat, read from its result.json: whether it counts, whether the detector caught the
    fault, when, whom it named, and what the slowdown cost. On the hang-length axis (a pause
    of ``pause_s`` that ends by itself) also whether the job restarted for it, and whether
    that restart was false: the job would have survived the pause, shorter than the longest
    hang its collectives wait out (``survives_s``, the profile's collective timeout)."""
    m = payload.get("measurements") or {}
    fault = payload.get("fault") or {}
    kind = fault.get("type")
    slow = kind in FAIL_SLOW
    ttd = _finite(m.get("time_to_straggler") if slow else m.get("time_to_detect"))
    attribution = m.get("attribution") or {}
    false = list(attribution.get("false_blames") or [])
    right = m.get("straggler_correct") if slow else attribution.get("correct")
    # a node's fault (a link) hurts every rank on the node, as the drill's attribution counts them
    if slow and right is False and m.get("straggler_rank") in (attribution.get("hurt") or []):
        right = True
    if slow and right is False and m.get("straggler_rank") is not None:
        false.append(m["straggler_rank"])
    baseline = _finite(m.get("baseline_step_s"))
    observed = _finite(m.get("observed_s"))
    steps = observed / baseline if baseline and observed and baseline > 0 else None
    why = None
    if payload.get("exit_code") in (2, 4, 5) or payload.get("verdict") in ("aborted",):
        why = f"{payload.get('verdict')} (exit {payload.get('exit_code')}): {payload.get('error') or ''}".strip()
    elif not fault.get("confirmed"):
        why = "the fault was not confirmed"
    elif broken := next((r for r in payload.get("reasons") or [] if str(r).startswith("checker error")), None):
        why = f"drillbit could not judge it: {broken}"  # a judge's own failure is no miss of the detector
    restarts = m.get("restarts") if isinstance(m.get("restarts"), int) else None
    restarted = bool(restarts) if restarts is not None else None
    pause = _finite(pause_s)
    survives = _finite(survives_s)
    false_restart = (restarted and pause is not None and survives is not None and pause < survives) or False
    effect = m.get("effect_rank") if isinstance(m.get("effect_rank"), int) else None
    return {"run": payload.get("run_dir"), "counts": why is None, "why": why, "detected": ttd is not None,
            "ttd": ttd, "right": right,
            "false_blames": len(set(false)), "steps": steps, "fleet_tax": _finite(m.get("fleet_tax")),
            "verdict": payload.get("verdict"), "restarted": restarted, "false_restart": false_restart,
            "back_s": _finite(m.get("time_to_first_step")), "delivered": _finite(m.get("effect_target_shift")),
            # drillbit's own reading of the per-rank step times, as a detector of its own
            "own": None if not slow or "effect_unread" not in m else {"unread": m["effect_unread"]} if m.get(
                "effect_unread") else {
                "detected": effect is not None and m.get("effect_correct") is True,
                "ttd": _finite(m.get("time_to_effect")) if m.get("effect_correct") is True else None,
                "right": m.get("effect_correct"), "false_blames": 1 if effect is not None and
                m.get("effect_correct") is False else 0}}


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]


def summarize(level: Level, outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    counted = [o for o in outcomes if o["counts"]]
    k = sum(1 for o in counted if o["detected"])
    n = len(counted)
    ttd = [o["ttd"] for o in counted if o["ttd"] is not None]
    steps = sum(o["steps"] for o in counted if o["steps"] is not None)
    false = sum(o["false_blames"] for o in counted)
    taxes = [o["fleet_tax"] for o in counted if o["fleet_tax"] is not None]
    right = [o["right"] for o in counted if o["detected"] and o["right"] is not None]
    ci = wilson(k, n)
    back = [o["back_s"] for o in counted if o.get("back_s") is not None]
    delivered = [o["delivered"] for o in counted if o.get("delivered") is not None]
    return {"level": level.label, "value": level.value, "order": level.order, "repeats": len(outcomes),
            "counted": n, "detected": k, "rate": k / n if n else None, "ci": list(ci) if ci else None,
            "ttd_median": statistics.median(ttd) if ttd else None, "ttd_p90": _p90(ttd) if ttd else None,
            "right_rate": sum(1 for r in right if r) / len(right) if right else None,
            "false_blames": false, "false_per_10k_steps": false / steps * 10_000 if steps else None,
            "fleet_tax_median": statistics.median(taxes) if taxes else None,
            "restarts": sum(1 for o in counted if o.get("restarted")),
            "false_restarts": sum(1 for o in counted if o.get("false_restart")),
            "back_median": statistics.median(back) if back else None,
            "delivered_median": statistics.median(delivered) if delivered else None,
            "not_counted": [o["why"] for o in outcomes if not o["counts"]]}


def reach(levels: list[dict[str, Any]], bar: float = BAR, blames: bool = True) -> dict[str, Any] | None:
    """The smallest level from which every larger one met the bar (rate >= bar over counted
    repeats, and, with ``blames``, no false blame); None when the largest did not. On the
    hang-length axis the reach is the shortest pause that triggers detection: whom the stack
    blamed for it is in the table, not in the reach."""
    found = None
    for s in sorted(levels, key=lambda s: s["order"], reverse=True):
        if not s["counted"] or s["rate"] is None or s["rate"] < bar or (blames and s["false_blames"]):
            break
        found = s
    return found


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{v * 100:.0f}%"


def _pct1(v: float | None) -> str:
    return "—" if v is None else f"{v * 100:.1f}%"


def _s(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f} s"


COLOURS = ("#1d4ed8", "#ea580c", "#059669", "#7c3aed", "#be185d", "#0891b2")


def _series(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The detectors of a report: one sweep, or several on the same levels (``detectors``),
    each followed by drillbit's own reading of the same drills where the job prints per-rank
    step times."""
    sweeps = list(report.get("detectors") or [report])
    out = []
    for rep in sweeps:
        out.append(rep)
        if rep.get("own"):
            out.append({**rep, **rep["own"], "detector": f"drillbit on {_who(rep)}" if len(sweeps) > 1 else OWN,
                        "own": None})
    return out


def _who(rep: dict[str, Any]) -> str:
    return rep.get("detector") or rep["job"]


def curve_svg(report: dict[str, Any], width: int = 640, height: int = 300) -> str:
    """Detection rate (with its interval) against the level for each detector, its reach marked."""
    series = _series(report)
    places: dict[str, float] = {}
    for rep in series:
        for s in rep["levels"]:
            same = next((k for k, o in places.items() if same_level(o, s["order"])), None)
            if same is None:
                places[s["level"]] = s["order"]
    labels = sorted(places, key=places.__getitem__)

    def place(level: dict[str, Any]) -> int:  # the same level written two ways (5%, 0.05) is one place
        return next(i for i, k in enumerate(labels) if same_level(places[k], level["order"]))
    several = len(series) > 1
    rows = (len(series) + 1) // 2 if several else 0
    height += 16 * rows
    left, right, top, bottom = 56, 20, 20, 44 + 16 * rows
    w, h = width - left - right, height - top - bottom
    n = max(1, len(labels) - 1)

    def x(i: int) -> float:
        return left + (w * i / n if len(labels) > 1 else w / 2)

    def y(rate: float) -> float:
        return top + h * (1 - rate)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="11"><rect width="100%" height="100%" fill="white"/>']
    for tick in (0, 0.5, 0.95, 1):
        parts.append(f'<line x1="{left}" x2="{left + w}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
                     f'stroke="{"#f59e0b" if tick == BAR else "#e5e7eb"}"/>'
                     f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick * 100:.0f}%</text>')
    for i, label in enumerate(labels):
        parts.append(f'<text x="{x(i):.1f}" y="{top + h + 16}" text-anchor="middle">{label}</text>')
    for k, rep in enumerate(series):
        parts += _one_curve(rep, k, len(series), labels, place, x, y, (left, top, w, h, height))
    first = series[0]
    parts.append(f'<text x="{left + w / 2:.1f}" y="{top + h + 32}" text-anchor="middle">{report["param"]} '
                 f'({first["drill"]}, {first["repeats"]} repeats a level)</text></svg>')
    return "".join(parts)


def _one_curve(rep: dict[str, Any], k: int, n_series: int, labels: list[str], place, x, y,
               box: tuple[float, float, float, float, float]) -> list[str]:
    """One detector's curve: its points with their intervals, the line, its reach, its legend."""
    left, top, w, h, height = box
    several = n_series > 1
    series = range(n_series)
    parts: list[str] = []
    colour = COLOURS[k % len(COLOURS)]
    shift = (k - (len(series) - 1) / 2) * 7 if several else 0.0  # side by side, not on top of each other
    points = []
    for s in rep["levels"]:
        i = place(s)
        if s["rate"] is None:
            continue
        cx = x(i) + shift
        if s["ci"]:
            parts.append(f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{y(s["ci"][0]):.1f}" y2="{y(s["ci"][1]):.1f}" '
                         f'stroke="{colour}" stroke-opacity="0.3" stroke-width="6"/>')
        points.append(f"{cx:.1f},{y(s['rate']):.1f}")
        parts.append(f'<circle cx="{cx:.1f}" cy="{y(s["rate"]):.1f}" r="4" '
                     f'fill="{"#dc2626" if s["false_blames"] else colour}"/>')
    if points:
        parts.append(f'<polyline points="{" ".join(points)}" fill="none" stroke="{colour}"/>')
    found = rep.get("reach")
    if found is not None:
        i = place(found)
        near_right = x(i) > left + w * 0.7  # the label on the side with room for it
        parts.append(f'<line x1="{x(i) + shift:.1f}" x2="{x(i) + shift:.1f}" y1="{top}" y2="{top + h}" '
                     f'stroke="{colour}" stroke-dasharray="4 3"/><text x="{x(i) + (-4 if near_right else 4):.1f}" '
                     f'y="{top + 12 + 13 * k}" text-anchor="{"end" if near_right else "start"}" fill="{colour}">'
                     f'reach {found["level"]}</text>')
    if several:  # the legend, two to a row under the axis
        lx = left + (k % 2) * (w / 2)
        ly = height - 16 * ((n_series + 1) // 2 - k // 2) + 2
        parts.append(f'<rect x="{lx:.1f}" y="{ly:.1f}" width="10" height="10" fill="{colour}"/>'
                     f'<text x="{lx + 14:.1f}" y="{ly + 9:.1f}">{_esc(_who(rep))}</text>')
    return parts


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _reach_line(rep: dict[str, Any], param: str) -> str:
    found = rep.get("reach")
    who = f"{_who(rep)}: " if rep.get("detector") else ""
    return (f"{who}reach: **{found['level']}** (the smallest {param} detected in ≥ {BAR:.0%} of its repeats, "
            "and every larger one, with no false blame)" if found else
            f"{who}reach: **none**: no level from the largest down was detected in ≥ {BAR:.0%} of its repeats with "
            "no false blame")


def _null_text(null: dict[str, Any] | None) -> str:
    if not null:
        return "—"
    rate = "—" if null["false_per_10k_steps"] is None else f"{null['false_per_10k_steps']:.1f}"
    return (f"{null['false_blames']} false blame(s) in {null['steps']} steps with no fault on ({rate} per 10k steps"
            + (f"; {null['late']} late detection(s) of a healed fault" if null.get("late") else "") + ")")


def page(report: dict[str, Any]) -> Page:
    series = _series(report)
    several = len(series) > 1
    hang = report["param"] == "duration"
    delivered = any(s.get("delivered_median") is not None for rep in series for s in rep["levels"])
    rows: list[list[str]] = []
    tones: list[str | None] = []
    for rep in series:
        for s in rep["levels"]:
            rows.append(([_who(rep)] if several else []) + [
                s["level"], f"{s['detected']}/{s['counted']}", _pct(s["rate"]),
                f"{_pct(s['ci'][0])}–{_pct(s['ci'][1])}" if s["ci"] else "—", _s(s["ttd_median"]), _s(s["ttd_p90"]),
                _pct(s["right_rate"]), str(s["false_blames"]),
                "—" if s["false_per_10k_steps"] is None else f"{s['false_per_10k_steps']:.1f}",
                _pct(s["fleet_tax_median"]), str(len(s["not_counted"]))]
                + ([_pct1(s.get("delivered_median"))] if delivered else [])
                + ([str(s.get("restarts", 0)), str(s.get("false_restarts", 0)), _s(s.get("back_median"))]
                   if hang else []))
            tones.append("pass" if rep.get("reach") and s["order"] >= rep["reach"]["order"] else None)
        null = rep.get("null")
        if null:
            rows.append(([_who(rep)] if several else []) + [
                "null (no fault)", "—", "—", "—", "—", "—", "—", str(null["false_blames"]),
                "—" if null["false_per_10k_steps"] is None else f"{null['false_per_10k_steps']:.1f}", "—", "—"]
                + (["—"] if delivered else []) + (["—", "—", "—"] if hang else []))
            tones.append("fail" if null["false_blames"] else None)
    head = (["detector"] if several else []) + [
        "level", "detected", "rate", "95% CI", "TTD median", "TTD p90", "right rank", "false blames",
        "per 10k steps", "fleet tax", "not counted"] + (["slowed rank's own"] if delivered else []) + (
        ["restarts", "false restarts", "stepping again after"] if hang else [])
    table = Table(head=head, rows=rows, right=frozenset({"detected", "rate", "TTD median", "TTD p90", "false blames",
                                                        "per 10k steps", "fleet tax", "not counted",
                                                        "slowed rank's own", "restarts",
                                                        "false restarts", "stepping again after"}), tones=tones)
    first = series[0]
    how = ("every repeat a segment of one launch, after a quiet gap of "
           f"{first.get('gap_s', 0):g} s with no fault on" if first.get("mode") == "one" else
           "every repeat its own launch of the job")
    blocks: list[Any] = [_reach_line(rep, report["param"]) for rep in series]
    blocks += [f"Levels: {how}; each watched for at most {first.get('window_s', 0):g} s. The null level: "
               + "; ".join(f"{_who(rep) + ': ' if several else ''}{_null_text(rep.get('null'))}" for rep in series)
               + ".", table, Figure(curve_svg(report))]
    if delivered:
        blocks.insert(len(series), "The slowed rank's own: its step times against its peers', while the fault was on "
                      "against just before it (drillbit's own reading): what the fault delivered, which a duty "
                      "cycle's stops can fall short of. The rows of " + OWN + " are that reading as a detector: it "
                      "names a rank whose shift stands 5 standard errors above zero.")
    if hang:
        blocks.insert(len(series), "The hang-length axis: each level a pause that ends by itself. A restart for a "
                      "pause shorter than the job's collective timeout is a false restart: the job would have "
                      "survived the pause, and the restart cost it the time until it stepped again.")
    skipped = [f"{_who(rep) + ' ' if several else ''}{s['level']}: {why}" for rep in series for s in rep["levels"]
               for why in s["not_counted"]]
    skipped += [f"{_who(rep)}: {rep['error']}" for rep in series if rep.get("error")]
    if skipped:
        blocks += ["Repeats that reached no verdict on the detector (counted in no rate):",
                   multirun.Bullets(skipped)]
    jobs = [r for r in series if not str(r.get("detector") or "").startswith(OWN)]
    title = (f"graded sweep: {first['drill']} over {report['param']} on {first['cluster']} / "
             + ", ".join(dict.fromkeys(r["job"] for r in jobs)))
    return Page(title, blocks)


def png_of(svg: Path, png: Path, width: int, height: int) -> str | None:
    """The SVG drawn to PNG by a headless chromium, where there is one; else why not."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        return "no chromium to draw the PNG"
    with tempfile.TemporaryDirectory() as profile:
        try:
            subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                            f"--screenshot={png}", f"--window-size={width},{height}", svg.resolve().as_uri()],
                           capture_output=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"chromium did not draw the PNG ({exc})"
    return None if png.exists() else "chromium did not draw the PNG"


def build(drill: str, cluster: str, job: str, param: str, levels: list[Level],
          outcomes: dict[str, list[dict[str, Any]]], repeats: int, *, null: dict[str, Any] | None = None,
          mode: str = "each", own_null: dict[str, Any] | None = None) -> dict[str, Any]:
    summaries = [summarize(lv, outcomes.get(lv.label, [])) for lv in levels]
    report = {"drill": drill, "cluster": cluster, "job": job, "param": param, "repeats": repeats, "bar": BAR,
              "mode": mode, "levels": summaries, "reach": reach(summaries, blames=param != "duration"), "null": null,
              "runs": {lv.label: [o["run"] for o in outcomes.get(lv.label, [])] for lv in levels}}
    own = {k: [_as_own(o) for o in v] for k, v in outcomes.items()}
    if any(o.get("own") for v in outcomes.values() for o in v):
        own_levels = [summarize(lv, own.get(lv.label, [])) for lv in levels]
        report["own"] = {"detector": OWN, "levels": own_levels, "reach": reach(own_levels), "null": own_null}
    return report


OWN = "drillbit's own reading"


def _as_own(o: dict[str, Any]) -> dict[str, Any]:
    """One repeat as drillbit's own reading saw it: a detector beside the job's."""
    own = o.get("own")
    if not own or own.get("unread"):
        why = (own or {}).get("unread") or "no per-rank step times to read"
        return {**o, "counts": False, "why": o.get("why") or why, "detected": False, "ttd": None, "right": None,
                "false_blames": 0}
    return {**o, **own}


def together(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Several detectors' sweeps of one drill over the same levels, as one report (one table,
    one figure); one sweep stays itself."""
    if len(reports) == 1:
        return reports[0]
    first = reports[0]
    return {"drill": first["drill"], "cluster": first["cluster"], "param": first["param"],
            "detectors": [{**r, "detector": r.get("detector") or r["job"]} for r in reports]}


def write(report: dict[str, Any], reports_dir: str | Path) -> Path:
    first = _series(report)[0]
    folder = new_folder(reports_dir, f"{first['drill']}-{report['param']}", kind="graded")
    svg = curve_svg(report)
    multirun.write(folder, page(report), md="graded.md", html="graded.html", data=report, json_name="graded.json",
                   extra={"graded.svg": svg})
    size = re.search(r'width="(\d+)" height="(\d+)"', svg)
    why = png_of(folder / "graded.svg", folder / "graded.png", *(map(int, size.groups()) if size else (640, 300)))
    if why:
        (folder / "graded.png.txt").write_text(why + "\n")
    return folder


def level_spec(spec, param: str, value: Any):
    """The drill at one level: the fault's parameter set to it (``duration``, the fault's own
    length, is the spec's ``fault.duration``: the hang-length axis)."""
    if param == "duration":
        fault = spec.fault.model_copy(update={"duration": float(value)})
    else:
        fault = spec.fault.model_copy(update={"params": {**spec.fault.params, param: value}})
    # one drill at one level: judged as a drill, not as the sweep a graded drill's grade: asks for
    return spec.model_copy(update={"fault": fault, "grade": None,
                                   "slo": spec.slo.model_copy(update={"reach": None})})


def check_param(resolved, param: str, levels: list[Level] | None = None) -> None:
    """The parameter is the fault's (or duration), and every level one the fault takes: all
    of it said before anything runs (exit 2)."""
    if param != "duration" and param not in _param_names(resolved):
        raise ConfigError(f"--param {param}: {resolved.spec.fault.type} has no parameter {param!r} (it has "
                          f"{', '.join(sorted(_param_names(resolved) | {'duration'}))})")
    wrong = level_problems(get_fault(resolved.spec.fault.type).Params, dict(resolved.spec.fault.params), param,
                           levels or [])
    if wrong:
        raise ConfigError(f"--param {param}: " + "; ".join(wrong))


def run_graded(resolved, param: str, levels: list[Level], repeats: int, *, reports_dir: str | None = None,
               ui=None, one_launch: bool = False, window: float | None = None, gap: float = 10.0,
               seed: int = 0, db: str | None = None, write_report: bool = True) -> tuple[dict[str, Any], Path | None]:
    """Every level, ``repeats`` drills each, then the report: each drill its own launch, or
    (``one_launch``) every drill a segment of one launch with a quiet gap before each."""
    check_param(resolved, param, levels)
    if window is not None:
        resolved = replace(resolved, spec=resolved.spec.model_copy(
            update={"observe": resolved.spec.observe.model_copy(update={"window": window})}))
    if one_launch:
        report = segmented(resolved, param, levels, repeats, reports_dir=reports_dir, ui=ui, gap=gap, seed=seed)
    else:
        outcomes: dict[str, list[dict[str, Any]]] = {}
        nulls: list[dict[str, Any]] = []
        quiet: list[tuple[History, float, float] | None] = []
        stopped: str | None = None
        error: str | None = None
        error_kind: str | None = None
        for lv in levels:
            for i in range(repeats):
                name = f"{resolved.spec.name}-{param}-{lv.label.replace('%', 'pct')}-{i + 1}"
                spec = level_spec(resolved.spec, param, lv.value).model_copy(update={"name": name})
                payload, out = execute(replace(resolved, spec=spec), reports_dir=reports_dir, db=db, ui=ui)
                outcomes.setdefault(lv.label, []).append(
                    {**outcome(payload, *_pause(param, lv.value, resolved)), "run": str(out.run_dir)})
                nulls.append(null_before_fault(out.history, resolved.spec.fault.type))
                quiet.append(_steady_to_fault(out.history))
                if interrupted(payload):  # the operator stopped it: no next drill
                    stopped = payload["reasons"][0].removeprefix("aborted: ")
                    break
                if payload.get("error_kind") in ("harness", "config") and error is None:
                    error, error_kind = payload.get("error"), payload.get("error_kind")
            if stopped:
                break
        histories = [h for h in quiet if h is not None]
        report = build(resolved.spec.name, resolved.cluster, resolved.job, param, levels, outcomes, repeats,
                       null=add_nulls(nulls), mode="each",
                       own_null=_sum_nulls([own_null(h, [(t0, t1)]) for h, t0, t1 in histories])
                       if resolved.spec.fault.type in FAIL_SLOW else None)
        report |= {"aborted": stopped, "error": error, "error_kind": error_kind,
                   "segments_run": sum(len(v) for v in outcomes.values()), "segments_planned": len(levels) * repeats}
    report["window_s"] = float(resolved.spec.observe.window)
    if not write_report:
        return report, None
    return report, write(report, reports_dir or resolved.config.reports_dir)


def _pause(param: str, value: Any, resolved) -> tuple[float | None, float | None]:
    """On the hang-length axis: the pause, and the longest hang the job's collectives wait out
    (its profile's collective timeout; unknown: no restart is called false)."""
    if param != "duration":
        return None, None
    timeouts = getattr(resolved.config.jobs.get(resolved.job), "timeouts", None)
    return float(value), getattr(timeouts, "collective", None)


def _param_names(resolved) -> set[str]:
    return set(get_fault(resolved.spec.fault.type).Params.model_fields)


# --- the null level: the job with no fault on ---------------------------------------------------

def _blames(events: list, slow: bool) -> list:
    """What a detector said with no fault on: a straggler named (fail-slow), else a detection."""
    return [e for e in events if e.kind == ("straggler" if slow else "detect")]


def quiet_stretch(history: History, t0: float, t1: float, slow: bool, late: set[int] | None = None,
                  late_s: float = 0.0) -> dict[str, Any]:
    """One stretch of the job with no fault on, (t0, t1]: its steps (distinct step numbers),
    and what the detector blamed in it. A blame of a rank the fault just left, within
    ``late_s`` of its heal, is a late detection of that fault, not a false blame."""
    events = [e for e in history if t0 < e.t <= t1]
    steps = {Step.of(e).n for e in events if e.kind == "step"}
    false, late_n = 0, 0
    for e in _blames(events, slow):
        rank = e.rank if e.rank is not None else e.data.get("rank")
        if late and rank in late and e.t <= t0 + late_s:
            late_n += 1
        else:
            false += 1
    return {"steps": len(steps), "false_blames": false, "late": late_n, "seconds": max(0.0, t1 - t0)}


def null_before_fault(history: History, fault_type: str) -> dict[str, Any]:
    """A drill's own null level: from its steady state to its fault."""
    stretch = _steady_to_fault(history)
    if stretch is None:
        return {"steps": 0, "false_blames": 0, "late": 0, "seconds": 0.0}
    return quiet_stretch(*stretch, fault_type in FAIL_SLOW)


def _steady_to_fault(history: History) -> tuple[History, float, float] | None:
    steady, inject = history.first("steady"), history.first("fault.inject")
    return (history, steady.t, inject.t) if steady is not None and inject is not None else None


def own_null(history: History, stretches: list[tuple[float, float]]) -> dict[str, Any] | None:
    """drillbit's own reading at the null level: each stretch with no fault on, its first half
    against its second; a rank named there is a false name. None where the job prints no
    per-rank step times."""
    events = [e for e in history if e.kind == "rank.time"]
    if not events:
        return None
    parts = []
    for t0, t1 in stretches:
        named, steps = false_names(events, t0, t1)
        parts.append({"steps": steps, "false_blames": named, "late": 0, "seconds": max(0.0, t1 - t0)})
    return add_nulls(parts)


def _sum_nulls(parts: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    read = [p for p in parts if p is not None]
    return add_nulls(read) if read else None


def add_nulls(parts: list[dict[str, Any]]) -> dict[str, Any]:
    steps = sum(p["steps"] for p in parts)
    false = sum(p["false_blames"] for p in parts)
    return {"steps": steps, "false_blames": false, "late": sum(p["late"] for p in parts),
            "seconds": round(sum(p["seconds"] for p in parts), 1), "stretches": len(parts),
            "false_per_10k_steps": false / steps * 10_000 if steps else None}


# --- one launch, many segments -------------------------------------------------------------------

class GradedLaunch:
    """A graded sweep as one launch for the drill runner (the campaign's stream): before each
    segment a quiet gap with no fault on (the null level: whatever the detector blames there
    is a false blame), then the fault at one level, watched until the detector names it and
    the job makes ``until_steps`` more steps, or the window ends, then healed. Levels are
    shuffled within each round of repeats (seeded), so a drift of the job over the launch
    does not line up with the axis."""

    def __init__(self, spec, param: str, levels: list[Level], repeats: int, gap: float, seed: int,
                 survives: float | None = None) -> None:
        self.spec, self.param, self.levels, self.repeats, self.gap = spec, param, levels, repeats, gap
        self.survives = survives  # the job's collective timeout: a longer pause would not pass by itself
        rng = random.Random(seed)
        self.order: list[tuple[Level, int]] = []
        for r in range(repeats):
            round_ = list(levels)
            rng.shuffle(round_)
            self.order += [(lv, r) for lv in round_]
        self.segments: list[dict[str, Any]] = []
        self.gaps: list[dict[str, Any]] = []

    def __call__(self, runner) -> Iterator["GradedStep"]:
        runner.record("graded.start", param=self.param, levels=[lv.label for lv in self.levels],
                      repeats=self.repeats, gap_s=self.gap, window_s=float(self.spec.observe.window),
                      **({"survives_s": self.survives} if self.survives is not None else {}))
        runner.ui.phase("graded", f"{len(self.order)} segments of {self.spec.fault.type} over {self.param} "
                                  f"({', '.join(lv.label for lv in self.levels)}), a {self.gap:g} s quiet gap before each")
        for index, (lv, r) in enumerate(self.order):
            yield GradedStep(self, index, lv, r)
            if runner.history.first("job.exit") is not None:
                return  # no job left to break
        if self.quiet(runner):  # the last segment's tail: a gap like the others
            runner.record("graded.end", segments=len(self.segments))

    def quiet(self, runner) -> bool:
        """A gap with no fault on; False when the job ended in it."""
        t0 = time.time()
        while time.time() < t0 + self.gap:
            if runner.job_ended() is not None:
                return False
            runner.ui.status(f"quiet gap: {t0 + self.gap - time.time():4.1f} s")
            runner.tick(0.1)
        after = self.segments[-1]["targets"] if self.segments else []
        self.gaps.append({"t0": t0, "t1": time.time(), "after": after})
        runner.record("graded.gap", t0=t0, after=after)
        return True


class GradedStep:
    def __init__(self, stream: GradedLaunch, index: int, level: Level, repeat: int) -> None:
        self.stream, self.index, self.level, self.repeat = stream, index, level, repeat
        self.spec = level_spec(stream.spec, stream.param, level.value)
        self.label = f"#{index + 1} {stream.param}={level.label}: "
        self.t_start = self.t_gap = 0.0

    def due(self, runner) -> bool:
        if not self.stream.quiet(runner):
            return False
        self.t_gap = self.stream.gaps[-1]["t0"]
        self.t_start = time.time()
        runner.record("graded.segment", index=self.index, level=self.level.label, repeat=self.repeat + 1)
        return True

    def watch(self, runner) -> None:
        obs = self.spec.observe
        confirmed = runner.history.last("fault.confirmed")
        t0 = confirmed.t if confirmed else self.t_start
        steady = runner.history.first("steady")
        base = SteadyReached.of(steady).baseline_step_s if steady else None
        duration = self.spec.fault.duration
        seen = -1
        while True:
            now = time.time()
            if duration is not None and now - t0 >= duration:
                duration = None
                runner.record("fault.expire", after_s=self.spec.fault.duration)
                runner.nemesis.heal()
            if len(runner.history) != seen:
                seen = len(runner.history)
                # recovered, and enough steps for drillbit's own reading of the per-rank times
                if recovered(segment(runner.history, self.t_start, now, base), obs.until_steps_after_recovery) \
                        and sum(1 for e in runner.history.of("step") if e.t >= t0) >= MIN_STEPS + 2:
                    return
            if runner.job_ended() is not None:
                return
            if now - t0 >= obs.window:
                return
            runner.ui.status(f"segment {self.index + 1}/{len(self.stream.order)}: +{now - t0:5.1f} s")
            runner.tick(0.2)

    def settle(self, runner, confirmed: bool) -> None:
        runner.nemesis.heal()
        self.stream.segments.append({"index": self.index, "level": self.level.label, "repeat": self.repeat + 1,
                                     "t_gap": self.t_gap, "t_start": self.t_start, "t_end": time.time(),
                                     "confirmed": confirmed,
                                     "targets": [t.rank for t in runner.targets]})
        runner.record("graded.segment.end", index=self.index, level=self.level.label)


def late_ranks(history: History, targets: list[int]) -> set[int]:
    """The ranks a segment's fault hurt: its targets, and where the fault hurts a node (a
    link) every rank on their nodes, as the launch's rank table places them."""
    late = set(targets)
    confirmed = history.of("fault.confirmed")
    table = history.last("job.ranks")
    if table is None or not any(e.data.get("hurts") == "node" for e in confirmed):
        return late
    node_of = {r.get("rank"): r.get("node") for r in table.data.get("ranks") or []}
    nodes = {node_of[r] for r in late if node_of.get(r) is not None}
    return late | {r for r, n in node_of.items() if n in nodes and isinstance(r, int)}


def judge_segments(spec, param: str, levels: list[Level], history: History, segments: list[dict[str, Any]],
                   gaps: list[dict[str, Any]], run_dir: str, survives: float | None = None,
                   ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any], dict[str, Any] | None]:
    """Each segment measured as the drill at its level is (check on its part of the history);
    the gaps as the null level."""
    steady = history.first("steady")
    base = SteadyReached.of(steady).baseline_step_s if steady else None
    by_label = {lv.label: lv for lv in levels}
    slow = spec.fault.type in FAIL_SLOW
    scenarios = scenarios_for(spec)  # a projection SLO's fleet scenario, as a drill of its own loads it
    outcomes: dict[str, list[dict[str, Any]]] = {}
    for seg in segments:
        # from the quiet gap before it: the job's own step time just before the fault, for the fleet tax
        sub = segment(history, seg["t_gap"], seg["t_end"], base)
        result = check(level_spec(spec, param, by_label[seg["level"]].value), sub, scenarios=scenarios)
        payload = {"measurements": result.measurements.model_dump(), "verdict": result.verdict, "exit_code": None,
                   "reasons": result.reasons,
                   "fault": {"type": spec.fault.type, "confirmed": seg["confirmed"]}, "run_dir": run_dir}
        pause = (float(by_label[seg["level"]].value), survives) if param == "duration" else (None, None)
        outcomes.setdefault(seg["level"], []).append({**outcome(payload, *pause), "run": f"{run_dir}#{seg['index'] + 1}"})
    # a blame of the rank just healed, in the first half of the gap after it, is that fault's
    # late detection; later, or of another rank, it is a false one
    nulls = [quiet_stretch(history, g["t0"], g["t1"], slow, late_ranks(history, g["after"]),
                           min(float(spec.observe.window), (g["t1"] - g["t0"]) / 2)) for g in gaps]
    return outcomes, add_nulls(nulls), own_null(history, [(g["t0"], g["t1"]) for g in gaps]) if slow else None


def segmented(resolved, param: str, levels: list[Level], repeats: int, *, reports_dir: str | None, ui, gap: float,
              seed: int) -> dict[str, Any]:
    """The graded sweep in one launch of the job (:class:`GradedLaunch`)."""
    config = resolved.config
    run_dir = new_run_dir(Path(reports_dir or config.reports_dir), f"{resolved.spec.name}-{param}-one-launch")
    cluster = config.clusters[resolved.cluster]
    first = level_spec(resolved.spec, param, levels[0].value)
    # the safeguard covers the whole launch: every segment's window and gap on top of the drill's own
    planned = len(levels) * repeats * (float(resolved.spec.observe.window) + gap + 15.0) + gap
    first = first.model_copy(update={"abort": first.abort.model_copy(
        update={"max_duration": float(first.abort.max_duration) + planned})})
    runner = DrillRunner(first, resolved.cluster, cluster, resolved.job, config.jobs[resolved.job], run_dir, ui,
                         nodes=connect(resolved.cluster, cluster, run_dir))
    (run_dir / "spec.json").write_text(resolved.spec.model_dump_json(by_alias=True, indent=2))
    stream = GradedLaunch(resolved.spec, param, levels, repeats, gap, seed, _pause(param, 0.0, resolved)[1])
    result = runner.run(stream)
    refuse_unstarted(result, run_dir, resolved.cluster)
    history = History.load(run_dir / "history.jsonl")
    stopped = history.last("abort")
    outcomes, null, own = judge_segments(resolved.spec, param, levels, history, stream.segments, stream.gaps,
                                         str(run_dir), _pause(param, 0.0, resolved)[1])
    report = build(resolved.spec.name, resolved.cluster, resolved.job, param, levels, outcomes, repeats, null=null,
                   mode="one", own_null=own)
    report |= {"run_dir": str(run_dir), "gap_s": gap, "seed": seed, "error": result.error,
               "error_kind": result.error_kind,
               "aborted": stopped.data.get("reason", "stopped") if stopped is not None else None,
               "segments_run": len(stream.segments), "segments_planned": len(stream.order)}
    write_into(report, run_dir)
    return report


def write_into(report: dict[str, Any], folder: Path) -> None:
    """The sweep's report in the launch's own folder too (``drill report`` re-judges it there)."""
    multirun.write(folder, page(report), md="graded.md", html="graded.html", data=report, json_name="graded.json",
                   extra={"graded.svg": curve_svg(report)})


def rejudge(run_dir: Path, spec, history: History, cluster: str, job: str,
            survives: float | None = None) -> dict[str, Any]:
    """A one-launch sweep's folder judged again from its history (``drill report``): the
    segments and gaps as its events recorded them, the levels and repeats as graded.start
    said; the report rewritten in the folder."""
    start = history.first("graded.start")
    if start is None:
        raise ConfigError(f"{run_dir}: its history has no graded.start; it is not a one-launch sweep's folder")
    name, levels = parse_levels(f"{start.data['param']}=" + ",".join(start.data["levels"]))
    segments, gaps = [], []
    current: dict[str, Any] | None = None
    for e in history:
        if e.kind == "graded.gap":
            gaps.append({"t0": e.data["t0"], "t1": e.t, "after": list(e.data.get("after") or [])})
        elif e.kind == "graded.segment" and gaps:
            current = {"index": e.data["index"], "level": e.data["level"], "repeat": e.data["repeat"],
                       "t_gap": gaps[-1]["t0"], "t_start": e.t, "confirmed": False, "targets": []}
        elif current is not None and e.kind == "fault.inject" and e.rank is not None:
            current["targets"].append(e.rank)
        elif current is not None and e.kind == "fault.confirmed":
            current["confirmed"] = True
        elif current is not None and e.kind == "graded.segment.end":
            segments.append({**current, "t_end": e.t})
            current = None
    if survives is None:
        survives = start.data.get("survives_s")
    outcomes, null, own = judge_segments(spec, name, levels, history, segments, gaps, str(run_dir), survives)
    report = build(spec.name, cluster, job, name, levels, outcomes, int(start.data["repeats"]), null=null,
                   mode="one", own_null=own)
    end = history.last("drill.end")
    stopped = history.last("abort")
    report |= {"run_dir": str(run_dir), "gap_s": float(start.data["gap_s"]), "window_s": float(start.data["window_s"]),
               "error": end.data.get("error") if end else None, "error_kind": end.data.get("error_kind") if end else None,
               "aborted": stopped.data.get("reason", "stopped") if stopped is not None else None,
               "segments_run": len(segments), "segments_planned": len(levels) * int(start.data["repeats"])}
    write_into(report, run_dir)
    return report


# --- a graded drill: drill run and drill gate judge its reach -------------------------------------

def judge_reach(report: dict[str, Any], slo) -> tuple[str, list[str], dict[str, Any]]:
    """The verdict of a graded drill on its ``slo.reach``: pass only when every level from the
    limit up was detected in >= 95% of its repeats with no false blame and the null level
    held; fail when the sweep shows otherwise; inconclusive when a level it rests on reached
    no verdict, or no step ran with the fault off (the null level unknown)."""
    at_most = slo.at_most_order
    label = str(slo.at_most)
    found = report.get("reach")
    null = report.get("null") or {}
    reasons: list[str] = []
    verdict = "pass"
    gating = [s for s in report["levels"] if s["order"] >= at_most or same_level(s["order"], at_most)]
    blind = [s for s in gating if s["counted"] and s["rate"] is not None and (s["rate"] < BAR or s["false_blames"])]
    short = [s for s in gating if s["counted"] < s["repeats"] or s["repeats"] < report.get("repeats", 0)]
    if blind:
        verdict = "fail"
        for s in blind:
            reasons.append(f"{report['param']} {s['level']} was detected in {s['detected']} of {s['counted']} repeats"
                           + (f" and {s['false_blames']} healthy rank(s) were blamed" if s["false_blames"] else "")
                           + f" (the reach must be {label} or less: every level from it up detected in ≥ {BAR:.0%})")
    elif not gating or not any(same_level(s["order"], at_most) for s in gating):
        verdict = "inconclusive"
        reasons.append(f"the sweep drilled no {report['param']} of {label}, the level the reach is judged at")
    elif short:
        verdict = "inconclusive"
        reasons.append("; ".join(f"{s['level']}: {s['counted']} of the {report.get('repeats', s['repeats'])} "
                                 "repeats reached a verdict on the detector" for s in short)
                       + f", so whether the reach is {label} or less is not established")
    planned, ran = report.get("segments_planned"), report.get("segments_run")
    if isinstance(planned, int) and isinstance(ran, int) and ran < planned and verdict == "pass":
        verdict = "inconclusive"
        reasons.append(f"the launch ended after {ran} of its {planned} segments")
    limit = slo.false_blames_per_10k_steps
    rate = null.get("false_per_10k_steps")
    if not null.get("steps"):
        verdict = "fail" if verdict == "fail" else "inconclusive"
        reasons.append("no step ran with the fault off, so the false blames at the null level are unknown")
    elif rate is not None and rate > limit:
        verdict = "fail"
        reasons.append(f"{null['false_blames']} false blame(s) in {null['steps']} steps with no fault on "
                       f"({rate:.1f} per 10,000 steps, at most {limit:g} allowed)")
    if verdict == "pass":
        reasons.append(f"reach {found['level'] if found else '—'} (at most {label}): every level from "
                       f"{label} up detected in ≥ {BAR:.0%} of its repeats with no false blame; {null['false_blames']} "
                       f"false blame(s) in {null['steps']} steps with no fault on")
    status = {"pass": "pass", "fail": "fail"}.get(verdict, "unknown")
    slo_row = {"name": "reach", "measurement": "reach", "limit": label,
               "measured": found["level"] if found else None, "status": status, "detail": "; ".join(reasons)}
    return verdict, reasons, slo_row


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).isoformat()


@dataclass
class GradedOutcome:
    run_dir: Path


def execute_graded(r, *, reports_dir: str | None = None, db: str | None = None, ui=None):
    """``drill run`` / ``drill gate`` of a drill with ``grade:``: the sweep, judged on its reach,
    beside the last passing sweep of the same drill, cluster and job (the before and after
    curves); recorded in the results store like any drill."""
    grade = r.spec.grade
    name, levels = parse_levels(f"{grade.param}=" + ",".join(str(v) for v in grade.levels))
    reports = Path(reports_dir or r.config.reports_dir)
    trust.check(reports, "reports folder")
    started = time.time()
    report, _ = run_graded(r, name, levels, grade.repeats, reports_dir=reports_dir, ui=ui, one_launch=grade.one_launch,
                           gap=float(grade.gap), seed=grade.seed, db=db, write_report=False)
    with Store(store_path(r.config, reports_dir, db)) as store:
        before = store.last_passing(r.spec.name, r.cluster, r.job)
        error, kind = report.get("error"), report.get("error_kind")
        if report.get("aborted"):  # the operator stopped it: said as every drill says it
            verdict, reasons, slo_row = "aborted", [f"aborted: {report['aborted']}"], None
        elif kind == "inconclusive":  # the job never let the sweep begin
            verdict, reasons, slo_row = "inconclusive", [error or "the job never let the sweep begin"], None
        elif error or kind:
            verdict, reasons, slo_row = "aborted", [error or "the sweep ended early"], None
        else:
            verdict, reasons, slo_row = judge_reach(report, r.spec.slo.reach)
        report |= {"verdict": verdict}
        shown = [report]  # the job's detector by its job's name, and drillbit's own reading
        if before and isinstance(before.get("graded"), dict):
            shown = [{**before["graded"], "detector": f"last pass ({(before.get('finished_at') or '')[:16]})"},
                     {**report, "detector": "this run"}]
        folder = write(together(shown), reports)
        payload = {"drill": r.spec.name, "cluster": r.cluster, "job": r.job, "verdict": verdict,
                   "exit_code": exitcodes.exit_code(verdict, kind), "reasons": reasons, "error": error,
                   "error_kind": kind, "measurements": {}, "slos": [slo_row] if slo_row else [],
                   "fault": {"type": r.spec.fault.type, "params": dict(r.spec.fault.params), "confirmed": True},
                   "started_at": _iso(started), "finished_at": _iso(time.time()), "run_dir": str(folder),
                   "graded": report, "before": before.get("graded") if before else None}
        (folder / "result.json").write_text(json.dumps(payload, indent=2, default=str))
        if payload["exit_code"] != exitcodes.USAGE:  # a refusal is no verdict: no row, no figure
            store.record(payload, str(folder))
            publish_metrics(reports, store, os.environ.get("DRILLBIT_PUSHGATEWAY"))
    for sent in notify.notify_all(r.config.notify, payload, folder):
        if not sent.get("sent"):
            print(f"drillbit: the webhook at {sent['host']} was not told of {r.spec.name}'s {payload['verdict']}: "
                  f"{sent.get('error')}", file=sys.stderr)
    return payload, GradedOutcome(folder)


def execute_drill(r, *, reports_dir: str | None = None, db: str | None = None, ui=None):
    """Run one drill as ``drill run``, a suite, a repeat or a comparison does: a graded drill
    (``grade:``) as its sweep, judged on its reach; any other as session.execute runs it."""
    if r.spec.grade is not None:
        return execute_graded(r, reports_dir=reports_dir, db=db, ui=ui)
    return execute(r, reports_dir=reports_dir, db=db, ui=ui)


def report_folder(run_dir: Path) -> dict[str, Any]:
    """``drill report``: a one-launch graded sweep's folder judged again from its history
    (``{"graded_report": …}``), any other run folder as session.rerender judges it."""
    run_dir = Path(run_dir)
    trust.check(run_dir, "run folder")
    try:
        history = History.load(run_dir / "history.jsonl")
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{run_dir} is not a run folder: {exc}") from exc
    if history.first("graded.start") is None:
        return rerender(run_dir)
    try:
        spec = DrillSpec.model_validate_json(read_file(run_dir / "spec.json"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{run_dir} is not a run folder: {exc}") from exc
    start = history.first("drill.start")
    report = rejudge(run_dir, spec, history, start.data["cluster"] if start else "?",
                     start.data["job"] if start else "?")
    return {"graded_report": report, "exit_code": exitcodes.PASS}
