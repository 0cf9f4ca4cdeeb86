"""Harness overhead on step time: the reference job alone vs the same job under the probes.

Each run launches the real 4-rank reference job for --steps steps; "probed" runs follow
its logs with drillbit's progress and events probes (as during a drill), in this process.
Prints the median step time of each run, the median over runs, and the ratio.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from drillbit.core.history import History
from drillbit.judging.probes.logs import EventsProbe, ProgressProbe
from drillbit.judging.probes.preset import signals_of
from drillbit.fixtures.reference.eventlog import parse_line

PRESETS = ["reference", "torchrun"]


def run_job(steps: int, probed: bool) -> float:
    run_dir = Path(tempfile.mkdtemp(prefix="drillbit-bench-"))
    events = run_dir / "events.log"
    probes = []
    if probed:
        history = History()
        logs = [events, run_dir / "launcher.log"]
        signals = signals_of(PRESETS)
        probes = [ProgressProbe(history, logs, signals), EventsProbe(history, logs, signals)]
        for probe in probes:
            probe.start()
    subprocess.run([sys.executable, "-m", "drillbit.fixtures.reference.launch", "--run-dir", str(run_dir),
                    "--steps", str(steps)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for probe in probes:
        probe.stop()
    dts = [float(f["dt"]) for f in map(parse_line, events.read_text().splitlines())
           if f and f["kind"] == "step" and int(f["n"]) > 5]  # skip warm-up
    return statistics.median(dts)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--steps", type=int, default=60)
    args = p.parse_args()
    alone, probed = [], []
    for i in range(args.runs):  # interleaved so drift hits both sides alike
        alone.append(run_job(args.steps, probed=False))
        probed.append(run_job(args.steps, probed=True))
        print(f"run {i + 1}: alone {alone[-1] * 1000:.1f} ms/step, probed {probed[-1] * 1000:.1f} ms/step")
    a, b = statistics.median(alone), statistics.median(probed)
    print(f"median step time over {args.runs} runs: alone {a * 1000:.1f} ms, under probes {b * 1000:.1f} ms, "
          f"ratio {b / a:.3f}")


if __name__ == "__main__":
    main()
