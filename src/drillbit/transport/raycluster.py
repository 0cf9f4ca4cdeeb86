"""The embedded local Ray cluster and the cluster lease on a running Ray cluster.

The embedded cluster is several simulated nodes on 127.0.0.1, each with a
``drillbit-node-<i>`` resource, owned by a keeper process (``python -m
drillbit.transport.raycluster keep``) that the drill starts and stops. Ray's processes
share the keeper's fate; when the controller dies the keeper waits for the agents to
finish their dead-man's work and then shuts the cluster down.

Seen with Ray 2.60: nodes bind the machine's non-loopback address unless
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is set; ``ray start`` of a second node on the same
host then refuses, so the keeper builds the nodes with ``ray.cluster_utils.Cluster``.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from drillbit.agent.rayactor import sealed
from drillbit.errors import DrillError, LeaseError
from drillbit.proc import ProcRef
from drillbit.transport import rayauth
from drillbit.transport.rayenv import import_ray, loopback_env

NAMESPACE = "drillbit"
NODE_RESOURCE = "drillbit-node-"


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
                f"since {time.ctime(who['since'])}, last renewed {who['silent_s']:g} s ago); wait for it to "
                f"finish, or stop it — a lease not renewed for {who['ttl']:g} s expires")

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

    def __init__(self, state_dir: Path, nodes: int, cpus_per_node: int) -> None:
        self.state_dir = state_dir
        self.nodes = nodes
        self.cpus_per_node = cpus_per_node
        self.proc: subprocess.Popen | None = None

    def start(self, controller: ProcRef, timeout: float = 120.0) -> str:
        """Start the cluster, with Ray's token authentication on (this process's token, which
        the keeper and every process of the cluster inherit) unless RAY_AUTH_MODE=disabled."""
        if not rayauth.disabled():
            rayauth.use(rayauth.embedded_token())
        address_file = self.state_dir / "ray-address"
        address_file.unlink(missing_ok=True)
        with open(self.state_dir / "ray-keeper.log", "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "drillbit.transport.raycluster", "keep", "--nodes", str(self.nodes),
                 "--cpus", str(self.cpus_per_node), "--state-dir", str(self.state_dir),
                 "--controller-pid", str(controller.pid), "--controller-start", repr(controller.start_time)],
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


def keep(nodes: int, cpus: int, state_dir: Path, controller: ProcRef, linger: float) -> int:
    """The keeper's loop: up, then down on SIGTERM or after the orphaned agents are done."""
    loopback_env()
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
        tmp = state_dir / "ray-address.tmp"
        tmp.write_text(cluster.address)
        os.replace(tmp, state_dir / "ray-address")
        while not stop.wait(0.5):
            if not controller.alive():
                # the agents heal and stop the job on their own; give them the time to
                until = time.time() + linger
                while time.time() < until and not stop.is_set():
                    done = [p for p in state_dir.glob("agent-*.deadman.jsonl") if "orphan.done" in p.read_text()]
                    if len(done) >= nodes:
                        break
                    stop.wait(0.5)
                break
    finally:
        cluster.shutdown()
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
    k.add_argument("--linger", type=float, default=120.0,
                   help="after the controller died, the longest the cluster waits for its agents")
    args = p.parse_args(argv)
    return keep(args.nodes, args.cpus, Path(args.state_dir),
                ProcRef(pid=args.controller_pid, start_time=args.controller_start), args.linger)


if __name__ == "__main__":
    raise SystemExit(main())

