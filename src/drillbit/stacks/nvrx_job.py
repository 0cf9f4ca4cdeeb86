"""A job under NVIDIA's Resiliency Extension (nvidia-resiliency-ext 0.4.1): ``ft_launcher``
(torchrun's agent with a rank monitor per rank) runs the ranks, each of which connects a
``RankMonitorClient`` and sends a heartbeat every step, the way NVRx's fault-tolerance
guide writes it. A rank whose heartbeat stops for ``--heartbeat-timeout`` seconds makes its
monitor restart the workers (in-job restart, up to ``--max-restarts``).

    python -m drillbit.stacks.nvrx_job launch --run-dir DIR [--nproc 2] \\
        [--heartbeat-timeout 10 | --default-timeouts]

The launcher's and monitors' output goes to ``DIR/launcher.log``; the loop and its
checkpoints (``DIR/ckpt/step_<N>.pt``) are :mod:`drillbit.stacks.loop`'s. Collectives are gloo all-reduces with torch's default timeout
(30 min): catching a hang is left to NVRx's heartbeats, as the guide intends.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from drillbit.stacks.supervise import Group, tool


def launch(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    ft_launcher = tool("ft_launcher")
    timeouts = [] if args.default_timeouts else [
        "--ft-initial-rank-heartbeat-timeout", str(args.initial_heartbeat_timeout),
        "--ft-rank-heartbeat-timeout", str(args.heartbeat_timeout), "--ft-workload-check-interval", "1"]
    group = Group({"LOGLEVEL": "INFO"})
    group.on_signals()
    main = group.start(
        [ft_launcher, "--standalone", "--nnodes", "1", "--nproc-per-node", str(args.nproc),
         "--max-restarts", str(args.max_restarts), "--monitor-interval", "1", *timeouts,
         "--ft-enable-nic-monitor", "false", "-m", "drillbit.stacks.nvrx_job", "train",
         "--step-ms", str(args.step_ms), "--ckpt-dir", str(run_dir / "ckpt"), "--ckpt-every", str(args.ckpt_every)],
        run_dir / "launcher.log")
    code = group.wait_any([main])
    group.stop_all()
    return code


def train(args: argparse.Namespace) -> int:
    import torch.distributed as dist

    from nvidia_resiliency_ext.fault_tolerance import RankMonitorClient

    from drillbit.stacks import loop

    dist.init_process_group("gloo")
    monitor = RankMonitorClient()
    monitor.init_workload_monitoring()
    try:
        loop.run(args.step_ms, args.ckpt_dir, args.ckpt_every, on_step=lambda _step: monitor.send_heartbeat())
    finally:
        monitor.shutdown_workload_monitoring()
    return 0


def main(argv: list[str] | None = None) -> int:
    from drillbit.stacks.loop import cli

    p, la, _ = cli(__doc__)
    la.add_argument("--heartbeat-timeout", type=float, default=10.0)
    la.add_argument("--initial-heartbeat-timeout", type=float, default=30.0)
    la.add_argument("--default-timeouts", action="store_true",
                    help="NVRx's own heartbeat timeouts (60 min initial, 45 min after)")
    args = p.parse_args(argv)
    return launch(args) if args.role == "launch" else train(args)

if __name__ == "__main__":
    raise SystemExit(main())
