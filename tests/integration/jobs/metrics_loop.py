"""A training loop that shows its progress only as a Prometheus metric, as many teams' jobs
do: no step lines, no drillbit reporter, only ``train_step{rank}`` (a gauge, from
prometheus_client) on /metrics at ``--metrics-port`` + rank. torchrun supervises it.

    torchrun --nproc-per-node 4 --max-restarts 3 metrics_loop.py --ckpt DIR --metrics-port P [--no-resume]

Rank 0 writes ``DIR/step_N.json`` every 5 steps (tmp file, then rename); on start every rank
resumes from the newest, unless --no-resume (the broken variant). Nothing in drillbit knows
this file: the test's drill.yaml describes it.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from prometheus_client import Gauge, start_http_server


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--metrics-port", type=int, required=True)
    ap.add_argument("--step-s", type=float, default=0.15)
    ap.add_argument("--no-resume", action="store_true")
    args = ap.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    ckpt = Path(args.ckpt)
    ckpt.mkdir(parents=True, exist_ok=True)
    gauge = Gauge("train_step", "the latest optimizer step", ["rank"])  # no series until the first step
    start_http_server(args.metrics_port + rank, addr="127.0.0.1")
    n = 0
    found = sorted((int(p.stem.split("_")[1]), p) for p in ckpt.glob("step_*.json"))
    if found and not args.no_resume:
        n = json.loads(found[-1][1].read_text())["step"]
    while True:
        time.sleep(args.step_s)
        n += 1
        gauge.labels(rank=str(rank)).set(n)
        if rank == 0 and n % 5 == 0:
            tmp = ckpt / f".step_{n}.tmp"
            tmp.write_text(json.dumps({"step": n}))
            os.replace(tmp, ckpt / f"step_{n}.json")


if __name__ == "__main__":
    main()
