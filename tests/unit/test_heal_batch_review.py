"""helper-20's review of the batched heal (#60): one node's faults healed in one call must
report each fault as one call a fault did. A scripted fault on the real NodeAgent and the
real Nemesis; the same on real processes is tests/integration/test_batched_calls.py."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
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


def test_a_heal_whose_registry_write_failed_keeps_its_claim_until_a_write_drops_it(agent, monkeypatch):
    """A full disk under the registry: the fault is healed but still listed, so its file claim
    is kept (a claim is let go only once no registry names its fault), and released at the
    next write that lands."""
    released: list[int] = []
    monkeypatch.setattr(NodeAgent, "_release", lambda self, handle: released.append(handle.target.pid))
    real_write = node_mod.write_private

    def full(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(node_mod, "write_private", full)
    report = agent.heal_all([next(h for h in agent.active() if h.target.pid == 11)])[0]
    assert not report.healed and "No space left" in report.detail and released == []
    monkeypatch.setattr(node_mod, "write_private", real_write)
    assert agent.heal(next(h for h in agent.active() if h.target.pid == 12)).healed
    assert sorted(released) == [11, 12]


class FileIntent(Intent):
    dev: int
    ino: int
    file: str


class OnFile(Scripted):
    """A scripted fault on a real file, claimed as the file faults' are (core/filelocks.py)."""

    State = FileIntent
    path = None
    barrier: threading.Barrier | None = None  # two prepares meet here; the second claims after the first

    def prepare(self, target, params):
        info = OnFile.path.stat()
        intent = FileIntent(pid=target.pid, dev=info.st_dev, ino=info.st_ino, file=str(OnFile.path))
        if OnFile.barrier is not None and OnFile.barrier.wait(10) == 0:
            time.sleep(0.3)
        return intent

    def act(self, target, params, intent):
        return intent


def claimed_by_another(path) -> bool:
    """Whether another process (another drill) is refused the file: the claim is held."""
    info = path.stat()
    probe = subprocess.run([sys.executable, "-c", (
        "from drillbit.core import filelocks\nfrom drillbit.core.errors import ConfigError\n"
        f"try:\n filelocks.claim({info.st_dev}, {info.st_ino}, {str(path)!r}, '/nonexistent/other.json', 'k', 'x')\n"
        " print('CLAIMED')\nexcept ConfigError:\n print('REFUSED')")], capture_output=True, text=True, timeout=60)
    assert probe.stdout.strip() in ("CLAIMED", "REFUSED"), probe.stderr
    return probe.stdout.strip() == "REFUSED"


@pytest.fixture
def on_file(tmp_path, monkeypatch):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "model.pt").write_bytes(b"x")
    OnFile.path, OnFile.barrier = tmp_path / "a" / "model.pt", None
    monkeypatch.setattr(node_mod, "get_fault", lambda name, scratch=None: OnFile(scratch))
    a = NodeAgent("n0", tmp_path / "registry.json")
    yield a
    for handle in a.active():
        a.heal(handle)


def test_a_refused_second_inject_of_one_target_keeps_the_first_ones_file_claim(on_file, tmp_path):
    """helper-21: two injects of one target at once (a retry beside the call it retries), both
    prepared while the registry's heal lock was held. The second is refused at the record; its
    undo let go of the claim the first one's active fault holds, and another drill could then
    claim the damaged file."""
    OnFile.barrier = threading.Barrier(2)
    results = []
    calls = [threading.Thread(target=lambda: results.append(on_file.inject_all("scripted", [
        ProcRef(pid=11, start_time=1.0, rank=0, node="n0")], {}))) for _ in range(2)]
    with node_mod.heal_lock(tmp_path / "registry.json"):
        for call in calls:
            call.start()
        time.sleep(1.0)
    for call in calls:
        call.join(30)
    assert sorted(type(r[1]).__name__ for r in results) == ["FaultError", "NoneType"]
    assert registry_pids(tmp_path / "registry.json") == [11]
    assert claimed_by_another(OnFile.path)
    on_file.heal(on_file.active()[0])
    assert not claimed_by_another(OnFile.path)


def test_a_target_injected_again_on_another_file_claims_that_file(on_file, tmp_path, monkeypatch):
    """helper-21: a heal whose registry write failed keeps its file's claim; the same target
    injected again on another file found its key "ours already" and left the new file
    unclaimed."""
    target = ProcRef(pid=11, start_time=1.0, rank=0, node="n0")
    first = on_file.inject("scripted", target, {})
    real_write = node_mod.write_private
    monkeypatch.setattr(node_mod, "write_private", lambda path, text: (_ for _ in ()).throw(OSError(28, "full")))
    on_file.heal_all([first])
    monkeypatch.setattr(node_mod, "write_private", real_write)
    OnFile.path = tmp_path / "b" / "model.pt"
    second = on_file.inject("scripted", target, {})
    assert second.state["file"] == str(tmp_path / "b" / "model.pt")
    assert claimed_by_another(tmp_path / "b" / "model.pt")
    on_file.heal(second)
    assert not claimed_by_another(tmp_path / "a" / "model.pt")
    assert not claimed_by_another(tmp_path / "b" / "model.pt")
