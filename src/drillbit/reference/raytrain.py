"""The reference job on Ray Train: a second, real recovery stack.

    python -m drillbit.reference.raytrain --run-dir DIR --address HOST:PORT [--workers 4]

A ``TorchTrainer`` on CPU (gloo) with ``FailureConfig(max_failures)``: when a worker dies,
Ray Train tears the worker group down and starts a new one, which restores the newest
checkpoint reported through ``ray.train.report``. A hung collective is caught by the
process group's timeout (``TorchConfig(timeout_s)``): the other workers' all-reduce fails,
and the group restarts the same way. Each worker writes ``DIR/pids/rank<N>.json`` (pid,
rank, Ray node id) so the node agents can find it; rank 0 writes the same ``step``,
``restart`` and ``restore`` events as the torchrun reference job to ``DIR/events.log``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path


from drillbit.proc import pidfile_identity


def train_loop(config: dict) -> None:
    import ray
    import ray.train
    import torch
    from torch import nn

    from drillbit.reference.eventlog import EventLog
    from drillbit.reference.train import compute

    run_dir = Path(config["run_dir"])
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    pids = run_dir / "pids"
    pids.mkdir(parents=True, exist_ok=True)
    tmp = pids / f".rank{rank}.{os.getpid()}"
    tmp.write_text(json.dumps({**pidfile_identity(os.getpid()), "rank": rank,
                               "node_id": ray.get_runtime_context().get_node_id()}))
    os.replace(tmp, pids / f"rank{rank}.json")
    log = EventLog(str(run_dir / "events.log"), source=f"rank{rank}")
    if rank == 0:
        log.worker_start(str(run_dir / ".worker-started"), 0, world)

    torch.manual_seed(0)
    model = ray.train.torch.prepare_model(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
    optim = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        t0 = time.time()
        if rank == 0:
            log.emit("restore.begin", path=checkpoint.path)
        with checkpoint.as_directory() as folder:
            state = torch.load(Path(folder) / "state.pt", weights_only=True)
        model.module.load_state_dict(state["model"])
        optim.load_state_dict(state["optim"])
        step = state["step"]
        if rank == 0:
            log.emit("restore", step=step, path=checkpoint.path, seconds=f"{time.time() - t0:.4f}")

    loss_fn = nn.MSELoss()
    while step < config["steps"]:
        t = time.time()
        step += 1
        compute(config["step_ms"] / 1000)
        gen = torch.Generator().manual_seed(step * world + rank)
        x = torch.randn(16, 32, generator=gen)
        loss = loss_fn(model(x).squeeze(1), x.sum(dim=1))
        optim.zero_grad()
        loss.backward()  # the all-reduce across every worker
        optim.step()
        if rank == 0:
            log.emit("step", n=step, rank=rank, dt=f"{time.time() - t:.4f}", loss=f"{loss.item():.5f}")
        if config["ckpt_every"] and step % config["ckpt_every"] == 0:
            with tempfile.TemporaryDirectory() as folder:
                saved = None
                if rank == 0:
                    t0 = time.time()
                    torch.save({"model": model.module.state_dict(), "optim": optim.state_dict(), "step": step},
                               Path(folder) / "state.pt")
                    saved = ray.train.Checkpoint.from_directory(folder)
                ray.train.report({"step": step}, checkpoint=saved)
                if rank == 0:
                    log.emit("ckpt.save", step=step, seconds=f"{time.time() - t0:.4f}", path=f"ray-checkpoint-{step}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run-dir", required=True)
    p.add_argument("--address", required=True, help="the Ray cluster")
    p.add_argument("--workers", type=int, default=int(os.environ.get("DRILLBIT_REFERENCE_NPROC", "4")),
                   help="Ray Train workers (default 4, or DRILLBIT_REFERENCE_NPROC where it is set)")
    p.add_argument("--max-failures", type=int, default=3, help="FailureConfig(max_failures); 0: no recovery")
    p.add_argument("--collective-timeout", type=float, default=10.0,
                   help="the process group's timeout (s): how a hung all-reduce is caught")
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--step-ms", type=float, default=float(os.environ.get("DRILLBIT_REFERENCE_STEP_MS", "250")))
    p.add_argument("--ckpt-every", type=int, default=10)
    args = p.parse_args(argv)
    run_dir = Path(args.run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    if args.address.startswith("127.0.0.1:"):
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # stay on loopback (read at import)
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    ray.init(address=args.address, log_to_driver=True, runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"run_dir": str(run_dir), "steps": args.steps, "step_ms": args.step_ms,
                           "ckpt_every": args.ckpt_every},
        torch_config=TorchConfig(backend="gloo", timeout_s=int(args.collective_timeout)),
        scaling_config=ScalingConfig(num_workers=args.workers, use_gpu=False, placement_strategy="SPREAD",
                                     resources_per_worker={"CPU": 0.5}),
        run_config=RunConfig(name="reference", storage_path=str(run_dir / "ray-results"),
                             failure_config=FailureConfig(max_failures=args.max_failures)),
    )
    try:
        trainer.fit()
    except Exception as exc:  # the failure budget is spent: Ray Train gives up
        print(f"drillbit.reference.raytrain: training failed: {exc.__class__.__name__}: {exc}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
