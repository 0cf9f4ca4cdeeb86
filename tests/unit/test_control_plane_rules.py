"""kill-control-plane's rules without processes: the profile's control_plane, how the fault
binds to it (its node, its {port} once launched), targets kept to its node, and the
keep_stepping judge on hand-built histories (pass, fail by exit, fail by silence, unknown on a
job that finished)."""
from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from drillbit.judging.checks import check
from drillbit.core.errors import ConfigError
from drillbit.faults import get as get_fault
from drillbit.core.history import History
from drillbit.loop.bind import job_params
from drillbit.loop.schedule import select_targets
from drillbit.core.proc import ProcRef
from drillbit.spec.config import BUILTIN_JOBS, ControlPlaneProcess, JobProfile
from drillbit.spec.models import DrillSpec, Observe, Targets
from tests.unit.test_checks import T_FAULT, prelude, steps


def drill(**params) -> DrillSpec:
    return DrillSpec.model_validate({
        "name": "kcp", "class": "fail-stop", "summary": "s",
        "fault": {"type": "kill-control-plane", "trigger": {"at_step": 25}, "params": params},
        "observe": {"at_least": 30, "window": 120}, "slo": {"keep_stepping": True}})


def profile(**control_plane) -> JobProfile:
    return BUILTIN_JOBS["reference"].model_copy(update={"control_plane": {
        k: ControlPlaneProcess.model_validate(v) for k, v in control_plane.items()}})


@pytest.mark.parametrize("entry, why", [
    ({}, "give cmdline, port or pidfile"),
    ({"port": 70000}, "not a TCP port"),
    ({"port": "twenty"}, "a number, or a placeholder"),
    ({"cmdline": "torchrun("}, "cmdline"),
])
def test_a_control_plane_entry_that_names_nothing_usable_is_refused(entry, why):
    with pytest.raises(ValidationError, match=why):
        ControlPlaneProcess.model_validate(entry)


def test_a_port_may_be_a_number_in_text_or_the_launch_placeholder():
    assert ControlPlaneProcess.model_validate({"port": "29500"}).port == 29500
    assert ControlPlaneProcess.model_validate({"port": "{port}"}).port == "{port}"


def test_the_fault_binds_the_profiles_entry_on_its_node_with_the_launch_port_filled():
    job = profile(rendezvous={"port": "{port}", "cmdline": "torch"})
    launched = {"node-0": {"port": "29511", "run_dir": "/r"}, "node-1": {"port": "29511", "run_dir": "/r"}}
    before = job_params(drill(), job, Path("/r"))
    assert before.process.port == "{port}" and before.node is None  # not launched yet: a dry run's plan
    bound = job_params(drill(), job, Path("/r"), launched)
    assert (bound.name, bound.node, bound.process.port) == ("rendezvous", "node-0", 29511)  # the first node
    assert get_fault("kill-control-plane").target_nodes(bound) == ["node-0"]
    on_one = profile(master={"cmdline": "master", "node": "node-1"})
    assert job_params(drill(), on_one, Path("/r"), launched).node == "node-1"


def test_a_pid_file_is_filled_with_the_runs_folder():
    bound = job_params(drill(), profile(etcd={"pidfile": "{run_dir}/services/etcd.pid"}), Path("/r"), {"n": {}})
    assert bound.process.pidfile == "/r/services/etcd.pid"


@pytest.mark.parametrize("job, params, why", [
    (profile(), {}, "the job profile names none"),
    (profile(a={"cmdline": "a"}, b={"cmdline": "b"}), {}, "say which in the drill's params.name"),
    (profile(a={"cmdline": "a"}), {"name": "lighthouse"}, "'lighthouse' is not in the job profile's control_plane"),
])
def test_a_profile_without_the_named_control_plane_is_a_config_error(job, params, why):
    with pytest.raises(ConfigError, match=why):
        job_params(drill(**params), job, Path("/r"))


def test_the_reference_profiles_name_their_rendezvous():
    assert BUILTIN_JOBS["reference"].control_plane["rendezvous"].cmdline == r"torch\.distributed\.run"
    assert BUILTIN_JOBS["reference-etcd"].control_plane["etcd"].pidfile == "{run_dir}/services/etcd.pid"


