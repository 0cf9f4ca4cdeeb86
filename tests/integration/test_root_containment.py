"""#57, finding 10: the job contained by a cgroup. A stray started by a job that runs as a
second local user — in a session of its own, with a clean environment, ignoring SIGTERM and
forking to a new pid every millisecond — outlived a root drill's teardown, reparented to
PID 1, in 1 of 3 drills and 4 of 5 direct runs: the job's init signals the pids it lists, and
by then the stray has forked on. The job now runs in a cgroup of its own, killed as a whole
(cgroup v2's ``cgroup.kill``; v1's freezer: freeze, kill, thaw) and removed; the launch says
which holds the job, and the subreaper alone where no cgroup can be made.

The stray proves it is alive by touching a file every millisecond: gone means the file stops
changing. It ends by itself after 30 s, so a failing run leaves nothing behind for long."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from drillbit.agent import NodeAgent
from drillbit.agent.jobcgroup import PREFIX, mounts
from drillbit.agent.jobproc import start_job
from drillbit.agent.leftovers import heal_registry
from tests.integration.cli import drill_cli
from tests.integration.otheruser import OtherUser, other_user  # noqa: F401 (a fixture)

PY = "/usr/bin/python3"  # the second user cannot run the suite's own interpreter (it lives under /root)
REPEATS = 3

STRAY = r"""
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
beat, end = sys.argv[1], time.time() + float(sys.argv[2])
while time.time() < end:
    if os.fork():
        os._exit(0)
    os.utime(beat)
    time.sleep(0.001)
"""

# the job: starts the stray (its own session, a clean environment), then steps as rank 0
JOB = r"""
import os, subprocess, sys, time
stray, beat, token = sys.argv[1], sys.argv[2], sys.argv[3]
open(beat, "w").close()
subprocess.Popen(["setsid", "env", "-i", sys.executable, "-c", stray, beat, "30", token])
for n in range(1, 100000):
    print("step %d" % n, flush=True)  # no braces: a drill.yaml's command line fills placeholders
    time.sleep(0.1)
