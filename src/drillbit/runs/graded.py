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

import math
import re
import shutil
import statistics
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drillbit.core.errors import ConfigError
from drillbit.core.runfolder import new_folder
from drillbit.faults import get as get_fault
from drillbit.runs.session import execute
from drillbit.runs.sweep import with_params
from drillbit.judging.report import multirun
from drillbit.judging.report.multirun import Figure, Page, Table

BAR = 0.95  # "detected in >= 95% of repeats"
FAIL_SLOW = {"slow-rank", "throttle-clocks", "lossy-link", "slow-link"}


@dataclass(frozen=True)
class Level:
    label: str   # as the user wrote it: "5%"
    value: Any   # what the fault's parameter gets: 0.05
    order: float  # where it sits on the axis


_NUMBER = re.compile(r"^(?P<n>[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(?P<unit>%|ms|s|m)?$")


def parse_levels(text: str) -> tuple[str, list[Level]]:
    """``NAME=V1,V2,…`` -> the parameter and its levels, in the order of the axis. A value is a
    number, a percentage (``5%`` -> 0.05) or a duration (``500ms``, ``15s``, ``2m`` -> seconds);
    every mistake is said at once (ConfigError, exit 2)."""
    name, sep, rest = text.partition("=")
    name = name.strip()
    problems = []
    if not sep or not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        problems.append(f"--param {text!r}: say NAME=V1,V2,… (a fault parameter, e.g. slowdown=1%,2%,5%)")
    levels: list[Level] = []
    for raw in [v.strip() for v in rest.split(",")] if sep else []:
        m = _NUMBER.match(raw)
        if not m:
            problems.append(f"--param {name}: {raw!r} is not a number, a percentage (5%) or a duration (15s)")
            continue
        n = float(m.group("n"))
        unit = m.group("unit")
        value = n / 100 if unit == "%" else n / 1000 if unit == "ms" else n * 60 if unit == "m" else n
        if not math.isfinite(value):
            problems.append(f"--param {name}: {raw!r} is not finite")
            continue
        levels.append(Level(raw, int(value) if unit is None and n.is_integer() and "." not in raw
                            and "e" not in raw.lower() else value, value))
    if sep and not levels and not problems:
        problems.append(f"--param {name}: no levels")
    if len({lv.order for lv in levels}) != len(levels):
        problems.append(f"--param {name}: a level is given twice")
    if problems:
        raise ConfigError("; ".join(problems))
    return name, sorted(levels, key=lambda lv: lv.order)


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


def outcome(payload: dict[str, Any]) -> dict[str, Any]:
    """One repeat, read from its result.json: whether it counts, whether the detector caught the
    fault, when, whom it named, and what the slowdown cost."""
    m = payload.get("measurements") or {}
    fault = payload.get("fault") or {}
    kind = fault.get("type")
    slow = kind in FAIL_SLOW
    ttd = _finite(m.get("time_to_straggler") if slow else m.get("time_to_detect"))
    attribution = m.get("attribution") or {}
    false = list(attribution.get("false_blames") or [])
    if slow and m.get("straggler_correct") is False and m.get("straggler_rank") is not None:
        false.append(m["straggler_rank"])
    baseline = _finite(m.get("baseline_step_s"))
    observed = _finite(m.get("observed_s"))
    steps = observed / baseline if baseline and observed and baseline > 0 else None
    why = None
    if payload.get("exit_code") in (2, 4, 5) or payload.get("verdict") in ("aborted",):
        why = f"{payload.get('verdict')} (exit {payload.get('exit_code')}): {payload.get('error') or ''}".strip()
    elif not fault.get("confirmed"):
        why = "the fault was not confirmed"
    return {"run": payload.get("run_dir"), "counts": why is None, "why": why, "detected": ttd is not None,
            "ttd": ttd, "right": m.get("straggler_correct") if slow else attribution.get("correct"),
            "false_blames": len(set(false)), "steps": steps, "fleet_tax": _finite(m.get("fleet_tax")),
            "verdict": payload.get("verdict")}


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
    return {"level": level.label, "value": level.value, "order": level.order, "repeats": len(outcomes),
            "counted": n, "detected": k, "rate": k / n if n else None, "ci": list(ci) if ci else None,
            "ttd_median": statistics.median(ttd) if ttd else None, "ttd_p90": _p90(ttd) if ttd else None,
            "right_rate": sum(1 for r in right if r) / len(right) if right else None,
            "false_blames": false, "false_per_10k_steps": false / steps * 10_000 if steps else None,
            "fleet_tax_median": statistics.median(taxes) if taxes else None,
            "not_counted": [o["why"] for o in outcomes if not o["counts"]]}


