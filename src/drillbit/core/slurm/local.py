"""A real Slurm cluster on this machine, in a folder: munged with a private socket and key,
slurmctld, and one ``slurmd -N NAME`` per node, all on 127.0.0.1 (Debian's ``slurm-wlm``
and ``munge``); or, given a namespace cluster's ``Topology``, each slurmd in its node's
namespace on the node's address and slurmctld on the switch's (10.77.0.254), so the nodes
are apart on the network as real ones are (munged's Unix socket is shared). The tests drill it; ``python -m
drillbit.core.slurm.local up DIR`` starts one
for a person to try the engine on (``down DIR`` stops it).

Two settings are what the drills are about (measured on Slurm 22.05):
``requeue_hold`` — a requeued batch job may not start again before the credential lifetime
has passed (``AuthInfo=cred_expire``, 120 s by default: the "~121 s" a requeued job sits
PENDING with reason BeginTime); ``return_to_service`` — 2 lets a DOWN node's still-running
slurmd re-register at once, so the rerun lands back on the node that failed.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import psutil

from drillbit.core.errors import DrillError
from drillbit.core.slurm.scheduler import Slurm


class NodeNetwork(Protocol):
    """What a local Slurm needs of nodes that are network namespaces (the namespace
    cluster's ``Topology``): their names and addresses, how to run a daemon on one, and the
    address and namespace that are no node's."""

    service_host: str

    def node_names(self) -> list[str]: ...

    def address(self, node: str) -> str: ...

    def wrap_daemon(self, node: str, argv: list[str]) -> list[str]: ...

    def wrap_service(self, argv: list[str]) -> list[str]: ...

BINARIES = ("munged", "slurmctld", "slurmd", "scontrol", "sbatch", "srun", "scancel")


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]


def _free_ports(count: int) -> list[int]:
    import socket

    socks, ports = [], []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


