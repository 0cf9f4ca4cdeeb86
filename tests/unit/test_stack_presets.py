"""The torchft, NVRx and DLRover presets on lines those stacks printed in real drills here
(tests/unit/captured/*.log: each file names the run, the ranks and whom the fault hit, and
marks where the fault hit), and attribution computed from what they say."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from drillbit.judging.checks.attribution import attribute
from drillbit.core.history import History
from drillbit.judging.probes.logs import LineReader
from drillbit.judging.probes.preset import load, matcher
from drillbit.spec.config import BUILTIN_JOBS
from drillbit.spec.signals import Signal

CAPTURED = Path(__file__).parent / "captured"
T_FAULT = 100.0


def replay(name: str, job: str) -> tuple[History, list[tuple[str, dict]]]:
    """The captured lines through the job profile's presets and signals, as a drill reads them:
    lines before a file's '# fault' mark at times before T_FAULT, lines after it after."""
    profile = BUILTIN_JOBS[job]
    signals = [s for p in profile.presets for s in load(p).signals] + list(profile.signals)
    reader = LineReader(matcher(signals))
    text = (CAPTURED / f"{name}.log").read_text().splitlines()
    header = text[0]
    ranks = json.loads(re.search(r"job\.ranks=(\[.*?\]) fault", header).group(1))
    injects = json.loads(re.search(r"fault\.inject=(\[.*\])$", header).group(1))
    h = History()
    hits: list[tuple[str, dict]] = []
    t = 0.0
    for line in text[1:]:
        if line.startswith("# --- "):
            t = 0.0
            continue
        if line == "# fault":
            t = T_FAULT + 1
            continue
        t += 0.01
        for kind, _t, rank, data in reader.hits(line):
            h.record("probe:logs", kind, t=t, rank=rank, **data)
            hits.append((kind, data))
    h.record("harness", "job.ranks", t=T_FAULT - 1, ranks=ranks)
    for rank, pid, fault in injects:
        h.record("harness", "fault.inject", t=T_FAULT, rank=rank, node="local", pid=pid, fault=fault)
    return h, hits


def blame_of(h: History, verb: str = "hurt"):
    return attribute(sorted(h, key=lambda e: e.t), T_FAULT, "rank", verb)


def test_torchft_lighthouse_quorums_blame_the_killed_replica_and_healing_is_a_restore():
    h, hits = replay("torchft-kill-rank", "torchft")
    quorums = [d["quorum_id"] for k, d in hits if k == "members"]
    assert quorums == [1, 2, 3]  # one event per change, though the lighthouse prints it every step
    members = next(d["members"] for k, d in hits if k == "members" and d["quorum_id"] == 2)
    assert [m["rank"] for m in members] == [0, 1] and all(":" in m["id"] for m in members)
    restores = [d for k, d in hits if k == "restore"]
    assert restores and restores[-1]["by"] == "torchft" and restores[-1]["step"] > 0
    assert restores[-1]["tier"] == "peer"  # healing copies a live peer's state
    a = blame_of(h, "killed")
    assert a is not None and a.correct and a.blamed == [1]
    assert set(a.by) == {"torchft-lighthouse", "torchrun"}
    assert a.describe() == "the stack blamed rank 1, the one killed"


def test_torchft_ddp_blames_the_survivor_too():
    """torchft.ddp's comm hook asserts when a peer dies mid-allreduce: the survivor's group
    restarts as well, and both replicas leave the quorum."""
    h, _ = replay("torchft-ddp-kill-rank", "torchft-ddp")
    a = blame_of(h, "killed")
    assert a is not None and a.blamed == [0, 1] and a.false_blames == [0] and not a.correct
    assert a.covers()  # superset would let it pass; exact does not
    assert a.describe().startswith("the stack blamed ranks 0 and 1 (") and a.describe().endswith(
        "only rank 1 was killed")


def test_torchft_stall_the_quorum_drops_only_the_stopped_replica_and_the_survivor_reports_the_timeout():
    h, hits = replay("torchft-stall", "torchft")
    detects = [d for k, d in hits if k == "detect"]
    assert detects and all(d["by"] == "torchft" for d in detects)
    a = blame_of(h, "stopped")
    assert a is not None and a.correct and a.blamed == [1] and a.by == ["torchft-lighthouse"]


def test_nvrx_rank_monitors_blame_both_ranks_of_a_stall():
    """The defect the stacks suite keeps: rank 0 was blocked in the all-reduce, not stopped,
    and its monitor reports it dead too."""
    h, hits = replay("nvrx-stall", "nvrx")
    assert [d.get("what") for k, d in hits if k == "detect" and d.get("by") == "nvrx-rank-monitor"] == [
        "Did not get subsequent heartbeat"] * 2
    assert [d["attempt"] for k, d in hits if k == "restart"] == [1]  # ft_launcher's '  restart_count=1'
    assert [d["step"] for k, d in hits if k == "restore"] == [30, 30]
    a = blame_of(h, "stopped")
    assert a is not None and a.blamed == [0, 1] and a.false_blames == [0]
    assert a.blamed_by["1"] == ["nvrx-rank-monitor"]
    assert a.describe() == ("the stack blamed ranks 0 and 1 (0: nvrx-rank-monitor, torchrun; 1: nvrx-rank-monitor); "
                            "only rank 1 was stopped")


