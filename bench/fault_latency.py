"""Fault-to-effect latency: from the agent's inject call to the confirmed effect.

Real processes (a sleeping Python child per run), the in-process NodeAgent, the same
code path the runner uses. Prints median / p90 / max over --runs per fault.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from drillbit.agent import NodeAgent
from drillbit.core.proc import ProcRef


def one(agent: NodeAgent, fault: str, params: dict) -> float:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.05)
        target = ProcRef.of(psutil.Process(child.pid), rank=0)
        t0 = time.perf_counter()
        handle = agent.inject(fault, target, params)
        evidence = agent.confirm(handle)
        elapsed = time.perf_counter() - t0
        assert evidence is not None, f"{fault} not confirmed"
        agent.heal(handle)
        return elapsed
    finally:
        child.kill()
        child.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=30)
    args = p.parse_args()
    agent = NodeAgent("local", Path(tempfile.mkdtemp()) / "reg.json")
    print(f"fault-to-effect latency, in-process agent, {args.runs} runs each")
    print(f"{'fault':<18}{'median ms':>11}{'p90 ms':>9}{'max ms':>9}")
    for fault, params in (("kill-rank", {"signal": "SIGKILL"}), ("kill-rank", {"signal": "SIGTERM"}),
                          ("hang-collective", {})):
        xs = sorted(one(agent, fault, params) * 1000 for _ in range(args.runs))
        label = f"{fault}" + (f"/{params['signal']}" if params else "")
        print(f"{label:<18}{statistics.median(xs):>11.2f}{xs[int(0.9 * (len(xs) - 1))]:>9.2f}{xs[-1]:>9.2f}")


if __name__ == "__main__":
    main()
