"""A job that checkpoints and logs the way Megatron-LM does, on CPU (megatron-core needs CUDA).

    torchrun --nproc-per-node 2 --max-restarts 3 megatron_format.py --save DIR --load DIR [--verify]

What it shares with Megatron-LM, from Megatron's own format strings (megatron/training):
- the folder: ``DIR/iter_0000020/mp_rank_00/model_optim_rng.pt`` per save (tensor and pipeline
  parallel 1: one model-parallel rank, saved by data-parallel rank 0) and
  ``DIR/latest_checkpointed_iteration.txt`` naming the newest;
- the lines: ``training_log``'s `` [2026-12-01 10:00:00] iteration       21/     100 | …``
  (printed by the last rank), ``saving checkpoint at iteration      20 to DIR in torch format``,
  ``  successfully saved checkpoint from iteration      20 to DIR``, and on start
  ``  successfully loaded checkpoint from DIR [ t 0/1, p 0/1 ] at iteration 20`` — the load
  line names the *folder it loads from*, not the checkpoint.

Every rank loads the iteration the tracker names. The file's bytes are this script's own
(the iteration and the weights, packed), not torch's pickle: flipped bytes load silently, as
they do in a tensor's data. With --verify the file ends in a sha256 of its bytes, checked
before loading; a file that fails falls back to the newest older iteration that passes.
Without it, a damaged checkpoint is loaded as it is and training goes on from it.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import struct
import sys
import time
from datetime import datetime
from pathlib import Path

WEIGHTS = 2048


def encode(iteration: int, weights: list[float], verify: bool) -> bytes:
    body = struct.pack("<q", iteration) + struct.pack(f"<{len(weights)}d", *weights)
    return body + (hashlib.sha256(body).digest() if verify else b"")


def decode(data: bytes, verify: bool) -> tuple[int, list[float]]:
    if verify:
        body, digest = data[:-32], data[-32:]
        if hashlib.sha256(body).digest() != digest:
            raise ValueError("sha256 mismatch")
        data = body
    n = (len(data) - 8) // 8
    return struct.unpack("<q", data[:8])[0], list(struct.unpack(f"<{n}d", data[8:8 + 8 * n]))


def iter_dir(root: Path, iteration: int) -> Path:
    return root / f"iter_{iteration:07d}"


def load(root: Path, verify: bool, rank: int) -> tuple[int, list[float]]:
    tracker = root / "latest_checkpointed_iteration.txt"
    if not tracker.exists():
        return 0, [0.0] * WEIGHTS
    newest = int(tracker.read_text().strip())
    candidates = sorted((int(p.name[5:]) for p in root.glob("iter_*") if p.name[5:].isdigit() and int(p.name[5:]) <= newest),
                        reverse=True)
    for iteration in candidates:
        path = iter_dir(root, iteration) / "mp_rank_00" / "model_optim_rng.pt"
        try:
            with open(path, "rb") as fh:
                got, weights = decode(fh.read(), verify)
        except (OSError, ValueError, struct.error) as exc:
            if rank == 0:
                print(f"checkpoint {path} rejected: {exc}", flush=True)
            continue
        if rank == 0:
            print(f"  successfully loaded checkpoint from {root} [ t 0/1, p 0/1 ] at iteration {got}", flush=True)
        return got, weights
    raise SystemExit(f"no loadable checkpoint in {root}")


def save(root: Path, iteration: int, weights: list[float], verify: bool) -> None:
    print(f"saving checkpoint at iteration {iteration:7d} to {root} in torch format", flush=True)
    folder = iter_dir(root, iteration) / "mp_rank_00"
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / "model_optim_rng.pt.tmp"
    tmp.write_bytes(encode(iteration, weights, verify))
    os.replace(tmp, folder / "model_optim_rng.pt")
    (root / "latest_checkpointed_iteration.txt").write_text(str(iteration))
    print(f"  successfully saved checkpoint from iteration {iteration:7d} to {root}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--save", type=Path, required=True)
    p.add_argument("--load", type=Path, required=True)
    p.add_argument("--verify", action="store_true")
    p.add_argument("--train-iters", type=int, default=100000)
    p.add_argument("--save-interval", type=int, default=5)
    p.add_argument("--step-s", type=float, default=0.3)
    args = p.parse_args()
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    args.save.mkdir(parents=True, exist_ok=True)
    iteration, weights = load(args.load, args.verify, rank)
    while iteration < args.train_iters:
        time.sleep(args.step_s)
        iteration += 1
        weights = [w + 0.001 * ((i + iteration) % 7) for i, w in enumerate(weights)]
        if rank == world - 1:
            stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
            print(f" [{stamp}] iteration {iteration:8d}/{args.train_iters:8d} | consumed samples: {iteration * 8:12d} | "
                  f"elapsed time per iteration (ms): {args.step_s * 1000:.1f} | lm loss: {1.0 / iteration:.6E} |",
                  flush=True)
        if rank == 0 and iteration % args.save_interval == 0:
            save(args.save, iteration, weights, args.verify)
    return 0


if __name__ == "__main__":
    sys.exit(main())
