"""A fault parameter's levels as users write them (``drill sweep --param``, a drill's
``grade``): numbers, percentages and durations, in the order of their axis (issue 58)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from drillbit.core.errors import ConfigError


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
    ordered = sorted(lv.order for lv in levels)
    if any(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) for a, b in zip(ordered, ordered[1:], strict=False)):
        problems.append(f"--param {name}: a level is given twice")
    if problems:
        raise ConfigError("; ".join(problems))
    return name, sorted(levels, key=lambda lv: lv.order)


def same_level(a: float, b: float) -> bool:
    """Two places on the axis that are one level (1.1% and 0.011)."""
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def level_problems(params_cls: Any, base: dict[str, Any], param: str, levels: list[Level]) -> list[str]:
    """Which levels the fault cannot take: each is tried in the fault's own parameters (a
    slowdown above 0 and at most 4, …); ``duration`` (the fault's own length) must be above 0."""
    from pydantic import ValidationError

    out = []
    for lv in levels:
        if param == "duration":
            if not lv.order > 0:
                out.append(f"{lv.label}: a duration must be above 0 s")
            continue
        try:
            params_cls.model_validate({**base, param: lv.value})
        except ValidationError as exc:
            why = "; ".join(e["msg"] for e in exc.errors() if tuple(e["loc"][:1]) == (param,)) or str(exc)
            out.append(f"{lv.label}: {why}")
    return out
