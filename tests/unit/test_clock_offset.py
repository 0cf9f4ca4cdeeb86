"""The clock offset the handshake measures (the agent's answers from a scripted clock here;
the real agent answers in tests/integration/test_agent_api.py)."""
from __future__ import annotations

import math

import drillbit
from drillbit.agent import api
from drillbit.faults import registry as fault_registry
from drillbit.transport.client import AgentClient

OFFSET = 123.25  # the agent's clock, ahead of the controller's


class ScriptedClient(AgentClient):
    def __init__(self, delays: list[float]) -> None:
        super().__init__("node-0")
        self.delays = list(delays)  # the round trip of each call, in order
        self.now = 1_000.0
        self.calls: list[str] = []

    def _send(self, method: str, payload: dict, timeout: float) -> dict:
        self.calls.append(method)
        delay = self.delays.pop(0) if self.delays else 0.0005
        self.now += delay / 2
        agent_t = self.now + OFFSET
        self.now += delay / 2
        if method == "info":
            return {"ok": {"node": self.node, "pid": 1, "host": "h", "t": agent_t, "version": drillbit.__version__,
                           "protocol": api.PROTOCOL, "faults": sorted(fault_registry())}}
        return {"ok": {"t": agent_t}}


def scripted(monkeypatch, delays: list[float]) -> ScriptedClient:
    client = ScriptedClient(delays)
    monkeypatch.setattr("drillbit.transport.client.time.time", lambda: client.now)
    return client


def test_the_handshakes_answer_is_the_first_sample_so_a_fast_link_needs_one_clock_call(monkeypatch):
    client = scripted(monkeypatch, [0.001, 0.001])
    client.handshake()
    offset, rtt = client.measure_offset()
    assert client.calls == ["info", "clock"]
    assert math.isclose(offset, OFFSET, abs_tol=1e-6) and rtt <= 0.002


def test_a_slow_handshake_is_outdone_by_a_faster_clock_sample(monkeypatch):
    client = scripted(monkeypatch, [0.5, 0.004, 0.003, 0.001])
    client.handshake()
    offset, rtt = client.measure_offset()
    assert client.calls == ["info", "clock", "clock", "clock"]
    assert math.isclose(rtt, 0.001, abs_tol=1e-9) and math.isclose(offset, OFFSET, abs_tol=1e-6)


def test_a_second_measurement_samples_afresh_and_without_a_handshake_takes_two(monkeypatch):
    client = scripted(monkeypatch, [0.001, 0.001, 0.001, 0.001])
    client.handshake()
    client.measure_offset()
    client.calls.clear()
    client.measure_offset()
    assert client.calls == ["clock", "clock"]
