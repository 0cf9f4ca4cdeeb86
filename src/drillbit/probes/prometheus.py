"""Reading a Prometheus from the controller: an instant query over its HTTP API
(``/api/v1/query``), its vector or scalar as ``(labels, value)`` pairs. The stop conditions
(``abort.when``) and the ``prometheus:`` signal source read the job's own metrics this way."""
from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request


class PrometheusError(Exception):
    """The query could not be answered: unreachable, refused, or not PromQL."""


Sample = tuple[dict[str, str], float]


def query(base: str, expr: str, timeout: float = 10.0) -> list[Sample]:
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
        return [({}, _value(result[1]))]
    if kind == "vector":
        return [(r.get("metric", {}), _value(r["value"][1])) for r in result]
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
