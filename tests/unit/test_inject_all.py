"""NodeAgent.inject_all: a node's targets in one call, record then act, two registry writes a
call; NodeAgent.heal_all: their heals in one call, each written as it heals. A scripted fault here
(its prepare, act and heal say what they were asked); the real faults on real processes go
through it in tests/integration/test_batched_calls.py and every drill."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from drillbit.agent import node as node_mod
from drillbit.agent.node import NodeAgent
from drillbit.core.errors import FaultError
from drillbit.core.proc import ProcRef
from drillbit.faults.base import Fault, HealReport, Params, State


class Intent(State):
    pid: int
    acted: bool = False


class Scripted(Fault):
    name = "scripted"
    Params = Params
    State = Intent
    log: list[str] = []
    refuse: set[int] = set()  # act raises FaultError (a clean refusal) on these pids
    breaks: set[int] = set()  # act raises half-way on these
    seen_on_disk: list[list[int]] = []  # the registry's faults each act saw
    heal_breaks: set[int] = set()  # heal raises on these

    def plan(self, targets, params): ...

    def prepare(self, target, params):
        self.log.append(f"prepare {target.pid}")
        return Intent(pid=target.pid)

    def unprepare(self, target, params, intent):
        self.log.append(f"unprepare {target.pid}")

    def act(self, target, params, intent):
        self.seen_on_disk.append(registry_pids(self.registry))
        self.log.append(f"act {target.pid}")
        if target.pid in self.refuse:
            raise FaultError(f"refused {target.pid}")
        if target.pid in self.breaks:
            raise RuntimeError(f"broke half-way on {target.pid}")
        return Intent(pid=target.pid, acted=True)

    def heal(self, target, params, state):
        self.log.append(f"heal {target.pid} acted={state.acted}")
        if target.pid in self.heal_breaks:
            raise OSError(f"could not undo {target.pid}")
        return HealReport(healed=True, verified=True, detail="scripted")


def registry_pids(path: Path) -> list[int]:
    return [f["target"]["pid"] for f in json.loads(path.read_text())["faults"]] if path.exists() else []


@pytest.fixture
def agent(tmp_path, monkeypatch):
    Scripted.log, Scripted.refuse, Scripted.breaks, Scripted.seen_on_disk = [], set(), set(), []
    Scripted.heal_breaks = set()
    Scripted.registry = tmp_path / "registry.json"
    monkeypatch.setattr(node_mod, "get_fault", lambda name, scratch=None: Scripted(scratch))
    saves = []
    real = node_mod.write_private
    monkeypatch.setattr(node_mod, "write_private", lambda path, text: (saves.append(1), real(path, text))[1])
    a = NodeAgent("n0", Scripted.registry)
    a.saves = saves
    return a


def targets(*pids: int) -> list[ProcRef]:
    return [ProcRef(pid=p, start_time=1.0, rank=i, node="n0") for i, p in enumerate(pids)]


def test_every_intent_is_on_disk_before_the_first_act_and_the_registry_is_written_twice(agent):
    handles, failed = agent.inject_all("scripted", targets(11, 12, 13), {})
    assert failed is None and [h.target.pid for h in handles] == [11, 12, 13]
    assert all(h.state["acted"] for h in handles)
    assert Scripted.seen_on_disk == [[11, 12, 13]] * 3  # record, then act: all recorded first
    assert len(agent.saves) == 2
    on_disk = json.loads(Scripted.registry.read_text())["faults"]
    assert [f["state"]["acted"] for f in on_disk] == [True, True, True]


def test_a_clean_refusal_stops_there_and_only_what_acted_before_it_is_held(agent):
    Scripted.refuse = {12}
    handles, failed = agent.inject_all("scripted", targets(11, 12, 13), {})
    assert isinstance(failed, FaultError) and "refused 12" in str(failed)
    assert [h.target.pid for h in handles] == [11]
    assert "act 13" not in Scripted.log and "unprepare 12" in Scripted.log and "unprepare 13" in Scripted.log
    assert [h.target.pid for h in agent.active()] == [11] and registry_pids(Scripted.registry) == [11]


def test_a_fault_that_broke_half_way_stays_registered_for_its_heal_and_the_rest_never_act(agent):
    Scripted.breaks = {12}
    handles, failed = agent.inject_all("scripted", targets(11, 12, 13), {})
    assert isinstance(failed, RuntimeError) and [h.target.pid for h in handles] == [11]
    assert sorted(h.target.pid for h in agent.active()) == [11, 12]  # 12 from its intent
    assert registry_pids(Scripted.registry) == [11, 12] and "act 13" not in Scripted.log
    assert "unprepare 13" in Scripted.log and "unprepare 12" not in Scripted.log
    for held in agent.active():
        assert agent.heal(held).healed
    assert "heal 12 acted=False" in Scripted.log and agent.active() == []


def test_a_single_inject_is_a_call_of_one_and_raises_what_failed(agent):
    assert agent.inject("scripted", targets(21)[0], {}).state["acted"]
    Scripted.refuse = {22}
    with pytest.raises(FaultError, match="refused 22"):
        agent.inject("scripted", targets(22)[0], {})
    assert [h.target.pid for h in agent.active()] == [21]


def test_the_same_target_twice_in_one_call_is_refused_before_it_prepares_and_the_first_is_kept(agent):
    """helper-19: a target named twice took the first fault's slot; the first was never healed
    (a duty-cycle thread left running, a partition left up). With [11, 12, 11] and 12 refused,
    the second 11's removal dropped the first 11, which had acted, from the registry."""
    handles, failed = agent.inject_all("scripted", targets(31, 31), {})
    assert isinstance(failed, FaultError) and "already asked for on pid 31" in str(failed)
    assert [h.target.pid for h in handles] == [31] and Scripted.log.count("prepare 31") == 1
    assert [h.target.pid for h in agent.active()] == [31] and registry_pids(Scripted.registry) == [31]
    Scripted.refuse = {12}
    handles, failed = agent.inject_all("scripted", targets(41, 12, 41), {})
    assert [h.target.pid for h in handles] == [41] and "refused 12" in str(failed)
    assert sorted(h.target.pid for h in agent.active()) == [31, 41]
    assert registry_pids(Scripted.registry) == [31, 41]


