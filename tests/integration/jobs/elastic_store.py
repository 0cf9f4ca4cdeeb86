"""What a team adds to a job so torchrun's restarts can rendezvous (torch 2.13, gloo): a store
prefix per restart attempt. Under torchrun each attempt's ranks meet in the agent's TCPStore,
which still holds the previous attempt's keys; gloo's connectFullMesh then dials the dead
ranks' addresses and fails on every attempt (DESIGN.md). Initialising the default group first
is enough: the Hugging Face Trainer (accelerate) and Lightning both use a process group that
already exists. The helper is drillbit.fixtures.defects.elastic's, which its own jobs use."""
from __future__ import annotations

from drillbit.fixtures.defects.elastic import init_per_attempt

__all__ = ["init_per_attempt"]
