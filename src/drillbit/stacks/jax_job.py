"""A JAX job with Orbax checkpoints (jax 0.10.2, orbax-checkpoint 0.12.8, CPU): two processes,
``jax.distributed`` over a coordinator on 127.0.0.1, four devices in a 2×2 mesh with axes
(replica, data) — each process one replica slice — and a training step whose gradients
cross processes. torchrun supervises the two processes as a group (torchrun can run any
Python): when one dies, JAX's coordination service ends the survivor (heartbeat timeout)
and torchrun restarts both, which restore from the newest checkpoint Orbax finds.

    python -m drillbit.stacks.jax_job launch --run-dir DIR [--ckpt emergency|plain] \\
        [--restore auto|persistent] [--heartbeat 10]

``--ckpt emergency``: Orbax's multi-tier emergency CheckpointManager — a local tier per
process (``DIR/local/p<rank>``, every ``--local-every`` steps) and a persistent tier
(``DIR/persistent``, every ``--persistent-every`` steps); on restart it restores the newest
step of any tier, from a replica slice's local copy when one is complete, else from the
persistent one. ``--ckpt plain``: Orbax's plain CheckpointManager, persistent tier only.
``--restore persistent``: a broken recovery path — whatever the local tier holds, restore
the newest persistent step. Orbax's INFO lines go to stderr (``DIR/launcher.log``); the job
prints ``step=N rank=R loss=X`` per step and ``restored step=N [tier=T] rank=R`` after a restore (the tier where Orbax's own line does not
name it: the plain manager, and the persistent-only restore).
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import sys
import time
from pathlib import Path

from drillbit.stacks.supervise import Group


def launch(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:  # the coordinator's first port; each restart attempt takes the next
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    group = Group({"LOGLEVEL": "INFO", "JAX_PLATFORMS": "cpu",
                   "XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    group.on_signals()
    main = group.start(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc-per-node", "2",
         "--max-restarts", str(args.max_restarts), "--monitor-interval", "0.5",
         "-m", "drillbit.stacks.jax_job", "train", "--run-dir", str(run_dir), "--port", str(port),
         "--ckpt", args.ckpt, "--restore", args.restore, "--heartbeat", str(args.heartbeat),
         "--local-every", str(args.local_every), "--persistent-every", str(args.persistent_every),
         "--step-ms", str(args.step_ms), "--peer-host", args.peer_host],
        run_dir / "launcher.log")
    code = group.wait_any([main])
    group.stop_all()
    return code


def train(args: argparse.Namespace) -> int:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    from absl import flags
    from absl import logging as absl_logging

    flags.FLAGS(["jax_job"], known_only=True)  # Orbax reads absl flags
    absl_logging.set_verbosity(absl_logging.INFO)
    absl_logging.set_stderrthreshold("info")

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    jax.distributed.initialize(f"127.0.0.1:{args.port + attempt}", world, rank,
                               heartbeat_timeout_seconds=int(args.heartbeat))
    # JAX's preemption notifier takes SIGTERM for itself: torchrun stopping its workers with
    # SIGTERM then left them running, orphaned. A worker stops when it is told to.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    import orbax.checkpoint as ocp
    from orbax.checkpoint._src.multihost import multihost

    multihost.initialize_runtime_to_distributed_ids()
    multihost.initialize_distributed_to_device_ids()

    mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("replica", "data"))
    w_sharding = NamedSharding(mesh, P("data"))
    x_sharding = NamedSharding(mesh, P(("replica", "data"), None))
    true_w = jnp.arange(8, dtype=jnp.float32) / 8

    def zeros():
        return {"w": jnp.zeros(8, jnp.float32), "trace": jnp.zeros(8, jnp.float32)}
    state = jax.jit(zeros, out_shardings={"w": w_sharding, "trace": w_sharding})()

    @jax.jit
    def train_step(state, key):
        x = jax.lax.with_sharding_constraint(jax.random.normal(key, (16, 8)), x_sharding)
        y = x @ true_w

        def loss_fn(w):
            return jnp.mean((x @ w - y) ** 2)
        loss, grad = jax.value_and_grad(loss_fn)(state["w"])
        trace = 0.9 * state["trace"] + grad
        return {"w": state["w"] - 0.05 * trace, "trace": trace}, loss

    run_dir = Path(args.run_dir)
    local = run_dir / "local" / f"p{rank}"
    persistent = run_dir / "persistent"
    local.mkdir(parents=True, exist_ok=True)
    persistent.mkdir(parents=True, exist_ok=True)
    abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), state)

    step = 0
    restored = None
    if args.restore == "persistent" and args.ckpt == "emergency":
        # the broken recovery path: the persistent tier's newest step, and a local tier that
        # starts over (its newer steps discarded, as a job that never trusted it would)
        restored = restore(args, None, abstract, persistent, ocp)
        newest = restored[0] if restored is not None else 0
        for entry in local.iterdir():
            if entry.name.isdigit() and int(entry.name) > newest:
                shutil.rmtree(entry, ignore_errors=True)
        multihost.sync_global_processes("drillbit_local_tier_discarded")
    if args.ckpt == "emergency":
        from orbax.checkpoint.experimental.emergency import checkpoint_manager as ecm

        options = ecm.CheckpointManagerOptions(
            local=ecm.LocalCheckpointOptions(save_interval_steps=args.local_every, max_to_keep=3),
            persistent=ecm.PersistentCheckpointOptions(save_interval_steps=args.persistent_every, max_to_keep=3),
            enable_async_checkpointing=False)
        manager = ecm.CheckpointManager(local, persistent, global_mesh=mesh, abstract_state=abstract, options=options)

        def save(n: int, st) -> None:
            manager.save(n, args=ocp.args.Composite(state=ocp.args.PyTreeSave(st)))
    elif args.ckpt == "p2p":
        from orbax.checkpoint.experimental.emergency.p2p import args as p2p_args
        from orbax.checkpoint.experimental.emergency.p2p import checkpoint_manager as p2p_cm
        from orbax.checkpoint.experimental.emergency.p2p import options as p2p_options

        options = p2p_options.CheckpointManagerOptions(
            local=p2p_options.LocalCheckpointOptions(save_interval_steps=args.local_every, max_to_keep=3),
            persistent=p2p_options.PersistentCheckpointOptions(save_interval_steps=args.persistent_every,
                                                               max_to_keep=3))
        from orbax.checkpoint.experimental.emergency.p2p import service as p2p_service

        # the address this process's P2P node tells its peers: Orbax takes the host name's first
        # address; one machine's processes pin it (--peer-host), a host whose name resolves to an
        # address its peers cannot reach is the broken path (--peer-host 192.0.2.1)
        p2p_service._get_primary_ip = lambda: (socket.AF_INET, args.peer_host)
        manager = p2p_cm.CheckpointManager(mesh, abstract, local, persistent, options=options)

        def save(n: int, st) -> None:
            manager.save(n, args=p2p_args.Composite(state=ocp.args.PyTreeSave(st)))
    else:
        manager = ocp.CheckpointManager(persistent, options=ocp.CheckpointManagerOptions(
            save_interval_steps=args.persistent_every, max_to_keep=3, enable_async_checkpointing=False))

        def save(n: int, st) -> None:
            manager.save(n, args=ocp.args.StandardSave(st))

    if restored is None and not (args.restore == "persistent" and args.ckpt == "emergency"):
        restored = restore(args, manager, abstract, persistent, ocp)
    if restored is not None:
        step, state, tier = restored
        print(f"restored step={step}" + (f" tier={tier}" if tier else "") + f" rank={rank}", flush=True)

    key = jax.random.key(0)
    while True:
        started = time.time()
        # the step's compute: a fault lands here most of the time, before the cross-process step
        time.sleep(max(0.0, args.step_ms / 1000 - (time.time() - started)))
        state, loss = train_step(state, jax.random.fold_in(key, step))
        step += 1
        print(f"step={step} rank={rank} loss={float(loss):.4f}", flush=True)
        save(step, state)


def restore(args: argparse.Namespace, manager, abstract, persistent: Path, ocp):
    """(step, state, tier) from the newest checkpoint the job's recovery path picks, or None."""
    if args.restore == "persistent" or args.ckpt == "plain":
        plain = manager if manager is not None and args.ckpt == "plain" else ocp.CheckpointManager(persistent)
        latest = plain.latest_step()
        if latest is None:
            return None
        # the emergency manager's persistent saves are the primary slice's state, as one
        # unnamed item: a plain manager reads them back onto the whole mesh
        return latest, plain.restore(latest, args=ocp.args.StandardRestore(abstract)), "persistent"
    latest = manager.latest_step()
    if latest is None:
        return None
    if args.ckpt == "p2p":
        from orbax.checkpoint.experimental.emergency.p2p import args as p2p_args

        state = manager.restore(latest, args=p2p_args.Composite(state=ocp.args.PyTreeRestore(abstract)))
    else:
        state = manager.restore(latest)
    if hasattr(state, "state"):
        state = state.state
    elif isinstance(state, dict) and "state" in state:
        state = state["state"]
    return latest, state, None  # the emergency manager's own line names the tier; the job does not guess


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="role", required=True)
    la = sub.add_parser("launch")
    la.add_argument("--run-dir", required=True)
    la.add_argument("--max-restarts", type=int, default=3)
    tr = sub.add_parser("train")
    tr.add_argument("--run-dir", required=True)
    tr.add_argument("--port", type=int, required=True)
    for sp in (la, tr):
        sp.add_argument("--ckpt", choices=["emergency", "p2p", "plain"], default="emergency")
        sp.add_argument("--restore", choices=["auto", "persistent"], default="auto")
        sp.add_argument("--heartbeat", type=float, default=10.0, help="JAX's coordination heartbeat timeout, s")
        sp.add_argument("--local-every", type=int, default=5)
        sp.add_argument("--persistent-every", type=int, default=10)
        sp.add_argument("--step-ms", type=float, default=250.0)
        sp.add_argument("--peer-host", default="127.0.0.1", help="--ckpt p2p: the address peers fetch from")
    args = p.parse_args(argv)
    return launch(args) if args.role == "launch" else train(args)


if __name__ == "__main__":
    raise SystemExit(main())