def test_targets_are_kept_to_the_control_planes_node():
    ranks = [ProcRef(pid=10 + r, start_time=1.0, rank=r, node=f"node-{r // 2}") for r in range(4)]
    chosen = select_targets(ranks, Targets(count=1, select="first"), ["node-1"])
    assert [r.rank for r in chosen] == [2]
    with pytest.raises(ConfigError, match="no rank there"):
        select_targets(ranks, Targets(count=1, exclude_nodes=["node-1"]), ["node-1"])


def test_observe_at_least_must_fit_the_window():
    with pytest.raises(ValidationError, match="longer than the window"):
        Observe(at_least=200, window=120)


def history(after: list[tuple], end: float) -> History:
    rows = prelude()
    rows += [(T_FAULT - 0.01, "fault.inject"), (T_FAULT, "fault.confirmed", {"expects": "crash"})]
    rows += after
    rows += [(end, "observe.end"), (end + 0.5, "drill.end")]
    return History.build(rows)


def keep_stepping(result):
    return next(s for s in result.slos if s.name == "keep_stepping")


def test_a_job_still_stepping_at_the_end_of_the_watch_passes():
    result = check(drill(), history(steps(26, 145, T_FAULT + 0.1), T_FAULT + 30.2))
    slo = keep_stepping(result)
    assert result.verdict == "pass", result.reasons
    assert slo.status == "pass" and slo.measured == pytest.approx(0.35, abs=0.01)
    assert "still stepping when the watch ended 30 s after the fault" in slo.detail


def test_a_job_that_exits_after_losing_its_control_plane_fails_with_the_exit():
    result = check(drill(), history([*steps(26, 30, T_FAULT + 0.1), (T_FAULT + 3, "job.exit", {"code": 1})],
                                    T_FAULT + 3))
    assert result.verdict == "fail"
    assert keep_stepping(result).status == "fail"
    assert result.reasons[0].startswith("the job did not survive the fault: it exited (code 1) 3 s after it")


def test_a_job_that_goes_quiet_without_exiting_fails():
    result = check(drill(), history(steps(26, 30, T_FAULT + 0.1), T_FAULT + 30))
    assert result.verdict == "fail"
    assert "the job stopped making steps: its last step came 1.1 s after the fault" in result.reasons[0]


def test_a_job_that_finished_its_training_inside_the_watch_is_unknown():
    result = check(drill(), history([*steps(26, 30, T_FAULT + 0.1), (T_FAULT + 2, "job.exit", {"code": 0})],
                                    T_FAULT + 2))
    assert keep_stepping(result).status == "unknown"
    assert result.verdict == "inconclusive", result.reasons



# --- partition of a control-plane endpoint (partition-lighthouse) ---------------------------
def cut(**params) -> DrillSpec:
    return DrillSpec.model_validate({
        "name": "cut", "class": "fail-hang", "summary": "s",
        "fault": {"type": "partition", "trigger": {"at_step": 25},
                  "params": {"scope": "endpoint", **params}},
        "observe": {"at_least": 30, "window": 90}, "slo": {"keep_stepping": True}})


def test_an_endpoint_cut_takes_the_control_planes_address_once_the_job_is_launched():
    job = BUILTIN_JOBS["torchft"]
    assert job.control_plane["lighthouse"].address == "{head}:{port}"
    before = job_params(cut(control_plane="lighthouse"), job, Path("/r"))
    assert before.endpoint is None  # {port} is chosen at the launch: a dry run's plan names the entry
    from drillbit.faults.partition import rules
    assert "ip daddr <control_plane.lighthouse>" in rules("t", before)
    assert "<control_plane.lighthouse> (control_plane.lighthouse)" in get_fault("partition").plan([], before).action
    launched = {"node-0": {"head": "10.77.0.1", "port": "29511"}, "node-1": {"head": "10.77.0.1", "port": "29511"}}
    bound = job_params(cut(control_plane="lighthouse"), job, Path("/r"), launched)
    assert bound.endpoint == "10.77.0.1:29511"
    assert "ip daddr 10.77.0.1 tcp dport 29511 drop" in rules("t", bound)
    assert "ip saddr 10.77.0.1 tcp sport 29511 drop" in rules("t", bound)


