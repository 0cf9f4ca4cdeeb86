"""Launch the reference job: torchrun (elastic, --max-restarts) plus its watchdog.

    python -m drillbit.reference.launch --run-dir DIR [--nproc 4] [--no-watchdog] ...

Writes ``DIR/events.log`` (structured events from ranks and watchdog), ``DIR/launcher.log``
(torchrun's own output) and checkpoints under ``DIR/ckpt``. Exits with torchrun's exit
code. SIGTERM/SIGINT stop torchrun and the watchdog.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--run-dir", required=True)
    p.add_argument("--nproc", type=int, default=None,
                   help="ranks per node (default: 4 ranks over all nodes; on one node DRILLBIT_REFERENCE_NPROC "
                        "where it is set)")
    p.add_argument("--nnodes", type=int, default=1,
                   help="nodes; above 1 each node runs one launcher and torchrun rendezvouses over c10d")
    p.add_argument("--min-nodes", default=None,
                   help="elastic: the job goes on with this many nodes when one is lost (default: one less "
                        "than --nnodes; equal to it, the job waits for the lost node)")
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--node-name", default=None, help="this node's name (events carry it)")
    p.add_argument("--rdzv-endpoint", default=None, help="host:port of the c10d rendezvous store (node 0 hosts it)")
    p.add_argument("--rdzv-backend", choices=["c10d", "etcd-v2"], default="c10d",
                   help="c10d: the store lives in node 0's torchrun agent; etcd-v2: in the etcd at --rdzv-endpoint")
    p.add_argument("--max-restarts", type=int, default=3)
    p.add_argument("--monitor-interval", type=float, default=0.5)
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--step-ms", type=float, default=float(os.environ.get("DRILLBIT_REFERENCE_STEP_MS", "250")))
    p.add_argument("--ckpt-every", type=int, default=10, help="0 switches checkpoints off")
    p.add_argument("--watchdog", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--watchdog-deadline", type=float, default=10.0)
    p.add_argument("--watchdog-watch", choices=["progress", "liveness"], default="progress",
                   help="what the watchdog watches: steps, or only that each worker's heartbeat thread runs")
    p.add_argument("--store-fix", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--save-mode", choices=["atomic", "inplace"], default="atomic",
                   help="atomic: temp folder, COMPLETE marker, rename; inplace: files written straight into the "
                        "final folder, no marker, and the newest folder restored unchecked")
    p.add_argument("--save-pause-ms", type=float, default=0.0,
                   help="pause after each checkpoint file (a slow filesystem: a save that takes time)")
    p.add_argument("--state-mb", type=float, default=0.0,
                   help="MiB of model state every save writes and every restore reads (a heavier model)")
    p.add_argument("--spares", type=int, default=3, help="spare nodes in the node pool")
    p.add_argument("--restore-defect", choices=["none", "weights", "optimizer", "data"], default="none",
                   help="what a restore leaves out while it resumes the step (drillbit.reference.train)")
    p.add_argument("--replace-policy", choices=["fallback", "naive"], default="fallback")
    p.add_argument("--straggler", choices=["fleet-median", "nvrx", "off"], default="fleet-median",
                   help="straggler detector rule (off: none)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run_dir = Path(args.run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    events = run_dir / "events.log"
    py = sys.executable
    from drillbit.reference import nodepool

    primary = args.node_rank == 0
    one_node = os.environ.get("DRILLBIT_REFERENCE_NPROC") if args.nnodes == 1 else None
    args.nproc = args.nproc or (int(one_node) if one_node else max(1, 4 // args.nnodes))
    if primary:
        nodepool.init(run_dir / "pool.json", args.spares)
    if args.nnodes > 1:
        if not args.rdzv_endpoint:
            raise SystemExit("--rdzv-endpoint is needed with --nnodes above 1")
        min_nodes = int(args.min_nodes) if args.min_nodes else args.nnodes - 1
        conf = "last_call_timeout=3,join_timeout=120"
        rdzv = ["--nnodes", f"{min_nodes}:{args.nnodes}", "--rdzv-backend", args.rdzv_backend,
                "--rdzv-endpoint", args.rdzv_endpoint, "--rdzv-id", run_dir.name,
                "--rdzv-conf", f"is_host={int(primary)},{conf}" if args.rdzv_backend == "c10d" else conf]
    else:
        rdzv = ["--standalone", "--nnodes", "1"]
    torchrun = [
        py, "-m", "torch.distributed.run", *rdzv,
        "--nproc-per-node", str(args.nproc), "--max-restarts", str(args.max_restarts),
        "--monitor-interval", str(args.monitor_interval),
        "-m", "drillbit.reference.train",
        "--events", str(events), "--ckpt-dir", str(run_dir / "ckpt"),
        "--ckpt-every", str(args.ckpt_every), "--steps", str(args.steps),
        "--step-ms", str(args.step_ms), "--heartbeat-dir", str(run_dir / "heartbeat"),
        "--store-fix" if args.store_fix else "--no-store-fix",
        "--verify" if args.verify else "--no-verify",
        "--save-mode", args.save_mode, "--save-pause-ms", str(args.save_pause_ms),
        "--pool", str(run_dir / "pool.json"), "--replace-policy", args.replace_policy,
        "--alive-dir", str(run_dir / "alive"),
        *(["--state-mb", str(args.state_mb)] if args.state_mb else []),
        *(["--restore-defect", args.restore_defect] if args.restore_defect != "none" else []),
    ]
    # LOGLEVEL=INFO makes torchrun print "Worker group FAILED. k/M attempts left; will restart
    # worker group", which the torchrun signal preset reads.
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", LOGLEVEL="INFO")
    if args.node_name:
        env["DRILLBIT_NODE"] = args.node_name
    if args.nnodes > 1 and args.store_fix:
        # across nodes the per-attempt prefix does not work (a node whose peers failed restarts
        # without counting an attempt); a store of its own per rendezvous round does
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    with open(run_dir / "launcher.log", "ab") as out:
        agent = subprocess.Popen(torchrun, stdout=out, stderr=subprocess.STDOUT, env=env)
    children = [agent]
    if args.watchdog:
        children.append(subprocess.Popen(
            [py, "-m", "drillbit.reference.watchdog", "--events", str(events),
             "--agent-pid", str(agent.pid), "--deadline", str(args.watchdog_deadline),
             "--watch", args.watchdog_watch, "--alive-dir", str(run_dir / "alive")],
            env=env,
        ))

    if args.straggler != "off" and primary:  # one detector reads the whole fleet's compute times
        children.append(subprocess.Popen(
            [py, "-m", "drillbit.reference.straggler", "--events", str(events), "--rule", args.straggler,
             "--agent-pid", str(agent.pid)], env=env,
        ))

    def stop(signum: int, _frame: object) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code = agent.wait()
    for child in children[1:]:
        if child.poll() is None:
            child.terminate()
        deadline = time.time() + 5
        while child.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        if child.poll() is None:
            child.kill()
            child.wait()
    return code


if __name__ == "__main__":
    raise SystemExit(main())
