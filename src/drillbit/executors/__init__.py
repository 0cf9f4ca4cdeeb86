"""Executors: how the runner reaches the nodes' agents.

``process``: one agent in the controller's process (``local-process``). ``ray``: one agent
actor per node of a Ray cluster, or of the embedded local one (``local``). ``ssh``: one
``python -m drillbit.agent serve`` per host, reached through Fabric.
"""
from __future__ import annotations

from pathlib import Path

from drillbit.spec.config import ClusterSpec


def make_executor(name: str, cluster: ClusterSpec, run_dir: Path):
    if cluster.engine == "ray":
        from drillbit.executors.ray import RayExecutor

        return RayExecutor(run_dir, name, address=cluster.address, nodes=cluster.nodes,
                           cpus_per_node=cluster.cpus_per_node, deadman_s=cluster.deadman,
                           job_grace_s=cluster.job_grace, skew=cluster.simulate_clock_skew,
                           lease_ttl=cluster.lease_ttl)
    if cluster.engine == "ssh":
        from drillbit.executors.ssh import SshExecutor

        return SshExecutor(run_dir, name, cluster)
    from drillbit.executors.local import LocalExecutor

    return LocalExecutor(run_dir, name)
