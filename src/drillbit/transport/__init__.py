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

from drillbit.spec.config import ClusterSpec

if TYPE_CHECKING:
    from drillbit.transport.nodes import Nodes


def node_netns(cluster: ClusterSpec) -> bool | None:
    """Whether a cluster's nodes each have a network namespace of their own, known from its
    config alone (the Nodes' ``node_netns``, for a dry run that connects nothing): a namespace
    cluster's do, local-process's and the embedded Ray cluster's share this machine's, real
    hosts' are found out by their agents at inject."""
    if cluster.topology == "netns":
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
                          job_grace_s=cluster.job_grace, version=cluster.simulate_agent_version,
                          services=cluster.services, frontend_mbit=cluster.frontend_mbit)

    return InProcessNodes(run_dir, name, deadman_s=cluster.deadman, job_grace_s=cluster.job_grace,
                          version=cluster.simulate_agent_version)
