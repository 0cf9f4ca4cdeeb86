"""The timeline chart: steps against time, with the fault, detection, restart, restore and
first step marked and the badput shaded — as inline SVG, so a report needs no network."""
from __future__ import annotations

from typing import Callable

from html import escape

from drillbit.judging.checks.goodput import ledger
from drillbit.judging.checks.recovery import Measurements, measure
from drillbit.core.history import History

MARKS = (  # (event kind or measurement, label, colour)
    ("fault", "fault", "#dc2626"),
    ("detect", "detect", "#ea580c"),
    ("restart", "restart", "#9333ea"),
    ("restore", "restore", "#16a34a"),
    ("first_step", "first step", "#0891b2"),
)
SHADES = {"detection": "#fecaca", "infrastructure_recovery": "#e9d5ff", "checkpoint_restore": "#bbf7d0",
          "slowdown": "#fde68a"}
STEP_COLOUR = "#2563eb"


def _marks(m: Measurements) -> dict[str, float]:
    """The moments the checks measured (the fault, detection, restart, restore, first step)."""
    if m.t_fault is None:
        return {}
    times = {"detect": m.time_to_straggler if m.expects == "slow" else m.time_to_detect,
             "restart": m.time_to_restart, "restore": m.time_to_restore, "first_step": m.time_to_first_step}
    return {"fault": m.t_fault, **{k: m.t_fault + v for k, v in times.items() if v is not None}}


def _step_lines(steps: list[tuple[float, int]], x: Callable[[float], float], y: Callable[[float], float]) -> list[str]:
    """One polyline per monotone run of steps, so a restore shows as a drop."""
    runs: list[list[tuple[float, int]]] = [[]]
    for t, n in steps:
        if runs[-1] and n <= runs[-1][-1][1]:
            runs.append([])
        runs[-1].append((t, n))
    parts = []
    for run in runs:
        if len(run) == 1:
            t, n = run[0]
            parts.append(f'<circle cx="{x(t):.1f}" cy="{y(n):.1f}" r="2.5" fill="{STEP_COLOUR}"/>')
        elif run:
            pts = " ".join(f"{x(t):.1f},{y(n):.1f}" for t, n in run)
            parts.append(f'<polyline class="steps" points="{pts}" fill="none" stroke="{STEP_COLOUR}" stroke-width="2.5"/>')
    return parts


def _mark_lines(marks: dict[str, float], x: Callable[[float], float], top: float, ph: float,
                right_edge: float) -> list[str]:
    """Vertical marks; each label goes in the first row where it overlaps no label already
    placed (restore and first step are often a fraction of a second apart), and to the left
    of its line when it would run off the chart."""
    parts = []
    rows: list[list[tuple[float, float]]] = []
    for key, label, colour in MARKS:
        if key not in marks:
            continue
        xm = x(marks[key])
        parts.append(f'<line class="mark" x1="{xm:.1f}" y1="{top}" x2="{xm:.1f}" y2="{top + ph}" stroke="{colour}" '
                     f'stroke-width="2" stroke-dasharray="5 3"/>')
        text = label if key == "fault" else f"{label} +{marks[key] - marks['fault']:.1f}s"
        w = 7.0 * len(text) + 6  # generous width of 12 px sans-serif
        anchor_end = xm + 3 + w > right_edge
        lo, hi = (xm - 3 - w, xm) if anchor_end else (xm, xm + 3 + w)
        row = next((i for i, spans in enumerate(rows) if all(hi < a or lo > b for a, b in spans)), len(rows))
        if row == len(rows):
            rows.append([])
        rows[row].append((lo, hi))
        tx, anchor = (xm - 3, "end") if anchor_end else (xm + 3, "start")
        parts.append(f'<text class="mark-label" x="{tx:.1f}" y="{top + 14 + 14 * row}" fill="{colour}" '
                     f'text-anchor="{anchor}">{escape(text)}</text>')
    return parts


def timeline_svg(history: History, measurements: Measurements | None = None, width: int = 900,
                 height: int = 320) -> str:
    steps = [(s.t, s.n) for s in history.steps()]  # a step line whose payload does not read is not drawn
    start_ev = history.first("job.launch") or history.first("drill.start")
    end_ev = history.first("observe.end") or history.last("drill.end")
    if not steps or start_ev is None or end_ev is None:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="60" role="img">'
                '<text x="10" y="30" font-family="sans-serif">no steps were observed</text></svg>')
    t0, t1 = start_ev.t, max(end_ev.t, steps[-1][0])
    left, right, top, bottom = 56, 16, 28, 40
    pw, ph = width - left - right, height - top - bottom
    n_max = max(n for _, n in steps) or 1

    def x(t: float) -> float:
        return left + pw * (t - t0) / max(t1 - t0, 1e-9)

    def y(n: float) -> float:
        return top + ph * (1 - n / n_max)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11" role="img" '
             f'aria-label="training steps over time">',
             f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#ffffff" stroke="#d1d5db"/>']
    # the marks are the measurements the checks made, and the shading is the ledger's own
    # intervals: the chart never picks events of its own (it once marked torchrun's restart
    # while the table gave the job's)
    m = measurements if measurements is not None else measure(history)
    marks = _marks(m)
    led = ledger(history, m)
    for name, a, b in (led.spans if led is not None else []):
        if b > a:
            parts.append(f'<rect class="badput" x="{x(a):.1f}" y="{top}" width="{max(x(b) - x(a), 1):.1f}" '
                         f'height="{ph}" fill="{SHADES[name]}" opacity="0.8"><title>{escape(name)}: '
                         f'{b - a:.2f} s</title></rect>')
    # axes
    for i in range(6):
        n = n_max * i / 5
        parts.append(f'<text x="{left - 6}" y="{y(n) + 4:.1f}" text-anchor="end" fill="#374151">{n:.0f}</text>')
        t = t0 + (t1 - t0) * i / 5
        parts.append(f'<text x="{x(t):.1f}" y="{height - bottom + 16}" text-anchor="middle" fill="#374151">'
                     f'{t - t0:.0f}s</text>')
    parts.append(f'<text x="{left}" y="16" fill="#111827" font-weight="bold">step</text>')
    parts += _step_lines(steps, x, y)
    parts += _mark_lines(marks, x, top, ph, right_edge=left + pw)
    parts.append(f'<text x="{left + pw / 2:.0f}" y="{height - 6}" text-anchor="middle" fill="#374151">'
                 'seconds since launch</text></svg>')
    return "".join(parts)
