"""One rank of the reference DDP job (run by torchrun; never imported by the harness).

Each step sleeps ``--step-ms`` to stand in for compute, then runs a real forward,
backward (a DDP all-reduce across every rank) and optimizer step on a small MLP with
deterministic synthetic data. Rank 0 logs one ``step`` event per step and saves a
checkpoint every ``--ckpt-every`` steps; every rank restores from the newest checkpoint
that verifies when it starts.

``--store-fix`` prefixes the rendezvous store per restart attempt. Without it, torch 2.13
CPU workers restarted after a SIGKILL read the dead workers' gloo addresses from the
reused store and fail ``connectFullMesh`` on every attempt (see DESIGN.md).
"""
from __future__ import annotations

import argparse
import datetime
import io
import math
import os
import socket
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, IterableDataset

from drillbit.reference import checkpoint, nodepool
from drillbit.reference.eventlog import EventLog


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--events", required=True, help="event log file (appended)")
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--ckpt-every", type=int, default=10, help="0 disables checkpoints")
    p.add_argument("--keep", type=int, default=5)
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--step-ms", type=float, default=250.0)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--state-mb", type=float, default=0.0,
                   help="MiB of state on the model (1 MiB buffers, never all-reduced nor broadcast), which every "
                        "save writes and every restore reads: checkpoint-restart with a model's weight to move")
    p.add_argument("--store-fix", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                   help="verify checkpoint sha256 before restoring")
    p.add_argument("--save-mode", choices=["atomic", "inplace"], default="atomic",
                   help="atomic: temp folder, manifest, COMPLETE marker, then rename; inplace: the files go "
                        "straight into step_N/ (no marker) and a restart loads the newest folder unchecked")
    p.add_argument("--save-pause-ms", type=float, default=0.0, help="pause after each checkpoint file")
    p.add_argument("--heartbeat-dir", default=None, help="per-rank heartbeat files")
    p.add_argument("--alive-dir", default=None,
                   help="a thread touches ALIVE_DIR/<pid> every second: what a liveness-only watchdog reads")
    p.add_argument("--pool", default=None, help="node pool file (node replacement on restart)")
    p.add_argument("--replace-policy", choices=["fallback", "naive"], default="fallback",
                   help="fallback: time out, check the node, try another spare, escalate; naive: one call, "
                        "no deadline, take whatever node comes back")
    p.add_argument("--replace-timeout", type=float, default=10.0)
    p.add_argument("--loader-workers", type=int, default=1, help="DataLoader worker processes per rank")
    p.add_argument("--restore-defect", choices=["none", "weights", "optimizer", "data"], default="none",
                   help="what a restore leaves out while it resumes the step and says it loaded: weights "
                        "(load_state_dict(strict=False) into keys with DDP's 'module.' prefix: nothing loads), "
                        "optimizer (a fresh optimizer and learning-rate schedule), data (the loader from sample 0)")
    p.add_argument("--report-compute", action=argparse.BooleanOptionalAction, default=True,
                   help="every rank logs its own compute time per step (for straggler detection)")
    return p.parse_args(argv)


def init_process_group(store_fix: bool, attempt: int) -> None:
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    timeout = datetime.timedelta(minutes=30)  # gloo's default: a hang is not caught by it
    if not store_fix or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "False":
        # without the fix; or across nodes, where each rendezvous round brings a fresh store
        if not store_fix and attempt > 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "False":
            _lose_the_stale_store_race(rank, attempt)
        dist.init_process_group(backend, rank=rank, world_size=world, timeout=timeout)
        return
    base = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
        world_size=world, is_master=False, timeout=datetime.timedelta(seconds=120),
    )
    store = dist.PrefixStore(f"attempt{attempt}", base)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)


def _lose_the_stale_store_race(rank: int, attempt: int) -> None:
    """The reused store's stale addresses make a restart fail only when a peer reads them
    before their owner overwrites them, and only for the pairs whose reader is the side that
    connects (gloo picks it by comparing the pair's addresses, ports included). The fixture
    tilts the race toward the bug: the other ranks wait until rank 0 has begun its
    rendezvous, then long enough for it to read what the dead workers left. It is still a
    race (won now and then: the restart then truly works); `reference-norestarts` is the
    broken profile that fails every time."""
    client = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
        is_master=False, timeout=datetime.timedelta(seconds=300),
    )
    key = f"drillbit-fixture/attempt{attempt}/rank0-rendezvous"
    if rank == 0:
        client.set(key, "1")
        return
    client.wait([key])
    time.sleep(5.0)


BATCH = 16  # samples per rank per step


