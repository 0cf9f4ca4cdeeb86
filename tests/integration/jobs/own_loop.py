"""A training loop of a team's own, as drillbit meets it: no framework, plain files for
checkpoints, the drillbit reporter for its events, torchrun as its supervisor.

    torchrun --nproc-per-node 4 --max-restarts 3 own_loop.py --ckpt DIR [--no-resume]

Every rank steps every --step-s seconds; rank 0 writes ``DIR/step_N.json`` every 5 steps
(tmp file, then rename) and reports steps, saves and restores through ``drillbit.job``.
On start it resumes from the newest checkpoint, unless --no-resume (the broken variant).
Nothing in drillbit knows this file: the test's drill.yaml describes it.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from drillbit import job


def newest(ckpt: Path) -> tuple[int, Path] | None:
    found = sorted((int(p.stem.split("_")[1]), p) for p in ckpt.glob("step_*.json"))
    return found[-1] if found else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--step-s", type=float, default=0.15)
    ap.add_argument("--no-resume", action="store_true")
    args = ap.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    ckpt = Path(args.ckpt)
    ckpt.mkdir(parents=True, exist_ok=True)
    n = 0
    found = None if args.no_resume else newest(ckpt)
    if found is not None:
        n = json.loads(found[1].read_text())["step"]
        if rank == 0:
            job.restored(n, str(found[1]))
    while True:
        time.sleep(args.step_s)
        n += 1
        if rank == 0:
            job.step(n)
            if n % 5 == 0:
                tmp = ckpt / f".step_{n}.tmp"
                tmp.write_text(json.dumps({"step": n}))
                os.replace(tmp, ckpt / f"step_{n}.json")
                job.checkpoint_saved(n, str(ckpt / f"step_{n}.json"))


if __name__ == "__main__":
    main()
