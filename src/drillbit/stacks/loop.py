"""The training loop the torch.distributed stack jobs share (NVRx, DLRover): a small MLP,
gloo all-reduce of the gradients, and a checkpoint every ``ckpt_every`` steps written the
usual careful way (rank 0, a temporary file renamed into place as ``step_<N>.pt``), loaded
from the newest file on start. Prints ``step=N rank=R loss=X`` per step and
``restored step=N path=P`` after a load; ``on_step`` runs after each step (a heartbeat).
A stack with checkpoints of its own (DLRover's flash checkpoints) passes a ``store`` in
their place: ``load() -> (step, state, where, tier) | None`` and ``save(step, state)``; a
load that names its tier prints ``restored step=N path=P tier=T``. A store with ``bind(model,
optimizer)`` is given them before it loads (one that loads in place, as DCP does)."""
from __future__ import annotations

import argparse
import os
import re
import time
from pathlib import Path
from typing import Callable


def cli(doc: str | None) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser, argparse.ArgumentParser]:
    """A stack job's command line: ``launch --run-dir DIR …`` and ``train``, both with the
    loop's options. Returns the parser and the launch and train sub-parsers (for the stack's
    own options)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="role", required=True)
    la = sub.add_parser("launch")
    la.add_argument("--run-dir", required=True)
    la.add_argument("--nproc", type=int, default=2)
    la.add_argument("--max-restarts", type=int, default=3)
    tr = sub.add_parser("train")
    tr.add_argument("--ckpt-dir", default=None)
    for sp in (la, tr):
        sp.add_argument("--step-ms", type=float, default=150.0)
        sp.add_argument("--ckpt-every", type=int, default=10, help="0: no checkpoints")
    return p, la, tr


def newest(ckpt_dir: Path) -> tuple[int, Path] | None:
    found = [(int(m.group(1)), p) for p in ckpt_dir.glob("step_*.pt") if (m := re.fullmatch(r"step_(\d+)\.pt", p.name))]
    return max(found) if found else None


class FileStore:
    """Checkpoints the usual careful way: rank 0 writes ``step_<N>.pt`` through a temporary file
    and a rename, every ``every`` steps; the newest file is loaded on start."""

    def __init__(self, folder: Path, every: int) -> None:
        self.folder, self.every = folder, every
        folder.mkdir(parents=True, exist_ok=True)

    def load(self) -> tuple[int, dict, str, str | None] | None:
        import torch

        last = newest(self.folder)
        if last is None:
            return None
        state = torch.load(last[1], weights_only=True)
        return int(state["step"]), state, str(last[1]), None

    def save(self, step: int, state: dict) -> None:
        import torch
        import torch.distributed as dist

        if not self.every or step % self.every or dist.get_rank() != 0:
            return
        tmp = self.folder / f".step_{step}.pt.tmp"
        torch.save(state, tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, self.folder / f"step_{step}.pt")
        print(f"saved step={step} path={self.folder / f'step_{step}.pt'}", flush=True)


def run(step_ms: float, ckpt_dir: str | None, ckpt_every: int, on_step: Callable[[int], None] | None = None,
        store=None) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    if store is None and ckpt_dir:
        store = FileStore(Path(ckpt_dir), ckpt_every)
    if store is not None:
        if hasattr(store, "bind"):  # a store that loads in place (DCP) needs the model it loads into
            store.bind(model, opt)
        last = store.load()
        if last is not None:
            step, state, where, tier = last
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optim"])
            print(f"restored step={step} path={where}" + (f" tier={tier}" if tier else ""), flush=True)
    gen = torch.Generator().manual_seed(rank * 1000 + step)
    while True:
        started = time.time()
        x = torch.randn(16, 32, generator=gen)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        # the step's compute: a fault lands here most of the time, before the all-reduce
        time.sleep(max(0.0, step_ms / 1000 - (time.time() - started)))
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        step += 1
        if on_step is not None:
            on_step(step)
        print(f"step={step} rank={rank} loss={loss.item():.4f}", flush=True)
        if store is not None:
            store.save(step, {"model": model.state_dict(), "optim": opt.state_dict(), "step": step})