class SyntheticBatches(IterableDataset):
    """Deterministic batches by (position, rank), produced in a DataLoader worker process."""

    def __init__(self, start: int, rank: int, world: int) -> None:
        self.start, self.rank, self.world = start, rank, world

    def __iter__(self):
        step = self.start
        while True:
            gen = torch.Generator().manual_seed(step * self.world + self.rank)
            x = torch.randn(BATCH, 32, generator=gen)
            yield x, x.sum(dim=1)
            step += 1


def lr_at(step: int) -> float:
    """The learning-rate schedule: 0.01, decaying 0.5 % a step."""
    return 0.995 ** step


def replace_node(pool: Path, node: str, policy: str, timeout: float, log: EventLog) -> str:
    """Get a healthy node for a restarting worker group from the provider (rank 0 only)."""
    import subprocess

    from drillbit.proc import which

    tries = 3 if policy == "fallback" else 1
    failed = node
    # the provider's command, found on PATH as a real stack finds its scheduler's CLI
    found = which("drillbit-ref-nodepool")
    provider = [found] if found else [sys.executable, "-m", "drillbit.reference.nodepool"]
    for attempt in range(1, tries + 1):
        log.emit("replace.request", failed=failed, attempt=attempt, policy=policy)
        try:
            out = subprocess.run([*provider, "replace", "--pool", str(pool), "--failed", failed],
                                 capture_output=True, text=True,
                                 timeout=timeout if policy == "fallback" else None)
        except subprocess.TimeoutExpired:
            log.emit("replace.failed", reason=f"no answer in {timeout:g}s", attempt=attempt)
            continue
        if out.returncode != 0:
            log.emit("replace.failed", reason=out.stderr.strip() or f"exit {out.returncode}", attempt=attempt)
            if policy == "naive":
                raise RuntimeError(f"node replacement failed: {out.stderr.strip()}")
            continue
        got = out.stdout.strip()
        if policy == "fallback" and got in nodepool.read(pool)["bad"]:
            log.emit("replace.failed", reason=f"handed back bad node {got}", attempt=attempt)
            failed = got
            continue
        log.emit("replace.done", node=got, attempt=attempt)
        return got
    log.emit("escalate", reason=f"no healthy node after {tries} replacement attempts; paging a human")
    raise SystemExit(3)


def compute(seconds: float, slice_s: float = 0.001) -> None:
    """Stand-in compute that only progresses while the process runs.

    Sleeps in ~1 ms slices and credits each slice at most 1.5x its length, so time the
    process spends descheduled or stopped (a throttled GPU, a SIGSTOP duty cycle) is not
    counted as work: the step takes longer, like real compute would, without burning CPU. A
    stop is over-credited by at most 1.5 ms: the rest of the slice it cut into, and the
    slack. The slice stays this short because that rest grows with it: 5 ms slices (a fifth
    of the wake-ups, 2.7 % of a core per rank saved) would hide most of a 3 ms stop, the
    slow-rank drill's 3 % of every 100 ms.
    """
    done = 0.0
    while done < seconds:
        want = min(slice_s, seconds - done)
        t = time.perf_counter()
        time.sleep(want)
        done += min(time.perf_counter() - t, 1.5 * want)


def serialize(model: nn.Module, optim: torch.optim.Optimizer, step: int,
              sched: torch.optim.lr_scheduler.LRScheduler | None = None, samples: int | None = None) -> bytes:
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "optim": optim.state_dict(), "step": step,
                **({"sched": sched.state_dict()} if sched is not None else {}),
                **({"samples": samples} if samples is not None else {})}, buf)
    return buf.getvalue()


