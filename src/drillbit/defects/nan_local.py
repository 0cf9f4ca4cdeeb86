"""NVIDIA/Megatron-LM#5281, by the same mechanism: a local-tier checkpoint that loads without
an error and holds NaN weights (there, assembled wrong from its replicas). Nothing checks
what was loaded, the loss goes NaN, the job raises, and every restart loads the same local
copy again: under ft_launcher the report counted 44 cycles of about 90 s, never falling back
to the global tier that was intact.

    torchrun --nproc-per-node 2 -m drillbit.defects.nan_local --ckpt-dir DIR [--restore trust|check]

Two tiers, written by rank 0 through a temporary file and a rename: ``DIR/local_step_N.pt``
every ``--local-every`` steps (a node's fast copy) and ``DIR/global_step_N.pt`` every
``--ckpt-every`` (shared storage). A start loads the newest local copy, else the newest global
one. After every step the job stops on NaN weights, as Megatron does on a NaN loss
(``FloatingPointError: NaN in the model's weights after step N``). ``--restore trust`` (the
affected code) loads the local copy as it is; ``--restore check`` (the fix) checks every tensor
it loaded is finite, and on NaN sets the copy aside and falls back to the global tier. Prints
``step=N rank=R loss=X``, ``saved step=N tier=T`` and ``restored step=N path=P tier=T``."""
from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from drillbit.defects.elastic import loop_args, run_loop


def newest(folder: Path, tier: str) -> tuple[int, Path] | None:
    found = [(int(m.group(1)), p) for p in folder.glob(f"{tier}_step_*.pt")
             if (m := re.fullmatch(rf"{tier}_step_(\d+)\.pt", p.name))]
    return max(found) if found else None


class TwoTiers:
    def __init__(self, folder: Path, local_every: int, global_every: int, restore: str) -> None:
        self.folder = folder
        self.local_every, self.global_every, self.restore = local_every, global_every, restore
        folder.mkdir(parents=True, exist_ok=True)

    def load(self) -> tuple[int, dict, str, str | None] | None:
        import torch
        import torch.distributed as dist

        for tier in ("local", "global"):
            last = newest(self.folder, tier)
            if last is None:
                continue
            try:
                state = torch.load(last[1], weights_only=True)
            except FileNotFoundError:  # another rank set it aside as bad meanwhile
                continue
            if self.restore == "check" and not all(torch.isfinite(t).all() for t in state["model"].values()):
                print(f"rejected step={last[0]} path={last[1]} tier={tier}: NaN in the weights; falling back",
                      flush=True)
                if dist.get_rank() == 0:
                    with contextlib.suppress(FileNotFoundError):
                        os.replace(last[1], last[1].with_name(last[1].name + ".bad"))
                continue
            return int(state["step"]), state, str(last[1]), tier
        return None

    def save(self, step: int, state: dict) -> None:
        import torch
        import torch.distributed as dist

        if not all(torch.isfinite(t).all() for t in state["model"].values()):
            raise FloatingPointError(f"NaN in the model's weights after step {step}")
        if dist.get_rank() != 0:
            return
        for tier, every in (("local", self.local_every), ("global", self.global_every)):
            if every and step % every == 0:
                tmp = self.folder / f".{tier}_step_{step}.pt.tmp"
                torch.save(state, tmp)
                os.replace(tmp, self.folder / f"{tier}_step_{step}.pt")
                print(f"saved step={step} tier={tier}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = loop_args(__doc__, every=10)
    ap.add_argument("--local-every", type=int, default=5)
    ap.add_argument("--restore", choices=["trust", "check"], default="trust")
    args = ap.parse_args(argv)
    store = TwoTiers(Path(args.ckpt_dir), args.local_every, args.ckpt_every, args.restore)
    return run_loop(args.step_ms, args.ckpt_every, store)


if __name__ == "__main__":
    raise SystemExit(main())
