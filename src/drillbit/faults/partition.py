"""partition, lossy-link, flap, slow-link: cut a node's network, drop a share of it, cut it
on and off, or cap its bandwidth.

Every process stays alive and heartbeating while a collective never completes: the hang that
cost BLOOM ~18 h, and the network causes Llama 3 counts among its 419 unexpected
interruptions (bigscience train/tr11-176B-ml/chronicles.md; the Llama 3 paper, arXiv 2407.21783, interruption table).
A SIGSTOP (hang-collective) freezes the heartbeat threads too, so
only a partition tells a progress watchdog from a liveness one.

The fault adds one nftables table of its own, ``inet drillbit_<id>``, in the network
namespace of the target rank (its node, on a cluster whose nodes are namespaces or
containers): every packet in and/or out of the namespace is dropped except loopback
(``scope: node``), or only those to and from one ``endpoint`` (``host[:port]``: the
rendezvous store, a lighthouse), or every one but those (``scope: data``: the data network
cut while the control plane stays reachable, so every member keeps its place in the quorum
and every collective fails). ``loss_pct`` below 100 drops that share at random (nft
``numgen random``): lossy-link. Heal deletes exactly that table and verifies it by listing
the namespace's tables. A namespace whose every process is gone took its tables with it.

Needs root or CAP_NET_ADMIN and Debian's ``nftables``; a rank in the agent's own namespace is
refused (the cut would take the agent's heartbeat with it, and the dead-man's switch would
heal it at once).
"""
from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any, ClassVar, Literal

import psutil
from pydantic import Field, model_validator

from drillbit.core.errors import FaultError
from drillbit.core.evidence import LinkCut
from drillbit.faults.base import Evidence, Fault, HealReport, Params, Plan, PlanStep, Progress, State
from drillbit.core.netns import inode_of
from drillbit.core.proc import ProcRef

FAMILY = "inet"


class PartitionParams(Params):
    scope: Literal["node", "endpoint", "data"] = "node"
    """node: every packet of the target's namespace except loopback; endpoint: only those to and from ``endpoint``;
    data: every packet except loopback and those to and from ``endpoint`` (the data network cut, the control plane
    still reachable)"""
    endpoint: str | None = None
    """scope endpoint: ``host`` or ``host:port`` (an IPv4 address) cut off from the target's node; scope data: the
    one left reachable"""
    control_plane: str | None = None
    """scope endpoint or data: instead of ``endpoint``, the job profile's control_plane entry of this name (the
    rendezvous store, a lighthouse, a master): its ``address``, filled in as ``endpoint`` once the job is launched"""
    direction: Literal["both", "in", "out"] = "both"
    """both ways, or only what the node receives (in) or sends (out)"""
    loss_pct: float = Field(100.0, gt=0, le=100)
    """the share of matching packets dropped, at random; 100: all (a partition)"""

    @model_validator(mode="after")
    def _hundredths(self) -> "PartitionParams":
        if abs(self.loss_pct * 100 - round(self.loss_pct * 100)) > 1e-6:
            raise ValueError(f"loss_pct {self.loss_pct:g}: nft drops shares in hundredths of a percent (0.01 to 100)")
        return self

    @model_validator(mode="after")
    def _endpoint(self) -> "PartitionParams":
        if self.scope in ("endpoint", "data"):
            if not self.endpoint and not self.control_plane:
                raise ValueError(f"scope {self.scope} needs endpoint (host or host:port) or control_plane (a name from "
                                 "the job profile's control_plane)")
            if not self.endpoint:
                return self
            host, _, port = self.endpoint.partition(":")
            try:
                ipaddress.IPv4Address(host)
            except ValueError:
                raise ValueError(f"endpoint {self.endpoint!r}: the host must be an IPv4 address") from None
            if port and not (port.isdigit() and 0 < int(port) < 65536):
                raise ValueError(f"endpoint {self.endpoint!r}: the port must be 1-65535")
        elif self.endpoint or self.control_plane:
            raise ValueError(f"{'endpoint' if self.endpoint else 'control_plane'} is for scope endpoint or data")
        return self