"""


def job_argv(other: OtherUser, beat: Path, token: str) -> list[str]:
    return [*other.prefix, PY, "-c", JOB, STRAY, str(beat), token]


def beating(beat: Path, over_s: float = 0.5) -> bool:
    """Whether the stray still touches its file (a live stray does so every millisecond)."""
    try:
        before = beat.stat().st_mtime_ns
        time.sleep(over_s)
        return beat.stat().st_mtime_ns != before
    except FileNotFoundError:
        return False


def started(beat: Path, timeout: float = 30.0) -> None:
    deadline = time.time() + timeout
    while not beating(beat, 0.1):
        assert time.time() < deadline, "the stray never started"


def strays(token: str) -> list[int]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if token in (proc.info["cmdline"] or []):
            found.append(proc.info["pid"])
    return found


def end_strays(token: str) -> None:
    """A failing run's strays, hunted down (they change pid every millisecond): until none is
    seen for half a second."""
    quiet_since = time.time()
    deadline = time.time() + 20
    while time.time() - quiet_since < 0.5 and time.time() < deadline:
        found = strays(token)
        if found:
            quiet_since = time.time()
        for pid in found:
            with contextlib.suppress(ProcessLookupError):  # gone since it was seen
                os.kill(pid, signal.SIGKILL)


def test_a_forking_stray_of_another_user_is_gone_after_teardown(
        tmp_path, other_user):  # noqa: F811 (the fixture)
    """Direct runs of the agent's own launch and teardown (the path every drill's job takes):
    in each of several, the stray is gone once the job is stopped, and its cgroup with it."""
    for attempt in range(REPEATS):
        token, beat = f"stray-57-{uuid.uuid4().hex}", other_user.home / f"beat-{attempt}"
        job = start_job(job_argv(other_user, beat, token), {"DRILLBIT_JOBINIT_GRACE_S": "0.5"}, str(other_user.home),
                        tmp_path / f"job-{attempt}.out", stop_timeout=1.0)
        try:
            started(beat)
            job.stop(1.0)
            assert not beating(beat), f"run {attempt + 1}: the stray outlived teardown (now pids {strays(token)})"
            assert job.contained.startswith("cgroup v"), job.contained  # this machine can make one
            assert job.cgroup is not None and not job.cgroup.path.exists() and job.left is None
        finally:
            job.stop(1.0)
            end_strays(token)


@pytest.mark.parametrize("hierarchy", ["v2", "v1-freezer"])
def test_each_hierarchy_holds_the_stray(tmp_path, other_user, hierarchy):  # noqa: F811 (the fixture)
    """v2's cgroup.kill and v1's freezer each end it (a host may have only one of them)."""
    if not any(m.version == hierarchy for m in mounts()):
        pytest.skip(f"no {hierarchy} hierarchy mounted here")
    token, beat = f"stray-57-{uuid.uuid4().hex}", other_user.home / "beat"
    job = start_job(job_argv(other_user, beat, token), {"DRILLBIT_JOBINIT_GRACE_S": "0.5"}, str(other_user.home),
                    tmp_path / "job.out", stop_timeout=1.0, cgroups=(hierarchy,))
    try:
        assert job.contained.startswith(f"cgroup {hierarchy} "), job.contained
        started(beat)
        job.stop(1.0)
        assert not beating(beat), f"the stray outlived teardown (now pids {strays(token)})"
        assert job.cgroup is not None and not job.cgroup.path.exists() and job.left is None
    finally:
        job.stop(1.0)
        end_strays(token)


def test_a_job_that_ends_by_itself_takes_its_cgroup_with_it(tmp_path):
    """Nothing left of the job: its init leaves the cgroup and removes it, before any teardown."""
    job = start_job([sys.executable, "-c", "pass"], {}, None, tmp_path / "job.out", stop_timeout=2.0)
    try:
        assert job.cgroup is not None, job.contained
        assert job.popen.wait(timeout=30) == 0 and not job.cgroup.path.exists()
    finally:
        job.stop(2.0)


def test_where_no_cgroup_can_be_made_the_subreaper_holds_the_job_and_the_launch_says_so(tmp_path):
    job = start_job([sys.executable, "-c", "import time; time.sleep(60)"], {}, None, tmp_path / "job.out",
                    stop_timeout=2.0, cgroups=())
    try:
        assert job.cgroup is None and job.contained.startswith("subreaper only"), job.contained
    finally:
        job.stop(2.0)


def test_drill_heal_ends_the_stray_through_the_cgroup_its_registry_names(
        tmp_path, other_user):  # noqa: F811 (the fixture)
    """The agent is gone (its controller and guardian too): `drill heal` stops the job from the
    registry, the cgroup with it. A cgroup a registry names is obeyed only if it is the one
    made for that job (named after its mark, under a cgroup mount)."""
    token, beat = f"stray-57-{uuid.uuid4().hex}", other_user.home / "beat"
    job = start_job(job_argv(other_user, beat, token), {"DRILLBIT_JOBINIT_GRACE_S": "0.5"}, str(other_user.home),
                    tmp_path / "job.out", stop_timeout=1.0)
    try:
        started(beat)
        agent = NodeAgent("n0", tmp_path / "agent-n0.json")
        agent.register_job(job.ref, job.mark, job.cgroup)
        assert json.loads((tmp_path / "agent-n0.json").read_text())["job"]["cgroup"] == str(job.cgroup.path)
        out = heal_registry(tmp_path / "agent-n0.json")
        assert out.job_stopped, out
        assert not beating(beat), f"the stray outlived drill heal (now pids {strays(token)})"
        assert job.cgroup is not None and not job.cgroup.path.exists()
    finally:
        job.stop(1.0)
        end_strays(token)


def test_a_drills_teardown_ends_the_stray_and_its_history_says_what_held_the_job(
        tmp_path, other_user):  # noqa: F811 (the fixture)
    """A whole root drill (kill-rank on a job of the second user's that starts the stray): after
    it, the stray is gone, and `job.launch` and the report name the cgroup."""
    token, beat = f"stray-57-{uuid.uuid4().hex}", other_user.home / "beat"
    (tmp_path / "drill.yaml").write_text(json.dumps({"jobs": {"stray": {
        "signals": [{"kind": "step", "pattern": r"^step (?P<n>\d+)$", "ints": ["n"]}],
        "launch": {"command": job_argv(other_user, beat, token), "cwd": str(other_user.home),
                   "env": {"RANK": "0", "DRILLBIT_JOBINIT_GRACE_S": "0.5"}, "stop_timeout": "2s"},
        "ranks": {"cmdline": "stray-57-"}, "logs": ["{run_dir}/job.out"]}}}))
    (tmp_path / "spec.yaml").write_text((Path(__file__).parent / "drills" / "kill-rank-fast-short.yaml").read_text()
                                        .replace("ranks: [1]", "ranks: [0]").replace("at_step: 15", "at_step: 5")
                                        .replace("window: 25s", "window: 3s") + "blast_radius: {max_share: 1.0}\n")
    try:
        proc = drill_cli("run", str(tmp_path / "spec.yaml"), "--job", "stray", "--config", str(tmp_path / "drill.yaml"),
                         "--cluster", "local-process", "--reports", str(tmp_path / "r"), "--json", timeout=180)
        assert proc.returncode in (0, 1, 3), proc.stdout[-3000:] + proc.stderr[-3000:]
        assert not beating(beat), f"the stray outlived the drill (now pids {strays(token)})"
        [history] = (tmp_path / "r").glob("*/history.jsonl")
        launch = next(json.loads(line) for line in history.read_text().splitlines() if '"job.launch"' in line)
        [how] = launch["data"]["contained"].values()
        assert how.startswith("cgroup v") and PREFIX in how, how
        assert not Path(how.split()[2]).exists(), f"{how}: left behind"
        assert f"| job held by | {how} |" in (history.parent / "report.md").read_text()
    finally:
        end_strays(token)
