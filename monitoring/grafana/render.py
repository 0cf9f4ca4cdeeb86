"""Draw drillbit's Grafana dashboard from its JSON without a Grafana: every panel's queries run
on a real Prometheus (instant or range, as the panel asks), drawn as an HTML page of SVG
charts in the dashboard's own grid — and, with --png, photographed by a headless Chromium.
It draws the panel kinds the dashboard uses (table, state timeline, time series with the
baseline band, bar chart, stat) and only those.

    python monitoring/grafana/render.py --prometheus http://127.0.0.1:9090 \\
        --start 2026-12-02T07:20:00Z --end 2026-12-02T07:40:00Z --html dash.html --png dash.png
"""
from __future__ import annotations

import argparse
import html
import json
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).parent
COL = 64  # px per grid column (24 columns)
ROW = 34  # px per grid row
PALETTE = ["#73bf69", "#f2cc0c", "#5794f2", "#ff780a", "#b877d9", "#f2495c", "#37872d", "#8ab8ff", "#fade2a", "#ca95e5"]
NAMED = {"green": "#73bf69", "red": "#f2495c", "yellow": "#fade2a", "orange": "#ff9830", "purple": "#b877d9",
         "dark-purple": "#8f3bb8"}


def query(base: str, path: str, params: dict) -> list[dict]:
    url = f"{base.rstrip('/')}/api/v1/{path}?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=30) as response:
        body = json.loads(response.read())
    if body.get("status") != "success":
        raise RuntimeError(f"{params.get('query')}: {body}")
    return body["data"]["result"]


def legend(fmt: str, metric: dict) -> str:
    out = fmt or ""
    for k, v in metric.items():
        out = out.replace("{{" + k + "}}", v)
    return out or ",".join(f"{k}={v}" for k, v in metric.items() if k != "__name__") or "value"


def mapping(panel: dict) -> dict[str, tuple[str, str]]:
    maps = panel.get("fieldConfig", {}).get("defaults", {}).get("mappings", [])
    out = {}
    for m in maps:
        for value, o in m.get("options", {}).items():
            out[value] = (o.get("text", value), NAMED.get(o.get("color", ""), o.get("color", "#888")))
    return out


def fmt_value(v: float, unit: str) -> str:
    if unit == "percentunit":
        return f"{v * 100:.1f}%"
    if unit == "s":
        return f"{v:.2f} s"
    return f"{v:g}"