def test_torchrun_family_agents_name_the_survivor_whose_allreduce_failed_first():
    h, _ = replay("nvrx-kill-rank", "nvrx")
    a = blame_of(h, "killed")
    assert a is not None and a.blamed == [0] and a.missed == [1]
    assert a.describe() == "the stack blamed rank 0 (0: torchrun); rank 1 was killed"


def test_dlrover_lists_every_failed_worker_and_its_diagnosis_is_a_detection():
    h, hits = replay("dlrover-kill-rank", "dlrover")
    culprits = next(d["culprits"] for k, d in hits if k == "blame" and d["by"] == "dlrover-agent")
    assert [(c["pid"], c["exitcode"]) for c in culprits] == [("32255", "1"), ("32256", "-9")]
    assert any(k == "detect" and d["by"] == "dlrover-agent" and d["failure_node"] == "False" for k, d in hits)
    a = blame_of(h, "killed")
    assert a is not None and a.blamed == [0, 1] and a.false_blames == [0]


def test_a_stack_that_says_nothing_is_not_judged_and_a_node_blame_covers_its_ranks():
    h = History()
    h.record("harness", "job.ranks", t=1, ranks=[{"rank": r, "pid": 10 + r, "node": f"n{r // 2}"} for r in range(4)])
    h.record("harness", "fault.inject", t=2, rank=3, node="n1", pid=13, fault="kill-rank")
    assert attribute(list(h), 2.0) is None
    h.record("probe:n0", "blame", t=3, node="n0", blamed_node="n1", by="scheduler")  # read on n0, names n1
    a = attribute(list(h), 2.0, "node", "killed (with its node)")
    assert a is not None and a.hurt == [2, 3] and a.blamed == [2, 3] and a.blamed_nodes == ["n1"] and a.correct


@pytest.mark.parametrize("bad, says", [
    ({"kind": "members", "pattern": "q=(?P<members>.*)"}, "give lists"),
    ({"kind": "blame", "pattern": "x(?P<m>.*)", "lists": {"nope": "a"}}, "lists name groups"),
    ({"kind": "blame", "pattern": "x(?P<m>.*)", "lists": {"m": "("}}, "lists.m: bad regex"),
    ({"kind": "blame", "pattern": "pid=(?P<source>\\d+)"}, "reserved"),
])
def test_bad_list_signals_are_refused(bad, says):
    with pytest.raises(ValueError, match=says):
        Signal.model_validate(bad)


def test_dlrover_flash_checkpoint_restores_name_their_tier():
    """DLRover 0.6.1's own lines, as its flash checkpoints printed them here: a restarted worker
    loading the agent's shared memory, and a new job loading the newest checkpoint on disk."""
    m = matcher(load("dlrover").signals)
    memory = ("[2026-11-30 18:17:54,027] [INFO] [engine.py:389:get_state_dict_from_memory] "
              "Load checkpoint at step 16 from memory.")
    cpu = "[2026-11-30 18:17:54,027] [INFO] [full_ckpt_engine.py:158:load] Load the state dict from the CPU memory buffer."
    disk = ("[2026-11-30 18:19:09,195] [INFO] [full_ckpt_engine.py:202:_load_from_storage] "
            "Load the state dict from /tmp/fl/job/ckpt/184/rank_0.pt")
    [(kind, t, data)] = m.match(memory)
    assert (kind, data["step"], data["tier"], data["by"]) == ("restore", 16, "memory", "dlrover") and t is not None
    assert m.match(cpu) == []  # the same restore, said again without its step
    [(kind, _, data)] = m.match(disk)
    assert (kind, data["step"], data["tier"], data["path"]) == ("restore", 184, "disk", "/tmp/fl/job/ckpt/184/rank_0.pt")


def test_torchfts_timed_heal_copy_is_read_with_its_source_and_seconds():
    """The line torchft 0.2.0's HTTP checkpoint transport printed when a heal's copy finished,
    in slow-recovery-network on local-netns-frontend."""
    line = ("2026-12-02 13:16:53,253 INFO torchft.checkpointing.http_transport fetching checkpoint from "
            "http://node-0:38583/checkpoint/25/full took 26.29933776199323s")
    reader = LineReader(matcher(load("torchft").signals))
    [(kind, _t, _rank, data)] = reader.hits(line)
    assert kind == "restore.copy" and data["peer"] == "http://node-0:38583"
    assert data["seconds"] == pytest.approx(26.299, abs=1e-3)
    # the line that starts the copy has no time yet: not a finished copy
    assert reader.hits("INFO torchft.checkpointing.http_transport fetching checkpoint from "
                       "http://node-0:38583/checkpoint/25/full") == []