def test_a_host_name_is_resolved_and_a_services_address_kept():
    etcd = job_params(cut(control_plane="etcd"), BUILTIN_JOBS["reference-etcd"], Path("/r"),
                      {"node-0": {"service_host": "10.77.0.254"}})
    assert etcd.endpoint == "10.77.0.254:2379"
    named = profile(master={"cmdline": "master", "address": "localhost:{port}"})
    assert job_params(cut(control_plane="master"), named, Path("/r"), {"n": {"port": "7"}}).endpoint == "127.0.0.1:7"


@pytest.mark.parametrize("job, params, why", [
    (profile(master={"cmdline": "master"}), {"control_plane": "master"}, "has no address"),
    (profile(), {"control_plane": "lighthouse"}, "the job profile names none"),
    (profile(a={"cmdline": "a", "address": "h:1"}), {"control_plane": "b"}, "'b' is not in the job profile"),
])
def test_an_endpoint_cut_of_a_control_plane_the_profile_cannot_place_is_a_config_error(job, params, why):
    with pytest.raises(ConfigError, match=why):
        job_params(cut(**params), job, Path("/r"), {"n": {"port": "7"}})


@pytest.mark.parametrize("params, why", [
    ({}, "needs endpoint .* or control_plane"),
    ({"scope": "node", "control_plane": "lighthouse"}, "control_plane is for scope endpoint"),
])
def test_partition_params_name_what_is_cut(params, why):
    from drillbit.faults.partition import PartitionParams

    with pytest.raises(ValidationError, match=why):
        PartitionParams.model_validate({"scope": "endpoint", **params})


@pytest.mark.parametrize("address", ["lighthouse", ":7", "h:port"])
def test_a_control_plane_address_is_host_and_port(address):
    with pytest.raises(ValidationError, match="HOST:PORT"):
        ControlPlaneProcess.model_validate({"cmdline": "x", "address": address})


def test_a_cut_from_the_control_plane_is_predicted_from_the_quorum_timeout():
    from drillbit.judging.checks.predict import predict
    from drillbit.faults.partition import Partition, PartitionParams

    spec = cut(control_plane="lighthouse")
    params = PartitionParams.model_validate(spec.fault.params)
    p = predict(Partition.seen_by(params), Partition.verb, BUILTIN_JOBS["torchft"].timeouts, spec.slo)
    assert (p.detect_s, p.by) == (30.0, "quorum")  # Manager(quorum_timeout=max(30 s, --timeout))
    node = predict(Partition.seen_by(PartitionParams()), Partition.verb, BUILTIN_JOBS["torchft"].timeouts, spec.slo)
    assert node.by == "collective"  # a whole node cut off: its peers' collective gives up first


def test_a_control_plane_process_named_by_its_node_index_binds_to_that_launched_node():
    from drillbit.core.errors import ConfigError
    from drillbit.loop.bind import BINDERS
    from drillbit.faults.kill_control_plane import ControlPlaneParams, where_node
    from drillbit.spec.config import BUILTIN_JOBS

    job = BUILTIN_JOBS["reference-respawn"]
    params = ControlPlaneParams(name="elastic-agent-1")
    before = BINDERS["control_plane"](params, job, Path("/r"), "kill-control-plane", {})
    assert before.node is None and before.process.node == 1 and where_node(before) == "node 1 (counted from 0)"
    launched = {"n0": {"node_rank": "0"}, "n1": {"node_rank": "1"}}
    after = BINDERS["control_plane"](params, job, Path("/r"), "kill-control-plane", launched)
    assert after.node == "n1" and after.process.node == "n1"
    with pytest.raises(ConfigError, match="on node 1 .counted from 0., and the job was launched on 1 node"):
        BINDERS["control_plane"](params, job, Path("/r"), "kill-control-plane", {"n0": {}})