class Renderer:
    def __init__(self, dashboard: dict, prometheus: str, start: float, end: float, variables: dict[str, str]):
        self.dashboard = dashboard
        self.prom = prometheus
        self.start, self.end = start, end
        self.step = max(1.0, (end - start) / 300)
        self.vars = variables

    def expr(self, text: str) -> str:
        for name, value in self.vars.items():
            text = text.replace(f"${name}", value)
        return text

    def instant(self, target: dict) -> list[dict]:
        return query(self.prom, "query", {"query": self.expr(target["expr"]), "time": self.end})

    def range(self, target: dict) -> list[dict]:
        return query(self.prom, "query_range", {"query": self.expr(target["expr"]), "start": self.start,
                                                 "end": self.end, "step": self.step})

    def x(self, t: float, width: float) -> float:
        return 50 + (t - self.start) / (self.end - self.start) * (width - 60)

    def axis(self, width: float, height: float) -> str:
        ticks = []
        for i in range(5):
            t = self.start + i * (self.end - self.start) / 4
            label = datetime.fromtimestamp(t, tz=timezone.utc).strftime("%H:%M")
            ticks.append(f'<text x="{self.x(t, width):.0f}" y="{height - 4}" class="tick" text-anchor="middle">{label}</text>')
        return "".join(ticks)

    def panel(self, p: dict) -> str:
        g = p["gridPos"]
        w, h = g["w"] * COL - 8, g["h"] * ROW - 8
        body = getattr(self, "draw_" + p["type"].replace("-", "_"))(p, w, h - 30)
        return (f'<div class="panel" style="left:{g["x"] * COL}px;top:{g["y"] * ROW}px;width:{w}px;height:{h}px">'
                f'<div class="title">{html.escape(p["title"])}</div>{body}</div>')

    def draw_table(self, p: dict, w: float, h: float) -> str:
        rows = self.instant(p["targets"][0])
        maps = mapping(p)
        hide = {"__name__", "instance", "job"}
        cols = sorted({k for r in rows for k in r["metric"] if k not in hide})
        head = "".join(f"<th>{html.escape(c)}</th>" for c in cols) + "<th>verdict</th>"
        out = []
        for r in sorted(rows, key=lambda r: [r["metric"].get(c, "") for c in cols]):
            text, color = maps.get(r["value"][1], (r["value"][1], "#444"))
            out.append("<tr>" + "".join(f"<td>{html.escape(r['metric'].get(c, ''))}</td>" for c in cols)
                       + f'<td style="background:{color};color:#111;font-weight:600">{text}</td></tr>')
        return f'<table><tr>{head}</tr>{"".join(out)}</table>'

    def draw_state_timeline(self, p: dict, w: float, h: float) -> str:
        series = self.range(p["targets"][0])
        maps = mapping(p)
        lane = min(26.0, (h - 20) / max(1, len(series)))
        parts = [f'<svg width="{w}" height="{h}">']
        for i, s in enumerate(series):
            y = 4 + i * lane
            name = legend(p["targets"][0].get("legendFormat", ""), s["metric"])
            points = [(float(t), v) for t, v in s["values"]]
            for (t, v), nxt in zip(points, points[1:] + [(self.end, None)], strict=False):
                color = maps.get(v, (v, "#555"))[1]
                x0, x1 = self.x(t, w) + 120, self.x(nxt[0], w) + 120
                parts.append(f'<rect x="{min(x0, w - 2):.1f}" y="{y:.1f}" width="{max(1.0, min(x1, w) - x0):.1f}" '
                             f'height="{lane - 4:.1f}" fill="{color}"/>')
            parts.append(f'<text x="4" y="{y + lane / 2 + 3:.1f}" class="label">{html.escape(name[:28])}</text>')
        parts.append(self.axis(w + 240, h) + "</svg>")
        return "".join(parts)

    def draw_timeseries(self, p: dict, w: float, h: float) -> str:
        h -= 18  # the legend's line above the chart
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        got = {t["refId"]: (t, self.range(t)) for t in p["targets"]}
        values = [float(v) for _, res in got.values() for s in res for _, v in s["values"] if v not in ("NaN",)]
        lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
        lo, hi = min(lo, 0.0), hi * 1.1 if hi > 0 else 1.0
        y = lambda v: h - 20 - (v - lo) / ((hi - lo) or 1) * (h - 30)  # noqa: E731
        parts = [f'<svg width="{w}" height="{h}">']
        for frac in (0, 0.5, 1):
            v = lo + frac * (hi - lo)
            parts.append(f'<line x1="50" x2="{w - 10}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="grid"/>'
                         f'<text x="46" y="{y(v) + 3:.1f}" class="tick" text-anchor="end">{fmt_value(v, unit)}</text>')
        band = {ref: got[ref][1] for ref in ("B", "C") if ref in got}
        if len(band) == 2 and band["B"] and band["C"]:
            high = [(float(t), float(v)) for t, v in band["B"][0]["values"]]
            low = [(float(t), float(v)) for t, v in band["C"][0]["values"]]
            poly = [f"{self.x(t, w):.1f},{y(v):.1f}" for t, v in high] + \
                   [f"{self.x(t, w):.1f},{y(v):.1f}" for t, v in reversed(low)]
            parts.append(f'<polygon points="{" ".join(poly)}" fill="rgba(115,191,105,0.22)"/>')
        legends = []
        color_i = 0
        for ref, (target, res) in got.items():
            if ref in ("B", "C"):
                continue
            for s in res:
                pts = " ".join(f"{self.x(float(t), w):.1f},{y(float(v)):.1f}" for t, v in s["values"] if v != "NaN")
                if ref == "D":
                    color, dash = "#aaa", ' stroke-dasharray="6 4"'
                else:
                    color, dash = PALETTE[color_i % len(PALETTE)], ""
                    color_i += 1
                parts.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
                name = html.escape(legend(target.get("legendFormat", ""), s["metric"]))
                legends.append(f'<span style="color:{color}">&#9632; {name}</span>')
        if band:
            legends.append('<span style="color:#73bf69">&#9632; baseline band</span>')
        parts.append(self.axis(w, h) + "</svg>")
        return f'<div class="legend">{" ".join(legends)}</div>' + "".join(parts)

    def draw_barchart(self, p: dict, w: float, h: float) -> str:
        rows = self.instant(p["targets"][0])
        colors = {"pass": NAMED["green"], "fail": NAMED["red"], "inconclusive": NAMED["yellow"],
                  "aborted": NAMED["orange"]}
        rows = sorted(rows, key=lambda r: list(colors).index(r["metric"].get("verdict", "")) if
                      r["metric"].get("verdict") in colors else 9)
        top = max([float(r["value"][1]) for r in rows] + [1.0])
        bw = (w - 60) / max(1, len(rows))
        parts = [f'<svg width="{w}" height="{h}">']
        for i, r in enumerate(rows):
            v = float(r["value"][1])
            bh = v / top * (h - 40)
            name = r["metric"].get("verdict", "")
            parts.append(f'<rect x="{40 + i * bw + 8:.1f}" y="{h - 20 - bh:.1f}" width="{bw - 16:.1f}" height="{bh:.1f}" '
                         f'fill="{colors.get(name, "#5794f2")}"/><text x="{40 + i * bw + bw / 2:.1f}" y="{h - 6}" '
                         f'class="tick" text-anchor="middle">{name} ({v:.0f})</text>')
        return "".join(parts) + "</svg>"

    def draw_stat(self, p: dict, w: float, h: float) -> str:
        rows = self.instant(p["targets"][0])
        steps = p.get("fieldConfig", {}).get("defaults", {}).get("thresholds", {}).get("steps", [])
        cells = []
        for r in rows:
            v = float(r["value"][1])
            color = next((NAMED.get(s["color"], s["color"]) for s in reversed(steps)
                          if s["value"] is None or v >= s["value"]), "#73bf69")
            cells.append(f'<div class="stat"><div class="big" style="color:{color}">{v:.1f}</div>'
                         f'<div>{html.escape(legend(p["targets"][0].get("legendFormat", ""), r["metric"]))}</div></div>')
        return "".join(cells)

    def page(self) -> str:
        panels = "".join(self.panel(p) for p in self.dashboard["panels"])
        bottom = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in self.dashboard["panels"]) * ROW
        span = (f"{datetime.fromtimestamp(self.start, tz=timezone.utc):%Y-%m-%d %H:%M} to "
                f"{datetime.fromtimestamp(self.end, tz=timezone.utc):%H:%M} UTC")
        return f"""<!doctype html><html><head><meta charset="utf-8"><style>
body {{ background:#111217; color:#ccccdc; font:13px -apple-system, 'Segoe UI', Roboto, sans-serif; margin:0; }}
.head {{ padding:10px 16px; font-size:18px; }} .head small {{ color:#8e8e9e; font-size:12px; margin-left:12px; }}
.grid-area {{ position:relative; margin:0 8px; height:{bottom}px; }}
.panel {{ position:absolute; background:#181b1f; border:1px solid #2c2f36; border-radius:3px; overflow:hidden; }}
.title {{ padding:6px 8px; font-weight:600; }}
table {{ width:100%; border-collapse:collapse; font-size:12px; }} th, td {{ padding:3px 6px; text-align:left;
  border-bottom:1px solid #2c2f36; }} th {{ color:#8e8e9e; font-weight:500; }}
.tick {{ fill:#8e8e9e; font-size:10px; }} .label {{ fill:#ccccdc; font-size:11px; }} .grid {{ stroke:#2c2f36; }}
.legend {{ padding:0 8px 2px; font-size:11px; height:16px; overflow:hidden; white-space:nowrap; }} .legend span {{
margin-right:10px; }}
.stat {{ display:inline-block; margin:6px 24px; text-align:center; }} .big {{ font-size:34px; font-weight:600; }}
</style></head><body><div class="head">{html.escape(self.dashboard["title"])}<small>{span} · drawn by
monitoring/grafana/render.py from the dashboard JSON, each query run on a real Prometheus</small></div>
<div class="grid-area">{panels}</div></body></html>"""


def when(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dashboard", default=str(HERE / "drillbit-dashboard.json"))
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--start", required=True, help="ISO time (UTC)")
    ap.add_argument("--end", required=True, help="ISO time (UTC)")
    ap.add_argument("--var", action="append", default=[], help="NAME=REGEX for a dashboard variable (default .*)")
    ap.add_argument("--html", required=True)
    ap.add_argument("--png", help="also a screenshot, by a headless Chromium")
    args = ap.parse_args(argv)
    dashboard = json.loads(Path(args.dashboard).read_text())
    variables = {v["name"]: ".*" for v in dashboard["templating"]["list"] if v["type"] == "query"}
    variables.update(dict(v.split("=", 1) for v in args.var))
    page = Renderer(dashboard, args.prometheus, when(args.start), when(args.end), variables).page()
    Path(args.html).write_text(page)
    if args.png:
        browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
        if browser is None:
            print("no chromium to take the picture with", file=sys.stderr)
            return 2
        height = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dashboard["panels"]) * ROW + 60
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--window-size={24 * COL + 16},{height}", f"--screenshot={Path(args.png).resolve()}",
                        Path(args.html).resolve().as_uri()], check=True, capture_output=True, timeout=120)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
