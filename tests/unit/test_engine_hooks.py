"""Engine differences are Nodes hooks (engine, local, provides, launches, check_engine,
attach_root), not branches in the loop: each engine's refusals, before anything starts."""
from __future__ import annotations

import os

import pytest

from drillbit.core.errors import ConfigError
from drillbit.loop import DrillRunner
from drillbit.spec.config import JobProfile, LaunchSpec, RankDiscovery, SlurmJob
from drillbit.transport.inprocess import InProcessNodes
from drillbit.transport.nodes import Nodes
from tests.fakes.fake_cluster import CLUSTER, JOB, FakeAgent, FakeJob, FakeNodes, fake_probes, spec

RAY_JOB = JobProfile(launch=LaunchSpec(command=["python", "train.py", "--address", "{ray_address}"]),
                     ranks=RankDiscovery(cmdline="train"), logs=["job.out"])


def test_a_fault_for_another_engine_is_refused_by_the_nodes(tmp_path):
    with pytest.raises(ConfigError, match="node-down works on clusters of engine slurm; cluster 'here' is engine process"):
        InProcessNodes(tmp_path, "here").check(JOB, "node-down", 60.0)
    InProcessNodes(tmp_path, "here").check(JOB, "kill-rank", 60.0)  # no refusal


def test_a_ray_jobs_placeholder_needs_an_engine_that_fills_it(tmp_path):
    with pytest.raises(ConfigError, match=r"job profile 'mine' runs on Ray; cluster 'here' is engine process "
                                          r"\(try --cluster local\)"):
        InProcessNodes(tmp_path, "here").check(RAY_JOB, "kill-rank", 60.0, "mine")

    class Filled(InProcessNodes):
        provides = frozenset({"ray_address"})

    Filled(tmp_path, "here").check(RAY_JOB, "kill-rank", 60.0, "mine")  # an engine that fills it: no refusal


def test_a_profile_with_nothing_to_start_or_attach_is_refused(tmp_path):
    nothing = JobProfile(ranks=RankDiscovery(cmdline="x"), logs=["job.out"])
    with pytest.raises(ConfigError, match="has neither launch nor attach_pid"):
        InProcessNodes(tmp_path, "here").check(nothing, "kill-rank", 60.0, "mine")


def test_slurm_launches_a_job_it_attaches_to_by_id(tmp_path):
    from drillbit.transport.slurm import SlurmNodes

    job = JobProfile(slurm=SlurmJob(job_id="42"), ranks=RankDiscovery(cmdline="x"), logs=["job.out"])
    assert Nodes.launches(Nodes.__new__(Nodes), job) is None  # elsewhere it would be attached by pid
    assert SlurmNodes.launches(SlurmNodes.__new__(SlurmNodes), job) == "attaching to Slurm job 42"


def test_attaching_by_pid_alone_only_where_the_job_runs_here(tmp_path):
    ref = InProcessNodes(tmp_path, "here").attach_root(os.getpid(), None)
    assert ref.pid == os.getpid() and ref.start_time
    remote = Nodes.__new__(Nodes)
    with pytest.raises(ConfigError, match="needs attach_start_time on a cluster of several machines"):
        remote.attach_root(os.getpid(), None)
    assert remote.attach_root(7, 123.0).start_time == 123.0


def test_the_runner_asks_the_nodes_and_touches_nothing_when_they_refuse(tmp_path):
    job = FakeJob()
    agent = FakeAgent("n0", job)
    outcome = DrillRunner(spec(fault={"type": "node-down", "targets": {"ranks": [1]}, "trigger": {"at_step": 8}}),
                          "fake", CLUSTER, "fake-job", JOB, tmp_path, nodes=FakeNodes(tmp_path, agent),
                          probes=fake_probes(job), heal_timeout=0.3).run()
    agent.release.set()
    assert outcome.error_kind == "config" and "works on clusters of engine slurm" in outcome.error
    assert "launch" not in agent.calls and "inject" not in agent.calls
