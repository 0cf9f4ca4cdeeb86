"""The order the suite runs in under pytest-xdist: longest first, the ``alone`` tests last.

Four workers share two cores, and the suite is bound by them: any time a worker idles is
time the run takes longer. Two kinds of idling are the scheduler's to avoid:

- a long test sent late is the run's tail, with the other workers done and idle (longest
  processing time first is the classic cure: a group of tests that must stay on one worker,
  the Ray tests, counts as one job of their summed time);
- an ``alone`` test sent mid-run makes every other worker finish what it has and then wait
  for it (tests/conftest.py: alone_or_together); sent last, that wait is the run's own end.

The times come from a CI log (``pytest --durations=0``), kept in ``durations.json`` beside
this file: ``python -m tests.durations LOG`` writes it anew. A test not listed counts as a
typical test of its tier. Only the order depends on them; no test does.
"""
from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

FILE = Path(__file__).with_name("durations.json")
UNLISTED_S = {"unit": 0.2, "integration": 20.0}
LINE = re.compile(r"^\s*([\d.]+)s (?:call|setup|teardown)\s+(tests/\S+)")


def plain(nodeid: str) -> str:
    """A node id without pytest-xdist's ``@group`` suffix (present under --dist loadgroup only)."""
    return re.sub(r"@[\w-]+$", "", nodeid)


def load() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(FILE.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def estimate(nodeid: str, known: dict[str, float]) -> float:
    nodeid = plain(nodeid)
    if nodeid in known:
        return known[nodeid]
    return UNLISTED_S["unit" if nodeid.startswith("tests/unit/") else "integration"]


def order(items: list, group_of, alone, known: dict[str, float] | None = None) -> list:
    """``items`` with each group kept together (in its own order), groups by their summed time,
    longest first, and the alone group after everything; ties keep the collection's order."""
    known = load() if known is None else known
    groups: dict[str, list] = defaultdict(list)
    for item in items:
        groups[group_of(item) or item.nodeid].append(item)
    first = {key: n for n, key in enumerate(groups)}

    def rank(key: str) -> tuple[int, float, int]:
        members = groups[key]
        return (1 if any(alone(i) for i in members) else 0,
                -sum(estimate(i.nodeid, known) for i in members), first[key])

    return [item for key in sorted(groups, key=rank) for item in groups[key]]


def record(log: str) -> dict[str, float]:
    """Each test's setup, call and teardown summed, from a ``pytest --durations=0`` log; tests
    of a second or more (the rest count as unlisted)."""
    total: dict[str, float] = defaultdict(float)
    for line in Path(log).read_text(errors="replace").splitlines():
        m = LINE.match(line)
        if m:
            if " setup " in line and m.group(2).startswith("tests/unit/") and float(m.group(1)) > 5:
                continue  # a unit test's long setup is its wait for the alone tests' hold, not its own time
            total[plain(m.group(2))] += float(m.group(1))
    return {k: round(v, 1) for k, v in sorted(total.items()) if v >= 1.0}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.durations PYTEST_LOG  (a log of pytest --durations=0)")
    times = record(sys.argv[1])
    FILE.write_text(json.dumps(times, indent=0, sort_keys=True) + "\n")
    print(f"{len(times)} tests, {sum(times.values()):.0f} s in all, written to {FILE}")
