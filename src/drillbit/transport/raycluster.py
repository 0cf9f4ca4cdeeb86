"""The embedded local Ray cluster and the cluster lease on a running Ray cluster.

The embedded cluster is several simulated nodes on 127.0.0.1, each with a
``drillbit-node-<i>`` resource, owned by a keeper process (``python -m
drillbit.transport.raycluster keep``) that the drill starts and stops. Ray's processes
share the keeper's fate; when the controller dies the keeper waits for the agents to
finish their dead-man's work and then shuts the cluster down.

On a namespace cluster (``topology: netns``, transport/netcluster.py) the keeper runs one
``ray start --block`` in each node's namespace under its hostname instead: the head (GCS
at 10.77.0.1:6379) on node 0, a raylet on each other node at its own address, each with a
temp dir of its own (their sockets would collide in one). The controller's driver joins
from the switch's namespace, on a thread of its own (drillbit.core.netns.call_in): every thread
Ray starts inherits that namespace, while the controller stays on this machine's network.

Seen with Ray 2.60: nodes bind the machine's non-loopback address unless
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is set; ``ray start`` of a second node on the same
host then refuses, so the keeper builds the nodes with ``ray.cluster_utils.Cluster``.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import secrets
import signal
import socket
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from drillbit.agent.rayactor import sealed
from drillbit.core.errors import DrillError, LeaseError
from drillbit.core.proc import ProcRef
from drillbit.transport import rayauth
from drillbit.transport.netcluster import Topology
from drillbit.transport.rayenv import import_ray, loopback_env

NAMESPACE = "drillbit"
NODE_RESOURCE = "drillbit-node-"
# A raylet starts workers when a task or actor asks for one. By default it also starts num_cpus
# idle workers for the first driver's job (each an import of Ray, ~1.7 CPU-s) before anything
# asks: without them a kill-rank drill on the embedded cluster took 28.3 CPU-s instead of 30.1
# (median of 2 each), CPU that on a small machine the job's own start competes for.
NO_PRESTART = {"RAY_prestart_worker_first_driver": "0"}


def _ray():
    try:
        return import_ray()  # its environment first: read by ray when it is imported
    except ImportError:  # pragma: no cover - ray is a dependency; a broken install lands here
        raise DrillError("the Ray engine needs the ray package: pip install 'ray>=2.40'") from None


# --- the cluster lease ----------------------------------------------------------------------
class LeaseActor:
    """One per cluster, named and detached: who holds the cluster, and since when.

    The expiry is the actor's own (set when it is created), so no caller can shorten it to
    take a lease that is still renewed; the holder's token never leaves the actor."""

    def __init__(self, ttl: float = 15.0) -> None:
        self.ttl = ttl
        self.holder: dict | None = None
        self.renewed = 0.0

    def acquire(self, holder: dict, ttl: float | None = None) -> dict | None:
        now = time.time()
        if self.holder is not None and now - self.renewed < self.ttl:
            shown = {k: v for k, v in self.holder.items() if k != "token"}
            return {**shown, "silent_s": round(now - self.renewed, 1), "ttl": self.ttl}
        self.holder, self.renewed = holder, now
        return None

    def renew(self, token: str) -> bool:
        if self.holder is None or self.holder["token"] != token:
            return False
        self.renewed = time.time()
        return True

    def release(self, token: str) -> None:
        if self.holder is not None and self.holder["token"] == token:
            self.holder = None


