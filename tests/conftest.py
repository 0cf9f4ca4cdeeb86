"""Shared test fixtures: a guard that no test leaves a rank, job or stopped process behind."""
from __future__ import annotations

pytest_plugins = ["pytester"]

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

MARKERS = ("drillbit.fixtures.reference", "drillbit.agent", "drillbit.transport", "drillbit.fixtures.stacks", "ray::",
    "gcs_server",
           "raylet", "ray/dashboard", "ray/autoscaler", "log_monitor.py", "sshd -D",
           "torchft_lighthouse", "ft_launcher", "dlrover-run", "dlrover.python", "slurmctld", "slurmd ", "slurmstepd",
           "munged", "etcd --name rdzv", "drillbit.transport.netcluster", "prometheus --config.file",
           "prometheus-pushgateway", "prometheus-node-exporter")


WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # under pytest-xdist: which worker this is
RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # and of which run


def pytest_collection_finish(session):
    """Under ``--dist loadgroup`` a test marked ``xdist_group`` carries its group in its node
    id: that is how pytest-xdist sends a group to one worker. pytest 9.2 silently dropped it
    (pytest-dev/pytest-xdist#1386) and the Ray, Slurm and namespace tests ran side by side;
    refuse to run like that."""
    if WORKER is None or not session.config.getvalue("loadgroup"):
        return
    lost = [i.nodeid for i in session.items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
    if lost:
        raise pytest.UsageError(f"pytest-xdist's loadgroup is not grouping under pytest {pytest.__version__} "
                                f"({len(lost)} tests, e.g. {lost[0]}): see pytest-dev/pytest-xdist#1386; install "
                                "the test extra's pytest (below 9.2)")
    loose = [i.nodeid for i in session.items if _is_alone(i) and not i.nodeid.endswith("@alone")]
    if loose:
        raise pytest.UsageError(f"{loose[0]} is marked alone outside xdist_group('alone'): the alone tests run "
                                "one after another on one worker, handing on their hold (alone_or_together)")


def pytest_addoption(parser):
    parser.addoption("--extended", action="store_true",
                     default=os.environ.get("DRILLBIT_TESTS_EXTENDED", "").strip().lower() in ("1", "true", "yes", "on"),
                     help="also run the extended tier (tests marked extended: variants and measurements whose "
                          "path a test of the CI tier already drives; nightly, not in .ci/run's default)")


def pytest_collection_modifyitems(config, items):
    """The extended tier left out unless asked for (--extended, or DRILLBIT_TESTS_EXTENDED=1);
    then longest first, each xdist group as one, the alone tests last (tests/durations.py); with
    ``--no-loadscope-reorder`` pytest-xdist sends the work in this order."""
    from tests.durations import order

    if not config.getoption("extended"):
        extended = [i for i in items if i.get_closest_marker("extended") is not None]
        if extended:
            config.hook.pytest_deselected(items=extended)
            items[:] = [i for i in items if i.get_closest_marker("extended") is None]

    def group(item: pytest.Item) -> str | None:
        mark = item.get_closest_marker("xdist_group")
        if mark is None:
            return None
        return "@" + str(mark.args[0] if mark.args else mark.kwargs.get("name", ""))

    items[:] = order(items, group, _is_alone)


def _lock_folder(run: str | None) -> Path:
    return Path(tempfile.gettempdir()) / f"drillbit-tests-{run or 'run'}"


_RUNS: set[str] = set()  # on the controller: the runs its workers took part in


def pytest_configure_node(node):
    """The controller learns its workers' run id, to remove their lock folder at the end."""
    _RUNS.add(node.workerinput["testrunuid"])


def pytest_sessionfinish(session):
    """On the controller, once every worker has ended: the run's lock folder goes."""
    if WORKER is None:
        for run in _RUNS:
            folder = _lock_folder(run)
            for name in ("gate.lock", "run.lock"):
                (folder / name).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                folder.rmdir()


_NEXT: dict[str, pytest.Item | None] = {}  # the test this worker runs after the current one
_HELD: dict[str, object] = {}  # an exclusive hold an alone test passed on to the next alone test


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    _NEXT["item"] = nextitem


def _is_alone(item: pytest.Item | None) -> bool:
    return item is not None and item.get_closest_marker("alone") is not None


@pytest.fixture(autouse=True)
def alone_or_together(request):
    """Under pytest-xdist, a test marked ``alone`` runs with no other test beside it; every
    other test may share the machine. The fail-slow drills judge step times a few percent
    apart, and a second drill's load on 2 cores is larger than that.

    A readers-writer lock across the workers, on two files of this run: every test holds
    ``run.lock`` shared, an ``alone`` test exclusive. ``gate.lock`` gives a waiting ``alone``
    test priority: it holds the gate while it waits, and a test that would start takes the
    gate (shared) before ``run.lock``, so it queues behind it instead of starving it. The
    ``alone`` tests share one xdist group, so they run one after another on one worker; each
    hands its exclusive hold to the next, and the machine drains its other tests once for
    all of them rather than once for each (ci20: 7.8 worker-minutes waited at the gate)."""
    if WORKER is None:
        yield
        return
    alone = _is_alone(request.node)
    run = _HELD.pop("run", None)
    if run is None:
        folder = _lock_folder(RUN)
        folder.mkdir(mode=0o700, exist_ok=True)
        run = open(folder / "run.lock", "a+")  # noqa: SIM115 (held, with its lock, for the test's life)
        with open(folder / "gate.lock", "a+") as gate:
            fcntl.flock(gate, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
            try:
                fcntl.flock(run, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
            finally:
                fcntl.flock(gate, fcntl.LOCK_UN)
    try:
        yield
    finally:
        if alone and _is_alone(_NEXT.get("item")):
            _HELD["run"] = run  # still exclusive: the next test is alone too
        else:
            fcntl.flock(run, fcntl.LOCK_UN)
            run.close()


def _ours(proc: psutil.Process) -> bool:
    """Under pytest-xdist a process is this worker's when it inherited the worker's name (every
    process a test starts does, down to Ray's workers and Slurm's job steps); another worker's
    processes are that worker's to check. Without xdist every process counts."""
    if WORKER is None:
        return True
    env = proc.environ()  # the worker's name and this run's id: another pytest run has a gw0 too
    return env.get("PYTEST_XDIST_WORKER") == WORKER and env.get("PYTEST_XDIST_TESTRUNUID") == RUN


def _leftovers() -> list[str]:
    me = os.getpid()
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            if proc.info["pid"] == me or not _ours(proc):
                continue
            if any(m in cmd for m in MARKERS) and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(f"{proc.info['pid']} [{proc.info['status']}] {cmd[:120]}")
            elif proc.info["status"] == psutil.STATUS_STOPPED and proc.ppid() == me:
                found.append(f"{proc.info['pid']} [stopped] {cmd[:120]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


@pytest.fixture(autouse=True)
def no_leftover_processes():
    before = set(_leftovers())
    yield
    deadline = time.time() + 60  # an orphaned Ray cluster goes down once its agents are done
    left = [p for p in _leftovers() if p not in before]
    while left and time.time() < deadline:
        time.sleep(0.25)
        left = [p for p in _leftovers() if p not in before]
    assert not left, "processes left behind:\n" + "\n".join(left)


@pytest.fixture(autouse=True)
def lease_dir(tmp_path, tmp_path_factory, monkeypatch):
    """Each test's leases and file claims apart from every other's: a user's are in
    $DRILLBIT_LEASE_DIR; root's, which no setting moves, in a claims namespace of the test's own
    (drillbit.core.statedir.claims_home)."""
    monkeypatch.setenv("DRILLBIT_LEASE_DIR", str(tmp_path))
    if os.geteuid() == 0:
        from drillbit.core.statedir import NAMESPACE_VAR, mark_namespace
        claims = tmp_path_factory.mktemp("claims")
        mark_namespace(claims)
        monkeypatch.setenv(NAMESPACE_VAR, str(claims))
    return tmp_path


@pytest.fixture(autouse=True)
def process_cluster(monkeypatch):
    """Drills run on the one-node ``local-process`` cluster unless a test names another
    (the Ray and SSH tests do); it needs no Ray start-up per drill."""
    monkeypatch.setenv("DRILLBIT_CLUSTER", "local-process")


@pytest.fixture
def ranks():
    """Three real processes that look like ranks to rank discovery: the marker ``fake-rank`` on
    their command line and RANK in their environment, children of the test process."""
    procs = []
    for rank in range(3):
        env = dict(os.environ, RANK=str(rank))
        procs.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "fake-rank"], env=env))
    yield procs
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.kill()
        p.wait()
