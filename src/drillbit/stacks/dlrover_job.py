"""A job under DLRover 0.6.1's elastic agent (``dlrover-run``), with its job master started
first on loopback, the way DLRover runs outside Kubernetes:

    python -m drillbit.stacks.dlrover_job launch --run-dir DIR --master HOST:PORT [--nproc 2]

Starts ``python -m dlrover.python.master.main --port PORT --node_num 1 --platform local``
(output in ``DIR/master.log``), waits for its port, then ``dlrover-run --nnodes 1
--nproc-per-node N --max-restarts 3`` with ``DLROVER_MASTER_ADDR`` (output in
``DIR/agent.log``). ``dlrover-run --standalone`` is not used: on torch 2.13 it fails
(``SubprocessHandler.__init__() missing … 'numa_options'``), and without a master the agent
silently falls back to plain torchrun. DLRover 0.6.1 writes to fixed folders
(``/tmp/dlrover``, ``/tmp/ckpt_sock``); the launcher removes what the job added there when
it stops. The loop and its checkpoints are :mod:`drillbit.stacks.loop`'s.
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


def launch(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    host, port = args.master.rsplit(":", 1)
    # torchelastic's temp files go to the run's own temp folder; DLRover's fixed folders
    # (/tmp/dlrover, /tmp/ckpt_sock, hard-coded in 0.6.1) are cleared of what this job added
    (run_dir / "tmp").mkdir(exist_ok=True)
    before = {d: set(os.listdir(d)) if os.path.isdir(d) else None for d in FIXED_DIRS}
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
         "--ckpt-dir", str(run_dir / "ckpt"), "--ckpt-every", str(args.ckpt_every)],
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
    return code


def train(args: argparse.Namespace) -> int:
    import torch.distributed as dist

    from drillbit.stacks import loop

    dist.init_process_group("gloo")
    loop.run(args.step_ms, args.ckpt_dir, args.ckpt_every)
    return 0


def main(argv: list[str] | None = None) -> int:
    from drillbit.stacks.loop import cli

    p, la = cli(__doc__)
    la.add_argument("--master", required=True, help="HOST:PORT for the DLRover job master")
    args = p.parse_args(argv)
    return launch(args) if args.role == "launch" else train(args)

if __name__ == "__main__":
    raise SystemExit(main())
