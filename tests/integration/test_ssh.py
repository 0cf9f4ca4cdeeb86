"""The SSH executor against real sshds: the same agent over Fabric, the same verdict as on the
process and Ray engines, host keys checked, passwords kept out.

Where this machine allows namespaces (root, iproute2, nftables) the two hosts are namespace
nodes, as a multi-node job runs: each its own sshd on its own address (10.77.0.1:22,
10.77.0.2:22) and hostname, reached from outside the private network through a ProxyCommand in
the switch's namespace; the agents run on their nodes and torchrun rendezvouses at node 0's
address. Elsewhere both hosts are one sshd on 127.0.0.1."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from drillbit.runs.session import execute, resolve
from drillbit.transport.netcluster import Topology
from tests.integration import netleft
from tests.integration.sshd import SSHD, Sshd, start_sshd, stop_sshd
from tests.integration.ranks import NPROC

HERE = Path(__file__).parent / "drills"
pytestmark = [pytest.mark.skipif(not Path(SSHD).exists(), reason="needs OpenSSH's sshd (.ci/run installs openssh-server)"),
              pytest.mark.xdist_group("ssh")]  # the hosts' agents share one state folder and lease
NETNS = netleft.namespace_nodes()  # the hosts are namespace nodes: the default where allowed


@dataclass
class Hosts:
    """What the tests connect to: per host its address, port, user and key (and the
    ProxyCommand that reaches a namespace node), and the known_hosts of them all."""
    entries: list[dict]
    known_hosts: Path
    topology: Topology | None = None

    def on(self, i: int, argv: list[str]) -> list[str]:
        """``argv`` run where host ``i`` is: its node's namespaces, under its hostname."""
        return self.topology.wrap(self.topology.node_names()[i], argv) if self.topology else argv

    def known_name(self, i: int) -> str:
        host, port = self.entries[i]["host"], self.entries[i]["port"]
        return host if port == 22 else f"[{host}]:{port}"


@pytest.fixture()
def sshd(tmp_path):
    servers: list[Sshd] = []
    if not NETNS:
        server = start_sshd(tmp_path / "sshd")
        servers.append(server)
        entry = {"host": "127.0.0.1", "port": server.port, "user": server.user, "key_filename": str(server.key)}
        try:
            yield Hosts([entry, dict(entry)], server.known_hosts)
        finally:
            stop_sshd(server)
        return
    before = netleft.leftovers()
    topology = Topology(2)
    topology.up()
    relay = f"ip netns exec {topology.switch} {sys.executable} -m drillbit.transport.netcluster relay %h %p"
    try:
        entries = []
        for i, node in enumerate(topology.node_names()):
            server = start_sshd(tmp_path / f"sshd-{i}", listen=topology.address(node), port=22,
                                wrap=lambda argv, node=node: topology.wrap(node, argv), reachable=topology.accepts)
            servers.append(server)
            entries.append({"host": topology.address(node), "port": 22, "user": server.user,
                            "key_filename": str(server.key), "proxy_command": relay})
        known = tmp_path / "known_hosts"
        known.write_text("".join(s.known_hosts.read_text() for s in servers))
        yield Hosts(entries, known, topology)
    finally:
        for server in servers:
            stop_sshd(server)
        assert topology.down() == []
        netleft.assert_nothing_left(before)


def ssh_config(tmp_path: Path, sshd: Hosts, *, known_hosts: Path | None = None, password: str | None = None,
               hosts: int = 2) -> Path:
    entries = []
    for i in range(hosts):
        host = {"name": f"host-{i}", **sshd.entries[i], "python": sys.executable,
                "state_dir": str(tmp_path / f"agent-{i}")}
        if password:
            host["password"] = password
        entries.append(host)
    cluster = {"engine": "ssh", "known_hosts": str(known_hosts or sshd.known_hosts), "hosts": entries}
    path = tmp_path / "drill.yaml"
    path.write_text(json.dumps({"clusters": {"slurm": cluster}}))  # JSON is YAML
    return path


def run(drill: str, tmp_path: Path, config: Path, job: str = "reference") -> tuple[dict, Path]:
    payload, outcome = execute(resolve(str(HERE / f"{drill}.yaml"), cluster="slurm", job=job,
                                       config_path=str(config)), reports_dir=str(tmp_path / "reports"))
    return payload, outcome.run_dir


