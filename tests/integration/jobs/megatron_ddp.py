"""A small data-parallel training script as a team writes one: torch and the standard library
only, nothing of drillbit. It logs and checkpoints the way Megatron-LM does, and is started as
docs/own-job.md shows, one torchrun per node:

    torchrun --nnodes N --node-rank R --nproc-per-node 1 --rdzv-backend c10d \\
        --rdzv-endpoint HOST:PORT --max-restarts 3 train.py --save DIR --load DIR

- a gloo process group; a linear model whose gradients are all-reduced every iteration;
- every ``--save-interval`` iterations rank 0 writes ``DIR/iter_0000020/mp_rank_00/
  model_optim_rng.pt`` (torch.save of the iteration, the model, the optimizer and the
  learning-rate schedule) and then
  ``DIR/latest_checkpointed_iteration.txt``;
- on start every rank loads the iteration the tracker names, with torch.load, and verifies
  nothing: flipped bytes load as they are, and training goes on from them;
- Megatron's lines: the last rank prints ``training_log``'s `` [2026-12-01 10:00:00] iteration
  21/  100000 | consumed samples: … | learning rate: … | lm loss: … |``, rank 0 ``saving
  checkpoint at iteration …``, ``  successfully saved checkpoint from iteration …`` and
  ``  successfully loaded checkpoint from DIR [ t 0/1, p 0/1 ] at iteration N``.

torch 2.13 with gloo under torchrun: a restart's ranks meet in the agent's store, which still
holds the dead attempt's keys. On one node a store prefix per attempt keeps them apart (as
tests/integration/jobs/elastic_store.py does). Across nodes the torchruns are started with
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (docs/own-job.md): each rendezvous round brings a fresh
store, torchrun says so (TORCHELASTIC_USE_AGENT_STORE=False), and the plain call is right.
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

FEATURES = 1024  # 16 KiB of weights: the tensor is most of the checkpoint's bytes


def init_process_group() -> None:
    timeout = datetime.timedelta(minutes=30)
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        dist.init_process_group("gloo", timeout=timeout)
        return
    base = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                         world_size=int(os.environ["WORLD_SIZE"]), is_master=False,
                         timeout=datetime.timedelta(seconds=120))
    store = dist.PrefixStore(f"attempt{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", base)
    dist.init_process_group("gloo", store=store, rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]), timeout=timeout)


def checkpoint_file(root: Path, iteration: int) -> Path:
    return root / f"iter_{iteration:07d}" / "mp_rank_00" / "model_optim_rng.pt"


def load(root: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, sched: torch.optim.lr_scheduler.LRScheduler,
         rank: int) -> int:
    tracker = root / "latest_checkpointed_iteration.txt"
    if not tracker.exists():
        return 0
    state = torch.load(checkpoint_file(root, int(tracker.read_text())), weights_only=True)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    sched.load_state_dict(state["opt_param_scheduler"])
    if rank == 0:
        print(f"  successfully loaded checkpoint from {root} [ t 0/1, p 0/1 ] at iteration {state['iteration']}",
              flush=True)
    return int(state["iteration"])


def save(root: Path, iteration: int, model: torch.nn.Module, opt: torch.optim.Optimizer,
         sched: torch.optim.lr_scheduler.LRScheduler) -> None:
    print(f"saving checkpoint at iteration {iteration:7d} to {root} in torch format", flush=True)
    path = checkpoint_file(root, iteration)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"iteration": iteration, "model": model.state_dict(), "optimizer": opt.state_dict(),
                "opt_param_scheduler": sched.state_dict()}, path.with_suffix(".tmp"))
    os.replace(path.with_suffix(".tmp"), path)
    (root / "latest_checkpointed_iteration.txt").write_text(str(iteration))
    print(f"  successfully saved checkpoint from iteration {iteration:7d} to {root}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--save", type=Path, required=True)
    p.add_argument("--load", type=Path, required=True)
    p.add_argument("--train-iters", type=int, default=100000)
    p.add_argument("--save-interval", type=int, default=5)
    p.add_argument("--micro-batch-size", type=int, default=4)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--step-s", type=float, default=0.2, help="the rest of an iteration's time, slept")
    args = p.parse_args()
    init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 4)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / 10))
    if rank == 0:
        args.save.mkdir(parents=True, exist_ok=True)
    iteration = load(args.load, model, opt, sched, rank)
    target = torch.randn(FEATURES, 4, generator=torch.Generator().manual_seed(1))
    while iteration < args.train_iters:
        gen = torch.Generator().manual_seed(iteration * world + rank)  # each rank its own shard of the data
        x = torch.randn(args.micro_batch_size, FEATURES, generator=gen)
        loss = torch.nn.functional.mse_loss(model(x), x @ target / FEATURES ** 0.5)
        opt.zero_grad()
        loss.backward()
        for param in model.parameters():
            assert param.grad is not None
            dist.all_reduce(param.grad)
            param.grad /= world
        lr = opt.param_groups[0]["lr"]
        opt.step()
        sched.step()
        iteration += 1
        reduced = loss.detach().clone()
        dist.all_reduce(reduced)
        time.sleep(args.step_s)
        if rank == world - 1:
            stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
            print(f" [{stamp}] iteration {iteration:8d}/{args.train_iters:8d} | consumed samples: "
                  f"{iteration * args.micro_batch_size * world:12d} | elapsed time per iteration (ms): "
                  f"{args.step_s * 1000:.1f} | learning rate: {lr:.6E} | lm loss: {reduced.item() / world:.6E} |",
                  flush=True)
        if rank == 0 and iteration % args.save_interval == 0:
            save(args.save, iteration, model, opt, sched)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