class PartitionState(State):
    netns_inode: int  # the target's network namespace (/proc/PID/ns/net)
    table: str  # the one table this fault adds there
    ruleset: str  # what was loaded (nft -f), for the record and --dry-run
    applied: bool = False


def rules(table: str, params: PartitionParams) -> str:
    """The nftables table that cuts what ``params`` names."""
    # nft compares numgen's value with an integer: the share in hundredths of a percent (0.5% is 50 in 10000)
    drop = "drop" if params.loss_pct >= 100 else f"numgen random mod 10000 < {round(params.loss_pct * 100)} drop"
    match_in = match_out = spare_in = spare_out = ""
    if params.scope in ("endpoint", "data"):
        host, _, port = (params.endpoint or _unresolved(params)).partition(":")
        match_in = f"ip saddr {host} " + (f"tcp sport {port} " if port else "")
        match_out = f"ip daddr {host} " + (f"tcp dport {port} " if port else "")
    if params.scope == "data":  # everything but the endpoint: it is accepted first, the rest dropped
        spare_in, spare_out = f"{match_in}accept; ", f"{match_out}accept; "
        match_in = match_out = ""
    chains = []
    if params.direction in ("both", "in"):
        chains.append(f"  chain input {{ type filter hook input priority -300; policy accept; "
                      f"iifname \"lo\" accept; {spare_in}{match_in}{drop}; }}")
    if params.direction in ("both", "out"):
        chains.append(f"  chain output {{ type filter hook output priority -300; policy accept; "
                      f"oifname \"lo\" accept; {spare_out}{match_out}{drop}; }}")
    return f"table {FAMILY} {table} {{\n" + "\n".join(chains) + "\n}\n"


def _unresolved(params: PartitionParams) -> str:
    """Where an endpoint stands in a plan before the job is launched (its port unknown)."""
    return f"<control_plane.{params.control_plane}>"


def _where_cut(params: PartitionParams) -> str:
    if params.scope == "node":
        return "every packet except loopback"
    cp = f" (control_plane.{params.control_plane})" if params.control_plane else ""
    if params.scope == "data":
        return f"every packet except loopback and those to and from {params.endpoint or _unresolved(params)}{cp}"
    return f"packets to and from {params.endpoint or _unresolved(params)}{cp}"


def netns_of(inode: int) -> str | None:
    """A path that enters that network namespace: a named one (/run/netns), else any live
    process in it. None: no process holds it any more (it is gone, with its tables)."""
    named = Path("/run/netns")
    if named.is_dir():
        for entry in named.iterdir():
            try:
                if entry.stat().st_ino == inode:
                    return str(entry)
            except OSError:
                continue
    for proc in psutil.process_iter(["pid"]):
        if inode_of(proc.info["pid"]) == inode:
            return f"/proc/{proc.info['pid']}/ns/net"
    return None


PACKAGES = {"nft": "nftables", "tc": "iproute2", "ip": "iproute2"}


