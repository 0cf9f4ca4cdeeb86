"""Exit codes hold their promise through the installed ``drill`` script: a broken drill.yaml
or a broken spec is exit 2 with the file and line, never a traceback, for every command
that reads them; no command ever prints a Python traceback."""
from __future__ import annotations

import os

import pytest

from tests.integration.cli import drill_cli

BROKEN_CONFIG = "clusters:\n  a:\n    engine: warp\n"
BROKEN_SPEC = "name: broken\nclass: fail-stop\nsummary: x\nfault:\n  type: kill-rnak\n  trigger: {at_step: 0}\n"

# every command that reads drill.yaml (found in the working directory, as users keep it)
READS_CONFIG = [
    ["run", "kill-rank"], ["run", "kill-rank", "--dry-run"], ["suite", "run", "pre-deploy"], ["gate"],
    ["gameday", "run", "--yes"], ["results"], ["history"], ["runbook", "kill-rank"], ["validate"],
    ["validate", "drill.yaml"],
]


@pytest.fixture()
def broken_dir(tmp_path):
    (tmp_path / "drill.yaml").write_text(BROKEN_CONFIG)
    (tmp_path / "broken.yaml").write_text(BROKEN_SPEC)
    (tmp_path / "suite.yaml").write_text("name: s\ndrills: [broken.yaml]\n")
    return tmp_path


@pytest.mark.parametrize("args", READS_CONFIG, ids=lambda a: " ".join(a))
def test_broken_config_is_exit_2_with_file_and_line(broken_dir, args):
    env = {k: v for k, v in os.environ.items() if k != "DRILLBIT_CONFIG"}
    proc = drill_cli(*args, cwd=broken_dir, env=env, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "drill.yaml:3" in proc.stderr and "engine" in proc.stderr
    assert not (broken_dir / "reports").exists()  # nothing ran, nothing was written


@pytest.mark.parametrize("args", [
    ["run", "broken.yaml"], ["run", "broken.yaml", "--dry-run"], ["validate", "broken.yaml"],
    ["suite", "run", "suite.yaml"], ["gate", "--suite", "suite.yaml"], ["runbook", "broken.yaml"],
], ids=lambda a: " ".join(a))
def test_broken_spec_is_exit_2_with_every_problem(tmp_path, args):
    (tmp_path / "broken.yaml").write_text(BROKEN_SPEC)
    (tmp_path / "suite.yaml").write_text("name: s\ndrills: [broken.yaml]\n")
    proc = drill_cli(*args, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "broken.yaml:5" in proc.stderr and "kill-rnak" in proc.stderr and "did you mean 'kill-rank'" in proc.stderr
    assert "broken.yaml:6" in proc.stderr  # every problem at once: at_step 0 too


@pytest.mark.parametrize("args, code", [
    (["run", "nope"], 2), (["run", "kill-rank", "--cluster", "nope"], 2), (["run", "/etc"], 2),
    (["report", "/tmp"], 2), (["cadence", "--save-seconds", "5", "--mtbf", "soon"], 2),
    (["simulate", "--scenario", "nope"], 2), (["simulate", "--scenario", "bloom-176b", "--from", "/tmp"], 2),
    (["suite", "run", "nope"], 2), (["frobnicate"], 2), (["run"], 2), (["--version"], 0),
], ids=lambda a: " ".join(a) if isinstance(a, list) else str(a))
def test_bad_input_anywhere_is_a_clean_exit_2(tmp_path, args, code):
    proc = drill_cli(*args, cwd=tmp_path, timeout=120)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


@pytest.mark.parametrize("args", [
    ["list", "--json"], ["faults", "--json"], ["validate", "--json"],
    ["cadence", "--save-seconds", "40", "--mtbf", "168h", "--json"],
    ["simulate", "--scenario", "bloom-176b", "--trials", "20", "--json"],
], ids=lambda a: a[0])
def test_reporting_commands_speak_json(tmp_path, args):
    import json

    proc = drill_cli(*args, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)


def test_a_busy_cluster_is_exit_2_naming_the_holder_with_no_run_folder(tmp_path):
    """#43: a drill refused by another's lease was exit 5 ("harness error"), verdict ABORTED,
    with a run folder and a results-store row that fed the aborted figures of metrics.prom."""
    from drillbit.core.lease import Lease

    lease = Lease("local-process", holder="game-day drill by alice")
    lease.acquire()
    try:
        proc = drill_cli("run", "kill-rank", "--cluster", "local-process", "--reports", "reports", cwd=tmp_path,
                         timeout=120)
    finally:
        lease.release()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "is held by game-day drill by alice" in proc.stderr and "Traceback" not in proc.stderr
    reports = tmp_path / "reports"
    assert not [p for p in reports.iterdir() if p.is_dir()] if reports.exists() else True
