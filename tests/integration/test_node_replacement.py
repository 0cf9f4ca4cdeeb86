"""fail-node-replacement: the node pool provider on its own, and the drill on the real job
(pass with the fallback policy, fail with the naive one)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from drillbit.agent import NodeAgent
from drillbit.core.errors import FaultError
from drillbit.core.proc import ProcRef
from drillbit.fixtures.reference import nodepool

HERE = Path(__file__).parent / "drills"


def hook(tmp_path: Path) -> dict:
    return {"command": "drillbit-ref-nodepool", "failed_arg": "--failed", "shim_dir": str(tmp_path / "shim"),
            "declare_dead": [sys.executable, "-m", "drillbit.fixtures.reference.nodepool", "mark-bad", "--pool",
                             str(tmp_path / "pool.json"), "--active"],
            "revive": [sys.executable, "-m", "drillbit.fixtures.reference.nodepool", "mark-good", "--pool",
                       str(tmp_path / "pool.json"), "--last-marked"]}


def provider(tmp_path: Path, failed: str, timeout: float = 5) -> subprocess.CompletedProcess:
    """The provider as the job calls it: by name, on a PATH with the stand-in's folder first."""
    env = {**os.environ, "PATH": f"{tmp_path / 'shim'}:{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(["drillbit-ref-nodepool", "replace", "--pool", str(tmp_path / "pool.json"),
                           "--failed", failed], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("mode", ["fail", "same-node", "hang"])
def test_provider_misbehaves_once_then_heals(tmp_path, mode):
    pool = tmp_path / "pool.json"
    nodepool.init(pool, spares=2)
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    agent = NodeAgent("n0", tmp_path / "reg.json")
    handle = agent.inject("fail-node-replacement", ProcRef.of(psutil.Process(victim.pid), rank=1),
                          {"mode": mode, "hook": hook(tmp_path)})
    victim.wait(timeout=10)
    assert agent.confirm(handle) is not None
    assert nodepool.read(pool)["bad"] == ["node-0"]  # the profile's declare_dead ran
    hanging = None
    if mode == "hang":  # a caller with no timeout of its own: the call never returns until heal ends it
        hanging = subprocess.Popen(["drillbit-ref-nodepool", "replace", "--pool", str(pool), "--failed", "node-0"],
                                   env={**os.environ, "PATH": f"{tmp_path / 'shim'}:{Path(sys.executable).parent}:"
                                                              f"{os.environ['PATH']}"}, stdout=subprocess.PIPE)
        with pytest.raises(subprocess.TimeoutExpired):
            hanging.wait(timeout=2)
    else:
        out = provider(tmp_path, "node-0")
        assert (out.returncode, out.stdout.strip()) == ((1, "") if mode == "fail" else (0, "node-0"))
    assert provider(tmp_path, "node-0").stdout.strip() == "spare-1"  # only the first request misbehaves
    report = agent.heal(handle)
    assert report.verified and not (tmp_path / "shim").exists(), report
    assert "misbehaved on 1 of 2 call(s)" in report.detail
    assert "ran revive" in report.detail and "node-0" not in nodepool.read(pool)["bad"], report  # declare_dead undone
    if hanging is not None:
        assert "ended 1 call(s) still hanging" in report.detail
        assert hanging.wait(timeout=10) != 0 and hanging.stdout.read() == b""  # it never answered
    assert provider(tmp_path, "node-1").stdout.strip() == "spare-2"  # healed: the real provider answers


def test_a_profile_without_a_replacement_hook_is_refused(tmp_path):
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        agent = NodeAgent("n0", tmp_path / "reg.json")
        with pytest.raises(FaultError, match="replacement: \\{command"):
            agent.inject("fail-node-replacement", ProcRef.of(psutil.Process(victim.pid), rank=1), {"mode": "fail"})
        assert victim.poll() is None  # nothing was done to it
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.slow
def test_fallback_policy_recovers_within_the_slo(tmp_path):
    """Run as the README's cron line and systemd unit run it: ``drill`` by its absolute path, the
    virtual environment not activated and not on PATH. The replacement shim and the reference
    job find the node pool's command beside the interpreter (it once failed every call, "not
    found on PATH", and the healthy path FAILed)."""
    import json

    from tests.integration.cli import drill_cli, drill_script

    venv_bin = str(Path(drill_script()).parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
                           if p and os.path.realpath(p) != os.path.realpath(venv_bin))
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = path
    proc = drill_cli("run", str(HERE / "fail-node-replacement-fast.yaml"), "--reports", str(tmp_path), "--json",
                     env=env, cwd=Path(__file__).parents[2], timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    payload = json.loads(proc.stdout)
    assert payload["verdict"] == "pass", payload["reasons"]
    m = payload["measurements"]
    assert m["replace_failures"] >= 1 and m["replacement_node"] == "spare-1"


@pytest.mark.slow
def test_naive_policy_just_waits_and_fails(tmp_path):
    from drillbit.runs.session import execute, resolve

    from tests.integration.short import short_window

    # it waits on the hung call forever: a short window shows that as well as a long one
    payload, _ = execute(short_window(resolve(str(HERE / "fail-node-replacement-fast.yaml"),
                                              job="reference-naivereplace"), 25), reports_dir=str(tmp_path))
    assert payload["verdict"] == "fail"
    assert any("just waited" in r or "only after" in r for r in payload["reasons"]), payload["reasons"]
