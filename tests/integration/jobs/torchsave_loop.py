"""A nanoGPT-shaped training script: DDP over gloo, AdamW, and one checkpoint file written with
``torch.save`` itself to a fixed name (``out_dir/ckpt.pt``), as nanoGPT's train.py does.

    torchrun --nproc-per-node 2 --max-restarts 3 torchsave_loop.py --out-dir DIR [--atomic] [--save-every N]

Rank 0 saves every --save-every steps (default 1: every step, as nanoGPT with
``always_save_checkpoint`` and a small ``eval_interval``), with nanoGPT's lines: "saving
checkpoint to DIR", and on a restart "Resuming training from DIR". On start every rank loads
``ckpt.pt`` with ``torch.load`` when it exists, trusting it (nanoGPT's ``init_from='resume'``):
a save cut short leaves a file torch.load refuses, and every restart dies on it. With
--atomic the save goes to ``ckpt.pt.tmp`` and is renamed over ``ckpt.pt``: a crash leaves the
previous checkpoint whole. The test's drill.yaml describes it; nothing in drillbit knows it.
"""
from __future__ import annotations

import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def init_process_group() -> None:
    """torchrun (torch 2.13) hands every attempt the same store, and a restart's gloo can read
    the dead workers' addresses from it and fail (a race this project met on torch 2.13): the
    job keys each attempt's rendezvous apart, as a user who met it would."""
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    base = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size=world,
                         is_master=False, timeout=datetime.timedelta(seconds=120))
    dist.init_process_group("gloo", store=dist.PrefixStore(f"attempt{attempt}", base), rank=rank, world_size=world)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--atomic", action="store_true")
    ap.add_argument("--save-every", type=int, default=1)
    ap.add_argument("--step-s", type=float, default=0.15)
    ap.add_argument("--width", type=int, default=64)
    args = ap.parse_args()
    init_process_group()
    rank = dist.get_rank()
    torch.manual_seed(1337)
    model = torch.nn.Sequential(torch.nn.Linear(args.width, args.width), torch.nn.GELU(),
                                torch.nn.Linear(args.width, args.width))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ckpt_path = os.path.join(args.out_dir, "ckpt.pt")
    iter_num = 0
    if os.path.exists(ckpt_path):  # init_from = 'resume'
        print(f"Resuming training from {args.out_dir}", flush=True) if rank == 0 else None
        checkpoint = torch.load(ckpt_path, map_location="cpu")
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        iter_num = checkpoint["iter_num"]
    ddp = DDP(model)
    os.makedirs(args.out_dir, exist_ok=True)
    gen = torch.Generator().manual_seed(rank)
    while True:
        t0 = time.time()
        x = torch.randn(8, args.width, generator=gen)
        loss = (ddp(x) - x).pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        iter_num += 1
        time.sleep(max(0.0, args.step_s - (time.time() - t0)))
        if rank == 0:
            print(f"iter {iter_num}: loss {loss.item():.4f}, time {(time.time() - t0) * 1000:.2f}ms", flush=True)
            if iter_num % args.save_every == 0:
                checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iter_num": iter_num}
                print(f"saving checkpoint to {args.out_dir}", flush=True)
                if args.atomic:
                    torch.save(checkpoint, ckpt_path + ".tmp")
                    os.replace(ckpt_path + ".tmp", ckpt_path)
                else:
                    torch.save(checkpoint, ckpt_path)


if __name__ == "__main__":
    main()