def in_netns(netns: str, tool: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """``tool args`` run inside that network namespace (nsenter --net)."""
    if shutil.which(tool) is None:
        raise FaultError(f"{tool} not found: install Debian's {PACKAGES.get(tool, tool)} on the node")
    return subprocess.run(["nsenter", f"--net={netns}", tool, *args], input=stdin, capture_output=True,
                          text=True, timeout=30)


def nft(netns: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return in_netns(netns, "nft", *args, stdin=stdin)


def tables(netns: str) -> list[str]:
    proc = nft(netns, "list", "tables")
    if proc.returncode != 0:
        raise FaultError(f"nft list tables: {proc.stderr.strip()}")
    return [line.split()[-1] for line in proc.stdout.splitlines() if line.startswith(f"table {FAMILY} ")]


class Partition(Fault[PartitionParams, PartitionState]):
    name = "partition"
    needs = ("root (CAP_NET_ADMIN) inside the node's own network namespace; nftables")
    blast_radius = ("the target node's links, inside its own network namespace; never the host's network (refused "
                    'where the nodes share it)')
    fault_class = "fail-hang"
    Params = PartitionParams
    State = PartitionState
    evidence = (LinkCut,)
    binds = ("control_plane_address",)
    verb = "cut off"
    expects: ClassVar[Literal["crash", "stall", "slow"]] = "stall"
    needs_node_netns = True
    # every process stays alive and heartbeating: only a watch of progress, or the collective
    # the peers wait in, can see it
    detected_by: ClassVar[tuple[str, ...] | None] = ("watchdog", "collective")

    def hurts(self, params: PartitionParams) -> Literal["rank", "node"]:
        return "node"

    @classmethod
    def seen_by(cls, params: Any = None) -> tuple[str, ...]:
        """A node cut off from one endpoint (its control plane) is seen when it next asks it
        and the wait runs out: the job's quorum timeout."""
        if getattr(params, "scope", "node") == "endpoint" and getattr(params, "loss_pct", 100) >= 100:
            return ("quorum",)
        return super().seen_by(params)

    def plan(self, targets: list[ProcRef], params: PartitionParams) -> Plan:
        what = _where_cut(params)
        share = "" if params.loss_pct >= 100 else f"{params.loss_pct:g}% of "
        way = {"both": "in and out", "in": "in", "out": "out"}[params.direction]
        return Plan(fault=self.name, targets=targets,
                    action=f"nft table {FAMILY} drillbit_<id> in the target's network namespace: drop {share}{what}, "
                           f"{way}",
                    heal="nft delete table (that table only), then list the namespace's tables to verify")

    def plan_lines(self, params: PartitionParams) -> list[str]:
        return ["in the target's network namespace (nsenter --net=/proc/PID/ns/net), nft -f:",
                *rules("drillbit_<id>", params).splitlines()]

    def describe(self, target: ProcRef, params: PartitionParams) -> PlanStep:
        step = super().describe(target, params)
        inode = _inode(target)
        where = netns_of(inode) if inode is not None else None
        step.action += f"; namespace {where or '(gone)'}:\n" + rules("drillbit_<id>", params)
        return step

    def prepare(self, target: ProcRef, params: PartitionParams) -> PartitionState:
        inode = _own_namespace_refused(target)
        if params.scope in ("endpoint", "data"):
            _endpoint_elsewhere(target, params, inode)
        table = f"drillbit_{secrets.token_hex(4)}"
        return PartitionState(netns_inode=inode, table=table, ruleset=rules(table, params))

    def act(self, target: ProcRef, params: PartitionParams, intent: PartitionState) -> PartitionState:
        where = netns_of(intent.netns_inode)
        if where is None:
            raise FaultError(f"the network namespace of pid {target.pid} is gone")
        proc = nft(where, "-f", "-", stdin=intent.ruleset)
        if proc.returncode != 0:
            denied = "not permitted" in proc.stderr or "denied" in proc.stderr
            raise FaultError(f"nft -f refused the table: {proc.stderr.strip()}"
                             + (" (root or CAP_NET_ADMIN needed)" if denied else ""))
        return intent.model_copy(update={"applied": True})

    def confirm(self, target: ProcRef, params: PartitionParams, state: PartitionState) -> Evidence | None:
        where = netns_of(state.netns_inode)
        if not state.applied or where is None or state.table not in tables(where):
            return None
        return Evidence(what="link cut", data={"table": f"{FAMILY} {state.table}", "netns": where,
                                               "scope": params.scope, "endpoint": params.endpoint,
                                               "control_plane": params.control_plane,
                                               "direction": params.direction, "loss_pct": params.loss_pct})

    def heal(self, target: ProcRef, params: PartitionParams, state: PartitionState) -> HealReport:
        where = netns_of(state.netns_inode)
        if where is None:
            return HealReport(healed=True, verified=True,
                              detail="the namespace is gone (no process holds it), its tables with it")
        if state.table in tables(where):
            proc = nft(where, "delete", "table", FAMILY, state.table)
            if proc.returncode != 0:
                return HealReport(healed=False, verified=False, detail=f"nft delete table: {proc.stderr.strip()}")
        left = tables(where)
        if state.table in left:
            return HealReport(healed=False, verified=False, detail=f"table {state.table} still listed in {where}")
        return HealReport(healed=True, verified=True,
                          detail=f"table {FAMILY} {state.table} deleted; {where} lists {left or 'no tables'}")

    def confirm_progress(self, progress: Progress, t_effect: float, params: Any = None) -> dict[str, Any] | None:
        if self.expects != "stall" or getattr(params, "scope", "node") == "endpoint":
            return {}  # one endpoint cut off (a control plane) stalls the job only if it needs it now
        quiet = progress.wait_quiet(t_effect)
        return None if quiet is None else {"progress_quiet_s": round(quiet, 3)}


class LossyLinkParams(PartitionParams):
    loss_pct: float = Field(5.0, gt=0, lt=100)
    """the share of the node's packets dropped, at random (nft numgen): a bad cable or NIC"""


class LossyLink(Partition):
    """Drop a share of a node's packets: the job slows (TCP retransmits) and nothing crashes."""

    name = "lossy-link"
    needs = ("root (CAP_NET_ADMIN) inside the node's own network namespace; nftables")
    blast_radius = ("a share of the target node's packets, inside its own network namespace")
    fault_class = "fail-slow"
    Params = LossyLinkParams
    verb = "behind the lossy link"
    expects = "slow"
    detected_by = ()


def _endpoint_elsewhere(target: ProcRef, params: PartitionParams, inode: int) -> None:
    """An endpoint cut needs a resolved endpoint on another node: the target's own namespace
    reaches its own addresses over loopback, which no cut touches (a no-op called a cut)."""
    if params.endpoint is None:
        raise FaultError(f"partition: control_plane.{params.control_plane}'s address was not filled (its "
                         "placeholders are known once the job is launched)")
    host = params.endpoint.partition(":")[0]
    where = netns_of(inode)
    if where is None:
        raise FaultError(f"the network namespace of pid {target.pid} is gone")
    shown = in_netns(where, "ip", "-o", "-4", "addr", "show")
    mine = [line.split()[3].split("/")[0] for line in shown.stdout.splitlines() if len(line.split()) > 3]
    if host in mine or ipaddress.IPv4Address(host).is_loopback:
        raise FaultError(f"partition: {params.endpoint} is in the target's own network namespace (node "
                         f"{target.node or '?'}: {', '.join(mine)}): its packets go over loopback and no cut there "
                         "touches them; target a rank on another node")


def _inode(target: ProcRef) -> int | None:
    return inode_of(target.pid) if target.alive() else None



# --- flap: cut, heal, cut again ------------------------------------------------------------
class FlapParams(PartitionParams):
    cut_s: float = Field(5.0, gt=0)
    """how long each cut lasts"""
    every_s: float = Field(20.0, gt=0)
    """a cut starts this often"""
    times: int = Field(3, ge=1, le=1000)
    """how many cuts"""

    @model_validator(mode="after")
    def _fits(self) -> "FlapParams":
        if self.cut_s >= self.every_s:
            raise ValueError(f"cut_s ({self.cut_s:g}) must be shorter than every_s ({self.every_s:g}): "
                             "a link that never comes back is a partition")
        return self


# the flapping threads of this agent, by table: heal stops one before it deletes the table
_FLAPPERS: dict[str, tuple[threading.Thread, threading.Event]] = {}


class Flap(Partition):
    """A link that goes down for ``cut_s`` every ``every_s``, ``times`` times (a flapping
    switch port or cable): the first cut is made at inject, the rest by a thread of the
    agent; heal stops that thread, then deletes the table and lists the tables to verify. An
    agent that died took its thread with it: its guardian deletes the table."""

    name = "flap"
    needs = ("root (CAP_NET_ADMIN) inside the node's own network namespace; nftables")
    blast_radius = ("the target node's links, cut `times` times, inside its own network namespace")
    Params = FlapParams
    verb = "flapped"
    expects = "slow"  # judged by what the flaps cost and whom the stack blamed
    detected_by = ()

    def plan(self, targets: list[ProcRef], params: FlapParams) -> Plan:  # type: ignore[override]
        plan = super().plan(targets, params)
        plan.action += f"; for {params.cut_s:g} s every {params.every_s:g} s, {params.times} times"
        plan.heal = "stop the flapping thread, then " + plan.heal
        return plan

    def act(self, target: ProcRef, params: FlapParams, intent: PartitionState) -> PartitionState:  # type: ignore[override]
        state = super().act(target, params, intent)  # the first cut
        stop = threading.Event()

        def flap() -> None:
            for i in range(params.times):
                if i > 0:
                    if stop.wait(params.every_s - params.cut_s):
                        return
                    where = netns_of(state.netns_inode)
                    if where is None or nft(where, "-f", "-", stdin=state.ruleset).returncode != 0:
                        return
                if stop.wait(params.cut_s):
                    return
                where = netns_of(state.netns_inode)
                if where is not None and state.table in tables(where):
                    nft(where, "delete", "table", FAMILY, state.table)

        thread = threading.Thread(target=flap, name=f"flap-{state.table}", daemon=True)
        _FLAPPERS[state.table] = (thread, stop)
        thread.start()
        return state

    def heal(self, target: ProcRef, params: FlapParams, state: PartitionState) -> HealReport:  # type: ignore[override]
        running = _FLAPPERS.pop(state.table, None)
        if running is not None:
            thread, stop = running
            stop.set()
            thread.join(timeout=30)
            if thread.is_alive():
                return HealReport(healed=False, verified=False, detail="the flapping thread did not stop")
        return super().heal(target, params, state)


# --- slow-link: a bandwidth cap (tbf) ------------------------------------------------------
class SlowLinkParams(Params):
    rate_mbit: float = Field(10.0, gt=0, le=1_000_000)
    """the cap on what the node sends, in Mbit/s"""
    burst_kb: float = Field(32.0, gt=0)
    """tbf's bucket"""
    latency_ms: float = Field(400.0, gt=0)
    """how long a packet may wait in the bucket before it is dropped"""
    interface: str | None = Field(None, pattern=r"^[A-Za-z0-9_.@-]{1,15}$")
    """the interface to cap (default: every interface of the namespace but loopback)"""


class SlowLinkState(State):
    netns_inode: int
    interfaces: dict[str, str]  # interface -> the root qdisc it had (its kind), put back at the heal
    applied: list[str] = []


def _tc(netns: str, *args: str) -> subprocess.CompletedProcess:
    return in_netns(netns, "tc", *args)


def root_qdisc(netns: str, dev: str) -> str:
    """The kind of the interface's root qdisc (noqueue, fq_codel, tbf, …)."""
    proc = _tc(netns, "qdisc", "show", "dev", dev, "root")
    if proc.returncode != 0:
        raise FaultError(f"tc qdisc show dev {dev}: {proc.stderr.strip()}")
    words = proc.stdout.split()
    return words[1] if len(words) > 1 and words[0] == "qdisc" else ""


def interfaces(netns: str) -> list[str]:
    proc = in_netns(netns, "ip", "-o", "link", "show")
    names = [line.split(":")[1].strip().split("@")[0] for line in proc.stdout.splitlines() if ":" in line]
    return [n for n in names if n != "lo"]


DEFAULT_QDISCS = ("noqueue", "pfifo_fast", "fq_codel", "mq", "fq")


class SlowLink(Fault[SlowLinkParams, SlowLinkState]):
    """Cap a node's bandwidth with tbf on its interfaces (what it sends): a degraded link, or
    recovery traffic on the slow network (torchft#329 took 948 s to heal that way). Only an
    interface whose root qdisc is the kernel's default is capped (deleting the cap gives that
    default back); heal deletes the tbf and verifies the root qdisc is what it was."""

    name = "slow-link"
    needs = ("root (CAP_NET_ADMIN) inside the node's own network namespace; iproute2's tc")
    blast_radius = ("the bandwidth of the target node's interfaces (a tbf root qdisc), inside its own network "
                    'namespace')
    fault_class = "fail-slow"
    Params = SlowLinkParams
    State = SlowLinkState
    evidence = (LinkCut,)
    needs_node_netns = True
    verb = "behind the slow link"
    expects = "slow"
    detected_by = ()

    def hurts(self, params: SlowLinkParams) -> Literal["rank", "node"]:
        return "node"

    def plan(self, targets: list[ProcRef], params: SlowLinkParams) -> Plan:
        on = params.interface or "every interface but loopback"
        return Plan(fault=self.name, targets=targets,
                    action=f"tc qdisc add dev IF root tbf rate {params.rate_mbit:g}mbit burst {params.burst_kb:g}kb "
                           f"latency {params.latency_ms:g}ms on {on} of the target's network namespace",
                    heal="tc qdisc del dev IF root, then verify the root qdisc is the one it had")

    def plan_lines(self, params: SlowLinkParams) -> list[str]:
        on = params.interface or "IF (each interface of the namespace but lo)"
        return [f"in the target's network namespace: tc qdisc add dev {on} root tbf rate {params.rate_mbit:g}mbit "
                f"burst {params.burst_kb:g}kb latency {params.latency_ms:g}ms"]

    def prepare(self, target: ProcRef, params: SlowLinkParams) -> SlowLinkState:
        inode = _own_namespace_refused(target)
        where = netns_of(inode)
        assert where is not None
        devs = [params.interface] if params.interface else interfaces(where)
        if not devs:
            raise FaultError(f"the network namespace of pid {target.pid} has no interface but loopback")
        kinds = {d: root_qdisc(where, d) for d in devs}
        theirs = {d: k for d, k in kinds.items() if k not in DEFAULT_QDISCS}
        if theirs:
            raise FaultError("a root qdisc of someone else's is in place (" + ", ".join(f"{d}: {k}" for d, k in
                             theirs.items()) + "); drillbit caps only interfaces with the kernel's default")
        return SlowLinkState(netns_inode=inode, interfaces=kinds)

    def act(self, target: ProcRef, params: SlowLinkParams, intent: SlowLinkState) -> SlowLinkState:
        where = netns_of(intent.netns_inode)
        if where is None:
            raise FaultError(f"the network namespace of pid {target.pid} is gone")
        applied = []
        for dev in intent.interfaces:
            proc = _tc(where, "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{params.rate_mbit:g}mbit",
                       "burst", f"{params.burst_kb:g}kb", "latency", f"{params.latency_ms:g}ms")
            if proc.returncode != 0:
                raise FaultError(f"tc refused the cap on {dev}: {proc.stderr.strip()} (root or CAP_NET_ADMIN needed)")
            applied.append(dev)
        return intent.model_copy(update={"applied": applied})

    def confirm(self, target: ProcRef, params: SlowLinkParams, state: SlowLinkState) -> Evidence | None:
        where = netns_of(state.netns_inode)
        if where is None or not state.applied or any(root_qdisc(where, d) != "tbf" for d in state.applied):
            return None
        return Evidence(what="link capped", data={"table": f"tbf {params.rate_mbit:g}mbit on {','.join(state.applied)}",
                                                  "netns": where, "scope": "node", "endpoint": None,
                                                  "direction": "out", "loss_pct": 0.0,
                                                  "rate_mbit": params.rate_mbit})

    def heal(self, target: ProcRef, params: SlowLinkParams, state: SlowLinkState) -> HealReport:
        where = netns_of(state.netns_inode)
        if where is None:
            return HealReport(healed=True, verified=True, detail="the namespace is gone, its qdiscs with it")
        wrong = []
        for dev, kind in state.interfaces.items():
            if root_qdisc(where, dev) == "tbf":
                _tc(where, "qdisc", "del", "dev", dev, "root")
            now = root_qdisc(where, dev)
            if now != kind:
                wrong.append(f"{dev}: {now or 'none'} (had {kind})")
        if wrong:
            return HealReport(healed=False, verified=False, detail="root qdisc not back: " + "; ".join(wrong))
        return HealReport(healed=True, verified=True, detail="tbf removed; root qdisc back to " + ", ".join(
            f"{d}: {k}" for d, k in state.interfaces.items()))


def _own_namespace_refused(target: ProcRef) -> int:
    """The target's network namespace; refused where it is gone, unreadable or this agent's own."""
    if target.process() is None:
        raise FaultError(f"rank {target.rank} (pid {target.pid}) is gone")
    inode = _inode(target)
    if inode is None:
        raise FaultError(f"cannot read the network namespace of pid {target.pid} (root or CAP_SYS_PTRACE needed)")
    if inode == inode_of(os.getpid()):
        raise FaultError(f"rank {target.rank} (pid {target.pid}) shares this agent's network namespace: a cut "
                         "would cut the agent's heartbeat too, and its dead-man's switch would heal at once; "
                         "drill it on a cluster whose nodes are namespaces or containers (topology netns)")
    return inode
