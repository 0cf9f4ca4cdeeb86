"""One call carries all of an agent's targets (plan_all, inject_all, confirm_all, heal_all): the
real agent service in-process, on real processes. A target the agent refuses stops the call
there, and what landed before it is answered, held and healed. A heal that fails in a batch is
that fault's failed report; the others are healed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from drillbit.agent.service import AgentService
from drillbit.core.proc import ProcRef
from drillbit.spec.config import RankDiscovery
from drillbit.transport.client import AgentError
from drillbit.transport.inprocess import InProcessClient

MARK = "drillbit-batched-sleeper"
FAULT, PARAMS = "hang-collective", {"method": "sigstop", "confirm_timeout_s": 5.0}


@pytest.fixture
def ranks(tmp_path) -> Iterator[tuple[InProcessClient, list[ProcRef]]]:
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", MARK],
                              env={**os.environ, "RANK": str(i)}) for i in range(3)]
    client = InProcessClient(AgentService("n0", tmp_path / "agent"))
    try:
        deadline = time.time() + 20
        found: list[ProcRef] = []
        while len(found) < 3 and time.time() < deadline:
            time.sleep(0.2)
            found = client.find_ranks(RankDiscovery(cmdline=MARK), ProcRef.of(psutil.Process()))
        assert len(found) == 3, found
        yield client, sorted((r.model_copy(update={"node": "n0"}) for r in found), key=lambda r: r.rank or 0)
    finally:
        for handle in client.active():
            client.heal(handle)
        client.close()
        for p in procs:
            p.kill()
            p.wait()


def stopped(ref: ProcRef) -> bool:
    return psutil.Process(ref.pid).status() == psutil.STATUS_STOPPED


def test_one_call_injects_confirms_and_plans_every_target_of_a_node(ranks):
    client, found = ranks
    steps = client.plan_all(FAULT, found, PARAMS)
    assert [s.pid for s in steps] == [r.pid for r in found]
    handles, failed = client.inject_all(FAULT, found, PARAMS)
    assert failed is None and [h.target.pid for h in handles] == [r.pid for r in found]
    evidence = client.confirm_all(handles)  # a confirmation waits for the stop to show
    assert len(evidence) == 3 and all(e is not None for e in evidence)
    assert all(stopped(r) for r in found)
    assert sorted(h.target.pid for h in client.active()) == sorted(r.pid for r in found)
    reports = client.heal_all(handles)
    assert [r.verified for r in reports] == [True, True, True], reports
    assert not any(stopped(r) for r in found) and client.active() == []
    assert json.loads(client.service.agent.registry_path.read_text())["faults"] == []
    assert [r.healed for r in client.heal_all(handles)] == [True, True, True]  # idempotent: already healed


def test_one_heal_that_raises_in_a_batch_is_its_own_failure_and_the_rest_are_healed(ranks):
    client, found = ranks
    handles, failed = client.inject_all(FAULT, found, PARAMS)
    assert failed is None and all(e is not None for e in client.confirm_all(handles))
    agent = client.service.agent
    key = agent._key(handles[1])
    broken = agent._active[key][1]  # the middle target's fault instance: its heal raises

    def refuse(*_a, **_k):
        raise OSError("the disk went away")

    broken.heal = refuse  # type: ignore[method-assign]
    writes = []
    save = agent._save
    agent._save = lambda: (writes.append(1), save())[1]  # type: ignore[method-assign]
    reports = client.heal_all(handles)
    assert [r.healed for r in reports] == [True, False, True], reports
    assert "heal raised OSError: the disk went away" in reports[1].detail
    assert len(writes) == 2  # each that healed left the registry as it healed
    assert [h.target.pid for h in client.active()] == [found[1].pid]
    on_disk = json.loads(agent.registry_path.read_text())["faults"]
    assert [h["target"]["pid"] for h in on_disk] == [found[1].pid]
    assert not stopped(found[0]) and stopped(found[1]) and not stopped(found[2])
    del broken.heal  # its own heal again: the retry heals it
    assert client.heal(handles[1]).verified and not stopped(found[1]) and client.active() == []


def test_a_refused_target_stops_the_call_and_what_landed_before_it_is_answered_and_healed(ranks):
    client, found = ranks
    stranger = ProcRef.of(psutil.Process()).model_copy(update={"node": "n0", "rank": 9})  # not a rank it found
    handles, failed = client.inject_all(FAULT, [found[0], stranger, found[2]], PARAMS)
    assert isinstance(failed, AgentError) and "not a rank this agent found" in str(failed), failed
    assert [h.target.pid for h in handles] == [found[0].pid]
    assert client.confirm_all(handles)[0] is not None and stopped(found[0])
    assert not stopped(found[2])  # the target after the refusal was not tried
    assert [h.target.pid for h in client.active()] == [found[0].pid]
    assert client.heal(handles[0]).verified and not stopped(found[0])
