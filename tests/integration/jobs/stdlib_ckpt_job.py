"""A training job of the standard library only, for drills where the job runs as another user
(issue 57): that user cannot run the suite's interpreter (a virtual environment under /root,
0700), so this runs on the system's ``python3``.

    python3 stdlib_ckpt_job.py --ckpt DIR [--nproc 2] [--max-restarts 3] [--step-ms 200]

A launcher starts ``--nproc`` ranks (``--rank i``, ``RANK=i`` in their environment) and, when
one dies, says so, stops the others and starts them all again, as torchrun does, up to
``--max-restarts`` times. Each rank restores the newest checkpoint whose ``model.pt`` matches
the sha256 its ``meta.json`` recorded (a damaged one is skipped, and said so), then steps;
rank 0 saves every 10 steps: ``step_N/`` made as ``.tmp-step_N/`` and renamed, with
``model.pt``, ``meta.json`` and ``COMPLETE``. ``--no-verify`` restores the newest unchecked: the
broken recovery path a drill must fail.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import time


def say(line: str) -> None:
    print(line, flush=True)


def restore(ckpt: str, verify: bool = True) -> int:
    steps = []
    for name in os.listdir(ckpt) if os.path.isdir(ckpt) else []:
        if name.startswith("step_") and name[5:].isdigit():
            steps.append(int(name[5:]))
    for step in sorted(steps, reverse=True):
        folder = os.path.join(ckpt, f"step_{step}")
        try:
            with open(os.path.join(folder, "meta.json")) as fh:
                meta = json.load(fh)
            with open(os.path.join(folder, "model.pt"), "rb") as fh:
                digest = hashlib.sha256(fh.read()).hexdigest()
            ok = os.path.exists(os.path.join(folder, "COMPLETE")) and (digest == meta.get("sha256") or not verify)
        except (OSError, ValueError) as exc:
            ok, digest = False, str(exc)
        if ok:
            say(f"restored checkpoint {folder} at step {step}")
            return step
        say(f"skipping corrupt checkpoint {folder}: sha256 mismatch")
    return 0


def save(ckpt: str, step: int) -> None:
    folder = os.path.join(ckpt, f"step_{step}")
    tmp = os.path.join(ckpt, f".tmp-step_{step}")
    os.makedirs(tmp, exist_ok=True)
    body = hashlib.sha256(str(step).encode()).digest() * 2048
    with open(os.path.join(tmp, "model.pt"), "wb") as fh:
        fh.write(body)
    with open(os.path.join(tmp, "meta.json"), "w") as fh:
        json.dump({"step": step, "sha256": hashlib.sha256(body).hexdigest()}, fh)
    open(os.path.join(tmp, "COMPLETE"), "w").close()
    os.rename(tmp, folder)
    say(f"saved checkpoint {folder} at step {step}")


def rank_main(args: argparse.Namespace) -> int:
    step = restore(args.ckpt, args.verify)
    while True:
        step += 1
        time.sleep(args.step_ms / 1000)
        say(f"rank {args.rank} step {step} loss {1.0 / step:.5f}")
        if args.rank == 0 and step % 10 == 0:
            save(args.ckpt, step)


def launch(args: argparse.Namespace) -> int:
    os.makedirs(args.ckpt, exist_ok=True)
    procs: list[subprocess.Popen] = []
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for attempt in range(args.max_restarts + 1):
        if attempt:
            say(f"restarting workers, attempt {attempt}")
        procs = [subprocess.Popen([sys.executable, __file__, "--ckpt", args.ckpt, "--rank", str(r),
                                   "--step-ms", str(args.step_ms), "--verify" if args.verify else "--no-verify"],
                                  env={**os.environ, "RANK": str(r)})
                 for r in range(args.nproc)]
        failed = None
        while not stopping and failed is None:
            time.sleep(0.1)
            failed = next((r for r, p in enumerate(procs) if p.poll() is not None), None)
        if failed is not None:
            say(f"worker rank {failed} exited with {procs[failed].returncode}; stopping the others")
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            p.wait()
        if stopping:
            return 0
    say("out of restarts")
    return 1


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", required=True)
    p.add_argument("--rank", type=int, default=None)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--max-restarts", type=int, default=3)
    p.add_argument("--step-ms", type=float, default=200.0)
    p.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                   help="--no-verify: restore the newest checkpoint without checking its sha256 (the broken job)")
    args = p.parse_args()
    return rank_main(args) if args.rank is not None else launch(args)


if __name__ == "__main__":
    sys.exit(main())
