"""A job under DLRover 0.6.1's elastic agent (``dlrover-run``), with its job master started
first on loopback, the way DLRover runs outside Kubernetes:

    python -m drillbit.stacks.dlrover_job launch --run-dir DIR --master HOST:PORT [--nproc 2]

Starts ``python -m dlrover.python.master.main --port PORT --node_num 1 --platform local``
(output in ``DIR/master.log``), waits for its port, then ``dlrover-run --nnodes 1
--nproc-per-node N --max-restarts 3`` with ``DLROVER_MASTER_ADDR`` (output in
``DIR/agent.log``). ``dlrover-run --standalone`` is not used: on torch 2.13 it fails
(``SubprocessHandler.__init__() missing … 'numa_options'``), and without a master the agent
silently falls back to plain torchrun. DLRover 0.6.1 writes to fixed folders
(``/tmp/dlrover``, ``/tmp/ckpt_sock``) and, with flash checkpoints, to ``/dev/shm``; the
launcher removes what the job added there when it stops. The loop and its checkpoints are :mod:`drillbit.stacks.loop`'s.

``--ckpt flash``: DLRover's flash checkpoints (``DdpCheckpointer``) instead — the state in
the agent's shared memory every ``--memory-every`` steps (it outlives a worker, not the
agent's host) and on disk every ``--ckpt-every`` (``DIR/ckpt/<step>/rank_0.pt``, written by
the agent's saver in the background). On start ``load_checkpoint()`` takes memory when it
holds a step, else the newest on disk; DLRover's own lines say which. ``--restore disk``:
a broken recovery path, the job's old resume code kept beside flash saves — ``torch.load``
of the newest disk checkpoint, whatever memory holds.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
from pathlib import Path

from drillbit.stacks.supervise import Group, tool, wait_port

FIXED_DIRS = ("/tmp/dlrover", "/tmp/ckpt_sock")
# flash checkpoints' shared memory and its locks (DLRover 0.6.1's ckpt_saver names): a copy
# left behind would be loaded by the next job of the same run id as its memory tier
SHM_DIR, SHM_PREFIXES = "/dev/shm", ("ckpt_shm_", "ckpt_meta_", "ckpt_lock_rank_", "shm_lock_")


def _shm_ours(name: str) -> bool:
    return any(prefix in name for prefix in SHM_PREFIXES)


def launch(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    host, port = args.master.rsplit(":", 1)
    # torchelastic's temp files go to the run's own temp folder; DLRover's fixed folders
    # (/tmp/dlrover, /tmp/ckpt_sock, hard-coded in 0.6.1) are cleared of what this job added
    (run_dir / "tmp").mkdir(exist_ok=True)
    before = {d: set(os.listdir(d)) if os.path.isdir(d) else None for d in FIXED_DIRS}
    shm_before = set(os.listdir(SHM_DIR)) if os.path.isdir(SHM_DIR) else set()
    group = Group({"DLROVER_MASTER_ADDR": args.master, "LOGLEVEL": "INFO", "TMPDIR": str(run_dir / "tmp")})
    group.on_signals()
    group.start([sys.executable, "-m", "dlrover.python.master.main", "--port", port, "--node_num", "1",
                 "--job_name", run_dir.parent.name or "drill", "--platform", "local"], run_dir / "master.log")
    if not wait_port(host, int(port), 60):
        print(f"the DLRover master {args.master} did not come up", file=sys.stderr)
        group.stop_all()
        return 1
    runner = tool("dlrover-run")
    agent = group.start(
        [runner, "--nnodes", "1", "--nproc-per-node", str(args.nproc), "--max-restarts", str(args.max_restarts),
         "--monitor-interval", "1", "-m", "drillbit.stacks.dlrover_job", "train", "--step-ms", str(args.step_ms),
         "--ckpt-dir", str(run_dir / "ckpt"), "--ckpt-every", str(args.ckpt_every), "--ckpt", args.ckpt,
         "--memory-every", str(args.memory_every), "--restore", args.restore],
        run_dir / "agent.log")
    code = group.wait_any([agent])
    group.stop_all()
    for folder, had in before.items():
        if not os.path.isdir(folder):
            continue
        for name in set(os.listdir(folder)) - (had or set()):
            path = os.path.join(folder, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.remove(path)
        if had is None and not os.listdir(folder):
            os.rmdir(folder)
    if os.path.isdir(SHM_DIR):
        for name in set(os.listdir(SHM_DIR)) - shm_before:
            if _shm_ours(name):
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(SHM_DIR, name))
    return code


def train(args: argparse.Namespace) -> int:
    import torch.distributed as dist

    from drillbit.stacks import loop

    dist.init_process_group("gloo")
    store = FlashStore(args.ckpt_dir, args.memory_every, args.ckpt_every, args.restore) if args.ckpt == "flash" else None
    loop.run(args.step_ms, args.ckpt_dir, args.ckpt_every, store=store)
    return 0


class FlashStore:
    """DLRover's flash checkpoints: memory (the agent's shared memory) every ``memory_every``
    steps, disk every ``disk_every``; every rank saves (DLRover's saver keeps rank 0's copy
    of a replicated model). Prints ``saved step=N tier=memory|disk``."""

    def __init__(self, ckpt_dir: str, memory_every: int, disk_every: int, restore: str) -> None:
        from dlrover.trainer.torch.flash_checkpoint.ddp import DdpCheckpointer

        self.folder = Path(ckpt_dir)
        self.memory_every, self.disk_every, self.restore = memory_every, disk_every, restore
        self.ckpt = DdpCheckpointer(str(self.folder))

    def load(self) -> tuple[int, dict, str, str | None] | None:
        if self.restore == "disk":
            # the broken path: the job's old resume code, torch.load of the newest disk checkpoint
            import torch
            from dlrover.python.common.constants import CheckpointConstant

            tracker = self.folder / CheckpointConstant.TRACER_FILE_NAME
            if not tracker.exists():
                return None
            path = self.folder / tracker.read_text().strip() / "rank_0.pt"
            state = torch.load(path, weights_only=False)
            return int(state["step"]), state, str(path), "disk"
        state = self.ckpt.load_checkpoint()  # DLRover's own lines say memory or disk
        if not state:
            return None
        return int(state["step"]), state, "flash", None

    def save(self, step: int, state: dict) -> None:
        from dlrover.trainer.torch.flash_checkpoint.checkpointer import StorageType

        if self.disk_every and step % self.disk_every == 0:
            self.ckpt.save_checkpoint(step, state, storage_type=StorageType.DISK)
            tier = "disk"
        elif self.memory_every and step % self.memory_every == 0:
            self.ckpt.save_checkpoint(step, state, storage_type=StorageType.MEMORY)
            tier = "memory"
        else:
            return
        print(f"saved step={step} tier={tier}", flush=True)


def main(argv: list[str] | None = None) -> int:
    from drillbit.stacks.loop import cli

    p, la, tr = cli(__doc__)
    la.add_argument("--master", required=True, help="HOST:PORT for the DLRover job master")
    for sp in (la, tr):
        sp.add_argument("--ckpt", choices=["file", "flash"], default="file")
        sp.add_argument("--memory-every", type=int, default=2, help="--ckpt flash: a memory save every N steps")
        sp.add_argument("--restore", choices=["auto", "disk"], default="auto")
    args = p.parse_args(argv)
    return launch(args) if args.role == "launch" else train(args)

if __name__ == "__main__":
    raise SystemExit(main())
