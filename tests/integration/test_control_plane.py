"""kill-control-plane on real processes: the job's control plane found among the job's
processes by the port it listens on, its command line or its pid file; killed, or stopped and
resumed (the heal verified by the process's state); a description that matches no process or
several is refused before anything is sent. Then the drills on the reference job: losing
torchrun's rendezvous store ends it (FAIL, keep_stepping), a 10 s pause of it does not (PASS)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from drillbit.agent import NodeAgent
from drillbit.core.errors import ConfigError
from drillbit.core.proc import ProcRef
from drillbit.runs.session import execute, resolve

DRILLS = Path(__file__).resolve().parents[2] / "drills"
STORE = ("import socket, sys, time\n"
         "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
         "print(s.getsockname()[1], flush=True); time.sleep(120)\n")


@pytest.fixture
def store():
    """A process of the job that listens on a port, as a rendezvous store does (a child of
    the test, as the ranks are: the test process stands for the job's root)."""
    proc = subprocess.Popen([sys.executable, "-c", STORE, "fake-store"], stdout=subprocess.PIPE, text=True)
    port = int(proc.stdout.readline())
    yield proc, port
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
    proc.wait()


def run(drill: str, tmp_path: Path) -> dict:
    payload, _ = execute(resolve(str(DRILLS / f"{drill}.yaml")), reports_dir=str(tmp_path))
    return payload


def params(tmp_path, **process) -> dict:
    return {"name": "rendezvous", "process": process, "node": "n0",
            "root": ProcRef.of(psutil.Process()).model_dump()}


def test_the_process_listening_on_the_port_is_killed_and_no_rank_is(tmp_path, ranks, store):
    proc, port = store
    agent = NodeAgent("n0", tmp_path / "reg.json")
    rank1 = ProcRef.of(psutil.Process(ranks[1].pid), rank=1, node="n0")
    handle = agent.inject("kill-control-plane", rank1, params(tmp_path, port=port))
    evidence = agent.confirm(handle)
    assert evidence is not None and evidence.kind == "control-plane-down"
    assert evidence.data["pid"] == proc.pid and evidence.data["status"] == "gone"
    assert proc.wait(timeout=5) == -signal.SIGKILL
    assert all(r.poll() is None for r in ranks)  # the ranks live on
    report = agent.heal(handle)
    assert report.healed and report.verified


def test_a_stopped_control_plane_is_resumed_and_the_heal_verified(tmp_path, ranks, store):
    proc, port = store
    agent = NodeAgent("n0", tmp_path / "reg.json")
    rank0 = ProcRef.of(psutil.Process(ranks[0].pid), rank=0, node="n0")
    handle = agent.inject("kill-control-plane", rank0,
                          {**params(tmp_path, cmdline="fake-store", port=port), "signal": "SIGSTOP"})
    evidence = agent.confirm(handle)
    assert evidence is not None and evidence.data["status"] == psutil.STATUS_STOPPED
    report = agent.heal(handle)
    assert report.healed and report.verified
    assert psutil.Process(proc.pid).status() != psutil.STATUS_STOPPED


@pytest.mark.parametrize("process, why", [
    ({"cmdline": "fake-(rank|store)"}, "matched 4 processes"),   # three ranks and the store
    ({"cmdline": "fake-store", "port": 1}, "matched no process"),
], ids=["several", "none"])
def test_a_description_that_fits_several_processes_or_none_is_refused_and_nothing_is_sent(tmp_path, ranks, store,
                                                                                          process, why):
    proc, _ = store
    agent = NodeAgent("n0", tmp_path / "reg.json")
    rank0 = ProcRef.of(psutil.Process(ranks[0].pid), rank=0, node="n0")
    with pytest.raises(ConfigError, match=why):
        agent.inject("kill-control-plane", rank0, params(tmp_path, **process))
    assert proc.poll() is None and all(r.poll() is None for r in ranks)
    assert agent.active() == []


def test_a_pid_file_names_it_only_with_its_own_start_time(tmp_path, ranks, store):
    proc, _ = store
    agent = NodeAgent("n0", tmp_path / "reg.json")
    rank0 = ProcRef.of(psutil.Process(ranks[0].pid), rank=0, node="n0")
    pidfile = tmp_path / "store.pid"
    pidfile.write_text(json.dumps({"pid": proc.pid, "start_time": 1.0}))  # another process's, long gone
    with pytest.raises(ConfigError, match="matched no process among the pid file"):
        agent.inject("kill-control-plane", rank0, params(tmp_path, pidfile=str(pidfile)))
    assert proc.poll() is None
    pidfile.write_text(json.dumps({"pid": proc.pid, "start_time": psutil.Process(proc.pid).create_time()}))
    handle = agent.inject("kill-control-plane", rank0, params(tmp_path, pidfile=str(pidfile)))
    assert agent.confirm(handle) is not None
    assert proc.wait(timeout=5) == -signal.SIGKILL


@pytest.mark.slow
def test_losing_torchruns_rendezvous_store_ends_the_reference_job(tmp_path):
    result = run("kill-control-plane", tmp_path)
    assert result["verdict"] == "fail" and result["exit_code"] == 1, result["reasons"]
    assert result["fault"]["confirmed"] is True
    slo = {s["name"]: s for s in result["slos"]}
    assert slo["keep_stepping"]["status"] == "fail"
    assert any("did not survive the fault" in r for r in result["reasons"]), result["reasons"]
    assert result["measurements"]["restarts"] == 0  # nothing restarted it: the job ended


@pytest.mark.slow
def test_a_ten_second_pause_of_the_rendezvous_store_is_survived(tmp_path):
    result = run("pause-control-plane", tmp_path)
    assert result["verdict"] == "pass" and result["exit_code"] == 0, result["reasons"]
    slo = {s["name"]: s for s in result["slos"]}
    assert slo["keep_stepping"]["status"] == "pass"
    assert result["measurements"]["observed_s"] >= 30  # observe.at_least
    heal = result["fault"]["heals"][0]
    assert heal["verified"] and heal["detail"].startswith("resumed")
