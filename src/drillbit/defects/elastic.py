"""The per-attempt store prefix that torchrun's restarts need under torch 2.13 with gloo.

Under torchrun every restart's ranks meet in the agent's TCPStore, which still holds the dead
attempt's keys; gloo's connectFullMesh then dials the dead ranks' addresses (drillbit's own
finding, DESIGN.md). A prefix per attempt (TORCHELASTIC_RESTART_COUNT) keeps the attempts
apart; a framework that finds the default group already made (the Hugging Face Trainer,
accelerate, Lightning) uses it."""
from __future__ import annotations

import argparse
import datetime
import os


def init_per_attempt(timeout_s: float = 1800.0) -> None:
    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) < 2 or dist.is_initialized():
        return
    timeout = datetime.timedelta(seconds=timeout_s)
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        dist.init_process_group("gloo", timeout=timeout)  # each rendezvous round brings a fresh store
        return
    base = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                         world_size=int(os.environ["WORLD_SIZE"]), is_master=False,
                         timeout=datetime.timedelta(seconds=120))
    store = dist.PrefixStore(f"attempt{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", base)
    dist.init_process_group("gloo", store=store, rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]), timeout=timeout)


def loop_args(doc: str | None, every: int) -> argparse.ArgumentParser:
    """The command line every loop job of this package shares; the job adds its switches."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt-dir", required=True)
    ap.add_argument("--ckpt-every", type=int, default=every)
    ap.add_argument("--step-ms", type=float, default=150.0)
    return ap


def run_loop(step_ms: float, every: int, store) -> int:
    """drillbit.stacks.loop's training loop under torchrun, its checkpoints kept by ``store``."""
    from drillbit.stacks import loop

    init_per_attempt()
    loop.run(step_ms, None, every, store=store)
    return 0
