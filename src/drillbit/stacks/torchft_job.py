"""A torchft job: a lighthouse and replica groups that heal from each other, each group a
torchrun (the supervisor that restarts a group's dead rank), the way torchft's README runs
``train_ddp.py``. Per node:

    python -m drillbit.stacks.torchft_job launch --run-dir DIR --node-rank R \\
        --lighthouse HOST:PORT [--nnodes N] [--groups 2] [--ddp] [--timeout 10] [--min-replicas 1]
        [--max-retries N] [--state-mb MB] [--advertise hostname|gloo-interface]

Node 0 starts ``torchft_lighthouse --bind HOST:PORT`` first (its output in
``DIR/lighthouse.log``). Each group ``g`` runs ``torchrun --standalone --nproc-per-node 1
--max-restarts N`` with ``REPLICA_GROUP_ID`` (unique over the job) and writes
``DIR/group<ID>.log``; the groups are split evenly over the nodes. The training loop is torchft's: ``Manager(ProcessGroupGloo(...))``,
its optimizer wrapper (quorum at ``zero_grad``, commit at ``step``) and a per-gradient
``manager.allreduce``; ``--ddp`` uses ``torchft.ddp.DistributedDataParallel`` instead. Each
committed step prints ``step=N replica=ID loss=X``.

A restarted group heals: it fetches a live group's state over torchft's HTTP checkpoint
transport, from the address that group advertises. torchft advertises ``socket.gethostname()``
(the default, ``--advertise hostname``); ``--advertise gloo-interface`` advertises the address
of the interface gloo is pinned to (``GLOO_SOCKET_IFNAME``), for the manager and the checkpoint
server both: torchft#329's fix, where hostnames resolved to the slow Ethernet and recovery
took ~948 s instead of ~20. ``--state-mb`` adds that much state to the model (1 MiB buffers, not
all-reduced), so a heal has something to carry.
"""
from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

from drillbit.stacks.supervise import Group, tool, wait_port


