"""pytest plugin (entry point ``pytest11``): gate on drills from a team's own test suite.

    @pytest.mark.drill("stall-nccl")
    def test_stall_recovers(drill):
        assert drill.result["verdict"] == "pass", drill.result["reasons"]

    def test_both(drill):
        drill.run("kill-rank", job="reference").assert_pass()

Options: ``--drill-cluster``, ``--drill-job``, ``--drill-config``, ``--drill-reports``.
"""
from __future__ import annotations

from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("drillbit", "drillbit chaos drills")
    group.addoption("--drill-cluster", default=None, help="cluster for @pytest.mark.drill drills (default: local)")
    group.addoption("--drill-job", default=None, help="job profile for the drills (default: each drill's)")
    group.addoption("--drill-config", default=None, help="drill.yaml path")
    group.addoption("--drill-reports", default=None, help="where run folders go (default: reports/)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "drill(name, job=None): run a drillbit drill; the `drill` fixture holds its result")


class DrillResult:
    def __init__(self, payload: dict[str, Any], run_dir: str) -> None:
        self.result = payload
        self.run_dir = run_dir

    @property
    def verdict(self) -> str:
        return self.result["verdict"]

    def assert_pass(self) -> "DrillResult":
        assert self.verdict == "pass", f"{self.result['drill']}: {self.verdict}: " + "; ".join(self.result["reasons"])
        return self


class DrillFixture:
    def __init__(self, config: pytest.Config) -> None:
        self._config = config
        self.last: DrillResult | None = None

    def run(self, name: str, *, job: str | None = None, cluster: str | None = None) -> DrillResult:
        from drillbit.runs.session import execute, resolve

        opt = self._config.getoption
        resolved = resolve(name, cluster=cluster or opt("--drill-cluster"), job=job or opt("--drill-job"),
                           config_path=opt("--drill-config"))
        payload, outcome = execute(resolved, reports_dir=opt("--drill-reports"))
        self.last = DrillResult(payload, str(outcome.run_dir))
        return self.last

    @property
    def result(self) -> dict[str, Any]:
        if self.last is None:
            raise RuntimeError("no drill has run: mark the test with @pytest.mark.drill(NAME) or call drill.run(NAME)")
        return self.last.result

    def assert_pass(self) -> DrillResult:
        if self.last is None:
            raise RuntimeError("no drill has run")
        return self.last.assert_pass()


@pytest.fixture
def drill(request: pytest.FixtureRequest) -> DrillFixture:
    fixture = DrillFixture(request.config)
    marker = request.node.get_closest_marker("drill")
    if marker is not None:
        if not marker.args:
            raise pytest.UsageError("@pytest.mark.drill needs the drill's name, e.g. @pytest.mark.drill('stall-nccl')")
        fixture.run(marker.args[0], job=marker.kwargs.get("job"), cluster=marker.kwargs.get("cluster"))
    return fixture
