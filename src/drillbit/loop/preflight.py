"""What a drill's preflight refuses on a cluster and job, before anything is touched: one
function, asked by the drill (``DrillRunner.preflight`` raises what it returns) and by
``drill probe`` (its "ready" column), so a "yes" from the probe means ``drill run`` starts.

Only refusals that need no running job and no agent are here: a protected cluster, the
engine's checks (``Nodes.check``: a fault of another engine, a network cut on nodes that
share this machine's network, a placeholder only another engine fills, Slurm's rights), the
fault's binding to the profile (a checkpoint, a tier's folder, a control plane), a launch's
per-node placeholders without ``per_node``, and what the spec asks of the profile's signals and
the cluster's Prometheus.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from drillbit.core.errors import ConfigError
from drillbit.loop.bind import job_params
from drillbit.judging.probes.preset import signals_of
from drillbit.spec.config import CheckpointSpec, ClusterSpec, JobProfile
from drillbit.spec.load import loc_text
from drillbit.spec.models import DrillSpec
from drillbit.spec.placeholders import per_node_findings


def refusals(spec: DrillSpec, job: JobProfile, job_name: str, cluster: ClusterSpec, cluster_name: str,
             nodes: Any, run_dir: Path) -> list[str]:
    """Every refusal of the drill on this cluster and job, in words (empty: preflight passes
    them all). ``nodes``: the cluster's :class:`~drillbit.transport.nodes.Nodes`, not started."""
    out: list[str] = []

    def attempt(fn) -> None:
        try:
            fn()
        except ConfigError as exc:
            out.append(str(exc))

    if cluster.protected:
        out.append(f"cluster {cluster_name!r} is protected; drills are refused there")
    attempt(lambda: nodes.check(job, spec.fault.type, spec.abort.max_duration, job_name))
    attempt(lambda: job_params(spec, job, run_dir))
    if any(sig.url is None for sig in job.prometheus) and not cluster.prometheus:
        out.append(f"job {job_name!r} reads signals from Prometheus: give their url, or prometheus: URL in cluster "
                   f"{cluster_name!r} of drill.yaml")
    if spec.abort.when and not cluster.prometheus:
        out.append(f"abort.when needs the Prometheus that watches the job: prometheus: URL in cluster "
                   f"{cluster_name!r} of drill.yaml")
    out += [f"job {job_name!r} {loc_text(loc)}: {message}" for loc, message in _per_node(job)[0]]
    kinds = {s.kind for s in signals_of(job.presets, job.signals)}
    if spec.steady.members is not None and "members" not in kinds:
        out.append(f"steady.members needs a membership signal (kind members, as the torchft preset reads the "
                   f"lighthouse's quorum); job {job_name!r} reads none")
    out += _uninterrupted_refusals(spec, job, job_name)
    return list(dict.fromkeys(out))


def _uninterrupted_refusals(spec: DrillSpec, job: JobProfile, job_name: str) -> list[str]:
    """matches_uninterrupted launches the job a second time, from nothing: it needs a job the
    drill launches, whose checkpoints are the run's own (a folder outside {run_dir} would hand the
    second run the drill's checkpoints, and take its saves)."""
    if spec.slo.matches_uninterrupted is None:
        return []
    if job.launch is None:
        return [f"matches_uninterrupted runs the job a second time without the fault: job {job_name!r} is attached to, "
                "not launched by drillbit (give it a launch: command)"]
    folders = [job.checkpoint.dir] if job.checkpoint is not None else []
    folders += [t.dir for t in job.tiers.values() if isinstance(t, CheckpointSpec)]
    outside = [f for f in folders if not _under_run_dir(f)]
    logs = [f for f in job.logs if not _under_run_dir(f)]
    out = []
    if outside:
        out.append(f"matches_uninterrupted runs job {job_name!r} a second time, from nothing, in a folder of its own: "
                   f"its checkpoints ({', '.join(outside)}) are not under {{run_dir}}, so the second run would restore "
                   "the drill's and save over them")
    if logs:
        out.append(f"matches_uninterrupted reads the second run of job {job_name!r} from its own logs: "
                   f"{', '.join(logs)} not under {{run_dir}} would hand it the drill's lines")
    return out


def _under_run_dir(path: str) -> bool:
    """{run_dir}/…, with no '..' to climb out of it."""
    return path.startswith("{run_dir}/") and ".." not in Path(path).parts


def cautions(job: JobProfile, job_name: str) -> list[str]:
    """What the drill says before it starts and does not refuse (a launch told {nnodes} that
    starts on one node: right for a launcher that reaches the other nodes itself)."""
    return [f"job {job_name!r} {loc_text(loc)}: {message}" for loc, message in _per_node(job)[1]]


def _per_node(job: JobProfile) -> tuple[list, list]:
    if job.launch is None:
        return [], []
    return per_node_findings(job.launch.command, job.launch.env, job.launch.per_node)
