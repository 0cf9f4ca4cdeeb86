"""Reading a Prometheus from the controller: an instant query over its HTTP API
(``/api/v1/query``), its vector or scalar as ``(labels, value)`` pairs. The stop conditions
(``abort.when``) and the ``prometheus:`` signal source read the job's own metrics this way."""
from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request

from drillbit.judging.probes.poller import Poller


class PrometheusError(Exception):
    """The query could not be answered: unreachable, refused, or not PromQL."""


Sample = tuple[dict[str, str], float]  # a series' labels and its value
Timed = tuple[dict[str, str], float, float]  # and the time Prometheus gives the value


def query(base: str, expr: str, timeout: float = 10.0) -> list[Sample]:
    return [(labels, value) for labels, value, _ in query_timed(base, expr, timeout)]


def query_timed(base: str, expr: str, timeout: float = 10.0) -> list[Timed]:
    url = base.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 — the operator's URL
            body = json.loads(response.read())
    except urllib.error.HTTPError as exc:  # a bad query is a 400 with Prometheus' own error
        try:
            detail = json.loads(exc.read()).get("error", "")
        except (ValueError, OSError):
            detail = ""
        raise PrometheusError(f"{expr!r}: HTTP {exc.code} {detail or exc.reason}") from None
    except (OSError, ValueError) as exc:
        raise PrometheusError(f"{base}: {getattr(exc, 'reason', exc)}") from None
    if body.get("status") != "success":
        raise PrometheusError(f"{expr!r}: {body.get('error', body)}")
    data = body.get("data", {})
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar":
        return [({}, _value(result[1]), float(result[0]))]
    if kind == "vector":
        return [(r.get("metric", {}), _value(r["value"][1]), float(r["value"][0])) for r in result]
    raise PrometheusError(f"{expr!r}: a {kind} is not an instant value (drop the [range], or wrap it in a function)")


def _value(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def describe(labels: dict[str, str]) -> str:
    shown = {k: v for k, v in labels.items() if k != "__name__"}
    name = labels.get("__name__", "")
    return name + ("{" + ",".join(f'{k}="{v}"' for k, v in sorted(shown.items())) + "}" if shown else "")


class PrometheusProbe(Poller):
    """The job's own metrics as history events, polled by the controller (a profile's
    ``prometheus:`` signals). Per series (its ``rank_label`` names the rank):

    - ``step``: the value is the step number; an event each time it changes, at the time
      Prometheus gives the value — the resolution is the scrape interval, and a step is
      seen up to one interval late, never early;
    - ``detect``: an event each time the value rises (a counter of detections, a gauge that
      goes to 1);
    - ``straggler``: a series whose value goes above 0 names its rank a straggler (once,
      until it goes back to 0).

    A query that fails is recorded once (``probe.error``) and polled again."""

    source = "probe:prometheus"

    def __init__(self, history, url: str, signals: list) -> None:
        super().__init__(0.1, join_timeout=15.0)  # each signal keeps its own interval
        self.name = self.source
        self._history = history
        self._url = url
        self._signals = signals
        self._last: dict[tuple[int, tuple], float] = {}
        self._seen_at: dict[tuple[int, tuple], float] = {}
        self._next = [0.0] * len(signals)
        self._failing: set[int] = set()

    def poll_once(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        for i, sig in enumerate(self._signals):
            if now < self._next[i]:
                continue
            self._next[i] = now + sig.interval
            try:
                samples = query_timed(self._url, sig.query)
            except PrometheusError as exc:
                if i not in self._failing:
                    self._failing.add(i)
                    self._history.record(self.source, "probe.error", query=sig.query, error=str(exc))
                continue
            self._failing.discard(i)
            seen = set()
            for labels, value, t in samples:
                seen.add(self._see(i, sig, labels, value, t))
            for key in self._seen_at:  # a series gone (its process died): seen absent now
                if key[0] == i and key not in seen:
                    self._seen_at[key] = now

    def _see(self, i: int, sig, labels: dict[str, str], value: float, t: float) -> tuple:
        key = (i, tuple(sorted((k, v) for k, v in labels.items() if k != "__name__")))
        since = self._seen_at.get(key)  # the value changed after this (the last look at the series)
        self._seen_at[key] = t
        if math.isnan(value):
            return key
        rank_text = labels.get(sig.rank_label, "")
        rank = int(rank_text) if rank_text.isdigit() else None
        last = self._last.get(key)
        self._last[key] = value
        if sig.kind == "step":
            if last is None or int(value) != int(last):
                # a metric says when it was read, not when the step happened: somewhere after
                # ``since``; the recovery checks take a step across a restart only from there
                extra = {"since": since} if since is not None else {}
                self._history.record(self.source, "step", t=t, rank=rank, n=int(value), **extra)
        elif sig.kind == "detect" and last is not None and value > last:
            self._history.record(self.source, "detect", t=t, rank=rank, by="prometheus", query=sig.query, value=value)
        elif sig.kind == "straggler" and value > 0 and not (last is not None and last > 0) and rank is not None:
            self._history.record(self.source, "straggler", t=t, rank=rank, by="prometheus", query=sig.query,
                                 value=value)
        return key