class RayLease:
    """Lease on a Ray cluster; the holder renews it with every heartbeat. A holder that
    died stops renewing, and after ``ttl`` seconds the next drill may take the cluster."""

    def __init__(self, cluster: str, holder: str, ttl: float = 15.0, identity: str | None = None) -> None:
        self.cluster = cluster
        self.holder = holder
        self.ttl = ttl
        # keyed by what the cluster is (its GCS address), not by what drill.yaml calls it:
        # two names for one cluster share one lease
        self.identity = identity or cluster
        self.token = secrets.token_hex(16)
        self._actor: Any = None
        self._renewal: Any = None
        self.lost: str | None = None

    @property
    def actor_name(self) -> str:
        return "drillbit-lease-" + hashlib.sha256(self.identity.encode()).hexdigest()[:16]

    def acquire(self) -> None:
        ray = _ray()
        self._actor = ray.remote(num_cpus=0)(LeaseActor).options(
            name=self.actor_name, namespace=NAMESPACE, lifetime="detached", get_if_exists=True).remote(self.ttl)
        who = ray.get(self._actor.acquire.remote(
            {"holder": self.holder, "pid": os.getpid(), "host": socket.gethostname(), "since": time.time(),
             "token": self.token}), timeout=60)
        if who is not None:
            self._actor = None
            raise LeaseError(
                f"cluster {self.cluster!r} is held by {who['holder']} (pid {who['pid']} on {who['host']}, "
                f"since {time.ctime(who['since'])}, last renewed {who['silent_s']:g} s ago)",
                f"wait for it to finish (--wait), or stop it — a lease not renewed for {who['ttl']:g} s expires")

    def renew(self) -> None:
        """Renew, and look at the answer to the previous renewal: a lease that was taken
        over (this holder was stopped past the expiry, say) is lost, and the drill stops."""
        if self._actor is None:
            return
        ray = _ray()
        if self._renewal is not None:
            ready, _ = ray.wait([self._renewal], timeout=0)
            if ready:
                try:
                    ok = ray.get(ready[0])
                except Exception as exc:
                    ok, why = False, f"the lease actor is gone ({exc.__class__.__name__})"
                else:
                    why = "another drill holds it now (this controller did not renew it in time)"
                if not ok:
                    self.lost = f"the cluster lease on {self.cluster!r} was lost: {why}"
                    return
            else:
                return  # the last renewal is still on its way; do not pile them up
        self._renewal = self._actor.renew.remote(self.token)

    def release(self) -> None:
        if self._actor is not None:
            try:
                _ray().get(self._actor.release.remote(self.token), timeout=30)
            finally:
                self._actor = None


sealed(LeaseActor)  # no __ray_call__: it would read the holder's token


# --- the embedded cluster -------------------------------------------------------------------
class EmbeddedCluster:
    """Starts the keeper process and waits for the cluster's address."""

    def __init__(self, state_dir: Path, nodes: int, cpus_per_node: int, topology: str | None = None) -> None:
        self.state_dir = state_dir
        self.nodes = nodes
        self.cpus_per_node = cpus_per_node
        self.topology = topology  # a namespace cluster's run id: one node per namespace
        self.proc: subprocess.Popen | None = None

    def start(self, controller: ProcRef, timeout: float | None = None) -> str:
        """Start the cluster, with Ray's token authentication on (this process's token, which
        the keeper and every process of the cluster inherit) unless RAY_AUTH_MODE=disabled.
        It waits 120 s, or 5 s a node where that is longer: a raylet took 3.4 s to come up on
        2 cores, and 64 of them were not up in 120 s (docs/fleet-scale.md)."""
        timeout = timeout if timeout is not None else max(120.0, 5.0 * self.nodes)
        if not rayauth.disabled():
            rayauth.use(rayauth.embedded_token())
        address_file = self.state_dir / "ray-address"
        address_file.unlink(missing_ok=True)
        with open(self.state_dir / "ray-keeper.log", "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "drillbit.transport.raycluster", "keep", "--nodes", str(self.nodes),
                 "--cpus", str(self.cpus_per_node), "--state-dir", str(self.state_dir),
                 "--controller-pid", str(controller.pid), "--controller-start", repr(controller.start_time),
                 *(["--controller-boot-start", repr(controller.boot_start)] if controller.boot_start is not None else []),
                 *(["--topology", self.topology] if self.topology else [])],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + timeout
        while not address_file.exists():
            if self.proc.poll() is not None:
                raise DrillError(f"the embedded Ray cluster did not start (see {self.state_dir / 'ray-keeper.log'})")
            if time.time() > deadline:
                self.stop()
                raise DrillError(f"the embedded Ray cluster was not up in {timeout:g} s")
            time.sleep(0.1)
        return address_file.read_text().strip()

    def stop(self, timeout: float = 60.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)  # Ray's processes share the keeper's fate
            self.proc.wait()