@pytest.mark.slow
def test_kill_rank_over_ssh_passes_like_the_other_engines(tmp_path, sshd):
    payload, run_dir = run("kill-rank-fast", tmp_path, ssh_config(tmp_path, sshd, password="hunter2-not-used"))
    assert payload["verdict"] == "pass", payload["reasons"]
    events = [json.loads(line_) for line_ in (run_dir / "history.jsonl").read_text().splitlines()]
    assert {e["node"] for e in events if e["kind"] == "agent.ready"} == {"host-0", "host-1"}
    inject = next(e for e in events if e["kind"] == "fault.inject")
    assert inject["rank"] == 1 and inject["node"] in ("host-0", "host-1")  # rendezvous order places ranks
    assert all(h["verified"] for h in payload["fault"]["heals"])
    if NETNS:  # each host's agent ran on its node, under the node's hostname
        netleft.assert_on_their_nodes(run_dir, events, {"host-0": "node-0", "host-1": "node-1"})
    # no password in anything the drill wrote
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert b"hunter2-not-used" not in path.read_bytes(), path


def test_unknown_host_key_is_refused_and_nothing_runs(tmp_path, sshd):
    wrong = tmp_path / "wrong_known_hosts"
    import subprocess
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    pub = (tmp_path / "other.pub").read_text().split()
    wrong.write_text(f"{sshd.known_name(0)} {pub[0]} {pub[1]}\n")
    payload, run_dir = run("kill-rank-fast", tmp_path, ssh_config(tmp_path, sshd, known_hosts=wrong, hosts=1))
    assert payload["verdict"] in ("aborted", "error")
    text = " ".join(payload["reasons"]) + (payload.get("error") or "")
    assert "host-0" in text and "known_hosts" in text
    kinds = [json.loads(line_)["kind"] for line_ in (run_dir / "history.jsonl").read_text().splitlines()]
    assert "job.launch" not in kinds


def test_a_dropped_ssh_channel_heals_at_once(tmp_path, sshd, ranks):
    """The controller's connection drops without a word (no disarm, no exit): the agent reads
    end of input, takes its controller for gone at once, and its dead-man's switch resumes the
    rank it had stopped — and records that it did."""
    import time

    import psutil

    from drillbit.core.proc import ProcRef
    from drillbit.spec.config import RankDiscovery, SshHost
    from drillbit.transport.ssh import SshAgentClient

    host = SshHost(name="h0", **sshd.entries[0], python=sys.executable, state_dir=str(tmp_path / "agent"))
    client = SshAgentClient(host, str(sshd.known_hosts))
    client.handshake()
    client.arm(deadman_s=60.0, job_grace_s=0.0)  # a long deadman: only the dropped channel can trip it
    found = client.find_ranks(RankDiscovery(cmdline="fake-rank"), ProcRef.of(psutil.Process()))
    target = next(r for r in found if r.pid == ranks[1].pid)
    handle = client.inject("hang-collective", target, {})
    assert client.confirm(handle) is not None  # the rank is in state T
    client.conn.close()  # the channel drops
    deadline = time.time() + 20
    while time.time() < deadline and psutil.Process(target.pid).status() == psutil.STATUS_STOPPED:
        time.sleep(0.1)
    assert psutil.Process(target.pid).status() != psutil.STATUS_STOPPED
    log = tmp_path / "agent" / "agent-h0.deadman.jsonl"
    while time.time() < deadline and not (log.exists() and "orphan.done" in log.read_text()):
        time.sleep(0.1)
    kinds = [json.loads(line)["kind"] for line in log.read_text().splitlines()]
    assert kinds == ["agent.lost", "fault.heal", "orphan.done"]


@pytest.mark.slow
def test_logs_read_on_their_node_with_no_folder_the_controller_can_read(tmp_path, sshd):
    """Each host keeps the job's log in a folder of its own (``{node}`` in the path, which only
    the agent on that host fills in): the controller never reads a log; the agents follow
    theirs, put each line on the controller's clock, and ship the matched events."""
    config = ssh_config(tmp_path, sshd)
    data = json.loads(config.read_text())
    hosts = tmp_path / "hosts"
    log = str(hosts / "{node}" / "events.log")
    loop = Path(__file__).parent / "jobs" / "own_loop.py"
    data["jobs"] = {"mine": {
        "presets": ["drillbit", "torchrun"],
        "launch": {"command": [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", NPROC,
                               "--max-restarts", "3", "--monitor-interval", "0.5", str(loop),
                               "--ckpt", str(hosts / "{node}" / "ckpt")],
                   "env": {"DRILLBIT_EVENTS": log, "LOGLEVEL": "INFO"}},
        "ranks": {"cmdline": "own_loop\\.py", "exclude_cmdline": "torch\\.distributed\\.run"},
        "logs": [log, "{run_dir}/job.out"]}}  # job.out: torchrun's lines, written where the job runs
    config.write_text(json.dumps(data))
    payload, run_dir = run("kill-rank-own-loop", tmp_path, config, job="mine")
    assert payload["verdict"] == "pass", payload["reasons"]
    events = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    steps = [e for e in events if e["kind"] == "step"]
    assert steps and {e["source"] for e in steps} == {"probe:host-0"}  # shipped by host-0's agent
    assert (hosts / "host-0" / "events.log").exists() and not (hosts / "{node}").exists()
    assert not any(e["kind"] in ("probe.gap", "probe.error") for e in events)


