"""A local cluster whose nodes are network namespaces (``topology: netns``).

Every simulated node gets a network namespace of its own (``dbit-<id>-node-<i>``), an address
(10.77.0.<i+1>/24 on its ``eth0``) and a hostname (``node-<i>``, as the embedded Ray cluster names its nodes, in a
UTS namespace of the
launch, resolvable from every node through ``/etc/netns/<ns>/hosts``, which ``ip netns exec``
mounts over ``/etc/hosts``). The other end of each node's veth pair sits on a bridge in a
private outer namespace (``dbit-<id>-sw``): nothing is routed out of it, so a server that
binds every interface is reachable from the simulated nodes and from nowhere else. A
partition is then a real cut between node 1 and node 0 (faults/partition.py), not a rule on
127.0.0.1.

With ``frontend_mbit`` each node has a second network, the frontend (``eth1``, 10.78.0.<i+1>,
on a bridge of its own), capped at that rate, and the hostnames resolve to it: the cluster
torchft#329 ran on, whose hostnames named the Ethernet while NCCL and gloo were pinned to
InfiniBand (``GLOO_SOCKET_IFNAME=eth0`` here). A job that advertises its hostname for
recovery traffic sends it over the slow network.

Teardown removes exactly what :meth:`Topology.up` made and verifies it by listing
(``ip netns list``, ``/etc/netns``). A controller killed outright cannot tear down, so
``up`` starts a reaper (``python -m drillbit.transport.netcluster reap MANIFEST``, in a
session of its own): once the owner has died it waits for the job's processes to leave the
node namespaces (the agent's guardian stops the job after its grace) or a bounded time, then
tears down. The manifest lives in a folder only root can write. ``drill heal`` and the test
suite sweep manifests whose owner is gone (:func:`sweep`).

Needs root (CAP_SYS_ADMIN for namespaces, CAP_NET_ADMIN for links and nftables) and
iproute2's ``ip``; :func:`preflight` says what is missing, as a config error.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from typing import Callable, Sequence

import psutil

from drillbit.core.atomic import write_private
from drillbit.core.errors import ConfigError, DrillError
from drillbit.core.netns import inode_of
from drillbit.core.proc import pidfile_identity, same_start, since_boot
from drillbit.spec.config import ServiceSpec
from drillbit.spec.placeholders import expand

SUBNET = "10.77.0"
FRONTEND_SUBNET = "10.78.0"  # the second network of a topology with a frontend (eth1, bridge br1)
SERVICE_HOST = f"{SUBNET}.254"  # the bridge's own address, in the switch namespace: where services listen
PREFIX = "dbit-"
STATE_DIR = Path(os.environ.get("DRILLBIT_NETNS_STATE", "/run/drillbit-netns"))
ETC_NETNS = Path("/etc/netns")
REAP_WAIT_S = 120.0  # after the owner died: how long the reaper waits for the job to leave
REAP_POLL_S = 0.5


class TopologyError(RuntimeError):
    """A namespace, link or address could not be made or removed."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise TopologyError(f"ip {' '.join(args)}: {proc.stderr.strip() or proc.returncode}")
    return proc


