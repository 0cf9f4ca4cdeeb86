"""The suite's own order under pytest-xdist (tests/durations.py): longest first, a group as
one job, the alone tests last."""
from __future__ import annotations

from dataclasses import dataclass, field

from tests.durations import estimate, order, plain, record


@dataclass
class Item:
    nodeid: str
    group: str | None = None
    alone: bool = False
    marks: list = field(default_factory=list)


def ids(items):
    return [i.nodeid for i in items]


def test_groups_run_by_their_summed_time_and_the_alone_tests_last():
    items = [Item("tests/integration/a.py::alone1", "@alone", True), Item("tests/unit/u.py::t"),
             Item("tests/integration/r.py::r1", "@ray"), Item("tests/integration/b.py::long"),
             Item("tests/integration/r.py::r2", "@ray"), Item("tests/integration/c.py::alone2", "@alone", True)]
    known = {"tests/integration/r.py::r1": 40.0, "tests/integration/r.py::r2": 40.0,
             "tests/integration/b.py::long": 70.0, "tests/integration/a.py::alone1": 500.0}
    got = order(items, lambda i: i.group, lambda i: i.alone, known)
    assert ids(got) == ["tests/integration/r.py::r1", "tests/integration/r.py::r2",  # 80 s as one
                        "tests/integration/b.py::long", "tests/unit/u.py::t",
                        "tests/integration/a.py::alone1", "tests/integration/c.py::alone2"]


def test_an_unlisted_test_counts_as_typical_of_its_tier_and_ties_keep_the_collection_order():
    assert estimate("tests/unit/x.py::t", {}) < estimate("tests/integration/x.py::t", {})
    assert estimate("tests/integration/x.py::t@ray", {"tests/integration/x.py::t": 3.0}) == 3.0
    items = [Item(f"tests/unit/u.py::t{n}") for n in range(5)]
    assert ids(order(items, lambda i: None, lambda i: False, {})) == ids(items)


def test_times_are_read_from_a_durations_log(tmp_path):
    log = tmp_path / "ci.log"
    log.write_text("12.50s call     tests/integration/x.py::t[a]@netns\n"
                   "2.00s setup    tests/integration/x.py::t[a]@netns\n"
                   "0.40s call     tests/unit/u.py::fast\n"
                   "[gw0] [ 1%] PASSED tests/integration/x.py::t[a]@netns\n")
    assert record(str(log)) == {"tests/integration/x.py::t[a]": 14.5}
    assert plain("tests/integration/x.py::t[a]@netns") == "tests/integration/x.py::t[a]"
