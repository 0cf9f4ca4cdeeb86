"""Fault-to-effect latency through a Ray agent vs in-process, and a fan-out across nodes.

Part 1: the same SIGSTOP fault (hang-collective) applied to a real sleeping process and
confirmed, --runs times, by the in-process NodeAgent and by a NodeAgent actor on the
embedded Ray cluster (2 nodes); prints the medians and their ratio.
Part 2: the embedded cluster with --nodes simulated nodes (default 8) and --per-node target
processes each (default 8: 64 in all); one fault applied to every target, then healed, the
way the nemesis fans out (the nodes in parallel, each node's targets in one inject_all and
one confirm_all, healed in one heal_all), and, beside it, each node's targets one call after another (before those
calls) and a thread per target (before #60). Prints the median and p90 latency per target (inject call to confirmed effect, on
the controller's clock), the wall time of the whole fan-out and of the heal, and the CPU
time the controller spent. Repeated --rounds times; medians across rounds.

    python bench/ray_fanout.py [--runs 20] [--nodes 8] [--per-node 8] [--rounds 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from drillbit.agent import NodeAgent
from drillbit.agent.service import AgentService
from drillbit.transport.inprocess import InProcessClient
from drillbit.transport.nodes import per_node
from drillbit.transport.ray import RayNodes
from drillbit.core.proc import ProcRef
from drillbit.faults.base import Handle
from drillbit.spec.config import RankDiscovery

FAULT, PARAMS = "hang-collective", {"method": "sigstop", "confirm_timeout_s": 5.0}


MARK = "drillbit-bench-sleeper"


def sleepers(n: int) -> list[subprocess.Popen]:
    """Processes that look like ranks to rank discovery (the marker, RANK in the environment),
    children of this process, which the agents are told is the attached job's root."""
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", MARK],
                              env={**os.environ, "RANK": str(i)}) for i in range(n)]
    time.sleep(0.5)
    return procs


def discovered(agent, node: str, procs: list[subprocess.Popen]) -> list[ProcRef]:
    """The sleepers as that node's agent found them (agents inject only into what they found)."""
    found = agent.find_ranks(RankDiscovery(cmdline=MARK), ProcRef.of(psutil.Process()))
    by_pid = {r.pid: r for r in found}
    return [by_pid[p.pid].model_copy(update={"node": node}) for p in procs]


def apply_and_heal(agent, target: ProcRef) -> float:
    t0 = time.perf_counter()
    handle = agent.inject(FAULT, target, PARAMS)
    evidence = agent.confirm(handle)
    elapsed = time.perf_counter() - t0
    assert evidence is not None
    assert agent.heal(handle).verified
    return elapsed


def single(executor: RayNodes, runs: int, tmp: Path) -> tuple[float, float, float]:
    """The same fault three ways: the NodeAgent called directly, through the agent API
    in-process (request and reply models, JSON), and through a Ray agent actor."""
    local = NodeAgent("local", tmp / "local.json")
    api = InProcessClient(AgentService("local", tmp / "api"))
    procs = sleepers(1)
    try:
        ref = ProcRef.of(psutil.Process(procs[0].pid), rank=0, node="node-1")
        here = [apply_and_heal(local, ref) for _ in range(runs)]
        [via_api] = discovered(api, "local", procs)
        through_api = [apply_and_heal(api, via_api) for _ in range(runs)]
        [via_ray] = discovered(executor.clients["node-1"], "node-1", procs)
        ray = [apply_and_heal(executor, via_ray) for _ in range(runs)]
    finally:
        api.close()
        for p in procs:
            p.kill()
            p.wait()
    return statistics.median(here), statistics.median(through_api), statistics.median(ray)