def launch(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    host, port = args.lighthouse.rsplit(":", 1)
    group = Group({"LOGLEVEL": "INFO", "TORCHFT_LIGHTHOUSE": f"http://{args.lighthouse}"})
    group.on_signals()
    if args.node_rank == 0:
        lighthouse = tool("torchft_lighthouse")
        group.start([lighthouse, "--bind", args.lighthouse, "--min_replicas", str(args.min_replicas),
                     "--quorum_tick_ms", "100", "--join_timeout_ms", str(args.join_timeout_ms),
                     "--heartbeat_timeout_ms", str(args.heartbeat_timeout_ms)],
                    run_dir / "lighthouse.log", env={"RUST_LOG": "info"})
    if not wait_port(host, int(port), 60):
        print(f"lighthouse {args.lighthouse} did not come up", file=sys.stderr)
        group.stop_all()
        return 1
    ranks = []
    per_node = max(1, args.groups // args.nnodes)
    for g in range(per_node):
        gid = args.node_rank * per_node + g
        ranks.append(group.start(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
             "--nproc-per-node", "1", "--max-restarts", str(args.max_restarts), "--monitor-interval", "0.5",
             "-m", "drillbit.stacks.torchft_job", "train", "--step-ms", str(args.step_ms),
             "--timeout", str(args.timeout), "--min-replicas", str(args.min_replicas),
             "--state-mb", str(args.state_mb), "--advertise", args.advertise,
             *(["--ddp"] if args.ddp else []),
             *(["--max-retries", str(args.max_retries)] if args.max_retries is not None else [])],
            run_dir / f"group{gid}.log", env={"REPLICA_GROUP_ID": str(gid)}))
    code = group.wait_any(ranks)
    group.stop_all()
    return code


def gloo_interface_address() -> str:
    """The IPv4 address of the interface gloo is pinned to (GLOO_SOCKET_IFNAME)."""
    import socket

    import psutil

    name = os.environ.get("GLOO_SOCKET_IFNAME")
    if not name:
        raise SystemExit("--advertise gloo-interface needs GLOO_SOCKET_IFNAME (the interface gloo is pinned to)")
    for addr in psutil.net_if_addrs().get(name, []):
        if addr.family == socket.AF_INET:
            return addr.address
    raise SystemExit(f"GLOO_SOCKET_IFNAME={name}: no IPv4 address on that interface")


def train(args: argparse.Namespace) -> int:
    import torch
    from torch import nn

    from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo
    from torchft.checkpointing.http_transport import HTTPTransport

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s",
                        stream=sys.stdout)
    gid = int(os.environ.get("REPLICA_GROUP_ID", "0"))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    for i in range(math.ceil(args.state_mb)):
        # state a heal must copy, never all-reduced: 1 MiB tensors (float32, 2**18 each), as a
        # model's many layers are; one tensor would be one write, which torchft's checkpoint
        # server must finish within its timeout
        model.register_buffer(f"ballast{i}", torch.ones(2 ** 18))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    timeout = timedelta(seconds=args.timeout)
    advertised: dict = {}
    if args.advertise == "gloo-interface":
        host = gloo_interface_address()

        class Advertised(HTTPTransport):
            def address(self) -> str:
                return f"http://{host}:{self._server.socket.getsockname()[1]}/checkpoint/"

        advertised = {"hostname": host, "checkpoint_transport": Advertised(timeout=timeout, num_chunks=0)}

    def state_dict():
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    def load_state_dict(sd):
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optim"])

    manager = Manager(pg=ProcessGroupGloo(timeout=timeout), min_replica_size=args.min_replicas, load_state_dict=load_state_dict,
                      state_dict=state_dict, replica_id=f"train_{gid}", timeout=timeout,
                      quorum_timeout=timedelta(seconds=max(30.0, args.timeout)), **advertised,
                      # torchft#151: None (the default) retries a failing commit for ever
                      **({"max_retries": args.max_retries} if args.max_retries is not None else {}))
    net = DistributedDataParallel(manager, model) if args.ddp else model
    optimizer = Optimizer(manager, opt)
    gen = torch.Generator().manual_seed(gid)
    while True:
        started = time.time()
        optimizer.zero_grad()  # torchft starts the step's quorum here
        x = torch.randn(16, 32, generator=gen)
        loss = (net(x) - x.sum(1, keepdim=True)).pow(2).mean()
        # the step's compute: a fault lands here most of the time, after the quorum and before
        # the gradients' all-reduce, as in a real step
        time.sleep(max(0.0, args.step_ms / 1000 - (time.time() - started)))
        loss.backward()
        if not args.ddp:
            for p in model.parameters():
                manager.allreduce(p.grad).wait()
        before = manager.current_step()
        optimizer.step()  # commits the step when every participant's all-reduce went through
        committed = manager.current_step() > before  # should_commit() said no: the step is discarded
        print(f"{'' if committed else 'discarded '}step={manager.current_step()} replica={gid} "
              f"loss={loss.item():.4f} participants={manager.num_participants()}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="role", required=True)
    la = sub.add_parser("launch")
    la.add_argument("--run-dir", required=True)
    la.add_argument("--node-rank", type=int, default=0)
    la.add_argument("--lighthouse", required=True, help="HOST:PORT the lighthouse binds (node 0 starts it)")
    la.add_argument("--nnodes", type=int, default=1)
    la.add_argument("--groups", type=int, default=2, help="replica groups over all nodes (split evenly)")
    la.add_argument("--max-restarts", type=int, default=10)
    la.add_argument("--heartbeat-timeout-ms", type=int, default=5000)
    la.add_argument("--join-timeout-ms", type=int, default=1000)
    for sp in (la, sub.add_parser("train")):
        sp.add_argument("--step-ms", type=float, default=150.0)
        sp.add_argument("--timeout", type=float, default=10.0, help="torchft's timeout for collectives and RPCs (s)")
        sp.add_argument("--ddp", action="store_true", help="torchft.ddp.DistributedDataParallel")
        sp.add_argument("--state-mb", type=float, default=0.0, help="MiB of model state a heal copies (1 MiB "
                                                                      "buffers)")
        sp.add_argument("--advertise", choices=["hostname", "gloo-interface"], default="hostname",
                        help="the address the manager and the checkpoint server advertise: torchft's default "
                             "socket.gethostname(), or GLOO_SOCKET_IFNAME's (torchft#329's fix)")
        sp.add_argument("--max-retries", type=int, default=None,
                        help="the Manager's max_retries: consecutive failed commits before it raises (default None: "
                             "for ever, torchft#151)")
        sp.add_argument("--min-replicas", type=int, default=1,
                        help="the lighthouse's --min_replicas and the Manager's min_replica_size: the replica groups "
                             "a quorum needs (1: the survivors train on; every group: one lost group stops all)")
    args = p.parse_args(argv)
    return launch(args) if args.role == "launch" else train(args)


if __name__ == "__main__":
    raise SystemExit(main())
