"""A training script of the most common kind: one checkpoint file, rewritten in place on every
save (``ckpt.bin``, as nanoGPT's ``ckpt.pt`` or many scripts' ``last.pt``), no step in its name.

    torchrun --nproc-per-node 2 --max-restarts 3 inplace_loop.py --ckpt DIR [--verify] [--keep-previous]

Every rank steps every --step-s seconds. Rank 0 saves every 5 steps by opening ``DIR/ckpt.bin``
for writing (truncating it) and writing the step and the weights in a few chunks — not atomic:
a crash mid-save leaves a torn file. On start every rank loads ``ckpt.bin``. With --verify the
file ends in a sha256 of its bytes, checked before loading; with --keep-previous the save first
copies ``ckpt.bin`` over ``ckpt.prev.bin`` (also in place), and a rejected ``ckpt.bin`` falls
back to it. Without both, a damaged file is loaded as it is (flipped bytes: silently other
weights) or crashes the start (a torn file). It prints its own lines; nothing in drillbit knows
this file: the test's drill.yaml describes it.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import struct
import sys
import time
from pathlib import Path

WEIGHTS = 4096  # float64s: 32 KiB, written in 4 chunks


def encode(step: int, weights: list[float], verify: bool) -> bytes:
    body = struct.pack("<q", step) + struct.pack(f"<{len(weights)}d", *weights)
    return body + (hashlib.sha256(body).digest() if verify else b"")


def decode(data: bytes, verify: bool) -> tuple[int, list[float]]:
    if verify:
        body, digest = data[:-32], data[-32:]
        if hashlib.sha256(body).digest() != digest:
            raise ValueError("sha256 mismatch")
        data = body
    n = (len(data) - 8) // 8
    if len(data) != 8 + 8 * WEIGHTS:
        raise ValueError(f"checkpoint is {len(data)} bytes, expected {8 + 8 * WEIGHTS}")
    return struct.unpack_from("<q", data)[0], list(struct.unpack_from(f"<{n}d", data, 8))


def load(ckpt: Path, args: argparse.Namespace, rank: int) -> tuple[int, list[float]] | None:
    names = ["ckpt.bin"] + (["ckpt.prev.bin"] if args.keep_previous else [])
    for name in names:
        path = ckpt / name
        if not path.exists():
            continue
        try:
            step, weights = decode(path.read_bytes(), args.verify)
        except ValueError as exc:
            if not args.verify:
                raise  # a torn file: the start crashes, as torch.load would
            if rank == 0:
                print(f"checkpoint {path} rejected: {exc}", flush=True)
            continue
        if rank == 0:
            print(f"resumed from {path} at step {step}", flush=True)
        return step, weights
    return None


def save(ckpt: Path, step: int, weights: list[float], args: argparse.Namespace) -> None:
    path = ckpt / "ckpt.bin"
    t0 = time.time()
    if args.keep_previous and path.exists():
        shutil.copyfile(path, ckpt / "ckpt.prev.bin")
    print(f"saving checkpoint {path} at step {step}", flush=True)
    data = encode(step, weights, args.verify)
    with open(path, "wb") as fh:  # in place: truncated, then written chunk by chunk
        quarter = len(data) // 4 + 1
        for i in range(0, len(data), quarter):
            fh.write(data[i:i + quarter])
            fh.flush()
            time.sleep(args.write_s)
    print(f"saved checkpoint {path} at step {step} in {time.time() - t0:.3f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--step-s", type=float, default=0.15)
    ap.add_argument("--write-s", type=float, default=0.02, help="pause between the chunks of one save")
    ap.add_argument("--verify", action="store_true")
    ap.add_argument("--keep-previous", action="store_true")
    args = ap.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    ckpt = Path(args.ckpt)
    ckpt.mkdir(parents=True, exist_ok=True)
    found = load(ckpt, args, rank)
    n, weights = found if found is not None else (0, [0.001 * i for i in range(WEIGHTS)])
    while True:
        time.sleep(args.step_s)
        n += 1
        weights[n % WEIGHTS] += 1.0
        if rank == 0:
            print(f"step {n} loss {1.0 / n:.5f}", flush=True)
            if n % 5 == 0:
                save(ckpt, n, weights, args)


if __name__ == "__main__":
    sys.exit(main())
