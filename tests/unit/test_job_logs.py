"""Where a drill reads a job's lines (docs/own-job.md, "Where drillbit reads the job's lines"):
the launcher's output on each node without a `logs:` entry, on every engine; `{node}`,
`{node_rank}` and globs in `logs`, a glob picking up files that appear later; a launch with
per-node placeholders that is not per node refused (or warned about) by drill validate and
the preflight; a named log that is never written ends the drill with exit 2 after its grace,
listing what the launch wrote."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from drillbit.agent.logtail import LogTail
from drillbit.core.errors import ConfigError, SpecError
from drillbit.core.proc import ProcRef
from drillbit.faults.loading import config_warnings, load_config
from drillbit.judging.probes.tail import FileSet, folder_listing
from drillbit.loop.logcheck import NamedLogs
from drillbit.loop.preflight import cautions, refusals
from drillbit.spec.config import JobProfile, LaunchSpec, RankDiscovery, SlurmJob, SlurmCluster
from drillbit.spec.signals import Signal
from drillbit.transport.nodes import Nodes
from drillbit.transport.slurm import SCHEDULER, SlurmNodes, batch_script
from tests.integration.cli import drill_cli

STEP = Signal(kind="step", pattern=r"^step (?P<n>\d+)$", ints=["n"])
TORCHRUN = ["{python}", "-m", "torch.distributed.run", "--nnodes", "{nnodes}", "--node-rank", "{node_rank}",
            "--rdzv-endpoint", "{head}:{port}", "train.py"]


def profile(command: list[str] | None = None, per_node: bool = True, logs: list[str] | None = None,
            **extra) -> JobProfile:
    return JobProfile(launch=LaunchSpec(command=command or TORCHRUN, per_node=per_node), logs=logs or [],
                      ranks=RankDiscovery(cmdline="train"), presets=["megatron"], **extra)


def two_nodes(run_dir: Path) -> Nodes:
    nodes = Nodes(run_dir, "two")
    nodes.clients = {"node-0": None, "node-1": None}  # type: ignore[dict-item]  # names only: nothing is called
    return nodes


def test_each_launchers_output_is_read_unnamed_and_logs_are_filled_per_node(tmp_path):
    nodes = two_nodes(tmp_path)
    job = profile(logs=["{run_dir}/logs/rank-{node_rank}.log", "{run_dir}/logs/{node}/*.log", "{run_dir}/job-node-0.out"])
    assert nodes.launch_outputs(job) == {"node-0": f"{tmp_path}/job-node-0.out", "node-1": f"{tmp_path}/job-node-1.out"}
    assert nodes.log_paths(job) == [tmp_path / p for p in (
        "logs/rank-0.log", "logs/node-0/*.log", "job-node-0.out", "logs/rank-1.log", "logs/node-1/*.log",
        "job-node-1.out")]  # the launcher output named too is followed once
    assert nodes.logs_by_node(job)["node-1"] == [f"{tmp_path}/logs/rank-1.log", f"{tmp_path}/logs/node-1/*.log",
                                                 f"{tmp_path}/job-node-0.out", f"{tmp_path}/job-node-1.out"]
    nodes.hosts = {"node-0": "vm", "node-1": "vm"}  # simulated nodes on one host: one agent reads a file
    assert nodes.logs_by_node(job)["node-1"] == [f"{tmp_path}/logs/rank-1.log", f"{tmp_path}/logs/node-1/*.log",
                                                 f"{tmp_path}/job-node-1.out"]
    one = profile(command=["python", "train.py"], per_node=False)
    assert nodes.launch_outputs(one) == {"node-0": f"{tmp_path}/job.out"}  # one launcher: job.out
    assert nodes.log_paths(one) == [tmp_path / "job.out"]
    assert nodes.log_paths(one.model_copy(update={"launcher_log": False, "logs": ["/x.log"]})) == [Path("/x.log")]
    attached = JobProfile(attach_pid=1, ranks=RankDiscovery(cmdline="x"), logs=["/a.log"])
    assert nodes.launch_outputs(attached) == {} and nodes.log_paths(attached) == [Path("/a.log")]


def test_on_slurm_the_batch_output_is_read_and_node_placeholders_follow_the_allocation(tmp_path):
    nodes = SlurmNodes(tmp_path, "hpc", SlurmCluster(engine="slurm"))
    nodes.allocation = ("n1", "n2")
    job = profile(slurm=SlurmJob(nodes=2), logs=["{run_dir}/rank-{node_rank}-{node}.log"])
    assert nodes.launch_outputs(job) == {SCHEDULER: f"{tmp_path}/job.out"}
    assert nodes.log_paths(job) == [tmp_path / "rank-0-n1.log", tmp_path / "rank-1-n2.log", tmp_path / "job.out"]
    assert nodes.launch_outputs(job.model_copy(update={"slurm": SlurmJob(job_id="7")})) == {}  # attached: not ours


def test_a_per_node_batch_script_gives_each_task_its_node_and_the_first_nodes_address(tmp_path):
    job = profile(slurm=SlurmJob(nodes=2)).model_copy(
        update={"launch": LaunchSpec(command=["echo", "{node_rank}", "{head}:{port}", "{nnodes}"], per_node=True,
                                     env={"MY_RANK": "{node_rank}"})})
    script = batch_script(job, {"python": "py", "run_dir": "/r", "port": "29500"})
    task = script.splitlines()[-1]
    assert task.startswith("exec srun ") and "${SLURM_LAUNCH_NODE_IPADDR}:29500" in task  # not the submit host
    assert "export MY_RANK=\"${SLURM_NODEID}\"" in task  # set in each node's task, not once in the batch


def test_a_glob_follows_files_that_appear_later_and_a_file_named_twice_is_read_once(tmp_path):
    files = FileSet([str(tmp_path / "rank-*.log"), str(tmp_path / "rank-0.log"), str(tmp_path / "main.log")],
                    rescan=0.0)
    assert files.missing() == [str(tmp_path / "rank-0.log"), str(tmp_path / "main.log"), str(tmp_path / "rank-*.log")]
    (tmp_path / "rank-0.log").write_text("step 1\n")
    assert [line for f in files.followers() for line in f.read_lines()] == ["step 1"]
    (tmp_path / "rank-1.log").write_text("step 2\n")  # made after the drill began following
    assert [line for f in files.followers() for line in f.read_lines()] == ["step 2"]
    assert files.missing() == [str(tmp_path / "main.log")]


def test_an_agent_follows_a_glob_on_its_node_and_says_what_is_missing(tmp_path):
    (tmp_path / "rank-3.log").write_text("step 7\n")
    tail = LogTail([str(tmp_path / "rank-*.log"), str(tmp_path / "nope.log")], [STEP], clock=time.time, poll=3600)
    tail.poll_once()
    tail.stop()
    events, _ = tail.fetch(10)
    assert [e["data"]["n"] for e in events if e["kind"] == "step"] == [7]
    assert tail.files.missing() == [str(tmp_path / "nope.log")]


def write_config(tmp_path: Path, launch: dict) -> Path:
    path = tmp_path / "drill.yaml"
    path.write_text(json.dumps({"jobs": {"gpt": {"presets": ["megatron"], "launch": launch,
                                                  "ranks": {"cmdline": "train"}}}}, indent=1))
    return path


def test_validate_refuses_per_node_placeholders_without_per_node_and_warns_on_nnodes_alone(tmp_path):
    with pytest.raises(SpecError) as caught:
        load_config(write_config(tmp_path, {"command": TORCHRUN}))
    said = [str(p) for p in caught.value.problems]
    assert any("jobs.gpt.launch.command.4: torchrun --nnodes {nnodes} without launch.per_node: true" in s and
               "drill.yaml:" in s for s in said), said
    assert any("jobs.gpt.launch.command.6: {node_rank} without launch.per_node: true" in s for s in said), said
    load_config(write_config(tmp_path, {"command": TORCHRUN, "per_node": True}))  # per node: fine
    driver = write_config(tmp_path, {"command": ["python", "driver.py", "--workers", "{nnodes}"]})
    load_config(driver)  # a launcher that reaches the other nodes itself: not refused...
    (warning,) = config_warnings(driver)
    assert warning.path == "jobs.gpt.launch.command.3" and "one launcher starts, on the first node only" in warning.message
    proc = drill_cli("validate", str(driver), "--json", timeout=120)
    assert proc.returncode == 0 and "{nnodes} without launch.per_node" in json.loads(proc.stdout)["warnings"][0]
    proc = drill_cli("validate", str(write_config(tmp_path, {"command": TORCHRUN})), timeout=120)
    assert proc.returncode == 2 and "set per_node: true" in proc.stderr, proc.stderr


def test_the_preflight_refuses_the_same_and_says_the_warning(tmp_path):
    from tests.fakes.fake_cluster import CLUSTER, spec

    job = profile(per_node=False)
    said = refusals(spec(), job, "gpt", CLUSTER, "fake", two_nodes(tmp_path), tmp_path)
    assert any("job 'gpt' launch.command.6: {node_rank} without launch.per_node" in s for s in said), said
    driver = profile(command=["python", "driver.py", "--workers", "{nnodes}"], per_node=False)
    assert not refusals(spec(), driver, "gpt", CLUSTER, "fake", two_nodes(tmp_path), tmp_path)
    assert "told the cluster's node count" in cautions(driver, "gpt")[0]


def test_an_attached_job_with_no_logs_is_a_problem(tmp_path):
    path = tmp_path / "drill.yaml"
    path.write_text(json.dumps({"jobs": {"mine": {"presets": ["megatron"], "attach_pid": 1,
                                                   "ranks": {"cmdline": "x"}}}}))
    with pytest.raises(SpecError, match="nothing to read"):
        load_config(path)


class Probe:
    def __init__(self, missing: dict) -> None:
        self._missing = missing

    def missing(self) -> dict:
        return self._missing

    def explain(self) -> str:
        return "the logs held 12 line(s)"


class Ranked(Nodes):
    def __init__(self, run_dir: Path, found: list[ProcRef]) -> None:
        super().__init__(run_dir, "here")
        self.found = found

    def find_ranks(self, discovery, attach=None):
        return self.found


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_named_log_never_written_ends_the_drill_after_its_grace_listing_what_the_launch_wrote(tmp_path,
                                                                                                  monkeypatch):
    clock = Clock()
    monkeypatch.setattr("drillbit.loop.logcheck.time.monotonic", clock)
    (tmp_path / "job-node-0.out").write_text("x" * 2100)
    (tmp_path / "ckpt" / "iter_0000005").mkdir(parents=True)
    (tmp_path / "ckpt" / "iter_0000005" / "model.pt").write_bytes(b"w")
    wanted = str(tmp_path / "logs" / "train.log")
    job = profile(logs_grace=30.0)
    nodes = Ranked(tmp_path, [])
    named = NamedLogs(job, nodes, [Probe({None: [wanted]})], tmp_path)
    named.check(stepped=False)  # no ranks yet: the grace has not begun
    clock.now += 60
    named.check(stepped=False)
    assert named.ranks_at is None
    nodes.found = [ProcRef(pid=1, start_time=1.0)]
    clock.now += 1
    named.check(stepped=False)  # the ranks are up: the grace begins
    clock.now += 29
    named.check(stepped=False)  # within it: a log made late still counts
    clock.now += 2
    named.check(stepped=True)  # a step came: the logs showed progress, nothing to say
    with pytest.raises(ConfigError) as caught:
        clock.now += 2
        named.check(stepped=False)
    said = str(caught.value)
    assert f"{wanted} was never written" in said and "30 s (logs_grace)" in said
    assert "job-node-0.out (2.1 kB)" in said and "ckpt/ (1 file)" in said  # what the launch wrote
    assert f"{tmp_path / 'logs'}: no such folder" in said and "the logs held 12 line(s)" in said


def test_a_folder_listing_says_what_is_there_in_a_few_words(tmp_path):
    for i in range(14):
        (tmp_path / f"f{i:02d}.log").write_text("x")
    text = folder_listing(tmp_path)
    assert text.startswith("f00.log (1 B), f01.log (1 B)") and text.endswith("and 2 more")
    assert folder_listing(tmp_path / "nope") == "no such folder"


def test_where_the_agents_read_the_logs_each_node_says_what_is_missing_and_what_its_folders_hold(tmp_path):
    from drillbit.agent.service import AgentService
    from drillbit.loop.agentlogs import AgentLogProbe
    from drillbit.core.history import History
    from drillbit.transport.inprocess import InProcessClient

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "train.out").write_text("torchrun says hello\n")
    (tmp_path / "run" / "history.jsonl").write_text("{}\n")  # drillbit's own: not what the launch wrote
    service = AgentService("host-0", tmp_path / "state")
    try:
        nodes = Ranked(tmp_path / "run", [ProcRef(pid=1, start_time=1.0)])
        nodes.clients = {"host-0": InProcessClient(service)}
        job = profile(logs=["{run_dir}/logs/rank-{node_rank}.log"])
        probe = AgentLogProbe(History(), nodes, job)
        probe.start()
        try:
            probe.poll_once()
            assert probe.missing() == {"host-0": [f"{tmp_path}/run/logs/rank-0.log", f"{tmp_path}/run/job.out"]}
            named = NamedLogs(job, nodes, [probe], tmp_path / "run")
            assert named.missing() == {"host-0": [f"{tmp_path}/run/logs/rank-0.log"]}  # job.out: the launch's own
            said = named.message(named.missing())
        finally:
            probe.stop()
    finally:
        service.shutdown()
    assert f"on host-0: {tmp_path}/run: train.out (20 B); {tmp_path}/run/logs: no such folder" in said, said
    assert "history.jsonl" not in said
