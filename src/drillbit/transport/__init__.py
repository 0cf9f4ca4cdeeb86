"""Transports: how the controller reaches the nodes' agents. Each is a thin adapter that
carries ``(method, request)`` to :meth:`drillbit.agent.service.AgentService.dispatch`.

``process`` (inprocess.py): one agent in the controller's process (``local-process``).
``ray`` (ray.py): one agent actor per node of a Ray cluster, or of the embedded local one
(``local``, raycluster.py). ``ssh`` (ssh.py): ``python -m drillbit.agent serve`` per host,
JSON lines over a Fabric connection. ``slurm`` (drillbit.transport.slurm): the same JSON
lines over ``srun --overlap`` into the job's allocation, and a scheduler agent here.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from drillbit.spec.config import ClusterSpec, ProcessCluster, RayCluster
from drillbit.transport import aids

if TYPE_CHECKING:
    from drillbit.transport.nodes import Nodes


def registries_on_hosts(cluster: ClusterSpec) -> bool:
    """Whether the engine keeps its agents' registries on the hosts, not in the run folders
    on this machine (SSH)."""
    return cluster.engine == "ssh"


def node_netns(cluster: ClusterSpec) -> bool | None:
    """Whether a cluster's nodes each have a network namespace of their own, known from its
    config alone (the Nodes' ``node_netns``, for a dry run that connects nothing): a namespace
    cluster's do, local-process's and the embedded Ray cluster's share this machine's, real
    hosts' are found out by their agents at inject."""
    if isinstance(cluster, (ProcessCluster, RayCluster)) and cluster.topology == "netns":
        # a Ray node's agent is an actor in the node's own namespace: a cut would cut it too
        return cluster.engine != "ray"
    if cluster.engine == "process" or (cluster.engine == "ray" and cluster.address is None):
        return False
    return None


def connect(name: str, cluster: ClusterSpec, run_dir: Path) -> "Nodes":
    """The Nodes of a cluster, not yet started, told whether its nodes have networks of their
    own (:func:`node_netns`)."""
    nodes = _nodes(name, cluster, run_dir)
    nodes.node_netns = node_netns(cluster)
    return nodes


def _nodes(name: str, cluster: ClusterSpec, run_dir: Path) -> "Nodes":
    """Each engine is imported when a cluster uses it: Ray and Fabric take seconds to import,
    and a drill uses one engine."""
    if cluster.engine == "ray":
        from drillbit.transport.ray import RayNodes

        return RayNodes.for_cluster(run_dir, name, cluster)
    if cluster.engine == "ssh":
        from drillbit.transport.ssh import SshNodes

        return SshNodes(run_dir, name, cluster)
    if cluster.engine == "slurm":
        from drillbit.transport.slurm import SlurmNodes

        return SlurmNodes(run_dir, name, cluster)
    from drillbit.transport.inprocess import InProcessNodes, NetnsNodes

    if cluster.topology == "netns":
        return NetnsNodes(run_dir, name, cluster.nodes or 2, deadman_s=cluster.deadman,
                          job_grace_s=cluster.job_grace, version=aids.agent_version(),
                          services=cluster.services, frontend_mbit=cluster.frontend_mbit)

    return InProcessNodes(run_dir, name, deadman_s=cluster.deadman, job_grace_s=cluster.job_grace,
                          version=aids.agent_version())


def heal_where_written(name: str, cluster: ClusterSpec, folders: list[Path], *, force: bool,
                       abandon: str | None) -> tuple[list[dict], list[str], bool]:
    """``drill heal --cluster``: heal the registries where the engine keeps them when they are
    not on this machine — on each SSH host over SSH, on each node of a running Ray cluster by a
    task pinned there. (What each host or node reported, the hosts not reached, and whether the
    run folders' own registries were healed there too; False: they are on this machine, for
    ``heal_folder``.)"""
    if cluster.engine == "ssh":
        from drillbit.core.errors import DrillError
        from drillbit.transport.ssh import heal_host

        done: list[dict] = []
        unreached: list[str] = []
        for host in cluster.hosts:
            try:
                done += heal_host(host, cluster.known_hosts, force, abandon)
            except DrillError as exc:
                unreached.append(f"{host.name}: {exc}")
        return done, unreached, False  # a run folder here may hold a registry too (the controller's)
    if cluster.engine == "ray" and cluster.address and folders:
        from drillbit.transport.ray import heal_on_nodes

        remote, unreached = heal_on_nodes(name, cluster, [str(f.resolve()) for f in folders], force=force,
                                          abandon=abandon)
        return list(remote), list(unreached), True
    return [], [], False
