"""NVIDIA-NeMo/Automodel#3254, by the same mechanism: a save that is interrupted and then
redone. Automodel's save made ``epoch_X_step_N/`` and wrote into it in place; an interrupted
save left the folder, incomplete. Resume itself was right (the ``LATEST`` pointer moves only
after a save completes), but the re-run reached step N again, and a guard that ran on rank 0
alone (``if os.path.exists(path): raise FileExistsError``) killed rank 0 while the other ranks
went on into the next collective (fixed by #3261, which made publication failure-atomic).

This job does the same with torch.distributed on CPU (gloo), under torchrun:

    torchrun --nproc-per-node 2 -m drillbit.defects.redo_save --ckpt-dir DIR [--save guard|atomic]

Every ``--ckpt-every`` steps, rank 0 checks and makes ``DIR/step_N/`` (``--save guard``: the
affected code's guard), every rank writes ``rank_R.pt`` into it, then rank 0 writes
``complete`` and moves ``DIR/LATEST`` to the step. A start loads the step ``LATEST`` names.
Under torchrun the rank that raises is seen by its agent, so where Automodel's in-process
launcher hung, this job restarts from ``LATEST``, raises again at the same step, and spends
its restarts without getting past it. ``--save atomic`` is the fix: each rank writes into
``step_N.partial/`` (a leftover from an interrupted save is cleared first), and rank 0 renames
it into place once every rank has written. Prints ``step=N rank=R loss=X``, ``saved step=N
path=P`` and ``restored step=N path=P``."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from drillbit.defects.elastic import loop_args, run_loop


class GuardedSave:
    """The save with the affected guard (``guard``) or failure-atomic (``atomic``)."""

    def __init__(self, folder: Path, every: int, mode: str, pause_s: float) -> None:
        self.folder, self.every, self.mode, self.pause_s = folder, every, mode, pause_s
        folder.mkdir(parents=True, exist_ok=True)

    def load(self) -> tuple[int, dict, str, str | None] | None:
        import torch
        import torch.distributed as dist

        latest = self.folder / "LATEST"
        if not latest.exists():
            return None
        path = self.folder / latest.read_text().strip()
        state = torch.load(path / f"rank_{dist.get_rank()}.pt", weights_only=True)
        return int(state["step"]), state, str(path), None

    def save(self, step: int, state: dict) -> None:
        import torch
        import torch.distributed as dist

        if not self.every or step % self.every:
            return
        rank = dist.get_rank()
        final = self.folder / f"step_{step}"
        where = final if self.mode == "guard" else self.folder / f"step_{step}.partial"
        if rank == 0:
            if self.mode == "guard":
                if final.exists():
                    raise FileExistsError(f"Checkpoint directory {final} already exists")
            elif where.exists():
                shutil.rmtree(where)  # what an interrupted save left, never published
            where.mkdir()
        dist.barrier()
        tmp = where / f".rank_{rank}.pt.tmp"
        torch.save(state, tmp)
        time.sleep(self.pause_s)  # a real shard takes a while to write
        os.replace(tmp, where / f"rank_{rank}.pt")
        dist.barrier()
        if rank == 0:
            time.sleep(self.pause_s)  # the save's metadata, written once every shard is in
            (where / "complete").write_text(f"{step}\n")
            if where != final:
                os.replace(where, final)
            pointer = self.folder / ".LATEST.tmp"
            pointer.write_text(final.name + "\n")
            os.replace(pointer, self.folder / "LATEST")
            print(f"saved step={step} path={final}", flush=True)
        dist.barrier()


def main(argv: list[str] | None = None) -> int:
    ap = loop_args(__doc__, every=10)
    ap.add_argument("--save", choices=["guard", "atomic"], default="guard")
    ap.add_argument("--save-pause-ms", type=float, default=300.0, help="how long each rank's shard takes to write")
    args = ap.parse_args(argv)
    store = GuardedSave(Path(args.ckpt_dir), args.ckpt_every, args.save, args.save_pause_ms / 1000)
    return run_loop(args.step_ms, args.ckpt_every, store)


if __name__ == "__main__":
    raise SystemExit(main())
