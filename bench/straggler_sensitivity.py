"""Straggler detector sensitivity: fleet-median rule vs NVRx's fastest-relative rule.

Step times come from a real run: the reference job's per-rank compute times (collected
first, --steps of them), whose relative deviations are resampled to build 8-rank streams.
For each slowdown of one rank among 8, the share of --runs runs in which the rank was
named (correctly) within 200 steps; and false alarms per 10,000 steps with no fault. Both
rules see the same step times.
"""
from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from drillbit.fixtures.reference.eventlog import parse_line
from drillbit.fixtures.reference.straggler import FleetMedianDetector, NVRxRule

RANKS, HORIZON = 8, 200


def real_deviations(steps: int) -> list[float]:
    run_dir = Path(tempfile.mkdtemp(prefix="drillbit-bench-"))
    subprocess.run([sys.executable, "-m", "drillbit.fixtures.reference.launch", "--run-dir", str(run_dir), "--steps", str(steps),
                    "--straggler", "off", "--no-watchdog"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    per_rank: dict[int, list[float]] = defaultdict(list)
    for line in (run_dir / "events.log").read_text().splitlines():
        f = parse_line(line)
        if f and f["kind"] == "compute" and int(f["n"]) > 5:
            per_rank[int(f["rank"])].append(float(f["s"]))
    devs = []
    for times in per_rank.values():
        med = statistics.median(times)
        devs += [t / med for t in times]
    return devs


def stream(devs: list[float], rng: random.Random, slow: int | None, slowdown: float, steps: int):
    for _ in range(steps):
        yield [0.25 * rng.choice(devs) * (1 + slowdown if r == slow else 1) for r in range(RANKS)]


def named_within(rule, devs, rng, slow, slowdown) -> bool:
    det = rule()
    for _n, row in enumerate(stream(devs, rng, slow, slowdown, HORIZON)):
        for r, t in enumerate(row):
            det.observe(r, t)
        hits = det.evaluate()
        if hits:
            return hits[0][0] == slow
    return False


def false_alarms(rule, devs, rng, steps: int) -> float:
    det, alarms = rule(), 0
    for row in stream(devs, rng, None, 0.0, steps):
        for r, t in enumerate(row):
            det.observe(r, t)
        alarms += len(det.evaluate())
    return alarms * 10_000 / steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--steps", type=int, default=150, help="reference-job steps to sample noise from")
    p.add_argument("--quiet-steps", type=int, default=100_000)
    args = p.parse_args()
    devs = real_deviations(args.steps)
    spread = statistics.pstdev(devs)
    print(f"noise from {len(devs)} real compute times of the reference job: sd {spread:.3%}")
    print(f"{'slowdown':>9}  {'fleet-median named':>19}  {'NVRx (0.75) named':>18}   "
          f"({args.runs} runs, 1 of {RANKS} ranks, within {HORIZON} steps)")
    rules = {"fleet-median": FleetMedianDetector, "nvrx": NVRxRule}
    for slowdown in (0.01, 0.02, 0.03, 0.05, 0.10):
        shares = {}
        for name, rule in rules.items():
            rng = random.Random(1)
            hits = sum(named_within(rule, devs, rng, rng.randrange(RANKS), slowdown) for _ in range(args.runs))
            shares[name] = hits / args.runs
        print(f"{slowdown:>9.0%}  {shares['fleet-median']:>19.1%}  {shares['nvrx']:>18.1%}")
    for name, rule in rules.items():
        print(f"false alarms per 10,000 steps with no fault, {name}: "
              f"{false_alarms(rule, devs, random.Random(2), args.quiet_steps):.2f} (over {args.quiet_steps:,} steps)")


if __name__ == "__main__":
    main()