def _wait_for_stop(stop: threading.Event, controller: ProcRef, state_dir: Path, nodes: int, linger: float) -> None:
    """Until SIGTERM, or until the controller died and its orphaned agents are done (at most
    ``linger`` seconds after it died)."""
    while not stop.wait(0.5):
        if not controller.alive():
            # the agents heal and stop the job on their own; give them the time to
            until = time.time() + linger
            while time.time() < until and not stop.is_set():
                done = [p for p in state_dir.glob("agent-*.deadman.jsonl") if "orphan.done" in p.read_text()]
                if len(done) >= nodes:
                    break
                stop.wait(0.5)
            return


def _publish(state_dir: Path, address: str) -> None:
    tmp = state_dir / "ray-address.tmp"
    tmp.write_text(address)
    os.replace(tmp, state_dir / "ray-address")


def keep(nodes: int, cpus: int, state_dir: Path, controller: ProcRef, linger: float,
         topology: str | None = None) -> int:
    """The keeper's loop: up, then down on SIGTERM or after the orphaned agents are done."""
    if topology is not None:
        return keep_netns(Topology(nodes, run_id=topology), cpus, state_dir, controller, linger)
    loopback_env()
    os.environ.update(NO_PRESTART)
    from ray.cluster_utils import Cluster

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": cpus, "resources": {f"{NODE_RESOURCE}0": 1}, "include_dashboard": False,
        "node_ip_address": "127.0.0.1"})
    try:
        for i in range(1, nodes):
            cluster.add_node(num_cpus=cpus, resources={f"{NODE_RESOURCE}{i}": 1}, node_ip_address="127.0.0.1")
        cluster.wait_for_nodes()
        # Ray's head node installs its own SIGTERM handler, which drains for up to 30 s (a
        # detached actor of a dead lease holder kept it waiting that long); this throwaway
        # cluster is ours to stop, so SIGTERM means: shut down now.
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        _publish(state_dir, cluster.address)
        _wait_for_stop(stop, controller, state_dir, nodes, linger)
    finally:
        cluster.shutdown()
    return 0


GCS_PORT = 6379
OBJECT_STORE_BYTES = 150 * 1024 * 1024  # as ray.cluster_utils gives each simulated node


def ray_start(topology: Topology, node: str | None, cpus: int, temp_dir: Path) -> list[str]:
    """``ray start --block`` of one node of a namespace cluster, in its namespace: the head on
    node 0, a raylet joining it on every other, with the node's ``drillbit-node-<i>``
    resource. ``node`` None: the controller's node, a raylet without CPUs or a node resource
    on the service address (the switch's namespace), where the drill's driver connects, as a
    real cluster's driver runs on a node of its own (a login or head node)."""
    ray_bin = Path(sys.executable).with_name("ray")
    argv = [str(ray_bin) if ray_bin.exists() else "ray", "start", "--block", "--disable-usage-stats",
            f"--object-store-memory={OBJECT_STORE_BYTES}", f"--temp-dir={temp_dir}"]
    if node is None:
        argv += [f"--node-ip-address={topology.service_host}", "--num-cpus=0", f"--address={head_address(topology)}"]
        return topology.wrap_service(argv)
    i = topology.node_names().index(node)
    argv += [f"--node-ip-address={topology.address(node)}", f"--num-cpus={cpus}",
             f"--resources={json.dumps({f'{NODE_RESOURCE}{i}': 1})}"]
    if i == 0:
        argv += ["--head", f"--port={GCS_PORT}", "--include-dashboard=false"]
    else:
        argv += [f"--address={head_address(topology)}"]
    return topology.wrap(node, argv)