def test_a_fault_still_active_on_a_target_is_not_injected_over(agent):
    assert agent.inject("scripted", targets(51)[0], {}).state["acted"]
    with pytest.raises(FaultError, match="already active on pid 51"):
        agent.inject("scripted", targets(51)[0], {})
    assert Scripted.log.count("act 51") == 1 and [h.target.pid for h in agent.active()] == [51]
    [held] = agent.active()
    assert agent.heal(held).healed and agent.active() == []
    assert agent.inject("scripted", targets(51)[0], {}).state["acted"]  # healed: it may come again


def test_heal_all_heals_in_order_and_a_heal_that_raises_is_its_own_failure(agent):
    handles, failed = agent.inject_all("scripted", targets(61, 62, 63), {})
    assert failed is None
    Scripted.heal_breaks = {62}
    del agent.saves[:]
    reports = agent.heal_all(handles)
    assert [r.healed for r in reports] == [True, False, True]
    assert reports[1].detail == "heal raised OSError: could not undo 62"
    assert [line for line in Scripted.log if line.startswith("heal")] == [
        "heal 61 acted=True", "heal 62 acted=True", "heal 63 acted=True"]
    assert len(agent.saves) == 2  # 61 and 63 each left the registry as it healed (62's failure wrote nothing)
    assert [h.target.pid for h in agent.active()] == [62] and registry_pids(Scripted.registry) == [62]
    with pytest.raises(OSError, match="could not undo 62"):  # one heal alone still raises, as it always did
        agent.heal(handles[1])
    Scripted.heal_breaks = set()
    again = agent.heal_all([handles[1], handles[1], handles[0]])  # twice, and one healed before
    assert [r.healed for r in again] == [True, True, True]
    assert Scripted.log.count("heal 62 acted=True") == 3 and Scripted.log.count("heal 61 acted=True") == 1
    assert agent.active() == [] and registry_pids(Scripted.registry) == []
