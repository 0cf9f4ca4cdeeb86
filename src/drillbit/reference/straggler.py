"""Fleet-relative straggler detection for the reference job (and the bench).

Every rank reports its own compute time per step (the time before it enters the
collective: after the all-reduce every rank waits for the slowest, so only the compute
part tells ranks apart). The detector keeps a window of recent compute times per rank
and scores each rank against the *fleet median*:

    score(rank) = median(rank's window) / median over ranks of their medians - 1

A rank whose score stays above ``threshold`` for ``patience`` consecutive steps is named.
BLOOM's bad node was ~2.4% slow in its own benchmark and cost the job 5.4%; the default
threshold here is 1.5%, continuous and windowed.

``NVRxRule`` is NVIDIA resiliency extension's rule for comparison: a rank's relative
score is its speed over the fastest rank's, flagged under 0.75 — i.e. only ranks ~33%
slower (NVIDIA Resiliency Extension's straggler detection docs).

Run as a process it follows the job's event log and appends ``straggler`` lines:
    python -m drillbit.reference.straggler --events events.log
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict, deque

from drillbit.probes.tail import FileFollower
from drillbit.reference.eventlog import EventLog, parse_line


class FleetMedianDetector:
    def __init__(self, window: int = 20, threshold: float = 0.015, patience: int = 5, min_ranks: int = 3) -> None:
        self.window, self.threshold, self.patience, self.min_ranks = window, threshold, patience, min_ranks
        self._times: dict[int, deque[float]] = defaultdict(lambda: deque(maxlen=window))
        self._over: dict[int, int] = defaultdict(int)
        self.flagged: set[int] = set()

    def reset(self) -> None:
        self._times.clear()
        self._over.clear()
        self.flagged.clear()

    def observe(self, rank: int, seconds: float) -> None:
        self._times[rank].append(seconds)

    def scores(self) -> dict[int, float]:
        full = {r: statistics.median(t) for r, t in self._times.items() if len(t) >= self.window}
        if len(full) < self.min_ranks:
            return {}
        fleet = statistics.median(full.values())
        return {r: m / fleet - 1.0 for r, m in full.items()} if fleet > 0 else {}

    def evaluate(self) -> list[tuple[int, float]]:
        """Call once per step; returns ranks newly named as stragglers, with their score."""
        named = []
        for rank, score in self.scores().items():
            if score > self.threshold:
                self._over[rank] += 1
                if self._over[rank] >= self.patience and rank not in self.flagged:
                    self.flagged.add(rank)
                    named.append((rank, score))
            else:
                self._over[rank] = 0
                self.flagged.discard(rank)
        return named


class NVRxRule:
    """Fastest-relative score (speed / fastest speed) under a threshold, as NVRx does."""

    def __init__(self, window: int = 20, threshold: float = 0.75, min_ranks: int = 3) -> None:
        self.window, self.threshold, self.min_ranks = window, threshold, min_ranks
        self._times: dict[int, deque[float]] = defaultdict(lambda: deque(maxlen=window))
        self.flagged: set[int] = set()

    def observe(self, rank: int, seconds: float) -> None:
        self._times[rank].append(seconds)

    def evaluate(self) -> list[tuple[int, float]]:
        full = {r: statistics.median(t) for r, t in self._times.items() if len(t) >= self.window}
        if len(full) < self.min_ranks:
            return []
        fastest = min(full.values())
        named = []
        for rank, m in full.items():
            score = fastest / m  # relative speed
            if score < self.threshold and rank not in self.flagged:
                self.flagged.add(rank)
                named.append((rank, score))
        return named


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", required=True)
    p.add_argument("--rule", choices=["fleet-median", "nvrx"], default="fleet-median")
    p.add_argument("--threshold", type=float, default=None)
    p.add_argument("--window", type=int, default=20)
    p.add_argument("--patience", type=int, default=5)
    p.add_argument("--agent-pid", type=int, default=None, help="exit when this process is gone")
    args = p.parse_args(argv)
    import psutil

    if args.rule == "nvrx":
        detector: FleetMedianDetector | NVRxRule = NVRxRule(args.window, args.threshold or 0.75)
    else:
        detector = FleetMedianDetector(args.window, args.threshold or 0.015, args.patience)
    log = EventLog(args.events, source="straggler")
    follower = FileFollower(args.events, from_start=False)
    nodes: dict[int, str] = {}
    last_step = -1
    attempt = None
    while args.agent_pid is None or psutil.pid_exists(args.agent_pid):
        for line in follower.read_lines():
            f = parse_line(line)
            if not f:
                continue
            if f["kind"] == "worker.start" and f.get("attempt") != attempt:
                attempt = f.get("attempt")
                if isinstance(detector, FleetMedianDetector):
                    detector.reset()  # a new worker group: start the windows over
            elif f["kind"] == "compute":
                rank = int(f["rank"])
                nodes[rank] = f.get("node", "?")
                detector.observe(rank, float(f["s"]))
                n = int(f["n"])
                if n != last_step:
                    last_step = n
                    for bad, score in detector.evaluate():
                        log.emit("straggler", rank=bad, node=nodes.get(bad, "?"), score=f"{score:.4f}",
                                 rule=args.rule, n=n)
        time.sleep(0.1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
