"""throttle-clocks on a real NVIDIA GPU: clocks and power limit before, during and after,
and the slowdown of a matmul workload. Needs CUDA torch, nvidia-ml-py and root.

    python bench/gpu_throttle.py [--seconds 10] [--size 8192] [--gpu 0]

The fault is applied through a NodeAgent exactly as a drill applies it (this process is the
"rank"), confirmed, measured, and healed; the script exits non-zero if the heal does not
verify. Prints figures for the README.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil


def tflops(torch, size: int, seconds: float) -> float:
    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    rates = []
    end = time.time() + seconds
    while time.time() < end:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()
        rates.append(10 * 2 * size**3 / (time.perf_counter() - t0) / 1e12)
    return statistics.median(rates)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--gpu", type=int, default=0)
    p.add_argument("--clock-fraction", type=float, default=0.5)
    p.add_argument("--power-fraction", type=float, default=0.6)
    args = p.parse_args()
    import pynvml
    import torch

    from drillbit.agent import NodeAgent
    from drillbit.faults.throttle_clocks import snapshot
    from drillbit.core.proc import ProcRef

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to throttle", file=sys.stderr)
        return 2
    torch.cuda.set_device(args.gpu)
    pynvml.nvmlInit()
    dev = pynvml.nvmlDeviceGetHandleByIndex(args.gpu)
    print(f"GPU {args.gpu}: {pynvml.nvmlDeviceGetName(dev)}")
    agent = NodeAgent("gpu-host", Path(tempfile.mkdtemp()) / "reg.json")
    me = ProcRef.of(psutil.Process(), rank=0)
    ok = True
    for params in ({"method": "lock-clocks", "clock_fraction": args.clock_fraction, "gpu_index": args.gpu},
                   {"method": "power-limit", "power_fraction": args.power_fraction, "gpu_index": args.gpu}):
        tflops(torch, args.size, 2.0)  # warm up
        before_state = snapshot(pynvml, dev)
        base = tflops(torch, args.size, args.seconds)
        handle = agent.inject("throttle-clocks", me, params)
        during_rate = tflops(torch, args.size, args.seconds)
        evidence = agent.confirm(handle)
        during_state = snapshot(pynvml, dev)
        report = agent.heal(handle)
        after_rate = tflops(torch, args.size, args.seconds)
        after_state = snapshot(pynvml, dev)
        ok &= report.verified
        print(json.dumps({"method": params["method"], "params": params,
                          "before": before_state, "during": during_state, "after": after_state,
                          "tflops": {"before": round(base, 1), "during": round(during_rate, 1),
                                     "after": round(after_rate, 1)},
                          "slowdown": round(base / during_rate - 1, 4), "confirmed": evidence is not None,
                          "heal": report.detail, "heal_verified": report.verified}, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