@pytest.mark.slow
def test_drill_heal_on_an_ssh_cluster_heals_each_hosts_registry_on_that_host(tmp_path, sshd):
    """The registries of an SSH cluster live on its hosts: `drill heal --cluster` reaches each
    host over SSH and heals there, and names a host it could not reach."""
    import os
    import signal
    import subprocess

    import psutil

    from tests.integration.cli import drill_cli

    config = ssh_config(tmp_path, sshd)
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "fake-rank"],
                              env={**os.environ, "RANK": "1"})
    try:
        state = tmp_path / "agent-0"
        state.mkdir(mode=0o700)
        # what host-0's agent left: a rank it stopped, in a registry written on host-0
        left = ("import sys, psutil\nfrom pathlib import Path\nfrom drillbit.agent import NodeAgent\n"
                "from drillbit.core.proc import ProcRef\n"
                "NodeAgent('host-0', Path(sys.argv[1])).inject('hang-collective', "
                "ProcRef.of(psutil.Process(int(sys.argv[2])), rank=1), {})\n")
        subprocess.run(sshd.on(0, [sys.executable, "-c", left, str(state / "agent-host-0.json"), str(victim.pid)]),
                       check=True, timeout=60)
        assert psutil.Process(victim.pid).status() == psutil.STATUS_STOPPED
        proc = drill_cli("heal", "--cluster", "slurm", "--json", cwd=tmp_path, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        healed = [d for d in json.loads(proc.stdout) if d.get("healed")]
        assert healed and healed[0]["node"] == "host-0" and "hang-collective on rank 1" in healed[0]["healed"][0]
        assert psutil.Process(victim.pid).status() != psutil.STATUS_STOPPED
        # a host that does not answer is named, and the command says it could not finish
        broken = json.loads(config.read_text())
        broken["clusters"]["slurm"]["hosts"][1]["port"] = 1
        config.write_text(json.dumps(broken))
        again = drill_cli("heal", "--cluster", "slurm", cwd=tmp_path, timeout=120)
        assert again.returncode == 5 and "could not reach host-1" in again.stderr, again.stdout + again.stderr
    finally:
        victim.send_signal(signal.SIGCONT)
        victim.kill()
        victim.wait()


@pytest.mark.slow
def test_the_own_job_pages_ssh_example_passes_kill_rank_reading_each_hosts_launcher_output(tmp_path, sshd):
    """docs/own-job.md's SSH example as printed, this test's hosts in place of the page's
    (`# yours`) and its project folder for /shared/gpt: one torchrun per host, each host's
    agent reading its own job-<host>.out, no log named."""
    from tests.integration.cli import drill_cli
    from tests.integration.own_docs import project

    folder = tmp_path / "gpt"
    hosts = [{"name": name, **sshd.entries[i], "python": sys.executable, "state_dir": str(tmp_path / f"agent-{i}")}
             for i, name in enumerate(("node-a", "node-b"))]
    project(folder, "# drill.yaml: a multi-node torchrun job on SSH hosts", replace={"/shared/gpt": str(folder)},
            cluster={"engine": "ssh", "known_hosts": str(sshd.known_hosts), "hosts": hosts})
    proc = drill_cli("run", "kill-rank", "--job", "gpt", "--cluster", "lab", "--json", cwd=folder, timeout=420)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["verdict"] == "pass" and result["measurements"]["restarts"] == 1, result["reasons"]
    (run_dir,) = (folder / "reports").glob("*-kill-rank")
    events = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    assert {e["source"] for e in events if e["kind"] == "step"} <= {"probe:node-a", "probe:node-b"}  # read on hosts
    assert sorted(p.name for p in run_dir.glob("job*.out")) == ["job-node-a.out", "job-node-b.out"]
