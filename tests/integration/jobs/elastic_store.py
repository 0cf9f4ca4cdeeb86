"""What a team adds to a job so torchrun's restarts can rendezvous (torch 2.13, gloo).

Under torchrun each restart attempt's ranks meet in the agent's TCPStore, which still holds
the previous attempt's keys; gloo's connectFullMesh then dials the dead ranks' addresses and
fails on every attempt (DESIGN.md). A store prefix per attempt (TORCHELASTIC_RESTART_COUNT)
keeps the attempts apart. Initialising the default group first is enough: the Hugging Face
Trainer (accelerate) and Lightning both use a process group that already exists.
"""
from __future__ import annotations

import datetime
import os

import torch.distributed as dist


def init_per_attempt() -> None:
    if int(os.environ.get("WORLD_SIZE", "1")) < 2 or dist.is_initialized():
        return
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        dist.init_process_group("gloo")  # each rendezvous round brings a fresh store
        return
    base = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                         world_size=int(os.environ["WORLD_SIZE"]), is_master=False,
                         timeout=datetime.timedelta(seconds=120))
    store = dist.PrefixStore(f"attempt{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", base)
    dist.init_process_group("gloo", store=store, rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]))
