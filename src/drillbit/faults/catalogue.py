"""The failure catalogue as data: faults/*.yaml, one entry per fault.

Each entry says which class it belongs to, what real failure it models, its real-world
rates with their public sources (papers, logbooks, issues), how it is confirmed and healed, and its
runbook and drill. ``drill faults`` lists it grouped by class.
"""
from __future__ import annotations

from pydantic import Field

from drillbit.core.errors import Problem, SpecError
from drillbit.faults import registry
from drillbit.spec.load import project_dirs, read_yaml, validate
from drillbit.spec.models import FaultClass, Strict

CLASSES: tuple[str, ...] = ("fail-stop", "fail-hang", "fail-slow", "recovery-path")


class Rate(Strict):
    what: str
    value: str
    source: str


class FaultEntry(Strict):
    name: str
    class_: FaultClass = Field(alias="class")
    injector: str
    models: str
    rates: list[Rate] = Field(min_length=1)
    confirm: str
    heal: str
    runbook: str
    drill: str


def load_catalogue() -> dict[str, FaultEntry]:

    entries: dict[str, FaultEntry] = {}
    problems: list[Problem] = []
    for d in project_dirs("faults"):
        for path in sorted(d.glob("*.yaml")):
            data, lines = read_yaml(path)
            entry, more = validate(FaultEntry, data, path, lines)
            problems += more
            if entry is None:
                continue
            if entry.injector not in registry():
                problems.append(Problem(str(path), lines.get(("injector",)), "injector",
                                        f"no fault plugin named {entry.injector!r}"))
            entries.setdefault(entry.name, entry)
    if problems:
        raise SpecError(problems)
    return entries


def by_class(entries: dict[str, FaultEntry]) -> dict[str, list[FaultEntry]]:
    return {c: [e for e in entries.values() if e.class_ == c] for c in CLASSES}