def reach(levels: list[dict[str, Any]], bar: float = BAR) -> dict[str, Any] | None:
    """The smallest level from which every larger one met the bar (rate >= bar over counted
    repeats, no false blame); None when the largest did not."""
    found = None
    for s in sorted(levels, key=lambda s: s["order"], reverse=True):
        if not s["counted"] or s["rate"] is None or s["rate"] < bar or s["false_blames"]:
            break
        found = s
    return found


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{v * 100:.0f}%"


def _s(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f} s"


def curve_svg(report: dict[str, Any], width: int = 640, height: int = 300) -> str:
    """Detection rate (with its interval) against the level, the reach marked."""
    levels = report["levels"]
    left, right, top, bottom = 56, 20, 20, 44
    w, h = width - left - right, height - top - bottom
    n = max(1, len(levels) - 1)

    def x(i: int) -> float:
        return left + (w * i / n if len(levels) > 1 else w / 2)

    def y(rate: float) -> float:
        return top + h * (1 - rate)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="11"><rect width="100%" height="100%" fill="white"/>']
    for tick in (0, 0.5, 0.95, 1):
        parts.append(f'<line x1="{left}" x2="{left + w}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
                     f'stroke="{"#f59e0b" if tick == BAR else "#e5e7eb"}"/>'
                     f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick * 100:.0f}%</text>')
    points = []
    for i, s in enumerate(levels):
        parts.append(f'<text x="{x(i):.1f}" y="{top + h + 16}" text-anchor="middle">{s["level"]}</text>')
        if s["rate"] is None:
            continue
        if s["ci"]:
            parts.append(f'<line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{y(s["ci"][0]):.1f}" y2="{y(s["ci"][1]):.1f}" '
                         'stroke="#93c5fd" stroke-width="6"/>')
        points.append(f"{x(i):.1f},{y(s['rate']):.1f}")
        colour = "#dc2626" if s["false_blames"] else "#1d4ed8"
        parts.append(f'<circle cx="{x(i):.1f}" cy="{y(s["rate"]):.1f}" r="4" fill="{colour}"/>')
    if points:
        parts.append(f'<polyline points="{" ".join(points)}" fill="none" stroke="#1d4ed8"/>')
    found = report.get("reach")
    if found is not None:
        i = next(i for i, s in enumerate(levels) if s["level"] == found["level"])
        near_right = x(i) > left + w * 0.7  # the label on the side with room for it
        parts.append(f'<line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{top}" y2="{top + h}" stroke="#16a34a" '
                     f'stroke-dasharray="4 3"/><text x="{x(i) + (-4 if near_right else 4):.1f}" y="{top + 12}" '
                     f'text-anchor="{"end" if near_right else "start"}" fill="#16a34a">reach {found["level"]}</text>')
    parts.append(f'<text x="{left + w / 2:.1f}" y="{height - 6}" text-anchor="middle">{report["param"]} '
                 f'({report["drill"]}, {report["repeats"]} repeats a level)</text></svg>')
    return "".join(parts)


