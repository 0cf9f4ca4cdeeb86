"""Exit codes hold their promise through the installed ``drill`` script: a broken drill.yaml
or a broken spec is exit 2 with the file and line, never a traceback, for every command
that reads them; a cluster another drill holds is exit 2 naming the holder, on every command
that takes the lease, and ``--wait`` queues behind it (Ctrl-C there: exit 4); no command
ever prints a Python traceback."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from drillbit.core.lease import Lease
from tests.integration.cli import drill_cli, drill_script

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


HOLDER = "game-day drill by alice"
# every command that takes the cluster's lease (drill heal does not: it must reach a cluster a
# stuck drill still holds)
TAKES_THE_LEASE = [
    ["probe", "--job", "reference"], ["run", "kill-rank"], ["run", "kill-rank", "--repeat", "2"],
    ["gate", "--suite", "pre-deploy"], ["suite", "run", "pre-deploy"], ["gameday", "run", "game-day", "--yes"],
    ["sweep", "kill-during-save"], ["compare", "--suite", "pre-deploy", "--jobs", "reference,reference-noverify"],
    ["campaign", str(Path(__file__).parent / "drills" / "campaign-fast.yaml")],
]


def held_by(holder: str = HOLDER) -> str:
    """The holder as every refusal names it: who, pid, host, since."""
    return f"is held by {holder} (pid {os.getpid()} on {socket.gethostname()}, since "


def run_folders(tmp_path: Path) -> list[Path]:
    reports = tmp_path / "reports"
    return [p for p in reports.iterdir() if p.is_dir()] if reports.exists() else []


@pytest.mark.parametrize("args", TAKES_THE_LEASE, ids=lambda a: " ".join(x for x in a if "/" not in x))
def test_a_busy_cluster_is_exit_2_naming_the_holder_on_every_command_that_takes_it(tmp_path, args):
    """#43: a drill refused by another's lease was exit 5 ("harness error"), verdict ABORTED,
    with a run folder and a results-store row that fed the aborted figures of metrics.prom.
    #56: `drill probe` was still exit 5, and a campaign left its folder: one code everywhere,
    the holder named (who, pid, host, since), nothing started, no run folder."""
    with Lease("local-process", holder=HOLDER):
        proc = drill_cli(*args, "--cluster", "local-process", "--reports", "reports", cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert held_by() in proc.stderr and "nothing was started" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr and "harness" not in proc.stderr
    assert not run_folders(tmp_path)


def test_wait_with_a_limit_gives_up_after_it_exit_2_naming_the_holder(tmp_path):
    with Lease("local-process", holder=HOLDER):
        proc = drill_cli("run", "kill-rank", "--cluster", "local-process", "--reports", "reports", "--wait", "1s",
                         cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    waiting = proc.stderr.index("waiting for it, up to 1.0 s")  # said once, naming the holder, before it gave up
    assert proc.stderr.count("waiting for it") == 1 and held_by() in proc.stderr[:waiting]
    gave_up = proc.stderr.index("still held after waiting 1.0 s (--wait)")
    assert waiting < gave_up and held_by() in proc.stderr[waiting:gave_up + 1]
    assert "Traceback" not in proc.stderr and not run_folders(tmp_path)


@pytest.mark.slow
def test_wait_goes_on_once_the_holder_releases_and_touches_nothing_before(tmp_path):
    """The drill queues behind the lease (it says so once, naming the holder), takes the cluster
    when the holder lets go, and only then starts anything: its agents are ready after the
    release, and the drill runs to its verdict."""
    lease = Lease("local-process", holder=HOLDER)
    lease.acquire()
    err = tmp_path / "stderr.txt"
    with open(err, "w") as stderr:
        proc = subprocess.Popen(
            [drill_script(), "run", str(Path(__file__).parent / "drills" / "kill-rank-fast-short.yaml"),
             "--job", "reference-norestarts", "--cluster", "local-process", "--reports", "reports", "--wait"],
            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        try:
            wait_for(lambda: "waiting for it, without a limit" in err.read_text(), proc)
            assert proc.poll() is None  # queued behind the holder
            released = time.time()
        finally:
            lease.release()
        assert proc.wait(timeout=300) == 1  # the drill ran: kill-rank on a job without restarts is a FAIL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    said = err.read_text()
    assert held_by() in said and said.count("waiting for it") == 1
    assert said.index("waiting for it") < said.index("the cluster is free") < said.index("launch")
    [folder] = run_folders(tmp_path)
    events = [json.loads(line) for line in (folder / "history.jsonl").read_text().splitlines()]
    ready = [e["t"] for e in events if e["kind"] == "agent.ready"]
    assert ready and min(ready) >= released  # the cluster was touched only once the holder let go
    assert json.loads((folder / "result.json").read_text())["verdict"] == "fail"


@pytest.mark.parametrize("args", [["run", "kill-rank"], ["probe", "--job", "reference"]], ids=lambda a: a[0])
def test_ctrl_c_while_waiting_is_exit_4_with_nothing_started(tmp_path, args):
    with Lease("local-process", holder=HOLDER):
        err = tmp_path / "stderr.txt"
        with open(err, "w") as stderr:
            proc = subprocess.Popen([drill_script(), *args, "--cluster", "local-process", "--reports", "reports",
                                     "--wait"], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            wait_for(lambda: "waiting for it" in err.read_text(), proc)
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    said = err.read_text()
    assert code == 4, said
    assert "nothing was started" in said and "Traceback" not in said
    assert not run_folders(tmp_path)  # no run folder, no verdict row: the drill never began


def wait_for(ready, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    """Until ``ready()`` (the command said something), or fail if the command ended first."""
    deadline = time.time() + timeout
    while not ready():
        assert proc.poll() is None, f"the command ended first (exit {proc.returncode})"
        assert time.time() < deadline, "the command never said it"
        time.sleep(0.1)
