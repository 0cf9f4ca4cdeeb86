"""Trends across runs (``drill results --html PAGE``, also ``drill history --html``): one
self-contained page, one plot per drill and measurement over its runs, each run a dot (green
pass, red fail, grey otherwise), and the current baseline shaded — the last 10 passing
runs' median up to the threshold a regression must cross (judging/checks/baseline.py, with the
gate's default allowance of 20%). No script, no external asset: it opens from a CI artefact.
"""
from __future__ import annotations

import html
from typing import Any

from drillbit.judging.checks.baseline import RUNS, Baseline
from drillbit.judging.checks.recovery import Measurements

PLOTTED = {"time_to_detect": "s", "time_to_first_step": "s", "lost_steps": "steps", "goodput": ""}
COLORS = {"pass": "#16a34a", "fail": "#dc2626"}
OTHER = "#9ca3af"
BAND = "#dbeafe"
W, H, PAD = 560, 170, 36
ALLOWANCE = 0.2


def series(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """Runs grouped by (drill, cluster, job), oldest first."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: r["id"]):
        groups.setdefault((row["drill"], row["cluster"], row["job"]), []).append(row)
    return groups


def _band(runs: list[dict[str, Any]], name: str) -> tuple[float, float] | None:
    passing = [r for r in runs if r["verdict"] == "pass"][-RUNS:]
    samples = [Measurements.model_validate(r["measurements"]) for r in passing]
    values = [getattr(s, name) for s in samples if getattr(s, name) is not None]
    if not values:
        return None
    verdict = Baseline(runs=[r["id"] for r in passing], samples=samples).judge(name, values[-1], ALLOWANCE)
    if verdict is None:
        return None
    return (verdict.median, verdict.threshold)


def plot(runs: list[dict[str, Any]], name: str, unit: str) -> str | None:
    points = [(i, r) for i, r in enumerate(runs) if isinstance(r["measurements"].get(name), (int, float))]
    if not points:
        return None
    band = _band(runs, name)
    values = [float(r["measurements"][name]) for _, r in points] + (list(band) if band else [])
    lo, hi = min(0.0, min(values)), max(values) or 1.0
    hi = hi + 0.1 * (hi - lo or 1.0)
    n = max(len(runs) - 1, 1)

    def x(i: int) -> float:
        return PAD + (W - 2 * PAD) * (i / n if len(runs) > 1 else 0.5)

    def y(v: float) -> float:
        return H - PAD + (PAD * 2 - H) * ((v - lo) / (hi - lo))

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" role="img" '
             f'aria-label="{html.escape(name)} over runs">',
             f'<rect x="0" y="0" width="{W}" height="{H}" fill="#ffffff"/>']
    if band is not None:
        top, bottom = sorted((y(band[0]), y(band[1])))
        parts.append(f'<rect class="band" x="{PAD}" y="{top:.1f}" width="{W - 2 * PAD}" height="{max(bottom - top, 2):.1f}" '
                     f'fill="{BAND}"><title>baseline: median {band[0]:.3g}, regression beyond {band[1]:.3g}</title></rect>')
    parts.append(f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="#6b7280"/>')
    parts.append(f'<text x="4" y="{PAD - 8}" font-size="11" fill="#374151">{hi:.3g} {html.escape(unit)}</text>')
    parts.append(f'<text x="4" y="{H - PAD + 4}" font-size="11" fill="#374151">{lo:.3g}</text>')
    path = " ".join(f"{x(i):.1f},{y(float(r['measurements'][name])):.1f}" for i, r in points)
    parts.append(f'<polyline points="{path}" fill="none" stroke="#93c5fd" stroke-width="1.5"/>')
    for i, r in points:
        v = float(r["measurements"][name])
        color = COLORS.get(r["verdict"], OTHER)
        parts.append(f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="5" fill="{color}">'
                     f'<title>run {r["id"]} ({html.escape(r["verdict"])}, {html.escape(str(r["started_at"] or ""))[:19]}): '
                     f'{v:.4g} {html.escape(unit)}</title></circle>')
    parts.append("</svg>")
    return "".join(parts)


def page(rows: list[dict[str, Any]]) -> str:
    body = []
    for (drill, cluster, job), runs in series(rows).items():
        passes = sum(1 for r in runs if r["verdict"] == "pass")
        body.append(f"<section><h2>{html.escape(drill)} <small>on {html.escape(cluster)}, job "
                    f"{html.escape(job)}: {passes} of {len(runs)} runs passed</small></h2><div class=plots>")
        for name, unit in PLOTTED.items():
            svg = plot(runs, name, unit)
            if svg is not None:
                body.append(f"<figure><figcaption>{html.escape(name)}</figcaption>{svg}</figure>")
        body.append("</div></section>")
    legend = (f'<p class=legend><span style="color:{COLORS["pass"]}">●</span> pass '
              f'<span style="color:{COLORS["fail"]}">●</span> fail <span style="color:{OTHER}">●</span> other '
              f'<span style="background:{BAND}">&nbsp;&nbsp;&nbsp;</span> baseline: the last {RUNS} passing runs\' '
              f"median up to where a regression begins ({ALLOWANCE:.0%} allowance, their spread, the floor)</p>")
    return ("<!doctype html><html><head><meta charset=utf-8><title>drillbit: trends</title><style>"
            "body{font:14px system-ui,sans-serif;margin:24px;color:#111827}h2 small{font-weight:normal;color:#6b7280}"
            ".plots{display:flex;flex-wrap:wrap;gap:12px}figure{margin:0}figcaption{font-size:12px;color:#374151}"
            "</style></head><body><h1>drillbit: recovery trends</h1>" + legend + "".join(body)
            + (f"<p>{len(rows)} run(s).</p>" if rows else "<p>No runs in the results store yet.</p>")
            + "</body></html>\n")


def rows_with_measurements(store, limit: int) -> list[dict[str, Any]]:
    out = []
    for row in store.runs(None, limit):
        result = store.result(row["id"])
        out.append({**row, "measurements": (result or {}).get("measurements", {})})
    return out

