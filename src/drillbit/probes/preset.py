"""Signal presets: log signatures per recovery stack, loaded from presets/*.yaml."""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from pydantic import Field

from drillbit.errors import DrillError, Problem, SpecError
from drillbit.spec.models import Strict

PRESET_DIR = Path(__file__).parent / "presets"


class Signal(Strict):
    kind: str
    pattern: str
    ints: list[str] = Field(default_factory=list)
    floats: list[str] = Field(default_factory=list)
    by: str | None = None


class Preset(Strict):
    name: str
    description: str = ""
    signals: list[Signal]


class Matcher:
    """Compiled signals of one or more presets; turns a line into (kind, t, data)."""

    def __init__(self, signals: list[Signal]) -> None:
        self._signals = [(s, re.compile(s.pattern)) for s in signals]

    def match(self, line: str) -> list[tuple[str, float | None, dict]]:
        hits = []
        for sig, rx in self._signals:
            m = rx.search(line)
            if not m:
                continue
            data: dict = {k: v for k, v in m.groupdict().items() if v is not None}
            t = float(data.pop("t")) if "t" in data else None
            for k in sig.ints:
                if k in data:
                    data[k] = int(data[k])
            for k in sig.floats:
                if k in data:
                    data[k] = float(data[k])
            if sig.by and "by" not in data:
                data["by"] = sig.by
            hits.append((sig.kind, t, data))
        return hits


def available() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


@lru_cache(maxsize=None)
def load(name: str) -> Preset:
    from drillbit.spec.load import read_yaml, validate

    path = PRESET_DIR / f"{name}.yaml"
    if not path.exists():
        raise DrillError(f"unknown signal preset {name!r}; known: {', '.join(available())}")
    data, lines = read_yaml(path)
    preset, problems = validate(Preset, data, path, lines)
    for i, sig in enumerate((data or {}).get("signals", [])):
        try:
            re.compile(sig.get("pattern", ""))
        except re.error as exc:
            problems.append(Problem(str(path), lines.get(("signals", i, "pattern")), f"signals.{i}.pattern", f"bad regex: {exc}"))
    if problems:
        raise SpecError(problems)
    return preset


def matcher(names: list[str], kinds: set[str] | None = None, exclude: set[str] | None = None) -> Matcher:
    signals = [s for n in names for s in load(n).signals
               if (kinds is None or s.kind in kinds) and (exclude is None or s.kind not in exclude)]
    return Matcher(signals)
