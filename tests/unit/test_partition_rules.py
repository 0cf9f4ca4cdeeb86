"""partition / lossy-link without root: the nftables table each set of params makes, the
params refused, the refusal of a rank in the agent's own namespace, and the namespace
cluster's preflight and reaper on fakes of what needs root."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil
import pytest
from pydantic import ValidationError

from drillbit.judging.checks.predict import predict
from drillbit.core.errors import ConfigError, FaultError
from drillbit.faults import get as get_fault
from drillbit.faults.partition import LossyLinkParams, Partition, PartitionParams, rules
from drillbit.core.proc import ProcRef
from drillbit.spec.config import BUILTIN_JOBS, cluster_spec
from drillbit.spec.models import SLO
from drillbit.transport import netcluster
from drillbit.transport.inprocess import NetnsNodes
from drillbit.transport.netcluster import Topology


def test_a_node_partition_drops_everything_but_loopback_both_ways():
    text = rules("drillbit_t", PartitionParams())
    assert text.startswith("table inet drillbit_t {")
    assert 'chain input { type filter hook input priority -300; policy accept; iifname "lo" accept; drop; }' in text
    assert 'chain output { type filter hook output priority -300; policy accept; oifname "lo" accept; drop; }' in text


def test_an_endpoint_partition_one_way_matches_only_that_address_and_port():
    text = rules("drillbit_t", PartitionParams(scope="endpoint", endpoint="10.77.0.1:29400", direction="out"))
    assert "chain input" not in text
    assert "ip daddr 10.77.0.1 tcp dport 29400 drop;" in text
    text = rules("drillbit_t", PartitionParams(scope="endpoint", endpoint="10.77.0.1", direction="in"))
    assert "chain output" not in text and "ip saddr 10.77.0.1 drop;" in text


def test_a_lossy_link_drops_a_random_share():
    assert "numgen random mod 10000 < 500 drop;" in rules("drillbit_t", LossyLinkParams())
    assert "numgen random mod 10000 < 1250 drop;" in rules("drillbit_t", LossyLinkParams(loss_pct=12.5))
    with pytest.raises(ValidationError):
        LossyLinkParams(loss_pct=100)  # that is a partition


def test_a_share_under_one_percent_is_an_integer_nft_accepts():
    """nft compares numgen's value with an integer: `mod 100 < 0.5` is a syntax error, and a graded
    sweep over loss_pct=0.5,1,2,5 aborted at its 0.5 segment (#58). Shares go in hundredths of a percent."""
    assert "numgen random mod 10000 < 50 drop;" in rules("drillbit_t", LossyLinkParams(loss_pct=0.5))
    assert "numgen random mod 10000 < 1 drop;" in rules("drillbit_t", LossyLinkParams(loss_pct=0.01))
    assert "numgen random mod 10000 < 9999 drop;" in rules("drillbit_t", LossyLinkParams(loss_pct=99.99))
    for finer in (0.005, 0.125, 33.333):
        with pytest.raises(ValidationError, match="hundredths of a percent"):
            LossyLinkParams(loss_pct=finer)


@pytest.mark.parametrize("params, message", [
    ({"scope": "endpoint"}, "scope endpoint needs endpoint"),
    ({"endpoint": "10.0.0.1"}, "endpoint is for scope endpoint"),
    ({"scope": "endpoint", "endpoint": "rdzv-host:29400"}, "must be an IPv4 address"),
    ({"scope": "endpoint", "endpoint": "10.0.0.1:70000"}, "port must be 1-65535"),
    ({"loss_pct": 0}, "greater than 0"),
    ({"direction": "sideways"}, "'both', 'in' or 'out'"),
])
def test_bad_params_are_refused_with_the_reason(params, message):
    with pytest.raises(ValidationError, match=message):
        PartitionParams(**params)


def test_a_rank_in_the_agents_own_namespace_is_refused_before_anything_is_touched():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        target = ProcRef.of(psutil.Process(child.pid))
        with pytest.raises(FaultError, match="shares this agent's network namespace"):
            Partition().prepare(target, PartitionParams())
    finally:
        child.kill()
        child.wait()


def test_the_faults_are_registered_with_what_can_see_them():
    assert type(get_fault("partition")) is Partition
    assert Partition.seen_by() == ("watchdog", "collective")  # alive and heartbeating: no heartbeat sees it
    assert type(get_fault("lossy-link")).expects == "slow" and get_fault("lossy-link").seen_by() == ()


def test_detection_predicted_for_a_partition_progress_watchdog_against_a_liveness_one():
    slo = SLO(detect_within=20.0)
    fast = predict(Partition.seen_by(), Partition.verb, BUILTIN_JOBS["reference"].timeouts, slo)
    slow = predict(Partition.seen_by(), Partition.verb, BUILTIN_JOBS["reference-liveness"].timeouts, slo)
    assert (fast.by, fast.detect_s) == ("watchdog", 10.0)
    assert (slow.by, slow.detect_s) == ("collective", 1800.0)
    assert [(s.name, s.status) for s in slow.slos] == [("detect_within", "fail")]


def test_topology_netns_is_for_the_embedded_clusters():
    with pytest.raises(ValidationError, match="topology netns is for the embedded clusters.*not ray with an address"):
        cluster_spec(engine="ray", topology="netns", address="10.0.0.1:6379")
    with pytest.raises(ValidationError, match="topology is for engine process or ray, not ssh"):
        cluster_spec(engine="ssh", topology="netns", hosts=[{"name": "a", "host": "a"}])
    assert cluster_spec(engine="ray", topology="netns").topology == "netns"


def test_a_ray_cluster_on_namespaces_starts_a_node_in_each_and_rendezvouses_at_node_0(tmp_path):
    """Without starting anything: what the keeper runs in each namespace, and what the job is
    given (node 0's address as the head, gloo on the node's veth, the service address)."""
    from drillbit.spec.config import BUILTIN_CLUSTERS
    from drillbit.transport import connect
    from drillbit.transport.raycluster import ray_start

    topology = Topology(2)
    head = ray_start(topology, "node-0", 2, tmp_path / "0")
    assert head[:3] == ["ip", "netns", "exec"] and head[3] == topology.namespace("node-0")
    assert "--head" in head and "--node-ip-address=10.77.0.1" in head and '--resources={"drillbit-node-0": 1}' in head
    raylet = ray_start(topology, "node-1", 2, tmp_path / "1")
    assert "--address=10.77.0.1:6379" in raylet and "--node-ip-address=10.77.0.2" in raylet and "--head" not in raylet
    nodes = connect("local-ray-netns", BUILTIN_CLUSTERS["local-ray-netns"], tmp_path)
    # its agents are Ray actors in the nodes' namespaces: a cut of a node would cut its agent
    assert nodes.engine == "ray" and nodes.node_netns is False and {"ray_address", "service_host"} <= nodes.provides
    assert nodes.head_host() == "10.77.0.1" and nodes.node_env("node-1")["GLOO_SOCKET_IFNAME"] == "eth0"
    assert nodes.embedded.topology == nodes.topology.run_id


def test_a_frontend_is_a_second_network_of_a_namespace_cluster_and_hostnames_resolve_to_it():
    with pytest.raises(ValidationError, match="frontend_mbit is for topology netns"):
        cluster_spec(engine="process", frontend_mbit=8)
    topology = Topology(2, frontend_mbit=8)
    assert topology.frontend_address("node-1") == "10.78.0.2" and topology.address("node-1") == "10.77.0.2"
    assert topology.name_address("node-1") == "10.78.0.2"  # the hostname names the slow network
    plain = Topology(2)
    assert plain.frontend_address("node-1") is None and plain.name_address("node-1") == "10.77.0.2"
    from drillbit.spec.config import BUILTIN_CLUSTERS

    assert BUILTIN_CLUSTERS["local-netns-frontend"].frontend_mbit == 8
    heavy, fixed = BUILTIN_JOBS["torchft-heavy"].launch.command, BUILTIN_JOBS["torchft-heavy-backend"].launch.command
    assert "--advertise" not in heavy and fixed[fixed.index("--advertise") + 1] == "gloo-interface"


def test_a_machine_without_the_rights_is_a_config_error_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.setattr("drillbit.transport.netcluster.preflight", lambda: ["root (namespaces need CAP_SYS_ADMIN)"])
    nodes = NetnsNodes(tmp_path, "local-netns", 2)
    with pytest.raises(ConfigError, match="needs root .*nothing was started"):
        nodes.connect()


def test_the_reaper_tears_down_once_the_owner_died_and_stops_when_the_manifest_is_gone(tmp_path, monkeypatch):
    torn: list[list[str]] = []
    monkeypatch.setattr(netcluster, "teardown", lambda ns, manifest: torn.append(ns) or manifest.unlink() or [])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    manifest = tmp_path / "abc.json"
    manifest.write_text(json.dumps({"owner_pid": dead.pid, "owner_start": time.time() - 5,
                                    "namespaces": ["dbit-abc-node-0", "dbit-abc-sw"]}))
    killed: list[list[str]] = []
    monkeypatch.setattr(netcluster, "kill_inside", lambda ns: killed.append(ns) or [])
    assert netcluster.reap(manifest, wait_s=1, poll_s=0.05) == 0
    assert torn == [["dbit-abc-node-0", "dbit-abc-sw"]]
    assert killed == [["dbit-abc-node-0", "dbit-abc-sw"]]  # what outlived the wait, before the names go
    assert netcluster.reap(tmp_path / "gone.json", poll_s=0.05) == 0  # the owner tore down itself
    me = psutil.Process(os.getpid())
    manifest.write_text(json.dumps({"owner_pid": me.pid, "owner_start": me.create_time(), "namespaces": []}))
    assert netcluster._owner_alive(json.loads(manifest.read_text()))


def test_services_are_for_a_namespace_cluster_and_the_etcd_one_is_no_nodes():
    from drillbit.spec.config import BUILTIN_CLUSTERS, ServiceSpec

    with pytest.raises(ValidationError, match="services are for topology netns"):
        cluster_spec(engine="process", services=[ServiceSpec(name="etcd", command=["etcd"], port=2379)])
    [etcd] = BUILTIN_CLUSTERS["local-netns-etcd"].services
    assert "http://{service_host}:2379" in etcd.command  # the bridge's address, on no node
    assert "{service_host}:2379" in BUILTIN_JOBS["reference-etcd"].launch.command


def test_a_flap_must_come_back_between_cuts_and_a_slow_link_names_its_cap():
    from drillbit.faults.partition import FlapParams, SlowLink, SlowLinkParams

    with pytest.raises(ValidationError, match="must be shorter than every_s"):
        FlapParams(cut_s=20, every_s=20)
    assert FlapParams(cut_s=2, every_s=10, times=4).times == 4
    plan = SlowLink().plan([], SlowLinkParams(rate_mbit=100, interface="eth0"))
    assert "tbf rate 100mbit burst 32kb latency 400ms on eth0" in plan.action
    with pytest.raises(ValidationError):
        SlowLinkParams(interface="eth0; reboot")


def test_a_dry_run_prints_the_table_and_refuses_a_cluster_whose_nodes_share_a_network():
    from drillbit.runs.session import plan_text, resolve
    from tests.integration.cli import drill_cli

    assert "numgen random mod 10000 < 500 drop;" in plan_text(resolve("lossy-link", cluster="local-netns"))
    refused = drill_cli("run", "partition-node", "--dry-run", "--cluster", "local-process")
    assert refused.returncode == 2
    assert "every node of cluster 'local-process' shares this machine's" in refused.stderr
    assert "Traceback" not in refused.stderr
    on_ray = drill_cli("run", "partition-node", "--dry-run", "--cluster", "local-ray-netns")
    assert on_ray.returncode == 2 and "its agent's network" in on_ray.stderr and "Traceback" not in on_ray.stderr


def test_a_namespace_cluster_fits_its_subnet():
    with pytest.raises(ValidationError, match="at most 250 nodes"):
        cluster_spec(engine="process", topology="netns", nodes=300)


def test_a_data_cut_accepts_the_control_plane_first_and_drops_the_rest():
    from drillbit.faults.partition import PartitionParams, rules

    text = rules("drillbit_t", PartitionParams(scope="data", endpoint="10.77.0.1:29400"))
    assert 'iifname "lo" accept; ip saddr 10.77.0.1 tcp sport 29400 accept; drop;' in text
    assert 'oifname "lo" accept; ip daddr 10.77.0.1 tcp dport 29400 accept; drop;' in text
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="scope data needs endpoint"):
        PartitionParams(scope="data")
