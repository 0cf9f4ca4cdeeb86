"""The test suite's CPU, test by test: a pytest plugin and its summary.

The suite is bound by the CPU its jobs burn (docs/development.md), so what to cut is read
from where that CPU goes. Under the plugin each test's process moves into a cgroup of its own
(cgroup v1 ``cpuacct``, as root) for the test's life; what it starts inherits the cgroup, the
daemons and the jobs' ranks included, and the cgroup's ``cpuacct.usage`` is the test's CPU::

    PYTHONPATH=bench pytest -p suite_cpu                      # writes suite-cpu.txt, or $SUITE_CPU_OUT
    python bench/suite_cpu.py suite-cpu.txt                   # by group and file, then the top tests

One line a test: ``cpu_s wall_s start worker nodeid``. A process that outlives its test stays
in that test's cgroup and is counted there up to the test's end only. Without a writable
``/sys/fs/cgroup/cpuacct`` the plugin records nothing and the tests run as ever. Its folder
(``drillbit-suite-cpu``) stays after the run, with a test's own folder inside wherever a process
outlived that test (a finding in itself): ``rmdir`` them.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path("/sys/fs/cgroup/cpuacct/drillbit-suite-cpu")
OUT = Path(os.environ.get("SUITE_CPU_OUT", "suite-cpu.txt"))
_count = [0]

try:
    import pytest
except ImportError:  # the summary needs no pytest
    pytest = None


def _move(cgroup: Path) -> bool:
    try:
        cgroup.mkdir(parents=True, exist_ok=True)
        (cgroup / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        return False
    return True


if pytest is not None:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        _count[0] += 1
        cgroup = ROOT / f"{worker}-{_count[0]}"
        moved = _move(cgroup)
        start = time.time()
        yield
        wall = time.time() - start
        if moved and _move(ROOT):
            cpu = int((cgroup / "cpuacct.usage").read_text()) / 1e9
            with OUT.open("a") as out:
                out.write(f"{cpu:.2f} {wall:.2f} {start:.1f} {worker} {item.nodeid}\n")
            with contextlib.suppress(OSError):
                cgroup.rmdir()  # only an empty one goes: a process left in it keeps it


def summary(path: str, top: int = 25) -> None:
    rows = [line.split(None, 4) for line in Path(path).read_text().splitlines() if line.strip()]
    groups: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for cpu, wall, _start, _worker, nodeid in rows:
        group = "@" + nodeid.rsplit("@", 1)[1] if "@" in nodeid else (
            "tests/unit" if nodeid.startswith("tests/unit/") else nodeid.split("::")[0])
        g = groups[group]
        g[0] += float(cpu)
        g[1] += float(wall)
        g[2] += 1
    total = sum(g[0] for g in groups.values())
    print(f"{len(rows)} tests, {total:.0f} CPU-s ({total / 60:.1f} CPU-min), "
          f"{sum(g[1] for g in groups.values()):.0f} s of test wall time")
    print(f"{'CPU-s':>7} {'share':>6} {'wall-s':>7} {'tests':>5}  group or file")
    for name, (cpu, wall, n) in sorted(groups.items(), key=lambda kv: -kv[1][0]):
        print(f"{cpu:7.0f} {100 * cpu / total:5.1f}% {wall:7.0f} {int(n):5d}  {name}")
    print(f"\nthe {top} tests with the most CPU:")
    for cpu, wall, _start, _worker, nodeid in sorted(rows, key=lambda r: -float(r[0]))[:top]:
        print(f"{float(cpu):7.1f} {float(wall):7.1f}  {nodeid}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python bench/suite_cpu.py SUITE_CPU_FILE  (written by pytest -p suite_cpu)")
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # | head
    summary(sys.argv[1])