def preflight() -> list[str]:
    """What this machine lacks for a namespace cluster (empty: nothing)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (namespaces need CAP_SYS_ADMIN, links and nftables CAP_NET_ADMIN); run the drill as "
                       "root or use a cluster of topology host")
    for tool, package in (("ip", "iproute2"), ("nft", "nftables"), ("nsenter", "util-linux"),
                          ("unshare", "util-linux")):
        if shutil.which(tool) is None:
            missing.append(f"{tool} (Debian's {package})")
    return missing


def named_inode(name: str) -> int | None:
    try:
        return os.stat(f"/run/netns/{name}").st_ino
    except OSError:
        return None


@dataclass
class Topology:
    """N node namespaces on a bridge in a private outer namespace. ``up`` then ``down``."""

    nodes: int
    frontend_mbit: float | None = None
    """a second network, the frontend: eth1 on each node (10.78.0.<i+1>/24, bridge br1), capped at
    this many Mbit/s into each node (tbf on the bridge's port), and the nodes' hostnames resolve
    to it; eth0 stays the fast backend. None: one network."""
    run_id: str = field(default_factory=lambda: secrets.token_hex(3))
    owner_pid: int = field(default_factory=os.getpid)
    reaper: subprocess.Popen | None = None
    services: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def switch(self) -> str:
        return f"{PREFIX}{self.run_id}-sw"

    def node_names(self) -> list[str]:
        return [f"node-{i}" for i in range(self.nodes)]

    def namespace(self, node: str) -> str:
        return f"{PREFIX}{self.run_id}-{node}"

    def address(self, node: str) -> str:
        return f"{SUBNET}.{self.node_names().index(node) + 1}"

    @property
    def service_host(self) -> str:
        """The bridge's address, in the switch's namespace: where services listen, on no node."""
        return SERVICE_HOST

    def frontend_address(self, node: str) -> str | None:
        return f"{FRONTEND_SUBNET}.{self.node_names().index(node) + 1}" if self.frontend_mbit else None

    def name_address(self, node: str) -> str:
        """What the node's hostname resolves to, on every node: the frontend where there is one
        (as on clusters whose hostnames name the Ethernet while the collectives use the fabric)."""
        return self.frontend_address(node) or self.address(node)

    def namespaces(self) -> list[str]:
        return [self.namespace(n) for n in self.node_names()] + [self.switch]

    @property
    def manifest(self) -> Path:
        return STATE_DIR / f"{self.run_id}.json"

    # --- up --------------------------------------------------------------------------
    def up(self, reaper: bool = True) -> None:
        """Make the namespaces, the bridge, the veth pairs and addresses; then the reaper.
        On any failure what was made is removed before the error is raised."""
        self._write_manifest()
        try:
            sw = self.switch
            _ip("netns", "add", sw)
            _ip("-n", sw, "link", "set", "lo", "up")
            _ip("-n", sw, "link", "add", "br0", "type", "bridge")
            _ip("-n", sw, "link", "set", "br0", "up")
            _ip("-n", sw, "addr", "add", f"{SERVICE_HOST}/24", "dev", "br0")
            if self.frontend_mbit:
                _ip("-n", sw, "link", "add", "br1", "type", "bridge")
                _ip("-n", sw, "link", "set", "br1", "up")
            hosts = "127.0.0.1 localhost\n" + "".join(f"{self.name_address(n)} {n}\n" for n in self.node_names())
            for i, node in enumerate(self.node_names()):
                ns = self.namespace(node)
                _ip("netns", "add", ns)
                _ip("-n", sw, "link", "add", f"v{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
                _ip("-n", sw, "link", "set", f"v{i}", "master", "br0", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "addr", "add", f"{self.address(node)}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
                if self.frontend_mbit:
                    self._frontend_link(i, node)
                etc = ETC_NETNS / ns
                etc.mkdir(parents=True, exist_ok=True)
                (etc / "hosts").write_text(hosts)
                (etc / "hostname").write_text(node + "\n")
        except BaseException:
            self.down()
            raise
        if reaper:
            self.reaper = subprocess.Popen(
                [sys.executable, "-m", "drillbit.transport.netcluster", "reap", str(self.manifest)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, close_fds=True)

    def _frontend_link(self, i: int, node: str) -> None:
        """eth1 of node ``i`` on br1; what the node receives over it leaves the bridge's port
        f<i> through a tbf at ``frontend_mbit``."""
        sw, ns = self.switch, self.namespace(node)
        _ip("-n", sw, "link", "add", f"f{i}", "type", "veth", "peer", "name", "eth1", "netns", ns)
        _ip("-n", sw, "link", "set", f"f{i}", "master", "br1", "up")
        _ip("-n", ns, "addr", "add", f"{self.frontend_address(node)}/24", "dev", "eth1")
        _ip("-n", ns, "link", "set", "eth1", "up")
        proc = subprocess.run(["ip", "netns", "exec", sw, "tc", "qdisc", "add", "dev", f"f{i}", "root", "tbf", "rate",
                               f"{self.frontend_mbit:g}mbit", "burst", "32kb", "latency", "400ms"],
                              capture_output=True, text=True, timeout=30)
        if proc.returncode != 0:
            raise TopologyError(f"tc qdisc add dev f{i} root tbf: {proc.stderr.strip() or proc.returncode}")

    def _write_manifest(self) -> None:
        STATE_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = STATE_DIR.stat()
        if st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise TopologyError(f"{STATE_DIR} must belong to uid {os.geteuid()} and be writable by it alone")
        owner = psutil.Process(self.owner_pid)
        data = {"run_id": self.run_id, "nodes": self.nodes, "owner_pid": self.owner_pid,
                "owner_start": owner.create_time(), "owner_boot_start": since_boot(self.owner_pid),
                    "namespaces": self.namespaces(), "created": time.time(),
                "services": [_ref(p.pid) for p in self.services.values() if _ref(p.pid)]}
        tmp = self.manifest.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.manifest)

    # --- the job on a node -------------------------------------------------------------
    def wrap(self, node: str, argv: list[str]) -> list[str]:
        """``argv`` run in the node's namespace, under its hostname."""
        return ["ip", "netns", "exec", self.namespace(node), "unshare", "--uts", "--", "sh", "-c",
                'hostname "$0" && exec "$@"', node, *argv]

    def wrap_daemon(self, node: str, argv: list[str]) -> list[str]:
        """``argv`` run in the node's network namespace under its hostname, keeping this
        machine's /sys (``ip netns exec`` mounts a fresh sysfs, without the cgroup
        hierarchies a slurmd needs): a mount namespace of its own binds the node's hosts file."""
        ns = self.namespace(node)
        return ["nsenter", f"--net=/run/netns/{ns}", "unshare", "--uts", "--mount", "--", "sh", "-c",
                'mount --bind "$1" /etc/hosts && hostname "$0" && shift && exec "$@"', node,
                str(ETC_NETNS / ns / "hosts"), *argv]

    def wrap_service(self, argv: list[str]) -> list[str]:
        """``argv`` run on the service address (the switch's namespace)."""
        return ["ip", "netns", "exec", self.switch, *argv]

    def accepts(self, host: str, port: int) -> bool:
        """Whether ``host:port`` on the private network accepts a connection, tried from the
        switch's namespace (this machine's own cannot reach it)."""
        probe = f"import socket; socket.create_connection(({host!r}, {port}), timeout=1).close()"
        return subprocess.run(self.wrap_service([sys.executable, "-c", probe]), capture_output=True).returncode == 0

    def start_service(self, name: str, argv: list[str], port: int, log: Path, timeout: float) -> psutil.Process:
        """Start a service, record it in the manifest (the reaper stops it if this process
        dies), and wait until it accepts connections on ``port``."""
        with open(log, "ab") as out:
            proc = subprocess.Popen(self.wrap_service(argv), stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.services[name] = proc
        self._write_manifest()
        deadline = time.time() + timeout
        while time.time() < deadline:
            if proc.poll() is not None:
                raise TopologyError(f"service {name} exited with code {proc.returncode} (see {log})")
            if self.accepts(SERVICE_HOST, port):
                return psutil.Process(proc.pid)
            time.sleep(0.3)
        raise TopologyError(f"service {name} did not accept connections on {SERVICE_HOST}:{port} within "
                            f"{timeout:g} s (see {log})")

    def stop_services(self, timeout: float = 10.0) -> list[str]:
        """Stop every service (SIGTERM, then SIGKILL); the ones that would not stop."""
        left = []
        for name, proc in self.services.items():
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    try:
                        proc.wait(timeout=timeout)
                    except subprocess.TimeoutExpired:
                        left.append(name)
        return left

    # --- down ------------------------------------------------------------------------
    def down(self) -> list[str]:
        """Remove every namespace, the hosts files and the manifest; verify by listing.
        Returns what is still there (empty: all gone). Stops the services and the reaper first."""
        left = self.stop_services()
        if self.reaper is not None and self.reaper.poll() is None:
            self.reaper.terminate()
            try:
                self.reaper.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.reaper.kill()
                self.reaper.wait()
        return [f"service {n}" for n in left] + teardown(self.namespaces(), self.manifest)


def bring_up(topology: Topology, cluster_name: str, services: Sequence[ServiceSpec], values: dict[str, str],
             run_dir: Path, note: Callable[[str, dict], None]) -> None:
    """A namespace cluster up for a drill, whatever engine drives it: the preflight (a config
    error, nothing started), the topology (noted: its namespaces and addresses), then each
    service on the service address, its pid in ``{run_dir}/services/NAME.pid`` (how a
    profile's control_plane names it). A service that does not come up takes the topology down."""
    missing = preflight()
    if missing:
        raise ConfigError(f"cluster {cluster_name!r} (topology netns) needs " + "; ".join(missing)
                          + "; nothing was started")
    topology.up()
    note("topology.up", {"namespaces": topology.namespaces(), "service_host": SERVICE_HOST,
                         "addresses": {n: topology.address(n) for n in topology.node_names()},
                         **({"frontend": {n: topology.frontend_address(n) for n in topology.node_names()},
                             "frontend_mbit": topology.frontend_mbit} if topology.frontend_mbit else {})})
    values = {**values, "service_host": SERVICE_HOST}
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        for svc in services:
            proc = topology.start_service(svc.name, [expand(a, values) for a in svc.command], svc.port,
                                          run_dir / f"service-{svc.name}.log", svc.ready_timeout)
            note("service.up", {"name": svc.name, "pid": proc.pid, "address": f"{SERVICE_HOST}:{svc.port}"})
            (run_dir / "services").mkdir(mode=0o700, exist_ok=True)
            write_private(run_dir / "services" / f"{svc.name}.pid",
                          json.dumps(pidfile_identity(proc.pid)))
    except TopologyError as exc:
        topology.down()
        raise DrillError(str(exc)) from exc


def take_down(topology: Topology, note: Callable[[str, dict], None]) -> None:
    """The topology down, verified by listing, and noted."""
    left = topology.down()
    note("topology.down", {"verified": not left, "left": left})


def _ref(pid: int) -> list | None:
    """(pid, start time, start after boot) of a live process, as the manifest names a service."""
    try:
        return [pid, psutil.Process(pid).create_time(), since_boot(pid)]
    except psutil.NoSuchProcess:
        return None


def kill_services(refs: list) -> None:
    """SIGKILL each service still alive under the same pid and start (the reaper, after the
    owner died), and its process group: an etcd forks nothing, but another service may."""
    for pid, start, *boot in refs:
        try:
            proc = psutil.Process(pid)
            if same_start(proc, start, boot[0] if boot else None):
                os.killpg(pid, 9)
                proc.wait(timeout=10)
        except (psutil.NoSuchProcess, ProcessLookupError, PermissionError, psutil.TimeoutExpired):
            continue


def listed() -> set[str]:
    proc = _ip("netns", "list", check=False)
    return {line.split()[0] for line in proc.stdout.splitlines() if line.strip()}


def teardown(namespaces: list[str], manifest: Path | None) -> list[str]:
    """Delete the namespaces (a node's veth goes with it, the bridge with the switch's),
    their /etc/netns folders and the manifest; what is left, verified by listing."""
    for ns in namespaces:
        if ns in listed():
            _ip("netns", "del", ns, check=False)
        shutil.rmtree(ETC_NETNS / ns, ignore_errors=True)
    left = sorted(set(namespaces) & listed()) + [str(ETC_NETNS / ns) for ns in namespaces
                                                 if (ETC_NETNS / ns).exists()]
    if not left and manifest is not None:
        manifest.unlink(missing_ok=True)
    return left


def _owner_alive(data: dict) -> bool:
    try:
        return same_start(psutil.Process(data["owner_pid"]), data["owner_start"], data.get("owner_boot_start"))
    except psutil.NoSuchProcess:
        return False


def _inside(namespaces: list[str]) -> list[psutil.Process]:
    """The processes in these (named) network namespaces."""
    inodes = {named_inode(ns) for ns in namespaces} - {None}
    return [p for p in psutil.process_iter(["pid"]) if inodes and inode_of(p.info["pid"]) in inodes]


def _busy(namespaces: list[str]) -> bool:
    return bool(_inside(namespaces))


def kill_inside(namespaces: list[str], timeout: float = 10.0) -> list[int]:
    """SIGKILL what is still in the cluster's namespaces once their owner is gone and the wait
    is over (a Ray node whose keeper was killed with it): everything there was started for
    this cluster, and deleting a namespace's name would not stop it. The pids killed."""
    procs = _inside(namespaces)
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(procs, timeout=timeout)
    return [p.pid for p in procs]


def reap(manifest: Path, wait_s: float = REAP_WAIT_S, poll_s: float = REAP_POLL_S) -> int:
    """The reaper's loop: done when the manifest is gone (the owner tore down); once the
    owner died, wait for the node namespaces to empty (at most ``wait_s``), then tear down."""
    while True:
        try:
            data = json.loads(manifest.read_text())
        except (OSError, ValueError):
            return 0
        if not _owner_alive(data):
            break
        time.sleep(poll_s)
    nodes = [ns for ns in data["namespaces"] if not ns.endswith("-sw")]
    deadline = time.time() + wait_s
    while _busy(nodes) and time.time() < deadline:  # the job leaves first; the services it used go then
        time.sleep(poll_s)
    kill_inside(data["namespaces"])  # the switch's too: a raylet there, where a Ray cluster's driver joined
    kill_services(data.get("services", []))
    return 1 if teardown(data["namespaces"], manifest) else 0


def sweep() -> list[str]:
    """Tear down every topology whose owner is gone (a reaper that was itself killed);
    returns the namespaces removed."""
    removed: list[str] = []
    if not STATE_DIR.is_dir():
        return removed
    for manifest in sorted(STATE_DIR.glob("*.json")):
        try:
            data = json.loads(manifest.read_text())
        except (OSError, ValueError):
            continue
        if not _owner_alive(data):
            kill_services(data.get("services", []))
            present = [ns for ns in data["namespaces"] if ns in listed()]
            if not teardown(data["namespaces"], manifest):
                removed += present
    return removed


def leftovers() -> list[str]:
    """drillbit's namespaces and /etc/netns folders on this machine, whoever made them."""
    found = sorted(ns for ns in listed() if ns.startswith(PREFIX))
    if ETC_NETNS.is_dir():
        found += sorted(str(p) for p in ETC_NETNS.iterdir() if p.name.startswith(PREFIX))
    return found


def relay(host: str, port: int) -> int:
    """Standard input and output joined to a TCP connection: a ProxyCommand that reaches a
    node's sshd from outside the private network (run in the switch's namespace, which is on
    the bridge: ``ip netns exec dbit-<id>-sw python -m drillbit.transport.netcluster relay %h %p``)."""
    import socket
    import threading

    sock = socket.create_connection((host, port), timeout=15)
    sock.settimeout(None)

    def inbound() -> None:  # what the client sends, to the server
        while chunk := os.read(0, 65536):
            sock.sendall(chunk)
        sock.shutdown(socket.SHUT_WR)

    threading.Thread(target=inbound, daemon=True).start()
    while chunk := sock.recv(65536):
        os.write(1, chunk)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 2 and argv[0] == "reap":
        return reap(Path(argv[1]))
    if len(argv) == 3 and argv[0] == "relay" and argv[2].isdigit():
        return relay(argv[1], int(argv[2]))
    if argv == ["sweep"]:
        for ns in sweep():
            print(f"removed {ns}")
        return 0
    print("usage: python -m drillbit.transport.netcluster reap MANIFEST | sweep | relay HOST PORT", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
