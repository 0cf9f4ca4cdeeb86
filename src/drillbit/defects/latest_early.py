"""KempnerInstitute/KempnerForge#102 (and the race of pytorch/torchtitan#930), at torch 2.13
with its own ``torch.distributed.checkpoint.async_save``: a job that moves its ``latest``
pointer as soon as the asynchronous save is dispatched, before the checkpoint is durable.
Until the background flush has written every shard and DCP's ``.metadata``, ``latest`` names a
folder no one can load; a crash in that window leaves an auto-resume that fails on every
restart ("metadata is None" in the report; here DCP's own error on the missing ``.metadata``).

    torchrun --nproc-per-node 2 -m drillbit.defects.latest_early --ckpt-dir DIR [--latest dispatch|durable]

Every ``--ckpt-every`` steps every rank calls ``dcp.async_save`` (a gloo group of its own for
the checkpoint's collectives) into ``DIR/step_N/``; the write's finish, where rank 0 writes
``.metadata``, takes ``--finish-ms`` longer (a large checkpoint on shared storage takes a
minute there). ``--latest dispatch`` (the affected code) moves ``DIR/latest`` right after the
call returns; ``--latest durable`` (the fix) once the save's future is done. A start loads
what ``latest`` names with ``dcp.load``. Prints ``step=N rank=R loss=X``, ``saved step=N
path=P`` when ``latest`` moves, and the loop's ``restored step=N path=P``."""
from __future__ import annotations

import os
import time
from pathlib import Path

from drillbit.defects.elastic import loop_args, run_loop


class LatestPointer:
    def __init__(self, folder: Path, every: int, latest: str, finish_s: float) -> None:
        self.folder, self.every, self.latest, self.finish_s = folder, every, latest, finish_s
        self.pending = None
        self.group = None
        self.model = self.opt = None
        folder.mkdir(parents=True, exist_ok=True)

    def bind(self, model, opt) -> None:
        self.model, self.opt = model, opt

    def load(self) -> tuple[int, dict, str, str | None] | None:
        import torch.distributed.checkpoint as dcp

        pointer = self.folder / "latest"
        if not pointer.is_symlink():
            return None
        target = self.folder / os.readlink(pointer)
        state = {"model": self.model.state_dict()}
        dcp.load(state, checkpoint_id=str(target))
        return int(target.name.rsplit("_", 1)[1]), {"model": state["model"], "optim": self.opt.state_dict()}, \
            str(target), None

    def _advance(self, step: int) -> None:
        import torch.distributed as dist

        if dist.get_rank() != 0:
            return
        tmp = self.folder / ".latest.tmp"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(f"step_{step}")
        os.replace(tmp, self.folder / "latest")
        print(f"saved step={step} path={self.folder / f'step_{step}'}", flush=True)

    def save(self, step: int, state: dict) -> None:
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import FileSystemWriter

        if not self.every or step % self.every:
            return
        if self.group is None:
            self.group = dist.new_group(backend="gloo")  # the checkpoint's collectives, apart from training's
        if self.pending is not None:
            self.pending.result()  # one save in flight at a time
        pause = self.finish_s

        class SlowFinish(FileSystemWriter):
            def finish(self, metadata, results) -> None:
                time.sleep(pause)  # shared storage: the shards are in, .metadata comes last
                super().finish(metadata, results)

        path = self.folder / f"step_{step}"
        self.pending = dcp.async_save({"model": state["model"]}, storage_writer=SlowFinish(str(path)),
                                      process_group=self.group)
        if self.latest == "dispatch":
            self._advance(step)  # the affected code: the save was dispatched, so it is "saved"
        else:
            self.pending.add_done_callback(lambda fut: fut.exception() is None and self._advance(step))


def main(argv: list[str] | None = None) -> int:
    ap = loop_args(__doc__, every=10)
    ap.add_argument("--latest", choices=["dispatch", "durable"], default="dispatch")
    ap.add_argument("--finish-ms", type=float, default=1500.0, help="how much longer the save's finish takes")
    args = ap.parse_args(argv)
    store = LatestPointer(Path(args.ckpt_dir), args.ckpt_every, args.latest, args.finish_ms / 1000)
    return run_loop(args.step_ms, args.ckpt_every, store)


if __name__ == "__main__":
    raise SystemExit(main())
