"""fail-node-replacement: the node pool provider on its own, and the drill on the real job
(pass with the fallback policy, fail with the naive one)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from drillbit.agent import NodeAgent
from drillbit.proc import ProcRef
from drillbit.reference import nodepool

HERE = Path(__file__).parent / "drills"


def provider(pool: Path, failed: str, timeout: float = 5) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "drillbit.reference.nodepool", "replace", "--pool", str(pool),
                           "--failed", failed], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("mode", ["fail", "same-node", "hang"])
def test_provider_misbehaves_once_then_heals(tmp_path, mode):
    pool = tmp_path / "pool.json"
    nodepool.init(pool, spares=2)
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    agent = NodeAgent("n0", tmp_path / "reg.json")
    handle = agent.inject("fail-node-replacement", ProcRef.of(psutil.Process(victim.pid), rank=1),
                          {"mode": mode, "node_pool": str(pool)})
    victim.wait(timeout=10)
    assert agent.confirm(handle) is not None
    assert nodepool.read(pool)["bad"] == ["node-0"]
    if mode == "hang":
        with pytest.raises(subprocess.TimeoutExpired):
            provider(pool, "node-0", timeout=2)
    else:
        out = provider(pool, "node-0")
        assert (out.returncode, out.stdout.strip()) == ((1, "") if mode == "fail" else (0, "node-0"))
    assert provider(pool, "node-0").stdout.strip() == "spare-1"  # only the first request misbehaves
    report = agent.heal(handle)
    assert report.verified and not nodepool.chaos_path(pool).exists()


@pytest.mark.slow
def test_fallback_policy_recovers_within_the_slo(tmp_path):
    from drillbit.session import execute, resolve

    payload, _ = execute(resolve(str(HERE / "fail-node-replacement-fast.yaml")), reports_dir=str(tmp_path))
    assert payload["verdict"] == "pass", payload["reasons"]
    m = payload["measurements"]
    assert m["replace_failures"] >= 1 and m["replacement_node"] == "spare-1"


@pytest.mark.slow
def test_naive_policy_just_waits_and_fails(tmp_path):
    from drillbit.session import execute, resolve

    payload, _ = execute(resolve(str(HERE / "fail-node-replacement-fast.yaml"), job="reference-naivereplace"),
                         reports_dir=str(tmp_path))
    assert payload["verdict"] == "fail"
    assert any("just waited" in r or "only after" in r for r in payload["reasons"]), payload["reasons"]
