"""drillbit's own reading with no fault on (issue 58, item 6): how often it names a rank when
none is slowed, over a long run of the real reference job.

The reference job runs --steps steps with no fault, no straggler detector and no watchdog
(4 ranks); its per-rank compute lines are read as drillbit reads them (``rank.time``), and the
run is cut into stretches of --stretch steps, each tested as a quiet gap is in a sweep: its
first half against its second (judging/checks/ownslow.py). Prints the steps, the stretches
tested and the ranks named (each a false name).

    python bench/own_reading_null.py [--steps 10000] [--step-ms 100] [--stretch 60]
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from drillbit.core.history import Event
from drillbit.judging.checks.ownslow import false_names

LINE = re.compile(r"^t=(?P<t>[\d.]+) kind=compute src=\S+ n=(?P<n>\d+) rank=(?P<rank>\d+) s=(?P<s>[\d.]+)")


def rank_times(events_log: Path) -> list[Event]:
    out = []
    for line in events_log.read_text().splitlines():
        m = LINE.match(line)
        if m:
            out.append(Event(seq=len(out), t=float(m["t"]), source="job", kind="rank.time", rank=int(m["rank"]),
                             data={"n": int(m["n"]), "s": float(m["s"])}))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--step-ms", type=float, default=100.0)
    p.add_argument("--stretch", type=int, default=60, help="steps a stretch (its halves compared)")
    p.add_argument("--run-dir", help="keep the job's folder here (default: a temporary one)")
    args = p.parse_args(argv)
    run_dir = Path(args.run_dir or tempfile.mkdtemp(prefix="drillbit-null-"))
    env = {**os.environ, "DRILLBIT_REFERENCE_NPROC": "4"}
    env.pop("DRILLBIT_REFERENCE_SLICE_MS", None)
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "drillbit.fixtures.reference.launch", "--run-dir", str(run_dir),
                    "--steps", str(args.steps), "--step-ms", str(args.step_ms), "--straggler", "off",
                    "--no-watchdog", "--ckpt-every", "0"], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    events = rank_times(run_dir / "events.log")
    steps = sorted({e.data["n"] for e in events})
    first_t: dict[int, float] = {}
    for e in events:
        first_t.setdefault(e.data["n"], e.t)
    named = tested = stretches = 0
    for i in range(0, len(steps) - args.stretch + 1, args.stretch):
        lo, hi = first_t[steps[i]] - 1e-6, first_t[steps[i + args.stretch - 1]] + 0.05
        n, k = false_names(events, lo, hi)
        named += n
        tested += k
        stretches += 1 if k else 0
    print(f"{len(steps)} steps in {wall / 60:.1f} min ({args.step_ms:g} ms a step, 4 ranks, no fault); "
          f"{stretches} stretches of {args.stretch} steps tested ({tested} steps): {named} rank(s) named")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
