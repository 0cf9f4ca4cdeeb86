"""The lease on a running Ray cluster: a named detached actor. A second drill is refused
while the first holds it, with a message naming the holder; a dead holder's lease expires."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from drillbit.transport.raycluster import EmbeddedCluster
from drillbit.core.errors import ConfigError
from drillbit.core.proc import ProcRef
from drillbit.runs.store import Store
from drillbit.runs.session import execute, resolve

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]  # one Ray cluster at a time under -n
HERE = Path(__file__).parent / "drills"

HOLD = """
import sys, time
from drillbit.transport.raycluster import RayLease, loopback_env
loopback_env()  # before ray is imported
import ray
ray.init(address=sys.argv[1], namespace="drillbit", log_to_driver=False, _node_ip_address="127.0.0.1")
# another name for the same cluster: the lease is keyed by what the cluster is (its GCS address)
lease = RayLease("staging-by-another-name", sys.argv[2], ttl=4.0, identity=ray.get_runtime_context().gcs_address)
lease.acquire()
print("held", flush=True)
while True:
    lease.renew()
    time.sleep(1)
"""


@pytest.fixture()
def running_cluster(tmp_path):
    """A Ray cluster that is already up when the drill starts, as staging would be."""
    cluster = EmbeddedCluster(tmp_path, nodes=2, cpus_per_node=2)
    address = cluster.start(ProcRef.of(psutil.Process()))
    (tmp_path / "drill.yaml").write_text(
        f"clusters:\n  staging:\n    engine: ray\n    address: '{address}'\n    lease_ttl: 4s\n")
    yield address, tmp_path / "drill.yaml"
    cluster.stop()


def hold(address: str, who: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, address, who], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if line.strip() != "held":
        proc.kill()
        proc.wait()
        raise AssertionError(f"the holder could not take the lease: {line!r}")
    return proc


def test_second_drill_refused_while_held_and_a_dead_holders_lease_expires(running_cluster, tmp_path):
    address, config = running_cluster
    holder = hold(address, "game-day drill by alice")
    try:
        # a busy cluster is its own outcome (#43): exit 2 naming the holder; no run folder, no row of an
        # aborted drill in the results store (it fed the aborted figures of metrics.prom)
        with pytest.raises(ConfigError, match="is held by game-day drill by alice.*nothing was started"):
            execute(resolve(str(HERE / "kill-rank-fast.yaml"), cluster="staging", config_path=str(config)),
                    reports_dir=str(tmp_path / "r"))
        assert not [p for p in (tmp_path / "r").iterdir() if p.is_dir()]
        with Store(tmp_path / "r" / "drills.db") as store:
            assert store.runs("kill-rank-fast") == []
    finally:
        holder.kill()  # dies without releasing
        holder.wait()
    time.sleep(4.5)  # past the lease's TTL
    second = hold(address, "the next drill")
    second.kill()
    second.wait()


def test_drill_heal_on_a_running_ray_cluster_heals_on_its_nodes(running_cluster, tmp_path):
    """The registries of a running Ray cluster are on the nodes whose agents wrote them:
    `drill heal --cluster` heals there, through a task pinned to each node."""
    import json
    import os
    import signal

    from drillbit.agent import NodeAgent
    from tests.integration.cli import drill_cli

    address, config = running_cluster
    folder = tmp_path / "reports" / "20261201-000000-kill-rank"
    folder.mkdir(parents=True)
    (folder / "history.jsonl").write_text(json.dumps({"seq": 0, "t": 0.0, "source": "harness", "kind": "drill.start",
                                                      "node": None, "rank": None,
                                                      "data": {"cluster": "staging"}}) + "\n")
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "fake-rank"],
                              env={**os.environ, "RANK": "1"})
    try:
        agent = NodeAgent("node-1", folder / "agent-node-1.json")  # what node-1's agent left
        agent.inject("hang-collective", ProcRef.of(psutil.Process(victim.pid), rank=1), {})
        proc = drill_cli("heal", "--cluster", "staging", "--json", cwd=tmp_path, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        healed = [d for d in json.loads(proc.stdout) if d.get("healed")]  # --json: nothing but JSON on stdout
        assert healed and "hang-collective on rank 1" in healed[0]["healed"][0], proc.stdout
        assert psutil.Process(victim.pid).status() != psutil.STATUS_STOPPED
    finally:
        victim.send_signal(signal.SIGCONT)
        victim.kill()
        victim.wait()
