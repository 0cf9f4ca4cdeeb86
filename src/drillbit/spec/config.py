"""Cluster config (drill.yaml): named clusters and job profiles.

``local`` (the embedded cluster) and the ``reference`` job profiles are built in, so
``drill run kill-rank`` needs no config file. A drill.yaml adds or overrides entries.
Placeholders in launch commands and paths (``spec/placeholders.py``, one way to fill
them): ``{run_dir}`` (the drill's run folder, for the job's own files), ``{python}`` (the
interpreter running drillbit), and per node ``{node}``, ``{node_rank}``, ``{nnodes}``,
``{head}`` (the rendezvous host), ``{port}`` and ``{ray_address}``.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (Discriminator, Field, SecretStr, Tag, TypeAdapter, create_model, field_validator,
                      model_validator)

from drillbit.core.verdicts import Verdict
from drillbit.spec.checkpoints import CheckpointSpec, SavedTier, Tier
from drillbit.spec.models import Duration, Span, Strict, compile_regex, launcher_regex
from drillbit.spec.signals import Signal


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
HEARTBEAT_S = 1.0  # the controller heartbeats every agent at least this far apart (drillbit.transport.nodes)
HEARTBEAT_MAX_S = 5.0  # and at most this far apart


def heartbeat_period(deadman_s: float) -> float:
    """How often the controller beats every agent: a quarter of the dead-man's deadline (two
    beats in a row can be lost with a period to spare before a switch trips), between
    HEARTBEAT_S and HEARTBEAT_MAX_S; a Ray cluster's lease takes at least three a TTL
    (RayNodes.beat_period). Each beat is one call per node: a 1,024-node fleet with a 10 s deadline
    is beaten every 2.5 s, not every second (docs/fleet-scale.md)."""
    return max(HEARTBEAT_S, min(deadman_s / 4, HEARTBEAT_MAX_S))


def _regex(name: str, value: str | None) -> None:
    if value is not None:
        compile_regex(value, name)


_ALL_BUT_PASS: list[Verdict] = ["fail", "inconclusive", "aborted"]

class SshHost(Strict):
    name: str = Field(description="the node's name in reports (e.g. the Slurm node name)")
    host: str
    """the address Fabric connects to"""
    port: int = 22
    """its SSH port"""
    user: str | None = None
    """the login (default: the controller's user)"""
    key_filename: str | None = Field(None, description="private key for this host (default: ssh-agent / ~/.ssh)")
    password: SecretStr | None = Field(None, description="prefer keys; never written to reports or logs")
    python: str = Field("python3", description="interpreter on the host that has drillbit installed")
    state_dir: str | None = Field(None, description="where the agent keeps its registry on the host, a folder "
                                                    "only its user can write (default: $XDG_RUNTIME_DIR/drillbit, "
                                                    "else /tmp/drillbit-<uid>, created 0700)")
    proxy_command: str | None = Field(None, min_length=1, description=(
        "reach the host's sshd through this command's standard input and output, as OpenSSH's ProxyCommand "
        "(%h and %p: the host and port): a bastion (`ssh -W %h:%p bastion`), or a namespace node's switch "
        "(`ip netns exec dbit-ID-sw python3 -m drillbit.transport.netcluster relay %h %p`)"))


class ServiceSpec(Strict):
    """A process the namespace cluster runs beside its nodes, on the service address
    (10.77.0.254, on the bridge): an etcd for torchrun's etcd-v2 rendezvous, a lighthouse.
    It is no node's, so losing a node does not lose it."""

    name: str = Field(pattern=r"^[a-z][a-z0-9-]*$", description="its name in the history and its log "
                                                               "(service-NAME.log in the run folder)")
    command: list[str] = Field(min_length=1, description="placeholders: {run_dir} {python} {service_host}")
    port: int = Field(ge=1, le=65535, description="the drill waits until it accepts connections here")
    ready_timeout: Duration = 30.0
    """how long it may take to start accepting"""


class _Cluster(Strict):
    """What every engine's cluster has."""

    description: str = ""
    """one line, shown by drill list"""
    protected: bool = Field(False, description="refuse every drill (e.g. production)")
    prometheus: str | None = Field(None, description="the Prometheus that watches this cluster's jobs (http://host:9090): "
                                                     "where abort.when's stop conditions and prometheus: signals are "
                                                     "queried, from the controller")
    lease_ttl: Duration = Field(15.0, description="a running cluster's lease expires when its holder has not "
                                                  "renewed it for this long (the holder died)")
    logs: Literal["auto", "controller", "agents"] = Field(
        "auto", description="where the job's logs are read: by each node's agent, which ships the matched events "
                            "(no shared filesystem needed), or by the controller from its own filesystem; auto: "
                            "agents for ssh and for a running Ray cluster, the controller for local ones")
    # dead-man's switch
    deadman: Duration = Field(5.0, description="an agent that hears no heartbeat this long heals on its own; "
                                               "the controller beats every agent a quarter of this apart (1 s to 5 s)")
    job_grace: Span = Field(30.0, description="after healing on its own, how long an agent lets the job "
                                                  "run before stopping it")
    allowed_hosts: list[str] | None = Field(
        None, description="host names (glob patterns) drills may touch; an agent on any other host is refused "
                          "before anything starts")

    @model_validator(mode="before")
    @classmethod
    def _another_engines_fields(cls, data: Any) -> Any:
        """A field of another engine's, said as such (not just "unknown field")."""
        if isinstance(data, dict) and (engine := data.get("engine", "ray")) in ENGINES:
            for field, (engines, default) in ENGINE_FIELDS.items():
                if field in data and engine not in engines:
                    if data[field] not in (None, [], "", default):
                        raise ValueError(f"{field} is for engine {' or '.join(engines)}, not {engine}")
                    data = {k: v for k, v in data.items() if k != field}  # spelt out as nothing: says nothing
        return data

    @model_validator(mode="after")
    def _heartbeat(self) -> Any:
        if self.deadman <= 2 * HEARTBEAT_S:
            raise ValueError(f"deadman must exceed twice the heartbeat ({2 * HEARTBEAT_S:g} s): one late "
                             "heartbeat must not trip the dead-man's switch")
        return self

    @property
    def logs_on_agents(self) -> bool:
        if self.logs != "auto":
            return self.logs == "agents"
        return self._logs_on_agents_by_default()

    def _logs_on_agents_by_default(self) -> bool:
        return False


class _Embedded(_Cluster):
    """The clusters drillbit starts itself on this machine (engine process, engine ray without
    an address): simulated nodes, on the host's network or in namespaces."""

    nodes: int | None = Field(None, ge=1, description="nodes to use (embedded: nodes to simulate, default 2)")
    topology: Literal["host", "netns"] = "host"
    """process, or ray without an address: netns simulates ``nodes`` nodes (default 2), each a network namespace with
    its own address and hostname on a private bridge, so a partition cuts one node off from the others (needs root,
    iproute2 and nftables); on engine ray each node is a ``ray start`` in its namespace (the head, the GCS, on node
    0). host: this machine's network (process: one node; ray: simulated nodes on 127.0.0.1)"""
    frontend_mbit: float | None = Field(None, gt=0, le=100_000)
    """topology netns: a second network per node, the frontend (eth1, 10.78.0.x), capped at this many Mbit/s into
    each node, and the nodes' hostnames resolve to it; eth0 stays the fast backend that gloo and NCCL are pinned to
    (torchft#329's cluster: hostnames on the Ethernet, collectives on InfiniBand). None: one network"""
    services: list[ServiceSpec] = Field(default_factory=list)
    """topology netns: processes started on the service address before the job and stopped after it"""
    cpus_per_node: int = Field(2, ge=1, description="embedded cluster: logical CPUs per simulated node")

    @model_validator(mode="after")
    def _namespaces(self) -> Any:
        if self.frontend_mbit and self.topology != "netns":
            raise ValueError("frontend_mbit is for topology netns (a second network of the namespace cluster)")
        if self.services and self.topology != "netns":
            raise ValueError("services are for topology netns (they run on its service address)")
        if self.topology == "netns" and (self.nodes or 2) > 250:
            raise ValueError(f"topology netns simulates at most 250 nodes (10.77.0.1-250), not {self.nodes}")
        return self


class ProcessCluster(_Embedded):
    """engine process: the agent in drillbit's own process, one node (or ``nodes`` namespaces)."""

    engine: Literal["process"]


class RayCluster(_Embedded):
    """engine ray: one agent actor per node of a Ray cluster, the embedded one or a running one."""

    engine: Literal["ray"] = "ray"
    address: str | None = Field(None, description="a running Ray cluster (host:port); none: the embedded "
                                                  "local cluster, started and stopped by the drill")
    ray_auth_token: SecretStr | None = Field(None, description="ray: the cluster's token (Ray token "
                                                               "authentication); never written to reports or logs. "
                                                               "Default: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or "
                                                               "~/.ray/auth_token, as Ray itself finds it")
    ray_auth_token_file: str | None = Field(None, description="ray: a file holding the cluster's token (what "
                                                              "`ray get-auth-token` prints on the head node)")

    @model_validator(mode="after")
    def _ray(self) -> Any:
        if self.ray_auth_token and self.ray_auth_token_file:
            raise ValueError("give ray_auth_token or ray_auth_token_file, not both")
        if self.topology == "netns" and self.address:
            raise ValueError("topology netns is for the embedded clusters, engine process or engine ray without an "
                             "address (a Ray node in each namespace), not ray with an address")
        if self.address and (self.frontend_mbit or self.services):
            raise ValueError("frontend_mbit and services are for the embedded clusters' topology netns, not a running "
                             "Ray cluster")
        return self

    def _logs_on_agents_by_default(self) -> bool:
        return self.address is not None


class SshCluster(_Cluster):
    """engine ssh: one agent per host, started over SSH."""

    engine: Literal["ssh"]
    hosts: list[SshHost] = Field(min_length=1)
    """ssh: the hosts, one agent each"""
    known_hosts: str | None = Field(None, description="known_hosts file; unknown or changed host keys are refused "
                                                      "(default: ~/.ssh/known_hosts)")

    def _logs_on_agents_by_default(self) -> bool:
        return True


class SlurmCluster(_Cluster):
    """engine slurm: the job submitted with sbatch, one agent per node of its allocation (srun --overlap)."""

    engine: Literal["slurm"]
    slurm_conf: str | None = Field(None, description="slurm: the cluster's slurm.conf (SLURM_CONF for every Slurm "
                                                     "command drillbit runs); none: Slurm's own default")
    partition: str | None = Field(None, description="slurm: the partition jobs are submitted to (none: the "
                                                    "default partition)")
    slurm_via: list[str] = Field(default_factory=list, description=(
        "slurm: a prefix for every Slurm command the controller runs (sbatch, scontrol, scancel, and the srun that "
        "carries each node's agent), for a slurmctld this machine cannot reach directly: a namespace cluster's "
        "switch ([ip, netns, exec, dbit-ID-sw]); SLURM_CONF is passed on"))
    python: str | None = Field(None, description="slurm: the interpreter on the nodes that has drillbit installed "
                                                 "(default: the controller's own path)")
    state_dir: str | None = Field(None, description="slurm: where agents keep their registries on the nodes, a "
                                                    "folder only their user can write (default: "
                                                    "$XDG_RUNTIME_DIR/drillbit, else /tmp/drillbit-<uid>)")

    @model_validator(mode="after")
    def _logs_here(self) -> Any:
        if self.logs == "agents":
            raise ValueError("engine slurm reads the job's logs on the controller (the agents end with each "
                             "allocation): the logs must be on a filesystem this machine sees, like the job's "
                             "sbatch output")
        return self


ENGINES: dict[str, type[_Cluster]] = {"process": ProcessCluster, "ray": RayCluster, "ssh": SshCluster,
                                      "slurm": SlurmCluster}
# each engine's own fields: the engines that have them (for the message that names them) and the
# default (which says nothing, so any engine may spell it out)
ENGINE_FIELDS: dict[str, tuple[tuple[str, ...], Any]] = {}
for _engine, _model in ENGINES.items():
    for _field, _info in _model.model_fields.items():
        if _field not in _Cluster.model_fields and _field != "engine":
            _engines = ENGINE_FIELDS.get(_field, ((), None))[0]
            ENGINE_FIELDS[_field] = (_engines + (_engine,), _info.get_default(call_default_factory=True))

# an entry whose engine is none of them: every engine's fields allowed, so the problems said are the
# engine and the fields no engine has
_AnyEngine = create_model("_AnyEngine", __base__=_Cluster,
                          engine=(Literal["process", "ray", "ssh", "slurm"], ...),
                          **{f: (Any, None) for f in ENGINE_FIELDS})  # type: ignore[call-overload]


def _engine_of(value: Any) -> str:
    engine = value.get("engine", "ray") if isinstance(value, dict) else getattr(value, "engine", None)
    return f"<{engine}>" if engine in ENGINES else "<unknown>"


Cluster = ProcessCluster | RayCluster | SshCluster | SlurmCluster
if TYPE_CHECKING:
    ClusterSpec = Cluster  # what validation yields: an entry of an unknown engine is never valid
else:
    ClusterSpec = Annotated[
        Annotated[ProcessCluster, Tag("<process>")] | Annotated[RayCluster, Tag("<ray>")]
        | Annotated[SshCluster, Tag("<ssh>")] | Annotated[SlurmCluster, Tag("<slurm>")]
        | Annotated[_AnyEngine, Tag("<unknown>")],
        Discriminator(_engine_of)]
"""A cluster entry of drill.yaml: one model per engine, chosen by ``engine`` (default ray)."""
_ADAPTER: TypeAdapter[Cluster] = TypeAdapter(ClusterSpec)


def cluster_spec(**fields: Any) -> Cluster:
    """A cluster entry from its fields, its engine's model chosen as drill.yaml's is."""
    return _ADAPTER.validate_python(fields)


class LaunchSpec(Strict):
    command: list[str] = Field(min_length=1, description="placeholders: {run_dir} {python} {node} {node_rank} "
                                                          "{nnodes} {head} {port} {ray_address}")
    per_node: bool = Field(False, description="run the command on every node (one launcher per node, each its "
                                              "output in the run folder's job-<node>.out), not only the first (its "
                                              "output in job.out); a command with {node_rank}, or torchrun's "
                                              "--nnodes {nnodes}, needs it")
    env: dict[str, str] = Field(default_factory=dict, description="names are shell variable names "
                                                                  "([A-Za-z_][A-Za-z0-9_]*)")
    cwd: str | None = Field(None, description=(
        "the folder the job starts in, on each node (placeholders as in command: {run_dir}/job). Unset, the job "
        "starts where the engine starts it, which is not the run folder: on process engines and the embedded Ray "
        "cluster (local), the folder drill runs in; on slurm, that same path on the allocated node (sbatch's "
        "default; Slurm falls back to /tmp where the node lacks it); on ssh, the SSH user's home folder on each "
        "host; on a running Ray cluster (address), the folder `ray start` ran in on each node. A relative "
        "checkpoint.dir or tier folder, and a relative path in the job's lines, are taken against this folder, and "
        "this folder (relative, or unset) against the folder drill runs in: on ssh and a running Ray cluster, "
        "where the job starts elsewhere, give an absolute one"))
    python: str | None = Field(None, description=(
        "the interpreter {python} stands for in this job's command and env, on every node. Set it when the job "
        "has a virtual environment of its own (its torch, its launcher) and its command starts with {python}: "
        "unset, {python} is drillbit's own interpreter (the controller's on process and ray engines, the same path "
        "on every node; hosts[].python on ssh; the cluster's python on slurm), which has drillbit's packages, not "
        "the job's. drill compare also reads each profile's stack versions from it. A command that names its "
        "interpreter or launcher by path (/opt/job/.venv/bin/torchrun) runs without it; a bare name (torchrun) "
        "is looked up on the PATH the job inherits, on process engines and slurm the one drill runs with, "
        "drillbit's virtual environment first where it is activated"))
    stop_timeout: Duration = 20.0
    """at teardown, SIGTERM, then SIGKILL after this long"""

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [k for k in value if not ENV_NAME.fullmatch(k)]
        if bad:
            raise ValueError(f"environment variable name(s) {', '.join(repr(k[:40]) for k in bad)} are not "
                             "names a shell or execve takes: letters, digits and _, not starting with a digit")
        return value


class SlurmJob(Strict):
    """How a job profile runs under Slurm (clusters of engine ``slurm``): ``sbatch`` wraps
    the launch command (one batch script on the first node of the allocation), or the drill
    attaches to a job already queued."""

    nodes: int = Field(1, ge=1, description="nodes to allocate (sbatch -N)")
    requeue: bool = Field(True, description="sbatch --requeue: Slurm requeues the job when a node of it fails")
    args: list[str] = Field(default_factory=list, description="more sbatch options, e.g. [--time=1:00:00, "
                                                             "--exclusive]")
    output: str = Field("{run_dir}/job.out", description="the batch script's output file (sbatch -o, appended "
                                                         "across requeues; every node's srun task writes there "
                                                         "too); read without being named in logs (launcher_log)")
    job_id: str | None = Field(None, description="attach to this queued or running job instead of submitting")


class RankDiscovery(Strict):
    """How rank processes are found on a node: by command line and RANK in the process
    environment, or by pid files that the ranks write (Ray Train workers)."""

    cmdline: str | None = Field(None, description="regex that a rank's command line matches (with pidfiles: "
                                                   "that a pid file's process must match too)")
    rank_env: str = "RANK"
    """the environment variable holding a rank's global rank"""
    exclude_cmdline: str | None = Field(None, description="regex of processes to skip (e.g. the launcher)")
    pidfiles: str | None = Field(None, description="glob of JSON pid files {pid, rank, node_id[, start_time][, "
                                                    "boot_start]} ({node} in it: each agent's own node, so it reads "
                                                    "only its node's files); a process that started before the job, or whose "
                                                    "start differs from its file's, is not a rank (boot_start: seconds "
                                                    "after boot, /proc/PID/stat's starttime over SC_CLK_TCK, which "
                                                    "no step of the wall clock moves; start_time: psutil's "
                                                    "create_time, which one does)")

    @model_validator(mode="after")
    def _one_way(self) -> "RankDiscovery":
        if self.cmdline is None and self.pidfiles is None:
            raise ValueError("give cmdline, pidfiles, or both")
        for name in ("cmdline", "exclude_cmdline"):
            _regex(name, getattr(self, name))
        return self


class ReplacementHook(Strict):
    """The job's node-replacement provider, as its stack calls it. fail-node-replacement
    puts a stand-in of the same name first on the job's PATH (``shim_dir``, added to the
    launch's PATH by drillbit), which misbehaves while the fault holds and otherwise runs the
    real command."""

    command: str = Field(description="the executable the stack runs to get a replacement node, by name "
                                     "(looked up on PATH)")
    failed_arg: str | None = Field(None, description="the argument before the failed node's name; same-node "
                                                     "mode hands that name back")
    declare_dead: list[str] | None = Field(None, description="a command that tells the stack's health check the "
                                                             "target's node is dead (e.g. scontrol update nodename="
                                                             "{node} state=down reason=drill); placeholders {run_dir} "
                                                             "{python} {node}")
    revive: list[str] | None = Field(None, description="the command that undoes declare_dead (e.g. scontrol update "
                                                       "nodename={node} state=resume); required with declare_dead: "
                                                       "the heal runs it")
    shim_dir: str = Field("{run_dir}/replacement-shim", description="where the stand-in goes (first on PATH)")

    @model_validator(mode="after")
    def _undo(self) -> "ReplacementHook":
        if self.declare_dead and not self.revive:
            raise ValueError("declare_dead needs its undo, revive (e.g. [scontrol, update, nodename={node}, "
                             "state=resume]): no fault outlives its drill")
        return self

    @field_validator("command")
    @classmethod
    def _bare_name(cls, value: str) -> str:
        if not value or "/" in value or value in (".", "..") or "\x00" in value:
            raise ValueError(f"{value[:60]!r}: a command name as the stack runs it from PATH (no '/'): the stand-in "
                             "is written under shim_dir by that name")
        return value


class ControlPlaneProcess(Strict):
    """One process of the job's recovery machinery that no rank is: the rendezvous store's
    host (torchrun's c10d store lives in the elastic agent on the rendezvous host), torchft's
    lighthouse, DLRover's master, an etcd. kill-control-plane finds it on its node by what
    is given here (all that is given must match), among the node's job (the launcher's tree)
    — a pid file may also name one outside it (a service the job was started beside)."""

    cmdline: str | None = Field(None, description="regex its command line matches")
    port: int | str | None = Field(None, description="a TCP port it listens on (placeholders: {port}, the "
                                                     "rendezvous port drillbit chose for the launch)")
    pidfile: str | None = Field(None, description="a file holding its pid (a number, or JSON {pid, start_time[, "
                                                  "boot_start]}, as for rank pid files); "
                                                  "placeholders {run_dir} and the node's")
    node: str | int | None = Field(None, description="the node it runs on: its name, or its index in the launch "
                                                     "order (0 is the first node, the rendezvous host; the default)")
    address: str | None = Field(None, description="HOST:PORT the job's other processes reach it at "
                                                  "(placeholders {head}, {port}, {service_host}, the node's): what "
                                                  "partition cuts a node off from with params.control_plane")

    @model_validator(mode="after")
    def _found_somehow(self) -> "ControlPlaneProcess":
        if self.cmdline is None and self.port is None and self.pidfile is None:
            raise ValueError("give cmdline, port or pidfile (or several: all must match)")
        if self.address is not None:
            host, sep, port = self.address.rpartition(":")
            if not sep or not host or not (port.isdigit() or re.fullmatch(r"\{\w+\}", port)):
                raise ValueError(f"address {self.address!r}: HOST:PORT (a placeholder such as {{head}}:{{port}} "
                                 "is filled when the job is launched)")
        _regex("cmdline", self.cmdline)
        if isinstance(self.port, str):
            text = self.port.strip()
            if not (text.isdigit() or re.fullmatch(r"\{\w+\}", text)):
                raise ValueError(f"port {self.port!r}: a number, or a placeholder such as {{port}}")
            if text.isdigit():
                self.port = int(text)
        if isinstance(self.port, int) and not 1 <= self.port <= 65535:
            raise ValueError(f"port {self.port}: not a TCP port (1-65535)")
        return self


class PrometheusSignal(Strict):
    """A signal read from the job's own metrics instead of its log lines: an instant PromQL
    query, polled by the controller on the cluster's Prometheus (``prometheus:`` in its
    cluster entry, or ``url``)."""

    query: str = Field(min_length=1, description="PromQL; for steps one series per rank, e.g. "
                                                 "max by (rank) (train_step)")
    kind: Literal["step", "detect", "straggler"] = Field(
        description="step: the value is the step number (an event when it changes); detect: an event when the "
                    "value rises (a counter of detections); straggler: a series above 0 names its rank")
    interval: Duration = Field(1.0, description="how often it is polled (no finer than the scrape interval)")
    rank_label: str = Field("rank", description="the label that holds a series' rank")
    url: str | None = Field(None, description="the Prometheus (default: the cluster's prometheus:)")


class JobTimeouts(Strict):
    """The job's own timeouts, as its configuration sets them: from these a dry run predicts
    when each drill's fault is detected and which SLO will fail, and the report sets the
    prediction beside the measurement."""

    collective: Duration | None = None
    """the process group's collective timeout (torch's defaults: NCCL 10 min, gloo 30 min): a
    rank waiting in a collective on a peer that never comes gives up after it"""
    watchdog: Duration | None = None
    """a progress watchdog's deadline: no step for this long and it acts"""
    heartbeat: Duration | None = None
    """a liveness heartbeat's timeout (NVRx's rank monitor, JAX's coordination service): it
    sees a process that stopped or died, not one that is alive and waiting"""
    monitor_interval: Duration | None = None
    """how often the launcher polls its workers (torchrun --monitor-interval): a dead worker
    is seen within it"""
    train: Duration | None = None
    """a per-step timeout of the training framework (torchft's Manager(timeout=): the step's
    quorum, allreduce and RPCs give up after it); the process group's must not exceed it"""
    quorum: Duration | None = None
    """how long a process waits for its control plane to answer a membership call (torchft's
    Manager(quorum_timeout=), a rendezvous's timeout): a node cut off from the lighthouse or
    the store gives up after it"""


class JobProfile(Strict):
    description: str = ""
    """one line, shown by drill list"""

    @model_validator(mode="after")
    def _launcher_regex(self) -> "JobProfile":
        launcher_regex(self.launcher)
        return self

    presets: list[str] = Field(default_factory=lambda: ["reference"],
                               description="built-in signal presets by name, or preset files by path")
    signals: list[Signal] = Field(default_factory=list, description="the job's own signals, after its presets'")
    launch: LaunchSpec | None = None
    """how to start the job (or give attach_pid, or slurm.job_id)"""
    slurm: SlurmJob | None = Field(None, description="clusters of engine slurm: sbatch options, or a job id to "
                                                     "attach to (default: sbatch -N 1 --requeue)")
    launcher: str | None = Field(None, description="regex of the per-node launcher's command line, the parent of "
                                                   "the ranks (kill-node kills it with them); default: torchrun")
    attach_pid: int | None = Field(None, description="attach to a running job rooted at this pid")
    attach_start_time: float | None = Field(
        None, description="the attach root's start time (epoch s, as psutil's create_time): with the pid it names "
                          "one process; required on clusters of more than this machine")
    ranks: RankDiscovery
    """how its rank processes are found on a node"""
    logs: list[str] = Field(default_factory=list)
    """log files the probes follow besides the launcher's output (placeholders as in launch.command, {node} and
    {node_rank} filled per node; a glob (*, ?, [..]) follows every file it matches, those that appear later too)"""
    launcher_log: bool = Field(True, description=(
        "also follow what the launch writes, without naming it in logs: the run folder's job.out (one launcher), "
        "job-<node>.out (per_node, one per node), on engine slurm the batch output (slurm.output); false where that "
        "output repeats a log named in logs (a launcher that tees), whose lines would count twice"))
    logs_grace: Duration = Field(30.0, description=(
        "how long after the job's ranks were first found a log named in logs may take to appear while no step has "
        "come; past it, a log still missing ends the drill (exit 2), listing the files the launch wrote"))
    heartbeat_file: str | None = None
    """a '<step> <epoch>' file, for jobs that log no step lines"""
    prometheus: list[PrometheusSignal] = Field(
        default_factory=list, description="signals read from the job's metrics on Prometheus (steps, detections, "
                                          "stragglers), for a job that shows them as metrics rather than lines")
    checkpoint: CheckpointSpec | None = Field(None, description="where the job saves checkpoints and their layout "
                                                               "(corrupt-checkpoint, restore-hang, drill probe)")
    replacement: ReplacementHook | None = Field(None, description="the job's node-replacement command "
                                                                  "(fail-node-replacement)")
    timeouts: JobTimeouts | None = Field(None, description="the job's own timeouts (collective, watchdog, "
                                                           "heartbeat, monitor_interval): detection predicted from "
                                                           "them by --dry-run and set beside the measurement")
    control_plane: dict[str, ControlPlaneProcess] = Field(
        default_factory=dict, description="the job's control plane by name (rendezvous, lighthouse, master, etcd): "
                                          "the processes kill-control-plane takes away")
    tiers: dict[str, Tier] = Field(
        default_factory=dict, description="multi-tier checkpoints, nearest first: tier name (local, memory, "
                                          "persistent) -> where its copies are; a dir may be a glob, each match one "
                                          "copy (a node's or a process's local tier); {known_from: saves} for a tier "
                                          "with no folder (shared memory), known from the job's save lines. Read "
                                          "when the fault hits: the newest step each copy held (best_available_step)")


class Notify(Strict):
    """A webhook told of a drill's result: a generic JSON body, or Slack's ``{"text": ...}``
    (Slack, Mattermost, Rocket.Chat, Teams' Slack-compatible hooks take it). A webhook that
    fails is recorded in the run folder and never changes the verdict or the exit code."""

    webhook: str = Field(description="the URL posted to (http or https; a Slack hook's URL holds its secret: the "
                                     "run folder records only its host)")
    format: Literal["json", "slack"] = Field("json", description="json: drillbit's own body; slack: {text: ...}")
    send_on: list[Verdict] = Field(
        default_factory=lambda: _ALL_BUT_PASS.copy(),
        description="the verdicts that are sent (default: all but pass; named send_on, since YAML reads a bare on: as true)")
    report_url: str | None = Field(None, description="where the reports folder is served: the message links "
                                                     "REPORT_URL/RUN_FOLDER/report.html instead of the local path")
    timeout_s: float = Field(10.0, gt=0, le=120, description="how long one post may take")

    @field_validator("webhook")
    @classmethod
    def _http(cls, value: str) -> str:
        if not re.match(r"https?://[^/\s]+", value):
            raise ValueError(f"webhook {value!r}: an http:// or https:// URL")
        return value


class DrillConfig(Strict):
    default_cluster: str = "local"
    """the cluster drill run uses without --cluster"""
    default_job: str = "reference"
    """the job profile a drill uses when neither it nor --job names one"""
    reports_dir: str = "reports"
    """where run folders go; a relative path is taken from the folder of this file, wherever drill runs
    (--reports overrides it, relative to where drill runs)"""
    results_db: str | None = Field(None, description="SQLite results store (default: <reports_dir>/drills.db); "
                                                     "relative to the folder of this file")
    clusters: dict[str, ClusterSpec] = Field(default_factory=dict)
    """where drills run, by name (--cluster NAME)"""
    jobs: dict[str, JobProfile] = Field(default_factory=dict)
    """the jobs drilled, by name (--job NAME)"""
    notify: list[Notify] = Field(default_factory=list)
    """webhooks told of each drill's result (by default only of fail, inconclusive and aborted)"""


def _flag(flags: tuple[str, ...], name: str, default: float) -> float:
    """A fixture's numeric flag as its launch command passes it, else its default."""
    return float(flags[flags.index(name) + 1]) if name in flags else default


def _reference(description: str, *flags: str) -> JobProfile:
    return JobProfile(
        description=description,
        presets=["reference", "torchrun"],
        launch=LaunchSpec(command=["{python}", "-m", "drillbit.fixtures.reference.launch", "--run-dir", "{run_dir}/job",
                                   "--nnodes", "{nnodes}", "--node-rank", "{node_rank}", "--node-name", "{node}",
                                   "--rdzv-endpoint", "{head}:{port}", *flags], per_node=True),
        ranks=RankDiscovery(cmdline=r"-m drillbit\.fixtures\.reference\.train\b",
                            exclude_cmdline=r"torch\.distributed\.run"),
        launcher=r"torch\.distributed\.run|drillbit\.fixtures\.reference\.launch",
        logs=["{run_dir}/job/events.log", "{run_dir}/job/launcher.log"],
        heartbeat_file="{run_dir}/job/heartbeat/rank0",
        checkpoint=CheckpointSpec(dir="{run_dir}/job/ckpt", layout="reference"),
        # the rendezvous: torchrun's c10d store lives in the first node's torchrun agent (etcd-v2: in
        # the etcd service, which the cluster runs)
        control_plane={"etcd": ControlPlaneProcess(pidfile="{run_dir}/services/etcd.pid", address="{service_host}:2379")}
        if "etcd-v2" in flags else {"rendezvous": ControlPlaneProcess(cmdline=r"torch\.distributed\.run",
                                                                      address="{head}:{port}")},
        # the launcher's defaults (drillbit.fixtures.reference.launch, train.py): gloo's 30 min collective
        # timeout, the progress watchdog's 10 s deadline, torchrun polled every 0.5 s
        timeouts=JobTimeouts(collective=1800.0, monitor_interval=0.5,
                             watchdog=None if "--no-watchdog" in flags or "liveness" in flags else 10.0,
                             heartbeat=10.0 if "liveness" in flags else None),
        replacement=ReplacementHook(command="drillbit-ref-nodepool", failed_arg="--failed", declare_dead=[
            "{python}", "-m", "drillbit.fixtures.reference.nodepool", "mark-bad", "--pool", "{run_dir}/job/pool.json",
            "--active"], revive=["{python}", "-m", "drillbit.fixtures.reference.nodepool", "mark-good", "--pool",
                                 "{run_dir}/job/pool.json", "--last-marked"]),
    )


def _nonatomic() -> JobProfile:
    """Writes each save straight into step_N/ (no temporary folder, no marker) and loads the
    newest folder on restart without checking it: the save path kill-during-save fails."""
    job = _reference("reference job that saves in place (no temp folder, no COMPLETE marker) and restores the "
                     "newest folder unchecked; 300 ms per file", "--save-mode", "inplace", "--save-pause-ms", "300")
    return job.model_copy(update={"checkpoint": CheckpointSpec(
        dir="{run_dir}/job/ckpt", layout="custom", glob="step_*", step_regex=r"step_(\d+)", metadata="meta.json")})


def _raytrain(description: str, *flags: str, module: str = "drillbit.fixtures.reference.raytrain") -> JobProfile:
    return JobProfile(
        description=description,
        presets=["reference", "ray-train"],
        launch=LaunchSpec(command=["{python}", "-m", module, "--run-dir", "{run_dir}/job",
                                   "--address", "{ray_address}", *flags], stop_timeout=30.0),
        ranks=RankDiscovery(pidfiles="{run_dir}/job/pids/*.json"),
        logs=["{run_dir}/job/events.log", "{run_dir}/job.out"],
        timeouts=JobTimeouts(collective=_flag(flags, "--collective-timeout", 10.0)),  # its process group's
    )


def _torchft(description: str, *flags: str) -> JobProfile:
    """Two torchft replica groups (one rank each, each under its own torchrun) and a
    lighthouse on node 0 (drillbit.fixtures.stacks.torchft_job)."""
    return JobProfile(
        description=description,
        presets=["torchft", "torchrun"],
        signals=[Signal(kind="step", pattern=r"^step=(?P<n>\d+) replica=(?P<rank>\d+) ", ints=["n", "rank"])],
        launch=LaunchSpec(command=["{python}", "-m", "drillbit.fixtures.stacks.torchft_job", "launch", "--run-dir",
                                   "{run_dir}/job", "--node-rank", "{node_rank}", "--nnodes", "{nnodes}",
                                   "--lighthouse", "{head}:{port}", *flags], per_node=True),
        ranks=RankDiscovery(cmdline=r"-m drillbit\.fixtures\.stacks\.torchft_job train\b",
                            exclude_cmdline=r"torch\.distributed\.run", rank_env="REPLICA_GROUP_ID"),
        launcher=r"torch\.distributed\.run|drillbit\.fixtures\.stacks\.torchft_job launch",
        logs=["{run_dir}/job/lighthouse.log", "{run_dir}/job/group0.log", "{run_dir}/job/group1.log"],
        # torchft_job.py: ProcessGroupGloo(timeout=T) and Manager(timeout=T), both --timeout
        # and Manager(quorum_timeout=max(30 s, T))
        timeouts=JobTimeouts(collective=_flag(flags, "--timeout", 10.0), train=_flag(flags, "--timeout", 10.0),
                             quorum=max(30.0, _flag(flags, "--timeout", 10.0))),
        # node 0's launcher starts the lighthouse on the rendezvous port
        control_plane={"lighthouse": ControlPlaneProcess(cmdline=r"torchft_lighthouse", port="{port}",
                                                         address="{head}:{port}")},
    )


# The job's own lines in the stack jobs of drillbit.fixtures.stacks.loop (NVRx, DLRover)
_LOOP_SIGNALS = [
    Signal(kind="step", pattern=r"^step=(?P<n>\d+) rank=(?P<rank>\d+) ", ints=["n", "rank"]),
    Signal(kind="ckpt.save", pattern=r"^saved step=(?P<step>\d+) path=(?P<path>\S+)", ints=["step"]),
    Signal(kind="ckpt.save", pattern=r"^saved step=(?P<step>\d+) tier=(?P<tier>\w+)", ints=["step"]),
    Signal(kind="restore", pattern=r"^restored step=(?P<step>\d+) path=(?P<path>\S+)(?: tier=(?P<tier>\w+))?",
           ints=["step"]),
]
_LOOP_CKPT = CheckpointSpec(dir="{run_dir}/job/ckpt", layout="glob", glob="step_*.pt", step_regex=r"step_(\d+)\.pt")


def _loop_job(stack: str, agent: str, logs: list[str], description: str, *flags: str) -> JobProfile:
    """Two ranks of drillbit.fixtures.stacks.loop under a stack's launcher (drillbit.fixtures.stacks.<stack>_job);
    ``agent`` is the launcher's command-line regex, the parent of the ranks."""
    module = rf"drillbit\.fixtures\.stacks\.{stack}_job"
    return JobProfile(
        description=description,
        presets=[stack, "torchrun"],
        signals=_LOOP_SIGNALS,
        launch=LaunchSpec(command=["{python}", "-m", f"drillbit.fixtures.stacks.{stack}_job", "launch", "--run-dir",
                                   "{run_dir}/job", *flags]),
        ranks=RankDiscovery(cmdline=rf"-m {module} train\b", exclude_cmdline=agent),
        launcher=rf"{agent}|{module} launch",
        logs=logs,
        checkpoint=_LOOP_CKPT,
    )


def _nvrx(description: str, *flags: str) -> JobProfile:
    """Two ranks under NVRx's ft_launcher with rank-monitor heartbeats."""
    # NVRx's heartbeat is sent from the training loop, once a step: a progress watchdog, not a
    # liveness one (its defaults: 60 min before the first heartbeat, 45 min after)
    return _loop_job("nvrx", "ft_launcher", ["{run_dir}/job/launcher.log"], description, *flags).model_copy(
        update={"timeouts": JobTimeouts(collective=1800.0,
                                        watchdog=2700.0 if "--default-timeouts" in flags else 10.0)})


def _dlrover(description: str, *flags: str) -> JobProfile:
    """Two ranks under DLRover's dlrover-run with its job master."""
    return _loop_job("dlrover", "dlrover-run", ["{run_dir}/job/agent.log", "{run_dir}/job/master.log"], description,
                     "--master", "{head}:{port}", *flags)


def _dlrover_flash(description: str, *flags: str) -> JobProfile:
    """The DLRover job with flash checkpoints: a memory tier in the agent's shared memory
    (known from the job's save lines) and a disk tier (DIR/ckpt/<step>/rank_0.pt)."""
    job = _dlrover(description, "--ckpt", "flash", *flags)
    return job.model_copy(update={
        "checkpoint": CheckpointSpec(dir="{run_dir}/job/ckpt", layout="glob", glob="[0-9]*", step_regex=r"^(\d+)$"),
        "tiers": {"memory": SavedTier(known_from="saves", lost_with="node"),
                  "disk": CheckpointSpec(dir="{run_dir}/job/ckpt", layout="glob", glob="[0-9]*", step_regex=r"^(\d+)$")},
    })


def _reference_slurm(description: str, *flags: str) -> JobProfile:
    """The reference job as one Slurm batch job on one node (2 ranks under torchrun), submitted
    with --requeue: a requeued rerun restores the newest checkpoint."""
    job = _reference(description, *flags)
    assert job.launch is not None
    return job.model_copy(update={
        "launch": LaunchSpec(command=["{python}", "-m", "drillbit.fixtures.reference.launch", "--run-dir", "{run_dir}/job",
                                      "--nnodes", "1", "--nproc", "2", "--node-name", "{node}", *flags]),
        "slurm": SlurmJob(nodes=1, requeue=True),
        "logs": [*job.logs, "{run_dir}/job.out"],
        "replacement": None,
    })


def _jax(description: str, *flags: str) -> JobProfile:
    """Two JAX processes with Orbax checkpoints under torchrun (drillbit.fixtures.stacks.jax_job): a
    local tier per process and a persistent tier."""
    return JobProfile(
        description=description,
        presets=["orbax", "torchrun"],
        signals=[Signal(kind="step", pattern=r"^step=(?P<n>\d+) rank=(?P<rank>\d+) ", ints=["n", "rank"]),
                 Signal(kind="restore", pattern=r"^restored step=(?P<step>\d+)(?: tier=(?P<tier>\w+))? ", ints=["step"])],
        launch=LaunchSpec(command=["{python}", "-m", "drillbit.fixtures.stacks.jax_job", "launch", "--run-dir", "{run_dir}/job",
                                   *flags]),
        ranks=RankDiscovery(cmdline=r"-m drillbit\.fixtures\.stacks\.jax_job train\b",
            exclude_cmdline=r"torch\.distributed\.run"),
        launcher=r"torch\.distributed\.run|drillbit\.fixtures\.stacks\.jax_job launch",
        logs=["{run_dir}/job/launcher.log"],
        checkpoint=CheckpointSpec(dir="{run_dir}/job/persistent", layout="orbax"),
        tiers={"local": CheckpointSpec(dir="{run_dir}/job/local/p{rank}", layout="orbax"),
               "persistent": CheckpointSpec(dir="{run_dir}/job/persistent", layout="orbax")},
        # JAX's coordination service: heartbeats from a thread of its own, a liveness check
        timeouts=JobTimeouts(heartbeat=_flag(flags, "--heartbeat", 10.0)),
    )


BUILTIN_CLUSTERS: dict[str, Cluster] = {
    "local": RayCluster(engine="ray", nodes=2, description="embedded: a Ray cluster of 2 simulated nodes on "
                                                            "127.0.0.1, started and stopped by the drill"),
    "local-process": ProcessCluster(engine="process", job_grace=5.0,
                                 description="one node, the agent in the drill's own process; no Ray"),
    "local-netns": ProcessCluster(engine="process", topology="netns", nodes=2, job_grace=5.0,
                               description="2 simulated nodes, each a network namespace (10.77.0.1-2) on a private "
                                           "bridge, the agents in the drill's own process; needs root"),
    "local-netns-frontend": ProcessCluster(
        engine="process", topology="netns", nodes=2, job_grace=5.0, frontend_mbit=8.0,
        description="local-netns with a second, slow network: hostnames resolve to an 8 Mbit/s frontend "
                    "(10.78.0.1-2) while gloo runs on the backend (10.77.0.1-2), as on torchft#329's cluster"),
    "local-ray-netns": RayCluster(
        engine="ray", topology="netns", nodes=2, job_grace=5.0,
        description="the embedded Ray cluster on 2 nodes that are network namespaces: the head (GCS at "
                    "10.77.0.1:6379) in node 0's, a raylet in node 1's, the driver joining from the switch; needs root"),
    "local-netns-etcd": ProcessCluster(
        engine="process", topology="netns", nodes=2, job_grace=5.0,
        description="local-netns with a real etcd (Debian's etcd-server, v2 API on) on the service address "
                    "10.77.0.254:2379, no node's: a rendezvous that survives the loss of any node",
        services=[ServiceSpec(name="etcd", port=2379, command=[
            "etcd", "--name", "rdzv", "--data-dir", "{run_dir}/etcd", "--enable-v2",
            "--listen-client-urls", "http://{service_host}:2379", "--advertise-client-urls", "http://{service_host}:2379",
            "--listen-peer-urls", "http://127.0.0.1:2380"])]),
}

BUILTIN_JOBS: dict[str, JobProfile] = {
    "reference": _reference("4-rank data-parallel job (a gradient all-reduce a step) under torchrun with watchdog, "
                            "checksummed checkpoints, store fix"),
    "reference-nowatchdog": _reference("reference job with its progress watchdog switched off", "--no-watchdog"),
    "reference-nostorefix": _reference("reference job without the per-attempt store prefix: a restart reads the dead "
                                       "workers' addresses and, most of the time, never rendezvouses (a real race)",
                                       "--no-store-fix"),
    "reference-norestarts": _reference("reference job under torchrun --max-restarts 0: a lost worker ends the job",
                                       "--max-restarts", "0"),
    "reference-heavy": _reference("the reference job with 24 MiB of model state, which every save writes and a restart "
                                  "reads back from the checkpoint: checkpoint-restart, beside torchft's heal of the "
                                  "same weight (slow-recovery-network)", "--state-mb", "24"),
    "reference-liveness": _reference("reference job whose watchdog checks only liveness: each worker's heartbeat "
                                     "thread, not its steps (what NVRx's rank monitor and JAX's coordination "
                                     "service check)", "--watchdog-watch", "liveness"),
    "reference-etcd": _reference("reference job whose torchrun rendezvouses through etcd (--rdzv-backend etcd-v2 at "
                                 "{service_host}:2379), not a c10d store in node 0's agent; needs --cluster "
                                 "local-netns-etcd", "--rdzv-backend", "etcd-v2", "--rdzv-endpoint",
                                 "{service_host}:2379"),
    "reference-noverify": _reference("reference job restoring without checksum verification", "--no-verify"),
    "reference-noweights": _reference("reference job whose restore resumes the step and says it loaded, but loads no "
                                      "weights: load_state_dict(strict=False) into keys with DDP's 'module.' prefix "
                                      "(pytorch/vision#3285, ScrollPrize/villa#1475)", "--restore-defect", "weights"),
    "reference-nooptim": _reference("reference job whose restore loads the weights but starts a fresh optimizer and "
                                    "learning-rate schedule", "--restore-defect", "optimizer"),
    "reference-nodata": _reference("reference job whose restore resumes the step while its data loader starts from "
                                   "the first sample (repeated data; msed-Ebrahimi/ARoFace#8)", "--restore-defect", "data"),
    "reference-augment": _reference("reference job that adds noise to every batch from torch's global random number "
                                    "generator (as dropout and augmentation draw from it), the generator's state saved "
                                    "with every checkpoint and restored", "--augment", "0.1"),
    "reference-norng": _reference("reference job that adds noise from torch's global random number generator to every "
                                  "batch and saves the generator's state, but its restore does not load it "
                                  "(transformers#17032): what comes back trains on other noise than it would have",
                                  "--augment", "0.1", "--restore-defect", "rng"),
    "reference-nockpt": _reference("reference job with checkpoints switched off", "--ckpt-every", "0"),
    "reference-nostraggler": _reference("reference job without a straggler detector", "--straggler", "off"),
    "reference-naivereplace": _reference("reference job whose node replacement waits on one call and takes "
                                         "whatever node comes back", "--replace-policy", "naive"),
    "reference-rigid": _reference("reference job that needs every node (--nnodes N:N): it waits in rendezvous "
                                  "for a lost node instead of going on without it", "--min-nodes", "{nnodes}"),
    "reference-longrun": _reference("reference job with a restart budget for a long run (torchrun --max-restarts "
                                    "100): what a campaign of many faults needs", "--max-restarts", "100"),
    "reference-slowsave": _reference("reference job whose checkpoint files take 300 ms each to write (atomic "
                                     "save: temp folder, manifest, COMPLETE, rename), so a crash can land inside "
                                     "a save", "--save-pause-ms", "300"),
    "reference-nonatomic": _nonatomic(),
    "reference-nvrx": _reference("reference job whose straggler detector uses NVRx's rule "
                                 "(speed / fastest < 0.75)", "--straggler", "nvrx"),
    "reference-waittimer": _reference("reference job whose per-rank timer wraps the backward and the gradients' all-reduce "
                                      "(as a timer around DDP's backward does): every rank's time holds the wait for "
                                      "the slowest, so its straggler detector and drillbit's reading see ranks alike "
                                      "(traceml-ai/traceml#252)", "--compute-timer", "with-allreduce"),
}


BUILTIN_JOBS.update({
    "reference-slurm": _reference_slurm("the reference job as a Slurm batch job (sbatch -N 1 --requeue): 2 ranks "
                                        "under torchrun on one node; a requeued rerun restores the newest checkpoint"),
    "reference-slurm-norequeue": _reference_slurm("the Slurm reference job submitted with --no-requeue: a failed "
                                                  "node ends it").model_copy(
        update={"slurm": SlurmJob(nodes=1, requeue=False)}),
})


BUILTIN_JOBS.update({
    "torchft": _torchft("torchft 0.2.0: 2 replica groups that heal from each other (Manager, ProcessGroupGloo, "
                        "per-gradient allreduce), each under torchrun, and a lighthouse; 10 s timeouts"),
    "torchft-ddp": _torchft("the torchft job with torchft.ddp.DistributedDataParallel: a peer that dies "
                            "mid-allreduce takes the survivor down too", "--ddp"),
    "torchft-slowtimeout": _torchft("the torchft job with torchft's default 60 s timeout: a stopped peer "
                                    "holds the survivor for a minute", "--timeout", "60"),
    "torchft-maxretries": _torchft("the torchft job with Manager(max_retries=3): a commit that fails 4 times in a row "
                                   "raises, and the group restarts, instead of retrying for ever (torchft#151)",
                                   "--max-retries", "3"),
    "torchft-allreplicas": _torchft("the torchft job whose quorum needs every replica group (lighthouse "
                                    "--min_replicas 2, Manager min_replica_size=2): a group cut off from the "
                                    "lighthouse stops the others too", "--min-replicas", "2"),
    # a heal's copy must finish within torchft's timeout: the serving replica waits that long for
    # the copy's read lock, then raises ("Timed out waiting for wlock"), so the 10 s of the other
    # profiles would turn a slow heal into a crash loop; torchft#329's job got its copy through
    "torchft-heavy": _torchft("the torchft job with 24 MiB of state a heal copies and a 60 s timeout, advertising "
                              "its hostname for recovery (torchft's default): where hostnames name a slow network, a "
                              "heal crawls (torchft#329)", "--state-mb", "24", "--timeout", "60"),
    "torchft-heavy-backend": _torchft("the 24 MiB torchft job advertising the address of gloo's interface for "
                                      "recovery (torchft#329's fix): a heal takes the fast network",
                                      "--state-mb", "24", "--timeout", "60", "--advertise", "gloo-interface"),
    "nvrx": _nvrx("NVIDIA Resiliency Extension 0.4.1: 2 ranks under ft_launcher, rank-monitor heartbeats "
                  "(10 s timeout), in-job restart (3), a checkpoint every 10 steps"),
    "nvrx-defaults": _nvrx("the NVRx job with NVRx's own heartbeat timeouts (60 min initial, 45 min after): a "
                           "hung rank is caught after three quarters of an hour", "--default-timeouts"),
    "dlrover": _dlrover("DLRover 0.6.1: 2 ranks under dlrover-run (elastic agent, diagnosis agent, 3 restarts) "
                        "with its job master on loopback, a checkpoint every 10 steps"),
    "dlrover-norestarts": _dlrover("the DLRover job with --max-restarts 0: a lost worker ends the job",
                                   "--max-restarts", "0"),
    "dlrover-flash": _dlrover_flash("the DLRover job with flash checkpoints: the state in the agent's shared memory "
                                    "every 2 steps, on disk every 10; a restarted worker loads memory"),
    **{name: _dlrover_flash(description, "--ckpt-every", "0", *flags).model_copy(update={"signals": [
        *_LOOP_SIGNALS, Signal(kind="metrics", pattern=r"^step=(?P<n>\d+) rank=0 loss=(?P<loss>[-+\d.eE]+|nan|inf)",
                               ints=["n"])]})
       for name, description, flags in (
           ("dlrover-flash-memonly", "the DLRover job with flash checkpoints to the agent's shared memory only (every "
                                     "2 steps, none on disk); its restart calls DLRover 0.6.1's load_checkpoint(), which "
                                     "reads memory first (dlrover#1085, in 0.3.6)", ()),
           ("dlrover-flash-memonly-tracker", "dlrover#1065 by its mechanism: memory-only flash checkpoints, and a "
                                             "restart that reads only the tracker file (never written without a disk "
                                             "save), as the load before dlrover#1085 did: it starts from random weights",
            ("--restore", "disk")))},
    "dlrover-flash-diskonly": _dlrover_flash("the flash-checkpoint DLRover job whose restart loads the newest disk "
                                             "checkpoint, whatever memory holds: it falls back further than it "
                                             "needs to", "--restore", "disk"),
    "jax-orbax": _jax("JAX 0.10.2 with Orbax 0.12.8's emergency checkpoints: 2 processes under torchrun, a local "
                      "tier per process every 5 steps, a persistent tier every 10, a 10 s coordination heartbeat"),
    "jax-orbax-persistent": _jax("the JAX job whose restart restores the newest persistent checkpoint, whatever "
                                 "its local tier holds: it falls back further than it needs to",
                                 "--restore", "persistent"),
    "jax-orbax-slowheartbeat": _jax("the JAX job with JAX's default 100 s coordination heartbeat: a dead peer "
                                    "holds the survivor for over a minute", "--heartbeat", "100"),
    "jax-orbax-plain": _jax("the JAX job with Orbax's plain CheckpointManager: one persistent tier, every 10 steps",
                            "--ckpt", "plain"),
    "jax-orbax-p2p": _jax("the JAX job with Orbax's P2P CheckpointManager: a local tier per process every 5 steps, "
                          "peers serving their copies over TCP, a persistent tier every 10 (its P2P server binds "
                          "every interface: drill it under python -m drillbit.core.netns)", "--ckpt", "p2p"),
    "jax-orbax-p2p-unreachable": _jax("the P2P JAX job whose processes tell their peers an address the others "
                                      "cannot reach (a host name resolving to the wrong interface): a lost "
                                      "local copy cannot be fetched from a peer", "--ckpt", "p2p",
                                      "--peer-host", "192.0.2.1"),
    "raytrain": _raytrain("4 Ray Train workers (TorchTrainer, CPU, gloo) with FailureConfig(max_failures=3), "
                          "checkpoints through train.report, a 10 s collective timeout; Ray clusters only"),
    "raytrain-nofailover": _raytrain("the Ray Train job with FailureConfig(max_failures=0): a lost worker ends "
                                     "the run", "--max-failures", "0"),
    "raytrain-notimeout": _raytrain("the Ray Train job with gloo's 30-minute collective timeout: a hung "
                                    "all-reduce is never caught", "--collective-timeout", "1800"),
})



def _defect_job(module: str, description: str, *flags: str, presets: list[str], checkpoint: CheckpointSpec | None,
                signals: list[Signal] | None = None, ranks: int = 2, restarts: int = 3,
                env: dict[str, str] | None = None) -> JobProfile:
    """A job of :mod:`drillbit.fixtures.defects` (drills/known-defects/): 2 ranks under torchrun
    (--standalone, 3 restarts, polled every 0.5 s), its output in the run folder's job.out."""
    return JobProfile(
        description=description,
        presets=presets,
        signals=signals or [],
        launch=LaunchSpec(command=["{python}", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                                   str(ranks), "--max-restarts", str(restarts), "--monitor-interval", "0.5", "-m",
                                   f"drillbit.fixtures.defects.{module}", *flags],
                          env={"LOGLEVEL": "INFO", **(env or {})}),
        ranks=RankDiscovery(cmdline=rf"-m drillbit\.fixtures\.defects\.{module}\b", exclude_cmdline=r"torch\.distributed\.run"),
        launcher=r"torch\.distributed\.run",
        logs=["{run_dir}/job.out"],
        checkpoint=checkpoint,
    )


# lightning_resume's rank 0: 'lstep n=12 epoch=0 loss=0.407295 lr=0.013 samples=192', 'lrestore step=10 path=…'
_LIGHTNING_RESUME_SIGNALS = [
    Signal(kind="step", pattern=r"^lstep n=(?P<n>\d+) epoch=(?P<epoch>\d+) loss=(?P<loss>\S+) lr=(?P<lr>\S+) "
                                r"samples=(?P<samples>\d+)", ints=["n", "epoch", "samples"]),
    Signal(kind="restore", pattern=r"^lrestore step=(?P<step>\d+) path=(?P<path>\S+)", ints=["step"]),
]
# ray25_recovered (Ray 2.5's AIR API): Tune's line for a lost worker; the driver's and the workers' exceptions
_RAY25_SIGNALS = [
    Signal(kind="detect", pattern=r"INFO utils\.py:\d+ -- Worker \d+ has failed\.", by="ray-train"),
    Signal(kind="error", pattern=r"^(?P<message>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception): .*)$", by="ray-train-driver"),
    Signal(kind="error", pattern=r"\((?:RayTrainWorker|TorchTrainer) pid=\d+\)\S*\s+(?P<message>(?:[A-Za-z_]\w*\.)*"
                                 r"[A-Z]\w*(?:Error|Exception)(?::\s.*)?)$", by="ray-train-worker"),
]
_HF_OUT = CheckpointSpec(dir="{run_dir}/job/out", layout="hf")
_REDO_CKPT = CheckpointSpec(dir="{run_dir}/job/ckpt", layout="custom", glob="step_*", step_regex=r"^step_(\d+)$",
                            marker="complete")


def _respawned(description: str, *flags: str) -> JobProfile:
    """The multi-node reference job with each node's launcher under drillbit.fixtures.defects.respawn
    (a node supervisor that starts it again at once, as systemd's Restart=on-failure does),
    and node 1's elastic agent named as a control-plane process of its own."""
    job = _reference(description, *flags)
    assert job.launch is not None
    return job.model_copy(update={
        "launch": job.launch.model_copy(update={"command": ["{python}", "-m", "drillbit.fixtures.defects.respawn", "--",
                                                            *job.launch.command]}),
        "launcher": r"torch\.distributed\.run|drillbit\.fixtures\.reference\.launch|drillbit\.fixtures\.defects\.respawn",
        "control_plane": {**job.control_plane, "elastic-agent-1": ControlPlaneProcess(
            cmdline=r"torch\.distributed\.run", node=1)},
    })


def _elastic_two_node(description: str, agent: list[str], worker: list[str], *, env: dict[str, str] | None = None,
                      signals: list[Signal] | None = None, launcher: str = r"torch\.distributed\.run",
                      exclude: str = r"torch\.distributed\.run",
                      control_plane: dict[str, ControlPlaneProcess] | None = None,
                      collective: float | None = None) -> JobProfile:
    """A job of drillbit.fixtures.defects on every node of a namespace cluster: torchrun --nnodes 1:{nnodes}
    (c10d, node 0 the rendezvous host), one rank per node, 3 restarts, polled every 0.5 s."""
    return JobProfile(
        description=description,
        presets=["torchrun"],
        signals=signals or _LOOP_SIGNALS,
        launch=LaunchSpec(command=["{python}", "-m", *agent, "--nnodes", "1:{nnodes}", "--nproc-per-node", "1",
                                   "--rdzv-backend", "c10d", "--rdzv-endpoint", "{head}:{port}", "--rdzv-id",
                                   "elastic", "--rdzv-conf", "last_call_timeout=3,join_timeout=120",
                                   "--max-restarts", "3", "--monitor-interval", "0.5", "-m", *worker,
                                   "--ckpt-dir", "{run_dir}/job/ckpt"],
                          env={"LOGLEVEL": "INFO", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **(env or {})},
                          per_node=True),
        ranks=RankDiscovery(cmdline=rf"-m {worker[0].replace('.', chr(92) + '.')}\b", exclude_cmdline=exclude),
        launcher=launcher,
        checkpoint=_LOOP_CKPT,
        control_plane=control_plane or {},
        timeouts=JobTimeouts(collective=collective, monitor_interval=0.5) if collective else None,
    )


_RANK_CHANGE = ["drillbit.fixtures.defects.rank_change", "launch", "--node-rank", "{node_rank}", "--first-node", "1"]
_RANK_CHANGE_LAUNCHER = r"defects\.rank_change (launch|agent)\b"
_SIGNAL_CLOSE_CP = {"elastic-agent-1": ControlPlaneProcess(
    cmdline=r"^\S+ -m drillbit\.fixtures\.defects\.signal_close\b", node=1)}
# lazy_sync's ranks step on their own between syncs: rank 0's steps only (a lagging rank's would read as a restart)
_SYNC_SIGNALS = [Signal(kind="step", pattern=r"^step=(?P<n>\d+) rank=(?P<rank>0) ", ints=["n", "rank"]),
                 *_LOOP_SIGNALS[1:]]
_SYNC = ["drillbit.fixtures.defects.lazy_sync", "--sync-every", "10", "--collective-timeout", "10"]

_ELASTIC_DEFECT_JOBS = {
    "elastic-rankchange": _elastic_two_node(
        "pytorch#182221 by its mechanism: torchrun --nnodes 1:2 (c10d, TCPStore shared with the workers) on two "
        "nodes, node 1 group rank 0 (it advertises its address), node 0 the rendezvous host; next_rendezvous as "
        "torch 2.12 had it (PR #182375 reverted)",
        [*_RANK_CHANGE, "--revert-182375", "--"], ["drillbit.fixtures.defects.rank_change", "train"],
        launcher=_RANK_CHANGE_LAUNCHER, exclude=_RANK_CHANGE_LAUNCHER),
    "elastic-rankchange-fixed": _elastic_two_node(
        "the same two-node elastic job on torch 2.13's torchrun as shipped (PR #182375: a node that becomes rank 0 "
        "creates the shared store's server)",
        [*_RANK_CHANGE, "--"], ["drillbit.fixtures.defects.rank_change", "train"],
        launcher=_RANK_CHANGE_LAUNCHER, exclude=_RANK_CHANGE_LAUNCHER),
    "lazy-sync": _elastic_two_node(
        "gloo#520 at torch 2.13: two nodes (torchrun --nnodes 1:2, one rank each) that average their weights over a "
        "gloo subgroup every 10 steps, TORCH_GLOO_LAZY_INIT=1 (pairs connect on first use), the groups' timeout 10 s",
        ["torch.distributed.run"], _SYNC, env={"TORCH_GLOO_LAZY_INIT": "1"}, signals=_SYNC_SIGNALS, collective=10.0),
    "lazy-sync-eager": _elastic_two_node(
        "the same two-node job with gloo's eager connect (TORCH_GLOO_LAZY_INIT unset, torch 2.13's default): every "
        "pair of the subgroup connects when new_group makes it",
        ["torch.distributed.run"], _SYNC, signals=_SYNC_SIGNALS, collective=10.0),
    "signal-close": _elastic_two_node(
        "pytorch#67742 by its mechanism: torchrun --nnodes 1:2 (c10d) on two nodes, one rank each, whose agent shuts "
        "the rendezvous down when a signal stops it (LocalElasticAgent._shutdown as torch 2.4-2.7 had it)",
        ["drillbit.fixtures.defects.signal_close", "--close-on-signal"], ["drillbit.fixtures.defects.rank_change", "train"],
        launcher=r"defects\.signal_close\b", exclude=r"defects\.signal_close\b", control_plane=_SIGNAL_CLOSE_CP),
    "signal-close-fixed": _elastic_two_node(
        "the same two-node elastic job on torch 2.13's torchrun as shipped: a signal stops the agent and its workers "
        "and leaves the rendezvous open (pytorch PR #67749, again since PR #152525)",
        ["drillbit.fixtures.defects.signal_close"], ["drillbit.fixtures.defects.rank_change", "train"],
        launcher=r"defects\.signal_close\b", exclude=r"defects\.signal_close\b", control_plane=_SIGNAL_CLOSE_CP),
}


# the async-save job's lines: each save and restore with a digest of the state (drillbit.fixtures.defects.async_save)
_DIGEST_SIGNALS = [
    _LOOP_SIGNALS[0],  # step=N rank=R
    Signal(kind="ckpt.save", pattern=r"^saved step=(?P<step>\d+) path=(?P<path>\S+) digest=(?P<digest>\w+)",
           ints=["step"]),
    Signal(kind="restore", pattern=r"^restored step=(?P<step>\d+) path=(?P<path>\S+) digest=(?P<digest>\w+)",
           ints=["step"]),
]

_DCP_CKPT = CheckpointSpec(dir="{run_dir}/job/ckpt", layout="dcp")
# drillbit.fixtures.defects.nan_local's two tiers share one folder (local_step_N.pt, global_step_N.pt): the
# newest copy is the local one a restart loads first, and the damage's read witness sees a read
# of either tier
_BOTH_TIERS = CheckpointSpec(dir="{run_dir}/job/ckpt", layout="glob", glob="*_step_*.pt", step_regex=r"_step_(\d+)\.pt$")
_LOCAL = CheckpointSpec(dir="{run_dir}/job/ckpt", layout="glob", glob="local_step_*.pt", step_regex=r"^local_step_(\d+)\.pt$")
_GLOBAL = CheckpointSpec(dir="{run_dir}/job/ckpt", layout="glob", glob="global_step_*.pt",
                         step_regex=r"^global_step_(\d+)\.pt$")


def _two_tiers(description: str, *flags: str) -> JobProfile:
    """drillbit.fixtures.defects.nan_local: a local tier every 5 steps (the one a restart loads first)
    and a global tier every 10; the profile's checkpoint is both, so its newest copy is local."""
    reject = Signal(kind="ckpt.reject", pattern=r"^rejected step=(?P<step>\d+) path=(?P<path>\S+) tier=(?P<tier>\w+): "
                                                 r"(?P<reason>.+)$", ints=["step"])
    job = _defect_job("nan_local", description, "--ckpt-dir", "{run_dir}/job/ckpt", *flags, presets=["torchrun"],
                      checkpoint=_BOTH_TIERS, signals=[*_LOOP_SIGNALS, reject])
    return job.model_copy(update={"tiers": {"local": _LOCAL, "global": _GLOBAL}})


# drills/known-defects/: each published defect's affected job and its fixed counterpart
BUILTIN_JOBS.update({
    "local-tier-trusted": _two_tiers("Megatron-LM#5281 by its mechanism: a restart loads the newest local-tier "
                                     "copy without checking it; NaN weights stop the job at its next step"),
    "local-tier-checked": _two_tiers("the two-tier job whose restart checks that the local copy's weights are finite "
                                     "and, on NaN, falls back to the global tier", "--restore", "check"),
    "latest-at-dispatch": _defect_job(
        "latest_early", "KempnerForge#102: DCP async_save (torch 2.13) of 2 ranks, the job's latest pointer moved as "
        "soon as the save is dispatched, before its shards and .metadata are written", "--ckpt-dir",
        "{run_dir}/job/ckpt", presets=["torchrun"], checkpoint=_DCP_CKPT, signals=_LOOP_SIGNALS),
    "latest-when-durable": _defect_job(
        "latest_early", "the DCP async-save job whose latest pointer moves only once the save's future is done",
        "--ckpt-dir", "{run_dir}/job/ckpt", "--latest", "durable", presets=["torchrun"], checkpoint=_DCP_CKPT,
        signals=_LOOP_SIGNALS),
    "reference-respawn": _respawned(
        "pytorch#147064: the reference job on 2+ nodes under torchrun --max-restarts 0, each node's launcher "
        "started again at once when it dies (a node supervisor's Restart=on-failure)", "--max-restarts", "0"),
    "async-save-offload": _defect_job(
        "async_save", "pytorch#144657 by its mechanism: rank 0 saves in a background thread what an offload to "
        "the CPU staged, the live tensors themselves, while training goes on", "--ckpt-dir", "{run_dir}/job/ckpt",
        presets=["torchrun"], checkpoint=_LOOP_CKPT, signals=_DIGEST_SIGNALS),
    "async-save-copy": _defect_job(
        "async_save", "the async-save job with pytorch#145408's fix: the state is copied before the background "
        "write", "--ckpt-dir", "{run_dir}/job/ckpt", "--stage", "copy", presets=["torchrun"],
        checkpoint=_LOOP_CKPT, signals=_DIGEST_SIGNALS),
    "hf-autoresume": _defect_job(
        "hf_resume", "transformers#35782: a Hugging Face Trainer job (transformers 5.25, 2 ranks) whose restart "
        "resumes from get_last_checkpoint, the highest checkpoint-N, complete or not", "--out", "{run_dir}/job/out",
        presets=["torchrun", "hf-trainer"], checkpoint=_HF_OUT),
    "hf-autoresume-complete": _defect_job(
        "hf_resume", "the Hugging Face Trainer job whose restart resumes from the newest checkpoint-N holding "
        "trainer_state.json (the workaround of transformers#35525)", "--out", "{run_dir}/job/out", "--resume",
        "complete", presets=["torchrun", "hf-trainer"], checkpoint=_HF_OUT),
    **{name: _defect_job(
        "hf_rng", description, "--out", "{run_dir}/job/out", *flags, presets=["torchrun"], checkpoint=_HF_OUT,
        signals=[Signal(kind="step", pattern=r"^step=(?P<n>\d+) rank=(?P<rank>\d+) loss=(?P<loss>\S+)",
                        ints=["n", "rank"]), *_LOOP_SIGNALS[1:]])
       for name, description, flags in (
           ("hf-rng", "a Hugging Face Trainer job (transformers 5.25, 2 ranks, attention dropout) saving every epoch "
                      "and resuming from get_last_checkpoint; the Trainer loads each rank's RNG state", ()),
           ("hf-rng-skip", "the same Trainer job with Trainer._load_rng_state a no-op (transformers#17032's "
                           "mechanism): the resumed run draws other dropout masks", ("--rng", "skip")))},
    **{name: _defect_job(
        "accel_autoname", description, "--project-dir", "{run_dir}/job/proj", *flags, presets=["torchrun"],
        checkpoint=None, signals=_LOOP_SIGNALS)
       for name, description, flags in (
           ("accel-autoname", "accelerate#3306 at 1.16.0: an Accelerator job (2 CPU ranks under torchrun, gloo) with "
                              "automatic checkpoint naming; its restart calls load_state() and its next save_state() "
                              "aims at checkpoint_0 again", ()),
           ("accel-autoname-restore", "the Accelerator job that, after load_state(), sets "
                                      "project_configuration.iteration to the loaded checkpoint's number plus one (the "
                                      "fix accelerate#3306 asks for)", ("--iteration", "restore")))},
    **_ELASTIC_DEFECT_JOBS,
    **{name: _defect_job(
        "lightning_stepping", description, "--out", "{run_dir}/job/out", *flags, presets=["torchrun"],
        checkpoint=CheckpointSpec(dir="{run_dir}/job/out/checkpoints", layout="file", files=["last.ckpt"]),
        signals=_LIGHTNING_RESUME_SIGNALS, env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"})
       for name, description, flags in (
           ("lightning-stepping-estimated", "Lightning#20550 at 2.6.6: a DDP job (2 ranks) with a stateful "
                                            "DataLoader whose configure_optimizers sizes OneCycleLR by "
                                            "trainer.estimated_stepping_batches; that sets the train loader up before the "
                                            "restore, and the checkpoint's loader state is never loaded: a mid-epoch "
                                            "resume starts the epoch again at sample zero",
            ("--total-steps", "estimated")),
           ("lightning-stepping-computed", "the same job sizing OneCycleLR from its own numbers (the number "
                                           "estimated_stepping_batches returns) without calling it, so Lightning 2.6.6 "
                                           "loads the loader's state before it iterates again",
            ("--total-steps", "max-steps")))},
    **{name: _defect_job(
        "accel_shuffle", description, "--out", "{run_dir}/job", *flags, presets=["torchrun"],
        checkpoint=_REDO_CKPT, signals=[Signal(kind="step", pattern=r"^step=(?P<n>\d+) rank=(?P<rank>\d+) loss=(?P<loss>\S+)",
                                               ints=["n", "rank"]), *_LOOP_SIGNALS[1:]])
       for name, description, flags in (
           ("accel-shuffle", "accelerate#3996 at 1.16.0: an Accelerator job (2 CPU ranks under torchrun, gloo) with a "
                             "shuffled, seeded DataLoader (use_seedable_sampler) prepared by it, save_state at every "
                             "epoch's end; its restart calls load_state() and the new loader starts at epoch 0's "
                             "shuffle order", ()),
           ("accel-shuffle-setepoch", "the same Accelerator job that, after load_state(), calls train_dl.set_epoch(epoch) "
                                      "with the epoch recomputed from the restored step (the workaround the "
                                      "accelerate#3996 threads give at 1.16.0)", ("--epoch", "restore")))},
    **{name: JobProfile(
        description=description, presets=["reference"], signals=_RAY25_SIGNALS,
        launch=LaunchSpec(command=["{python}", "-m", "drillbit.fixtures.defects.venvs", "run", stack, "--", "-m",
                                   "drillbit.fixtures.defects.ray25_recovered", "--run-dir", "{run_dir}/job", "--steps",
                                   "40", "--stages", "3"], stop_timeout=30.0),
        ranks=RankDiscovery(pidfiles="{run_dir}/job/pids/*.json"),
        logs=["{run_dir}/job/events.log", "{run_dir}/job.out"], timeouts=JobTimeouts(collective=10.0))
       for name, stack, description in (
           ("ray25-recovered", "ray-2.5.0",
            "ray#36277 at Ray 2.5.0 (a venv of its own: python -m drillbit.fixtures.defects.venvs make ray-2.5.0): a "
            "TorchTrainer (2 gloo workers, FailureConfig(max_failures=3)) whose driver trains in 3 fit() stages of 40 "
            "steps; a stage that recovers from a lost worker and finishes still raises TrainingFailedError from fit()"),
           ("ray25-recovered-fixed", "ray-2.5.1",
            "the same job on Ray 2.5.1 (make ray-2.5.1), which carries ray#36266: a run that recovered and finished "
            "returns from fit()"))},
    "ray-local-restore": _raytrain(
        "ray#36357 by its mechanism: a TorchTrainer (Ray 2.60, 2 workers, gloo) that writes one shard per worker; a "
        "retry restores the coordinator's local copy of the checkpoint (rank 0's shard only) instead of the persisted "
        "one", "--restore", "coordinator-local", module="drillbit.fixtures.defects.ray_local_restore"),
    "ray-persisted-restore": _raytrain(
        "the same job whose retry loads ray.train.get_checkpoint(), the persisted checkpoint with every worker's shard "
        "(Ray 2.60's own restore path)", "--restore", "persisted", module="drillbit.fixtures.defects.ray_local_restore"),
    **{name: _defect_job(
        "lightning_resume", description, "--out", "{run_dir}/job/out", *flags, presets=["torchrun"],
        checkpoint=CheckpointSpec(dir="{run_dir}/job/out/checkpoints", layout="file", files=["last.ckpt"]),
        signals=_LIGHTNING_RESUME_SIGNALS, env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"})
       for name, description, flags in (
           ("lightning-tmpfs-save", "Lightning#19970 at 2.6.6: a DDP job (2 ranks) whose TMPDIR is a tmpfs (/dev/shm) "
                                    "and whose checkpoints are on disk; _atomic_save's fsspec transaction stages "
                                    "last.ckpt in TMPDIR and its commit, across filesystems, copies it into last.ckpt in "
                                    "place (a 64 MiB frozen table; a resumable loader, so that #5325 stays out of it)",
            ("--embed-rows", "262144", "--loader", "resumable", "--staging", "/dev/shm")),
           ("lightning-tmpfs-save-beside", "the same job and TMPDIR with a CheckpointIO plugin that writes each "
                                           "checkpoint beside its name (.last.ckpt.<random>.tmp), fsyncs it and "
                                           "os.replace's it into place (the fix of Lightning PR #21744)",
            ("--embed-rows", "262144", "--io", "beside", "--loader", "resumable", "--staging", "/dev/shm")),
           ("lightning-midepoch-plain", "Lightning#5325 at 2.6.6: a DDP job (2 ranks) with a plain DataLoader, "
                                        "checkpointing every 5 steps mid-epoch; a resume restores the step and epoch, "
                                        "and the loader starts the epoch again at sample zero", ("--loader", "plain")),
           ("lightning-midepoch-resumable", "the same job with a resumable DataLoader (state_dict/load_state_dict: the "
                                            "batches it handed out this epoch), which Lightning 2.6.6 saves in the "
                                            "checkpoint and loads before it iterates again", ("--loader", "resumable")))},
    "redo-save-guard": _defect_job(
        "redo_save", "NeMo Automodel#3254 by its mechanism: every rank writes its shard into step_N/ in place, and "
        "rank 0 alone raises FileExistsError when step_N/ is there already (an interrupted save's)",
        "--ckpt-dir", "{run_dir}/job/ckpt", presets=["torchrun"], checkpoint=_REDO_CKPT, signals=_LOOP_SIGNALS),
    "redo-save-atomic": _defect_job(
        "redo_save", "the redo-save job with Automodel#3261's fix: shards go into step_N.partial/ (a leftover is "
        "cleared), renamed into place once every rank has written", "--ckpt-dir", "{run_dir}/job/ckpt",
        "--save", "atomic", presets=["torchrun"], checkpoint=_REDO_CKPT, signals=_LOOP_SIGNALS),
    **{f"{name}-plain{'-fixed' if fixed else ''}": _defect_job(
        "plain_restart", (f"a plain {words} job under torchrun (2 ranks, one restart allowed) with "
                          "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: each rendezvous round a store of its own (the fix of "
                          "pytorch#135712)") if fixed else
        (f"pytorch#135712 at torch 2.13: a plain {words} job under torchrun (2 ranks, one restart allowed) making its "
         "process group from torchrun's environment; a restarted attempt meets the dead one's keys in the store "
         "torchrun keeps across restarts"),
        "--framework", name, "--out", "{run_dir}/job/out", presets=["torchrun", preset], checkpoint=ckpt,
        restarts=1, env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"} if fixed else None)
       for name, words, preset, ckpt in (("hf", "Hugging Face Trainer", "hf-trainer", _HF_OUT),
                                         ("lightning", "Lightning", "lightning",
                                          CheckpointSpec(dir="{run_dir}/job/out/checkpoints", layout="lightning")))
       for fixed in (False, True)},
})

def with_builtins(config: DrillConfig) -> DrillConfig:
    return config.model_copy(update={
        "clusters": {**BUILTIN_CLUSTERS, **config.clusters},
        "jobs": {**BUILTIN_JOBS, **config.jobs},
    })