def _beat_alive(folder: Path, every_s: float = 1.0) -> None:
    """A heartbeat from a thread of its own, as NVRx's rank monitor and JAX's coordination
    service have: it goes on while the main thread waits in a collective that never ends."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / str(os.getpid())

    def beat() -> None:
        while True:
            path.touch()
            time.sleep(every_s)

    threading.Thread(target=beat, name="alive", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    log = EventLog(args.events, source=f"rank{rank}")
    node = os.environ.get("DRILLBIT_NODE") or socket.gethostname()
    if args.pool and Path(args.pool).exists():
        node = nodepool.read(Path(args.pool))["active"]
    if rank == 0:
        log.worker_start(str(Path(args.ckpt_dir).parent / ".worker-started"), attempt, world)
    pool = Path(args.pool) if args.pool else None
    if pool is not None and rank == 0:
        state = nodepool.read(pool)
        if state["active"] in state["bad"]:  # the node we ran on was declared dead
            replace_node(pool, state["active"], args.replace_policy, args.replace_timeout, log)
    init_process_group(args.store_fix, attempt)
    if pool is not None:
        dist.barrier()
        state = nodepool.read(pool)
        node = state["active"]
        if node in state["bad"]:
            raise RuntimeError(f"rank {rank} was started on {node}, a node known to be bad")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 1))
    for i in range(math.ceil(args.state_mb)):
        model.register_buffer(f"ballast{i}", torch.ones(2 ** 18))  # 1 MiB of float32 each
    # the ballast is the same on every rank: DDP need not broadcast it at every step
    ddp = DistributedDataParallel(model, broadcast_buffers=not args.state_mb)
    optim = torch.optim.SGD(ddp.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lr_at)
    ckpt_dir = Path(args.ckpt_dir)

    step = 0
    samples = 0
    def trying(path: Path) -> None:
        if rank == 0:
            log.emit("restore.begin", path=path)

    if args.save_mode == "inplace":  # the newest folder, whatever it holds
        newest = checkpoint.checkpoint_dirs(ckpt_dir)[:1]
        found = checkpoint.Verified(path=newest[0], step=-1) if newest else None
        if found is not None:
            trying(found.path)
        rejected = []
    else:
        found, rejected = checkpoint.newest_valid(ckpt_dir, checksums=args.verify, on_try=trying)
    if rank == 0:
        for path, reason in rejected:
            log.emit("ckpt.reject", path=path, reason=reason)
    if found is not None:
        t0 = time.time()
        state = torch.load(found.path / "shard_0.pt", map_location="cpu", weights_only=True)
        if args.restore_defect == "weights":  # keys saved from the bare model, loaded as DDP's: nothing matches
            model.load_state_dict({f"module.{k}": v for k, v in state["model"].items()}, strict=False)
        else:
            model.load_state_dict(state["model"])
        if args.restore_defect != "optimizer":
            optim.load_state_dict(state["optim"])
            if "sched" in state:
                sched.load_state_dict(state["sched"])
        step = found.step if found.step >= 0 else int(state["step"])
        # the samples consumed so far, across ranks: saved with the state, as a data loader's position
        # is (a world that shrank since consumes fewer per step from here on)
        samples = 0 if args.restore_defect == "data" else int(state.get("samples", step * BATCH * world))
        if rank == 0:
            log.emit("restore", step=step, path=found.path, seconds=f"{time.time() - t0:.4f}")
    dist.barrier()

    if args.alive_dir:
        _beat_alive(Path(args.alive_dir))
    heartbeat = None
    if args.heartbeat_dir:
        Path(args.heartbeat_dir).mkdir(parents=True, exist_ok=True)
        heartbeat = Path(args.heartbeat_dir) / f"rank{rank}"
    step_s = args.step_ms / 1000.0
    start = 0 if args.restore_defect == "data" else step  # the defect: the loader from its first sample
    batches = iter(DataLoader(SyntheticBatches(start, rank, world), batch_size=None,
                              num_workers=args.loader_workers))
    last = time.time()
    while step < args.steps:
        x, y = next(batches)  # blocks for as long as the loader worker does: no timeout
        y = y.reshape(-1, 1)
        t_compute = time.perf_counter()
        compute(step_s)  # stands in for the forward/backward compute of a real model
        loss = nn.functional.mse_loss(ddp(x), y)
        compute_s = time.perf_counter() - t_compute
        optim.zero_grad()
        loss.backward()  # the all-reduce: every rank must reach it
        lr = optim.param_groups[0]["lr"]
        optim.step()
        sched.step()
        step += 1
        samples += BATCH * world
        now = time.time()
        if args.report_compute:
            log.emit("compute", n=step, rank=rank, s=f"{compute_s:.6f}", node=node)
        if heartbeat is not None:
            heartbeat.write_text(f"{step} {now:.6f}\n")
        if rank == 0:
            log.emit("step", n=step, rank=rank, dt=f"{now - last:.4f}", loss=f"{loss.item():.5f}", lr=f"{lr:.6g}",
                     samples=samples)
            if args.ckpt_every and step % args.ckpt_every == 0:
                t0 = time.time()
                path = checkpoint.write_checkpoint(
                    ckpt_dir, step, {"shard_0.pt": serialize(model, optim, step, sched, samples)},
                    {"world_size": world, "attempt": attempt},
                    atomic=args.save_mode == "atomic", pause_s=args.save_pause_ms / 1000.0,
                )
                checkpoint.prune(ckpt_dir, args.keep)
                log.emit("ckpt.save", step=step, seconds=f"{time.time() - t0:.4f}", path=path)
        last = now
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