def page(report: dict[str, Any]) -> Page:
    found = report.get("reach")
    head = (f"reach: **{found['level']}** (the smallest {report['param']} detected in ≥ {BAR:.0%} of its repeats, "
            "and every larger one, with no false blame)" if found else
            f"reach: **none**: no level from the largest down was detected in ≥ {BAR:.0%} of its repeats with no "
            "false blame")
    rows = [[s["level"], f"{s['detected']}/{s['counted']}", _pct(s["rate"]),
             f"{_pct(s['ci'][0])}–{_pct(s['ci'][1])}" if s["ci"] else "—", _s(s["ttd_median"]), _s(s["ttd_p90"]),
             _pct(s["right_rate"]), str(s["false_blames"]),
             "—" if s["false_per_10k_steps"] is None else f"{s['false_per_10k_steps']:.1f}",
             _pct(s["fleet_tax_median"]), str(len(s["not_counted"]))] for s in report["levels"]]
    table = Table(head=["level", "detected", "rate", "95% CI", "TTD median", "TTD p90", "right rank",
                        "false blames", "per 10k steps", "fleet tax", "not counted"],
                  rows=rows, right=frozenset({"detected", "rate", "TTD median", "TTD p90", "false blames",
                                              "per 10k steps", "fleet tax", "not counted"}))
    blocks: list[Any] = [head, table, Figure(curve_svg(report))]
    skipped = [f"{s['level']}: {why}" for s in report["levels"] for why in s["not_counted"]]
    if skipped:
        blocks += ["Repeats that reached no verdict on the detector (counted in no rate):",
                   multirun.Bullets(skipped)]
    return Page(f"graded sweep: {report['drill']} over {report['param']} on {report['cluster']} / {report['job']}",
                blocks)


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
          outcomes: dict[str, list[dict[str, Any]]], repeats: int) -> dict[str, Any]:
    summaries = [summarize(lv, outcomes.get(lv.label, [])) for lv in levels]
    return {"drill": drill, "cluster": cluster, "job": job, "param": param, "repeats": repeats, "bar": BAR,
            "levels": summaries, "reach": reach(summaries),
            "runs": {lv.label: [o["run"] for o in outcomes.get(lv.label, [])] for lv in levels}}


def write(report: dict[str, Any], reports_dir: str | Path) -> Path:
    folder = new_folder(reports_dir, f"{report['drill']}-{report['param']}", kind="graded")
    svg = curve_svg(report)
    multirun.write(folder, page(report), md="graded.md", html="graded.html", data=report, json_name="graded.json",
                   extra={"graded.svg": svg})
    why = png_of(folder / "graded.svg", folder / "graded.png", 640, 300)
    if why:
        (folder / "graded.png.txt").write_text(why + "\n")
    return folder


def run_graded(resolved, param: str, levels: list[Level], repeats: int, *, reports_dir: str | None = None,
               ui=None) -> tuple[dict[str, Any], Path]:
    """Every level, ``repeats`` drills each (each its own launch), then the report."""
    if param not in resolved.spec.fault.params and param not in _param_names(resolved):
        raise ConfigError(f"--param {param}: {resolved.spec.fault.type} has no parameter {param!r} (it has "
                          f"{', '.join(sorted(_param_names(resolved)))})")
    outcomes: dict[str, list[dict[str, Any]]] = {}
    for lv in levels:
        for i in range(repeats):
            name = f"{resolved.spec.name}-{param}-{lv.label.replace('%', 'pct')}-{i + 1}"
            payload, out = execute(with_params(resolved, name=name, **{param: lv.value}), reports_dir=reports_dir,
                                   ui=ui)
            outcomes.setdefault(lv.label, []).append({**outcome(payload), "run": str(out.run_dir)})
    report = build(resolved.spec.name, resolved.cluster, resolved.job, param, levels, outcomes, repeats)
    return report, write(report, reports_dir or resolved.config.reports_dir)


def _param_names(resolved) -> set[str]:
    return set(get_fault(resolved.spec.fault.type).Params.model_fields)