def head_address(topology: Topology) -> str:
    return f"{topology.address(topology.node_names()[0])}:{GCS_PORT}"


def _stop_tree(procs: list[subprocess.Popen], temp_root: Path, grace: float = 10.0) -> None:
    """Stop every node's ``ray start --block`` and all that it started: SIGTERM, then SIGKILL
    to whatever of the tree is left; then any process still naming this cluster's temp dir
    (a worker a raylet forked and nobody reaped)."""
    tree: list[psutil.Process] = []
    for proc in procs:
        try:
            root = psutil.Process(proc.pid)
            tree += [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    for p in tree:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(tree, timeout=grace)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=grace)
    strays = []
    for p in psutil.process_iter(["cmdline"]):
        if any(str(temp_root) in arg for arg in p.info["cmdline"] or ()):
            with contextlib.suppress(psutil.Error):
                p.kill()
                strays.append(p)
    psutil.wait_procs(strays, timeout=grace)
    for proc in procs:
        with contextlib.suppress(Exception):
            proc.wait(timeout=1)


def keep_netns(topology: Topology, cpus: int, state_dir: Path, controller: ProcRef, linger: float,
               timeout: float = 120.0) -> int:
    """The keeper of a Ray cluster on a namespace cluster's nodes (made by the controller,
    named by its run id): the head first, then the raylets once the GCS answers; the address
    published; down as the embedded one goes. The temp dirs sit under a short path of their
    own (Ray's sockets live there and a socket's path is at most 107 bytes)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    temp_root = Path(tempfile.mkdtemp(prefix=f"dbit-ray-{topology.run_id}-", dir="/tmp"))
    procs: list[subprocess.Popen] = []
    # each node has an address of its own: Ray's multi-node default, not the loopback setting
    # this process was started with (under which ray start refuses a second node)
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1", **NO_PRESTART}
    try:
        with open(state_dir / "ray-nodes.log", "ab") as log:
            for node in [*topology.node_names(), None]:
                procs.append(subprocess.Popen(ray_start(topology, node, cpus, temp_root / (node or "node-sw")[5:]),
                                              env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT))
                if node != topology.node_names()[0]:
                    continue
                head, port = head_address(topology).split(":")
                deadline = time.time() + timeout
                while not topology.accepts(head, int(port)):
                    if procs[0].poll() is not None or time.time() > deadline or stop.is_set():
                        raise DrillError(f"the head of the Ray cluster did not answer at {head}:{port}")
                    time.sleep(0.3)
        _publish(state_dir, head_address(topology))
        _wait_for_stop(stop, controller, state_dir, topology.nodes, linger)
    finally:
        _stop_tree(procs, temp_root)
        shutil.rmtree(temp_root, ignore_errors=True)
    return 0


def reachable(address: str | None, timeout: float = 5.0) -> None:
    """Fail fast on an address nobody answers at (ray.init would retry for minutes)."""
    if not address or address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except (OSError, ValueError) as exc:
        raise DrillError(f"cannot reach the Ray cluster at {address}: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m drillbit.transport.raycluster")
    sub = p.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("keep", help="run the embedded local Ray cluster until told to stop")
    k.add_argument("--nodes", type=int, default=2)
    k.add_argument("--cpus", type=int, default=2)
    k.add_argument("--state-dir", required=True)
    k.add_argument("--controller-pid", type=int, required=True)
    k.add_argument("--controller-start", type=float, required=True)
    k.add_argument("--controller-boot-start", type=float, help="its start in seconds after boot (what names it)")
    k.add_argument("--topology", help="a namespace cluster's run id: each node a ray start in its namespace")
    k.add_argument("--linger", type=float, default=120.0,
                   help="after the controller died, the longest the cluster waits for its agents")
    args = p.parse_args(argv)
    return keep(args.nodes, args.cpus, Path(args.state_dir),
                ProcRef(pid=args.controller_pid, start_time=args.controller_start,
                        boot_start=args.controller_boot_start), args.linger, args.topology)


if __name__ == "__main__":
    raise SystemExit(main())

