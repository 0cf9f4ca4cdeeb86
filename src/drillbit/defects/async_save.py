"""pytorch/pytorch#144657, by the same mechanism: an asynchronous checkpoint of CPU tensors
writes the values the weights have *after* the save was called. DCP's ``async_save`` staged
the state with an offload-to-CPU helper, a no-op for tensors already on the CPU, so the
background writer read the live tensors while the optimizer went on changing them (fixed by
pytorch#145408, which copies; torch 2.13's ``async_save`` copies, checked here).

This job stages the way the affected code did and writes in a background thread:

    torchrun --nproc-per-node 2 -m drillbit.defects.async_save --ckpt-dir DIR [--stage offload|copy]

Every ``--ckpt-every`` steps rank 0 stages the state (``--stage offload``: ``tensor.to("cpu")``,
which returns the tensor itself; ``--stage copy``: a clone, the fix) and a thread writes
``step_N.pt`` after ``--write-ms`` (a large state takes that long to serialise) while
training goes on. Each save line carries a digest of the state as it was when the save was
called, and the restore line a digest of what was loaded: ``saved step=N path=P digest=D``
and ``restored step=N path=P digest=D``, with ``step=N rank=R loss=X`` per step."""
from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from pathlib import Path

from drillbit.defects.elastic import loop_args, run_loop


def digest(state: dict) -> str:
    import torch

    h = hashlib.sha256()
    for key in sorted(state["model"]):
        h.update(key.encode())
        h.update(state["model"][key].detach().to(torch.float64).numpy().tobytes())
    return h.hexdigest()[:16]


class AsyncSave:
    def __init__(self, folder: Path, every: int, stage: str, write_s: float) -> None:
        self.folder, self.every, self.stage, self.write_s = folder, every, stage, write_s
        self.pending: threading.Thread | None = None
        folder.mkdir(parents=True, exist_ok=True)

    def load(self) -> tuple[int, dict, str, str | None] | None:
        import torch

        found = [(int(m.group(1)), p) for p in self.folder.glob("step_*.pt")
                 if (m := re.fullmatch(r"step_(\d+)\.pt", p.name))]
        if not found:
            return None
        step, path = max(found)
        state = torch.load(path, weights_only=True)
        print(f"restored step={step} path={path} digest={digest(state)}", flush=True)
        return step, state, str(path), None

    def save(self, step: int, state: dict) -> None:
        import torch
        import torch.distributed as dist

        if not self.every or step % self.every or dist.get_rank() != 0:
            return
        if self.pending is not None:
            self.pending.join()  # one save in flight at a time, as DCP's callers wait on the last future
        meant = digest(state)  # what this save is meant to hold: the state now
        if self.stage == "copy":
            staged = {"model": {k: v.detach().clone() for k, v in state["model"].items()}}
        else:  # the affected staging: offload to CPU, which is the tensor itself when it is on the CPU already
            staged = {"model": {k: v.detach().to("cpu") for k, v in state["model"].items()}}
        staged.update(optim=state["optim"], step=step)  # plain SGD: no tensors of its own
        final = self.folder / f"step_{step}.pt"

        def write() -> None:
            time.sleep(self.write_s)
            tmp = self.folder / f".step_{step}.pt.tmp"
            torch.save(staged, tmp)
            os.replace(tmp, final)
            print(f"saved step={step} path={final} digest={meant}", flush=True)

        self.pending = threading.Thread(target=write, name=f"async-save-{step}", daemon=True)
        self.pending.start()


def main(argv: list[str] | None = None) -> int:
    ap = loop_args(__doc__, every=5)
    ap.add_argument("--stage", choices=["offload", "copy"], default="offload")
    ap.add_argument("--write-ms", type=float, default=300.0, help="how long the background write takes to begin")
    args = ap.parse_args(argv)
    store = AsyncSave(Path(args.ckpt_dir), args.ckpt_every, args.stage, args.write_ms / 1000)
    return run_loop(args.step_ms, args.ckpt_every, store)


if __name__ == "__main__":
    raise SystemExit(main())
