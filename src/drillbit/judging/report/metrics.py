"""Drill results as Prometheus metrics: the text format node-exporter's textfile collector
reads (``reports/metrics.prom``, rewritten atomically after every run), the same families
for a Pushgateway (``--pushgateway URL``), and OpenMetrics for ``drill results
--openmetrics``.

One series per drill, job profile, cluster and fault: the latest run's verdict (a state set),
its exit code, when it ended, each SLO's status (a state set) and each numeric measurement in
base units (``_seconds``, ``_ratio``), and a counter of runs by verdict. Never a label per
run: the cardinality is bounded by the catalogue times the clusters and jobs drilled.

The job profile's label is ``job_profile``, not ``job``: Prometheus gives every scraped
series the target's own ``job`` label, and a metric's ``job`` would be renamed
``exported_job`` on a scrape (or overwritten by a Pushgateway's grouping key).
"""
from __future__ import annotations

import math
import statistics
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable

from drillbit.core.atomic import write_atomic
from drillbit.judging.checks.baseline import K_MAD, NORMAL, RUNS, Baseline
from drillbit.judging.checks.recovery import Measurements
from drillbit.core.verdicts import Verdict

PREFIX = "drillbit"
LABELS = ("drill", "job_profile", "cluster", "fault")
VERDICTS: tuple[Verdict, ...] = ("pass", "fail", "inconclusive", "aborted")
SLO_STATUSES = ("pass", "fail", "unknown")
# measurements that are shares of a whole (0..1), whatever their names say
RATIOS = {"goodput", "fleet_tax", "slowdown", "slowdown_achieved", "target_slowdown"}
# numeric measurements that are identifiers, not quantities (a step number is a quantity)
NOT_QUANTITIES = {"straggler_rank"}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    body = ",".join(f'{k}="{_escape(str(v))}"' for k, v in pairs)
    return "{" + body + "}" if body else ""