def fanout(executor: RayNodes, nodes: list[str], each: int, mode: str = "batched") -> dict[str, float]:
    """``mode``: batched, as the nemesis fans out since #60's batched calls (each node's targets
    in one inject_all, one confirm_all and one heal_all, the nodes in parallel); per-target, as it did before
    them (the nodes in parallel, each node's targets one call after the other); threads, a
    thread per target, as before #60."""
    per_node_n = each
    procs = sleepers(len(nodes) * per_node_n)
    try:
        targets = [t for i, node in enumerate(nodes)
                   for t in discovered(executor.clients[node], node, procs[i * per_node_n:(i + 1) * per_node_n])]
        me = psutil.Process()
        cpu0 = sum(me.cpu_times()[:2])
        t0 = time.perf_counter()

        def one(target: ProcRef):
            handle = executor.inject(FAULT, target, PARAMS)
            evidence = executor.confirm(handle)
            assert evidence is not None
            return handle, time.perf_counter() - t0

        def group(chunk: list[ProcRef]) -> list[tuple[Handle, float]]:
            handles, failed = executor.inject_group(FAULT, chunk, PARAMS)
            assert failed is None, failed
            evidence = executor.confirm_group(handles)
            assert all(e is not None for e in evidence)
            at = time.perf_counter() - t0
            return [(h, at) for h in handles]

        if mode == "threads":  # every target on a thread of its own, as this bench did before #60
            with ThreadPoolExecutor(max_workers=len(targets)) as pool:
                done = list(pool.map(one, targets))
        elif mode == "per-target":  # the nodes in parallel, each node's targets one call after the other
            done = per_node(targets, lambda t: t.node, one)
        else:  # the nodes in parallel, each node's targets in one call
            chunks = [[t for t in targets if t.node == node] for node in nodes]
            done = [d for got in per_node(chunks, lambda c: c[0].node, group) for d in got]
        wall = time.perf_counter() - t0
        assert all(psutil.Process(p.pid).status() == psutil.STATUS_STOPPED for p in procs)
        t1 = time.perf_counter()
        if mode == "threads":
            with ThreadPoolExecutor(max_workers=len(targets)) as pool:
                reports = list(pool.map(lambda d: executor.heal(d[0]), done))
        elif mode == "per-target":
            reports = per_node([d[0] for d in done], lambda h: h.target.node, executor.heal)
        else:  # each node's faults in one heal_all, the nodes in parallel, as the nemesis heals
            chunks = [[d[0] for d in done if d[0].target.node == node] for node in nodes]
            reports = [r for got in per_node(chunks, lambda c: c[0].target.node, executor.heal_group) for r in got]
        heal_wall = time.perf_counter() - t1
        cpu = sum(me.cpu_times()[:2]) - cpu0
        assert all(r.verified for r in reports)
        lat = sorted(d[1] for d in done)
        return {"median": statistics.median(lat), "p90": lat[int(0.9 * (len(lat) - 1))], "wall": wall,
                "heal": heal_wall, "cpu": cpu}
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--per-node", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    me = ProcRef.of(psutil.Process())
    with tempfile.TemporaryDirectory() as tmp:
        two = RayNodes(Path(tmp) / "two", "bench2", address=None, nodes=2)
        (Path(tmp) / "two").mkdir()
        t = time.perf_counter()
        two.start(me)
        up2 = time.perf_counter() - t
        try:
            here, through_api, ray = single(two, args.runs, Path(tmp))
        finally:
            two.close()
        print(f"embedded Ray cluster, 2 nodes: up and agents ready in {up2:.1f} s")
        print(f"SIGSTOP fault to confirmed effect, median of {args.runs}:")
        print(f"  NodeAgent, called directly     {here * 1000:7.2f} ms")
        print(f"  agent API, in-process client   {through_api * 1000:7.2f} ms   ratio {through_api / here:.2f}x")
        print(f"  agent API, Ray agent actor     {ray * 1000:7.2f} ms   ratio {ray / here:.1f}x")

        big = RayNodes(Path(tmp) / "big", "bench8", address=None, nodes=args.nodes, cpus_per_node=1)
        (Path(tmp) / "big").mkdir()
        t = time.perf_counter()
        big.start(me)
        up = time.perf_counter() - t
        try:
            modes = ["batched", "per-target", "threads"]
            rounds: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
            for _ in range(args.rounds):  # the modes interleaved, so that a slow minute hurts each alike
                for mode in modes:
                    rounds[mode].append(fanout(big, list(big.clients), args.per_node, mode))
        finally:
            big.close()
    n = args.nodes * args.per_node
    print(f"\nfan-out: {args.nodes} simulated nodes (up and agents ready in {up:.1f} s), {n} target processes, "
          f"one fault each; median of {args.rounds} rounds:")
    label = {"batched": "each node's targets in one call (the nemesis now)",
             "per-target": "each node's targets one call after another (before the batched calls)",
             "threads": "a thread per target (before #60)"}
    for mode, got in rounds.items():
        m = {k: statistics.median(r[k] for r in got) for k in got[0]}
        print(f"  {label[mode]}:")
        print(f"    latency per target  median {m['median'] * 1000:.1f} ms, p90 {m['p90'] * 1000:.1f} ms")
        print(f"    all {n} confirmed     {m['wall'] * 1000:.1f} ms;  all healed and verified {m['heal'] * 1000:.1f} ms")
        print(f"    controller CPU      {m['cpu'] * 1000:.0f} ms for inject + confirm + heal of {n} targets")


if __name__ == "__main__":
    main()
