"""drill probe's "ready" is the drill's preflight: the probe's refusals and the runner's come
from one function (loop/preflight.py). Walked over the whole catalogue on every built-in
cluster: where the probe would say a drill is not ready for a reason of the cluster or the
profile, ``DrillRunner.preflight`` refuses it with exit 2, and where it says nothing, the
preflight lets it through (#42: the probe said partition-node was ready on local-process,
the drill refused it)."""
from __future__ import annotations

from drillbit.core.errors import ConfigError
from drillbit.faults.loading import load_config, load_drill
from drillbit.loop.preflight import refusals
from drillbit.loop.runner import DrillRunner
from drillbit.spec.load import catalogue
from drillbit.transport import connect


def test_the_probes_refusals_are_the_preflights_on_every_builtin_cluster(tmp_path):
    config = load_config(None)
    drills = {name: load_drill(path, config) for name, path in catalogue(None).items()}
    disagree, refused_somewhere, i = [], 0, 0
    for cluster_name, cluster in sorted(config.clusters.items()):
        for name, spec in sorted(drills.items()):
            job_name = spec.job or config.default_job
            job = config.jobs[job_name]
            i += 1
            run_dir = tmp_path / str(i)
            run_dir.mkdir()
            probe_says = refusals(spec, job, job_name, cluster, cluster_name, connect(cluster_name, cluster, run_dir),
                                  run_dir)
            try:
                runner = DrillRunner(spec, cluster_name, cluster, job_name, job, run_dir,
                                     nodes=connect(cluster_name, cluster, run_dir))
                runner.preflight()
                drill_says = None
            except ConfigError as exc:
                drill_says = str(exc)
            refused_somewhere += bool(probe_says)
            if bool(probe_says) != (drill_says is not None):
                disagree.append(f"{name} on {cluster_name}: probe {probe_says or 'ready'}; drill "
                                f"{drill_says or 'starts'}")
    assert not disagree, "\n".join(disagree)
    assert refused_somewhere  # the walk did meet refusals (partition-node on local-process among them)


def test_partition_node_is_not_ready_on_a_cluster_whose_nodes_share_this_machines_network(tmp_path):
    config = load_config(None)
    spec = load_drill(catalogue(None)["partition-node"], config)
    said = refusals(spec, config.jobs["reference"], "reference", config.clusters["local-process"], "local-process",
                    connect("local-process", config.clusters["local-process"], tmp_path), tmp_path)
    assert any("local-netns" in s for s in said), said