def _number(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def measurement_metric(key: str) -> tuple[str, str] | None:
    """The metric name and unit of a measurement: seconds for ``time_to_*`` and ``*_s``,
    ratio for shares; None for one that is not a quantity."""
    if key in NOT_QUANTITIES:
        return None
    if key in RATIOS:
        return f"{PREFIX}_{key}_ratio", "ratio"
    if key.endswith("_s"):
        return f"{PREFIX}_{key[:-2]}_seconds", "seconds"
    if key.startswith("time_to_"):
        return f"{PREFIX}_{key}_seconds", "seconds"
    return f"{PREFIX}_{key}", ""


@dataclass
class Family:
    name: str
    kind: str  # gauge, counter, stateset
    help: str
    unit: str = ""
    # (labels, value) or, in a backfill, (labels, value, the time of its run)
    samples: list[tuple[Any, ...]] = field(default_factory=list)


def _epoch(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        return datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return None


BAND = ("time_to_detect", "time_to_first_step", "goodput")  # the measurements a dashboard sets against a band


def band(values: list[float]) -> dict[str, float]:
    """The baseline's median and the noise band the regression judge allows around it
    (median ± K_MAD · 1.4826 · MAD of the last passing runs)."""
    med = statistics.median(values)
    spread = K_MAD * NORMAL * statistics.median(abs(v - med) for v in values)
    return {"low": med - spread, "median": med, "high": med + spread}


def _latest(result: dict[str, Any], add: Callable[..., None]) -> None:
    """The families of one series' latest result: its verdict, exit code, when it ended, each
    SLO's status and each measurement."""
    base = dict(zip(LABELS, series_key(result), strict=True))
    for verdict in VERDICTS:
        add(f"{PREFIX}_verdict", "stateset", "The latest run's verdict (1: this verdict)",
            {**base, f"{PREFIX}_verdict": verdict}, 1 if result["verdict"] == verdict else 0)
    add(f"{PREFIX}_exit_code", "gauge", "The latest run's exit code (0 pass, 1 SLO failed, 2 config, "
        "3 inconclusive, 4 aborted, 5 harness)", base, result.get("exit_code", 5))
    ended = _epoch(result.get("finished_at")) or _epoch(result.get("started_at"))
    if ended is not None:
        add(f"{PREFIX}_last_run_timestamp_seconds", "gauge", "When the latest run ended (Unix time)",
            base, ended, "seconds")
    for slo in result.get("slos", []):
        for status in SLO_STATUSES:
            add(f"{PREFIX}_slo_status", "stateset", "Each SLO's status in the latest run (1: this status)",
                {**base, "slo": slo["name"], f"{PREFIX}_slo_status": status},
                1 if slo.get("status") == status else 0)
    measurements = dict(result.get("measurements") or {})
    attribution = measurements.pop("attribution", None)
    if isinstance(attribution, dict) and isinstance(attribution.get("correct"), bool):
        measurements["attribution_correct"] = attribution["correct"]
    for name, value in sorted(measurements.items()):
        if value is None or not isinstance(value, (int, float)):
            continue
        metric = measurement_metric(name)
        if metric is None:
            continue
        metric_name, unit = metric
        add(metric_name, "gauge", f"The latest run's measurement {name}" + (f" ({unit})" if unit else ""),
            base, value, unit)


def families(latest: list[dict[str, Any]], counts: dict[tuple[str, ...], dict[str, int]],
             baselines: dict[tuple[str, ...], Any] | None = None) -> list[Family]:
    """The metric families of the latest result of each series (``latest``: result.json
    payloads), the run counts by verdict of each (``counts``: key -> verdict -> runs) and
    the baseline band of each (``baselines``: key -> the last passing runs)."""
    out: dict[str, Family] = {}

    def add(name: str, kind: str, help: str, labels: dict[str, str], value: float, unit: str = "") -> None:
        fam = out.setdefault(name, Family(name, kind, help, unit))
        fam.samples.append((labels, value))

    for result in latest:
        _latest(result, add)
    for key, baseline in sorted((baselines or {}).items()):
        for name in BAND:
            values = baseline.values(name)
            if not values:
                continue
            metric_name, unit = measurement_metric(name)  # type: ignore[misc]
            for bound, value in band(values).items():
                add(metric_name.replace(f"{PREFIX}_", f"{PREFIX}_baseline_", 1), "gauge",
                    f"The baseline of {name}: the median of the last passing runs and the band the regression "
                    "judge allows around it", {**dict(zip(LABELS, key, strict=False)), "bound": bound}, value, unit)
    for key, by_verdict in sorted(counts.items()):
        for verdict in VERDICTS:
            add(f"{PREFIX}_runs_total", "counter", "Drill runs recorded in the results store, by verdict",
                {**dict(zip(LABELS, key, strict=False)), "verdict": verdict}, by_verdict.get(verdict, 0))
    return list(out.values())


def series_key(result: dict[str, Any]) -> tuple[str, ...]:
    return (result["drill"], result["job"], result["cluster"], (result.get("fault") or {}).get("type", ""))


def text(fams: list[Family], openmetrics: bool = False) -> str:
    """Prometheus' text format (0.0.4: the textfile collector and a Pushgateway read it), or
    OpenMetrics 1.0 (``# EOF``, state sets and units declared)."""
    lines: list[str] = []
    for fam in fams:
        kind = fam.kind if openmetrics or fam.kind != "stateset" else "gauge"
        name = fam.name
        if openmetrics and fam.kind == "counter":
            name = fam.name[: -len("_total")]  # OpenMetrics names the family without _total
        lines.append(f"# HELP {name} {fam.help}")
        lines.append(f"# TYPE {name} {kind}")
        if openmetrics and fam.unit:
            lines.append(f"# UNIT {name} {fam.unit}")
        for labels, value, *ts in fam.samples:
            stamp = f" {ts[0]:.3f}" if ts else ""  # a backfill's sample carries its run's time
            lines.append(f"{fam.name}{_labels(labels.items())} {_number(value)}{stamp}")
    if openmetrics:
        lines.append("# EOF")
    return "\n".join(lines) + "\n"


def from_store(store: Any, openmetrics: bool = False, drill: str | None = None) -> str:
    """Every series in the results store (or one drill's): its latest run, and its runs by
    verdict."""
    latest, counts = store.series()
    if drill is not None:
        latest = [r for r in latest if r["drill"] == drill]
        counts = {k: v for k, v in counts.items() if k[0] == drill}
    baselines = {}
    for result in latest:
        found = store.baseline(result["drill"], result["cluster"], result["job"])
        if found is not None:
            baselines[series_key(result)] = found
    return text(families(latest, counts, baselines), openmetrics)


HOLD_S = 240.0  # a backfilled value is repeated this often (under Prometheus' 5 min lookback)


def history(store: Any, drill: str | None = None, until: float | None = None) -> str:
    """Every run in the store as OpenMetrics samples stamped with the time it ended — what the
    metrics said after each run (its verdict, measurements and SLOs, the runs by verdict so far,
    the baseline band as of it) — for ``promtool tsdb create-blocks-from openmetrics``: a
    Prometheus that starts after months of drills gets their history. Each value is held, as a
    scrape of metrics.prom would have seen it, every 4 minutes until the next run of its series
    (or ``until``, default now): queries at any time in between see it."""
    until = time.time() if until is None else until
    merged: dict[str, Family] = {}
    counts: dict[tuple[str, ...], dict[str, int]] = {}
    passing: dict[tuple[str, ...], list[tuple[int, dict]]] = {}
    for run_id, result in store.all_results():
        if drill is not None and result["drill"] != drill:
            continue
        ended = _epoch(result.get("finished_at")) or _epoch(result.get("started_at"))
        if ended is None:
            continue
        key = series_key(result)
        by_verdict = counts.setdefault(key, {})
        by_verdict[result["verdict"]] = by_verdict.get(result["verdict"], 0) + 1
        if result["verdict"] == "pass":
            passing.setdefault(key, []).append((run_id, result.get("measurements") or {}))
        window = passing.get(key, [])[-RUNS:]
        baselines = {}
        if window:
            baselines[key] = Baseline(runs=[r for r, _ in reversed(window)],
                                      samples=[Measurements.model_validate(m) for _, m in reversed(window)])
        for fam in families([result], {key: dict(by_verdict)}, baselines):
            into = merged.setdefault(fam.name, Family(fam.name, fam.kind, fam.help, fam.unit))
            into.samples += [(labels, value, ended) for labels, value in fam.samples]
    for fam in merged.values():  # a series' samples in time order, each held until the next
        by_series: dict[tuple, list] = {}
        for labels, value, t in fam.samples:
            by_series.setdefault(tuple(sorted(labels.items())), []).append((t, labels, value))
        fam.samples = []
        for _, points in sorted(by_series.items()):
            points.sort(key=lambda p: p[0])
            for (t, labels, value), nxt in zip(points, [p[0] for p in points[1:]] + [max(until, points[-1][0])], strict=False):
                fam.samples.append((labels, value, t))
                held = t + HOLD_S
                while held < nxt:
                    fam.samples.append((labels, value, held))
                    held += HOLD_S
    return text(list(merged.values()), openmetrics=True)


def write_textfile(path: Path, store: Any) -> None:
    write_atomic(Path(path), from_store(store))


def push(url: str, body: str, timeout: float = 10.0) -> None:
    """PUT the families to a Pushgateway under the grouping key ``job=drillbit`` (a PUT
    replaces the group: a series no longer in the store goes with it)."""
    target = url.rstrip("/") + "/metrics/job/drillbit"
    request = urllib.request.Request(target, data=body.encode(), method="PUT",
                                     headers={"Content-Type": "text/plain; version=0.0.4"})
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 — the operator's URL
        if response.status >= 300:
            raise OSError(f"{target}: HTTP {response.status}")


def push_quietly(url: str, body: str) -> str | None:
    """Push; None when it went, else why not (a Pushgateway that fails never changes a verdict)."""
    try:
        push(url, body)
    except (OSError, urllib.error.URLError, ValueError) as exc:
        return f"{url}: {exc}"
    return None
