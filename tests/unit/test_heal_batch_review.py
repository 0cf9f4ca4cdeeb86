"""helper-20's review of the batched heal (#60): one node's faults healed in one call must
report each fault as one call a fault did. A scripted fault on the real NodeAgent and the
real Nemesis; the same on real processes is tests/integration/test_batched_calls.py."""
from __future__ import annotations

import json
import signal
import threading
import time

import pytest

from drillbit.agent import node as node_mod
from drillbit.agent.node import NodeAgent
from drillbit.core.history import History
from drillbit.core.proc import ProcRef
from drillbit.faults.base import Fault, Handle, HealReport, Params
from drillbit.loop.nemesis import HealAbandoned, Nemesis
from tests.unit.test_inject_all import Intent, registry_pids


class Scripted(Fault):
    name = "scripted"
    Params = Params
    State = Intent
    healed: list[int] = []
    slow_s = 0.0  # every heal takes this long
    hang: dict[int, threading.Event] = {}  # these heals wait for their event

    def plan(self, targets, params): ...

    def prepare(self, target, params):
        return Intent(pid=target.pid)

    def unprepare(self, target, params, intent): ...

    def act(self, target, params, intent):
        return Intent(pid=target.pid, acted=True)

    def heal(self, target, params, state):
        time.sleep(self.slow_s)
        if target.pid in self.hang:
            self.hang[target.pid].wait()
        self.healed.append(target.pid)
        return HealReport(healed=True, verified=True, detail="scripted")


class _Fault:
    name = "scripted"


class _AgentNodes:
    """One node's NodeAgent, routed as the in-process engine routes it."""

    def __init__(self, agent: NodeAgent) -> None:
        self.agent = agent

    def route(self, fault, target):
        return str(target.node)

    def active_by_node(self):
        return {"n0": self.agent.active()}

    def heal_group(self, handles):
        return self.agent.heal_all(handles)

    def heal(self, handle):
        return self.agent.heal(handle)


@pytest.fixture
def agent(tmp_path, monkeypatch):
    Scripted.healed, Scripted.slow_s, Scripted.hang = [], 0.0, {}
    monkeypatch.setattr(node_mod, "get_fault", lambda name, scratch=None: Scripted(scratch))
    a = NodeAgent("n0", tmp_path / "registry.json")
    handles, failed = a.inject_all("scripted", [ProcRef(pid=p, start_time=1.0, rank=i, node="n0")
                                                for i, p in enumerate((11, 12, 13, 14))], {})
    assert failed is None and len(handles) == 4
    return a


def test_heals_each_slower_than_the_deadline_but_within_its_retry_are_all_recorded_healed(agent):
    """Each heal 0.4 s against a 0.3 s deadline: one call a fault healed every one on its
    retry. In one call with the call's deadline shared, the first was reported left in place."""
    Scripted.slow_s = 0.4
    history = History()
    Nemesis(_AgentNodes(agent), "scripted", _Fault(), Params(), history, heal_timeout=0.3).heal()
    assert sorted(Scripted.healed) == [11, 12, 13, 14] and agent.active() == []
    assert history.of("heal.failed") == []
    assert sorted(e.data["pid"] for e in history.of("fault.heal")) == [11, 12, 13, 14]


def test_a_heal_that_hangs_leaves_the_faults_healed_before_it_healed_on_disk_and_in_the_record(agent):
    release = threading.Event()
    Scripted.hang = {12: release}
    history = History()
    try:
        Nemesis(_AgentNodes(agent), "scripted", _Fault(), Params(), history, heal_timeout=0.2).heal()
        assert 11 in Scripted.healed and 11 not in registry_pids(agent.registry_path)
        assert sorted(e.data["pid"] for e in history.of("fault.heal")) == [11]
        # 12 hung; 13 and 14 waited behind it in its call, and their retries behind its lock
        assert sorted(e.data["pid"] for e in history.of("heal.failed")) == [12, 13, 14]
        assert registry_pids(agent.registry_path) == [12, 13, 14]  # for the dead-man's switch
    finally:
        release.set()
    time.sleep(0.2)
    assert sorted(Scripted.healed)[:2] == [11, 12]


def test_no_heal_call_begins_after_the_operators_second_ctrl_c() -> None:
    """40 agents, more than the 32 calls in flight; each call 0.5 s; the operator's second
    Ctrl-C at 0.2 s. The calls in flight end on their nodes; none begins after it."""
    handles = [Handle(fault="fake", target=ProcRef(pid=100 + i, start_time=1.0, rank=i, node=f"n{i}"), params={})
               for i in range(40)]
    calls: list[tuple[float, str]] = []
    lock = threading.Lock()

    class Nodes:
        def route(self, fault, target):
            return str(target.node)

        def active_by_node(self):
            return {str(h.target.node): [h] for h in handles}

        def heal_group(self, hs):
            with lock:
                calls.append((time.monotonic(), str(hs[0].target.node)))
            time.sleep(0.5)
            return [HealReport(healed=True, verified=True, detail="undone") for _ in hs]

        def heal(self, h):
            return self.heal_group([h])[0]

    main = threading.main_thread().ident
    assert main is not None

    def handler(signum, frame):
        raise HealAbandoned("SIGUSR1 twice while healing")

    previous = signal.signal(signal.SIGUSR1, handler)
    history = History()
    nemesis = Nemesis(Nodes(), "fake", _Fault(), Params(), history, heal_timeout=5)  # type: ignore[arg-type]
    try:
        threading.Timer(0.2, lambda: signal.pthread_kill(main, signal.SIGUSR1)).start()
        nemesis.heal()
        left_at = time.monotonic()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    time.sleep(1.0)
    with lock:
        after = [node for t, node in calls if t > left_at]
    assert nemesis.abandoned and after == [], after
    left = [e.node for e in history.of("heal.failed") if "left in place" in e.data["detail"]]
    healed = [e.node for e in history.of("fault.heal")]
    assert sorted(left + healed) == sorted(f"n{i}" for i in range(40))  # each said once, one way or the other


def test_a_row_that_cannot_be_written_is_in_neither_the_file_nor_memory_and_the_rows_before_it_are_in_both(tmp_path):
    history = History(tmp_path / "h.jsonl")
    with pytest.raises(ValueError):
        history.record_many("probe:n0", [("step", 1.0, "n0", 0, {"n": 1}),
                                         ("not-a-kind", 2.0, "n0", 0, {"blob": object()})])
    history.record("harness", "probe.error", detail="after")
    history.close()
    on_disk = [json.loads(line)["seq"] for line in (tmp_path / "h.jsonl").read_text().splitlines()]
    assert on_disk == [e.seq for e in history] == [0, 1]
    assert [e.kind for e in history] == ["step", "probe.error"]


def test_batches_and_single_records_from_threads_keep_one_order_in_memory_the_file_and_the_listeners(tmp_path):
    history = History(tmp_path / "h.jsonl")
    heard: list[int] = []
    history.subscribe(lambda e: heard.append(e.seq))

    def many() -> None:
        for i in range(100):
            history.record_many("probe:n0", [("step", None, "n0", 0, {"n": i * 10 + j}) for j in range(10)])

    def one() -> None:
        for i in range(500):
            history.record("harness", "probe.error", detail=str(i))

    threads = [threading.Thread(target=f) for f in (many, one, many)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    history.close()
    seqs = [json.loads(line)["seq"] for line in (tmp_path / "h.jsonl").read_text().splitlines()]
    assert seqs == list(range(2500)) == heard == [e.seq for e in history]
