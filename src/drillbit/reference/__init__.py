"""The reference training job and its recovery stack.

A real PyTorch DDP job (gloo on CPU, NCCL when CUDA is present) under torchrun elastic,
with atomic checksummed checkpoints, an external progress watchdog and structured event
lines. Every recovery piece can be switched off so drills can be shown to FAIL.
"""
