"""Cluster config (drill.yaml): named clusters and job profiles.

``local`` (the embedded cluster) and the ``reference`` job profiles are built in, so
``drill run kill-rank`` needs no config file. A drill.yaml adds or overrides entries.
Placeholders in launch commands and paths: ``{run_dir}`` (the drill's run folder, for the
job's own files) and ``{python}`` (the interpreter running drillbit).
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from drillbit.spec.models import Duration, Strict


class ClusterSpec(Strict):
    engine: Literal["local"] = "local"
    description: str = ""
    protected: bool = Field(False, description="refuse every drill (e.g. production)")


class LaunchSpec(Strict):
    command: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    stop_timeout: Duration = 20.0


class RankDiscovery(Strict):
    """How rank processes are found on a node."""

    cmdline: str = Field(description="regex that a rank's command line matches")
    rank_env: str = "RANK"
    exclude_cmdline: str | None = Field(None, description="regex of processes to skip (e.g. the launcher)")


class JobProfile(Strict):
    description: str = ""
    presets: list[str] = Field(default_factory=lambda: ["reference"])
    launch: LaunchSpec | None = None
    attach_pid: int | None = Field(None, description="attach to a running job rooted at this pid")
    ranks: RankDiscovery
    logs: list[str] = Field(min_length=1)
    heartbeat_file: str | None = None
    checkpoint_dir: str | None = None
    node_pool: str | None = Field(None, description="the job's node pool file (node replacement drills)")


class DrillConfig(Strict):
    default_cluster: str = "local"
    default_job: str = "reference"
    reports_dir: str = "reports"
    results_db: str | None = Field(None, description="SQLite results store (default: <reports_dir>/drills.db)")
    clusters: dict[str, ClusterSpec] = Field(default_factory=dict)
    jobs: dict[str, JobProfile] = Field(default_factory=dict)


def _reference(description: str, *flags: str) -> JobProfile:
    return JobProfile(
        description=description,
        presets=["reference", "torchrun"],
        launch=LaunchSpec(command=["{python}", "-m", "drillbit.reference.launch",
                                   "--run-dir", "{run_dir}/job", *flags]),
        ranks=RankDiscovery(cmdline=r"-m drillbit\.reference\.train\b",
                            exclude_cmdline=r"torch\.distributed\.run"),
        logs=["{run_dir}/job/events.log", "{run_dir}/job/launcher.log"],
        heartbeat_file="{run_dir}/job/heartbeat/rank0",
        checkpoint_dir="{run_dir}/job/ckpt",
        node_pool="{run_dir}/job/pool.json",
    )


BUILTIN_CLUSTERS: dict[str, ClusterSpec] = {
    "local": ClusterSpec(engine="local", description="embedded: this machine, 127.0.0.1"),
}

BUILTIN_JOBS: dict[str, JobProfile] = {
    "reference": _reference("4-rank DDP under torchrun with watchdog, checksummed checkpoints, store fix"),
    "reference-nowatchdog": _reference("reference job with its progress watchdog switched off", "--no-watchdog"),
    "reference-nostorefix": _reference("reference job without the per-attempt store prefix (restarts never rendezvous)", "--no-store-fix"),
    "reference-noverify": _reference("reference job restoring without checksum verification", "--no-verify"),
    "reference-nockpt": _reference("reference job with checkpoints switched off", "--ckpt-every", "0"),
    "reference-nostraggler": _reference("reference job without a straggler detector", "--straggler", "off"),
    "reference-naivereplace": _reference("reference job whose node replacement waits on one call and takes "
                                         "whatever node comes back", "--replace-policy", "naive"),
    "reference-nvrx": _reference("reference job whose straggler detector uses NVRx's rule "
                                 "(speed / fastest < 0.75)", "--straggler", "nvrx"),
}


def with_builtins(config: DrillConfig) -> DrillConfig:
    return config.model_copy(update={
        "clusters": {**BUILTIN_CLUSTERS, **config.clusters},
        "jobs": {**BUILTIN_JOBS, **config.jobs},
    })