@dataclass
class LocalSlurm:
    """``start()`` writes the configuration and starts the daemons; ``stop()`` stops every
    process it started (by pid) and cancels what is left of the jobs."""

    root: Path
    nodes: int = 3
    cpus: int = 2
    requeue_hold: int = 120  # AuthInfo cred_expire, seconds (Slurm's default 120)
    return_to_service: int = 1
    sched_interval: int = 60  # seconds between the scheduler's full passes (Slurm's default 60)
    slurmd_timeout: int = 10  # seconds before an unresponsive slurmd's node is set DOWN
    partition: str = "debug"
    topology: NodeNetwork | None = None  # nodes that are network namespaces (one per Slurm node)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def sockets(self) -> Path:
        """A short folder for the daemons' Unix sockets (munged's; slurmd's spool, where each
        step's slurmstepd listens on ``<node>_<job>.<step>``): a socket's path must fit in 107
        bytes, and a folder deep in a test's temporary tree does not leave room for it."""
        return Path("/tmp") / f"drillbit-slurm-{hashlib.sha1(str(self.root.resolve()).encode()).hexdigest()[:10]}"

    @property
    def node_names(self) -> list[str]:
        return [f"n{i}" for i in range(1, self.nodes + 1)]

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def write(self) -> None:
        root = self.root
        for sub in ("munge", "state", "log"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (self.sockets / "spool").mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o755)
        os.chmod(root / "munge", 0o755)
        os.chmod(self.sockets, 0o755)  # the socket's folder must be reachable by job users
        key = root / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
            os.chmod(key, 0o400)
        names = self.node_names
        if self.topology is not None:  # namespaces of their own: the default ports are free
            ctl, slurmd = 6817, [6818] * self.nodes
            ctl_host = self.topology.service_host  # the bridge's address, in the switch's namespace: no node's
            addrs = [self.topology.address(n) for n in self.topology.node_names()[:self.nodes]]
        else:
            ctl, *slurmd = _free_ports(1 + self.nodes)
            ctl_host, addrs = "127.0.0.1", ["127.0.0.1"] * self.nodes
        sock = self.sockets / "munge.sock"
        lines = [
            # a name of its own (from its folder): apart from other local clusters on this machine
            f"ClusterName=drill{hashlib.sha1(str(root).encode()).hexdigest()[:8]}",
            f"SlurmctldHost=localhost({ctl_host})",
            f"SlurmctldPort={ctl}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"AuthInfo=socket={sock},cred_expire={self.requeue_hold}",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={self.sockets / 'spool'}/%n",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.sockets / 'spool'}/slurmd-%n.pid",
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'log'}/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/builtin",
            f"SchedulerParameters=sched_interval={self.sched_interval}",
            f"ReturnToService={self.return_to_service}",
            "JobRequeue=1",
            # job ids of their own: another local cluster's job 1 on this machine is not this one's
            f"FirstJobId={int.from_bytes(os.urandom(2), 'big') * 10 + 1000}",
            f"SlurmdTimeout={self.slurmd_timeout}",
            "SlurmctldTimeout=10",
            "MessageTimeout=5",
            "KillWait=5",
            "InactiveLimit=0",
            "MinJobAge=300",
            "MpiDefault=none",
            "JobCompType=jobcomp/none",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
        ]
        for name, port, addr in zip(names, slurmd, addrs, strict=False):
            lines.append(f"NodeName={name} NodeHostname=localhost NodeAddr={addr} Port={port} "
                         f"CPUs={self.cpus} State=UNKNOWN")
        lines.append(f"PartitionName={self.partition} Nodes={','.join(names)} Default=YES MaxTime=INFINITE "
                     "State=UP")
        self.conf.write_text("\n".join(line for line in lines if line) + "\n")

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        with open(self.root / "log" / f"{name}.stderr", "ab") as log:  # the daemon keeps its own copy
            proc = subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    start_new_session=True)
        self.procs[name] = proc
        return proc

    def start(self, timeout: float = 30.0) -> "LocalSlurm":
        missing = missing_binaries()
        if missing:
            raise DrillError(f"a local Slurm needs {', '.join(missing)} (Debian: apt-get install slurm-wlm munge)")
        self.write()
        munge = self.root / "munge"
        self._spawn("munged", [self.slurm.binary("munged"), "-F", "--force", f"--socket={self.sockets / 'munge.sock'}",
                               f"--key-file={munge / 'munge.key'}", f"--pid-file={munge / 'munged.pid'}",
                               f"--seed-file={munge / 'munged.seed'}", f"--log-file={self.root / 'log' / 'munged.log'}"])
        self._wait(lambda: (self.sockets / "munge.sock").exists(), timeout, "munged's socket")
        ctld = [self.slurm.binary("slurmctld"), "-D", "-i", "-f", str(self.conf)]
        self._spawn("slurmctld", self.topology.wrap_service(ctld) if self.topology is not None else ctld)
        self._wait(lambda: self.slurm.reachable() is None, timeout, "slurmctld")
        for name in self.node_names:
            self.start_slurmd(name)
        self._wait(lambda: all(s.startswith("IDLE") for s in self.node_states().values()), timeout,
                   "the nodes to be idle")
        return self

    def start_slurmd(self, name: str) -> subprocess.Popen:
        argv = [self.slurm.binary("slurmd"), "-D", "-N", name, "-f", str(self.conf)]
        if self.topology is not None:  # Slurm's node n<i> is the topology's node-<i-1>
            argv = self.topology.wrap_daemon(self.topology.node_names()[self.node_names.index(name)], argv)
        return self._spawn(f"slurmd-{name}", argv)

    def _wait(self, ok, timeout: float, what: str) -> None:
        end = time.time() + timeout
        while time.time() < end:
            try:
                if ok():
                    return
            except (OSError, subprocess.SubprocessError):
                pass
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise DrillError(f"local Slurm: {name} exited with {proc.returncode} while waiting for {what} "
                                     f"(logs in {self.root / 'log'})")
            time.sleep(0.1)
        raise DrillError(f"local Slurm: no {what} after {timeout:g} s (logs in {self.root / 'log'})")

    @property
    def via(self) -> list[str]:
        """How this machine reaches slurmctld: through the switch's namespace, on a topology."""
        return self.topology.wrap_service([]) if self.topology is not None else []

    @property
    def slurm(self) -> Slurm:
        """Slurm's commands against this cluster's configuration."""
        return Slurm(str(self.conf), self.partition, self.via)

    def node_states(self) -> dict[str, str]:
        return {name: fields.get("State", "") for name, fields in self.slurm.nodes().items()}

    def stop(self) -> None:
        """Cancel every job, then stop the daemons this object started (slurmds first)."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self.slurm.run("scancel", "--full", "--partition", self.partition, check=False)
            self.slurm.run("scancel", "--partition", self.partition, check=False)
            time.sleep(0.5)
        order = [n for n in self.procs if n.startswith("slurmd-")] + ["slurmctld", "munged"]
        for name in order:
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()
        # daemons of this configuration started by others (a node-crash heal starts the
        # crashed node's slurmd again): the configuration's path is in their command line
        for proc in self.own_daemons():
            try:
                proc.terminate()
                proc.wait(10)
            except psutil.TimeoutExpired:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        shutil.rmtree(self.sockets, ignore_errors=True)

    def own_daemons(self) -> list["psutil.Process"]:
        out = []
        for proc in psutil.process_iter(["name", "cmdline"]):
            try:
                if proc.info["name"] in ("slurmd", "slurmctld") and str(self.conf) in (proc.info["cmdline"] or []):
                    out.append(proc)
            except psutil.NoSuchProcess:
                continue
        return out

    def __enter__(self) -> "LocalSlurm":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m drillbit.core.slurm.local",
                                description="a real Slurm cluster on 127.0.0.1, in a folder")
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start it and wait (Ctrl-C stops it)")
    up.add_argument("dir")
    up.add_argument("--nodes", type=int, default=3)
    up.add_argument("--requeue-hold", type=int, default=120)
    up.add_argument("--return-to-service", type=int, default=1)
    args = p.parse_args(argv)
    cluster = LocalSlurm(Path(args.dir).absolute(), nodes=args.nodes, requeue_hold=args.requeue_hold,
                         return_to_service=args.return_to_service)
    cluster.start()
    print(json.dumps({"slurm_conf": str(cluster.conf), "nodes": cluster.node_names}), flush=True)
    print(f"export SLURM_CONF={cluster.conf}   # Ctrl-C stops the cluster", file=sys.stderr, flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
