"""How fast the probes read logs: lines per second through the matcher and the file
follower with 20 signals active, against what a fleet of 10,000 ranks each logging one
line a second would need (10,000 lines/s into one controller). Median of --runs.

    python bench/probe_throughput.py [--lines 200000] [--runs 5]
"""
from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from drillbit.core.history import History
from drillbit.judging.probes.logs import LogProbe
from drillbit.judging.probes.preset import Matcher, signals_of
from drillbit.spec.signals import Signal

NEEDED = 10_000  # lines/s: 10,000 ranks, one line a second each


def twenty_signals() -> list[Signal]:
    """The built-in presets' signals, topped up to 20 with signals of a Megatron-like job."""
    signals = signals_of(["reference", "torchrun", "ray-train", "drillbit"])
    i = 0
    while len(signals) < 20:
        signals.append(Signal(kind="detect", pattern=rf"^\[(?P<t>[^\]]+)\] watchdog{i}: rank (?P<rank>\d+) silent",
                              ints=["rank"], time_format="iso8601", timezone="UTC"))
        i += 1
    return signals[:20]


def log_lines(n: int, seed: int = 0) -> list[str]:
    """A training log as it reads: mostly lines no signal wants, a step line every 20."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if i % 20 == 0:
            out.append(f"t={1796000000 + i * 0.01:.6f} kind=step src=rank0 n={i // 20} rank=0 dt=0.25")
        else:
            out.append(f"[2026-11-30T01:25:{i % 60:02d}.222] iteration {i} | loss {rng.random():.6f} | "
                       f"lr 3.0E-04 | tokens/s {rng.randint(1000, 9000)}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    signals = twenty_signals()
    lines = log_lines(args.lines)
    match_rates, probe_rates = [], []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job.log"
        path.write_text("\n".join(lines) + "\n")
        for _ in range(args.runs):
            matcher = Matcher(signals)
            t0 = time.perf_counter()
            hits = sum(len(matcher.match(line)) for line in lines)
            match_rates.append(len(lines) / (time.perf_counter() - t0))
            history = History()
            probe = LogProbe(history, [path], Matcher(signals))
            t0 = time.perf_counter()
            probe.poll_once()  # read, split, match and record, as the probe thread does
            probe_rates.append(len(lines) / (time.perf_counter() - t0))
    m, p = statistics.median(match_rates), statistics.median(probe_rates)
    print(f"{len(signals)} signals, {len(lines):,} lines ({hits:,} matched), median of {args.runs} runs:")
    print(f"  matcher alone            {m:12,.0f} lines/s   {m / NEEDED:6.1f}x what 10,000 ranks need")
    print(f"  probe (read+match+record) {p:11,.0f} lines/s   {p / NEEDED:6.1f}x what 10,000 ranks need")


if __name__ == "__main__":
    main()
