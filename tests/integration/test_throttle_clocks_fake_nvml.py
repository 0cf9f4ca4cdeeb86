"""throttle-clocks against a FAKE NVML library (this machine has no NVIDIA GPU): the NVML
calls, the GPU choice from the rank's environment, the exact restore and the read-back.
On a GPU host, bench/gpu_throttle.py runs the same fault on the real device."""
from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from drillbit.agent import NodeAgent
from drillbit.core.errors import FaultError
from drillbit.core.proc import ProcRef
from tests.fakes import fake_pynvml


@pytest.fixture
def fake_nvml(monkeypatch):
    fake_pynvml.reset(count=2)
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml)
    return fake_pynvml


@pytest.fixture
def rank1():
    env = dict(os.environ, LOCAL_RANK="1", RANK="5")
    proc = subprocess.Popen([sys.executable, "-c", "import sys, time; print('up', flush=True); time.sleep(60)"],
                            env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"  # running its own image, environment and all
    yield ProcRef.of(psutil.Process(proc.pid), rank=5)
    proc.kill()
    proc.wait()


def test_fake_nvml_lock_clocks_on_the_ranks_gpu_and_reset(tmp_path, fake_nvml, rank1):
    agent = NodeAgent("n0", tmp_path / "reg.json")
    handle = agent.inject("throttle-clocks", rank1, {"method": "lock-clocks", "clock_fraction": 0.5})
    assert handle.state["gpu_index"] == 1  # LOCAL_RANK=1
    assert fake_nvml.DEVICES[1].locked == (0, 990) and fake_nvml.DEVICES[0].locked is None
    evidence = agent.confirm(handle)
    assert evidence is not None and evidence.data["during"]["sm_clock_mhz"] <= 990
    assert evidence.data["before"]["sm_clock_mhz"] == 1980
    report = agent.heal(handle)
    assert report.healed and fake_nvml.DEVICES[1].locked is None
    assert fake_nvml.DEVICES[1].calls == ["lock 0-990", "reset-lock"]


def test_fake_nvml_power_limit_restored_exactly(tmp_path, fake_nvml, rank1):
    fake_nvml.DEVICES[1].power_limit = 650_123  # an operator's own setting, not the default
    agent = NodeAgent("n0", tmp_path / "reg.json")
    handle = agent.inject("throttle-clocks", rank1, {"method": "power-limit", "power_fraction": 0.5})
    assert fake_nvml.DEVICES[1].power_limit == 325_061
    assert agent.confirm(handle) is not None
    report = agent.heal(handle)
    assert report.verified and fake_nvml.DEVICES[1].power_limit == 650_123


def test_fake_nvml_power_limit_is_clamped_to_the_board_minimum(tmp_path, fake_nvml, rank1):
    agent = NodeAgent("n0", tmp_path / "reg.json")
    handle = agent.inject("throttle-clocks", rank1, {"method": "power-limit", "power_fraction": 0.1})
    assert fake_nvml.DEVICES[1].power_limit == 200_000
    agent.heal(handle)
    assert fake_nvml.DEVICES[1].power_limit == 700_000


def test_fake_nvml_refusal_is_a_clear_error_and_changes_nothing(tmp_path, fake_nvml, rank1):
    fake_nvml.allow_writes = False
    agent = NodeAgent("n0", tmp_path / "reg.json")
    with pytest.raises(FaultError, match="NVML refused lock-clocks on GPU 1.*Insufficient Permissions"):
        agent.inject("throttle-clocks", rank1, {"method": "lock-clocks"})
    assert fake_nvml.DEVICES[1].locked is None and agent.active() == []


def test_fake_nvml_gpu_is_never_guessed(tmp_path, fake_nvml):
    proc = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                            env={k: v for k, v in os.environ.items() if k != "LOCAL_RANK"},
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "up"
        agent = NodeAgent("n0", tmp_path / "reg.json")
        with pytest.raises(FaultError, match="cannot tell which GPU"):
            agent.inject("throttle-clocks", ProcRef.of(psutil.Process(proc.pid), rank=3), {})
        assert all(d.locked is None for d in fake_nvml.DEVICES)
    finally:
        proc.kill()
        proc.wait()


def test_without_nvml_the_error_says_what_to_install(tmp_path, monkeypatch, rank1):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    agent = NodeAgent("n0", tmp_path / "reg.json")
    with pytest.raises(FaultError, match=r"drillbit\[gpu\]"):
        agent.inject("throttle-clocks", rank1, {})


@pytest.mark.parametrize("visible, want", [
    ("GPU-8a1b2c3d-0000-1111-2222-333344445555,GPU-9f8e7d6c-0000-1111-2222-333344445555", "by UUID"),
    ("3", "CUDA_VISIBLE_DEVICES lists 1 device"),
])
def test_fake_nvml_a_gpu_named_by_uuid_is_refused_not_guessed(tmp_path, fake_nvml, visible, want):
    """LOCAL_RANK 1 with GPUs named by UUID: index 1 would be whatever NVML calls GPU 1,
    perhaps another job's. The fault refuses and touches no GPU."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                            env=dict(os.environ, LOCAL_RANK="1", CUDA_VISIBLE_DEVICES=visible),
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "up"
        agent = NodeAgent("n0", tmp_path / "reg.json")
        with pytest.raises(FaultError, match=want):
            agent.inject("throttle-clocks", ProcRef.of(psutil.Process(proc.pid), rank=1), {})
        assert all(d.locked is None for d in fake_nvml.DEVICES) and agent.active() == []
    finally:
        proc.kill()
        proc.wait()
