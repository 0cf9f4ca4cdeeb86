"""#57, finding 8: claims every drill sees. The lease (one drill at a time per cluster) and the
file claim (one fault at a time per file) lived in a state folder that ``DRILLBIT_LEASE_DIR``,
``XDG_RUNTIME_DIR`` or ``TMPDIR`` chose, and those differ between a login shell and cron: two
root drills on one cluster name and one file both ran, both heals said verified, and the file
was left damaged. Now root's leases are in /run/drillbit whatever the environment says, and
the file claim is a lock on the checkpoint's folder itself, which every drill of every user
meets.

The job here is a second local user's, its checkpoint in that user's folder. These tests use
the real /run/drillbit (no claims namespace), under cluster names of their own, and remove
what they made there."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from drillbit.agent import NodeAgent
from drillbit.core.proc import ProcRef
from drillbit.core.statedir import NAMESPACE_VAR, ROOT_CLAIMS
from tests.integration.cli import drill_script
from tests.integration.otheruser import OtherUser, other_user  # noqa: F401 (a fixture)

PY = "/usr/bin/python3"  # the second user cannot run the suite's own interpreter (it lives under /root)
SRC = Path(__file__).resolve().parents[2] / "src"
MODEL = bytes(range(256)) * 64

# the job: steps as rank 0; saves one checkpoint (custom layout) at step 3 into the folder it is given
JOB = r"""
import json, os, sys, time
root, model = sys.argv[1], bytes(range(256)) * 64
for n in range(1, 100000):
    if n == 3 and root != "-":
        ckpt = os.path.join(root, "step_3")
        os.makedirs(ckpt, exist_ok=True)
        with open(os.path.join(ckpt, "model.pt"), "wb") as f:
            f.write(model)
        with open(os.path.join(ckpt, "meta.json"), "w") as f:
            json.dump(dict(step=3), f)
        open(os.path.join(ckpt, "COMPLETE"), "w").close()
    print("step %d" % n, flush=True)  # no braces: a drill.yaml's command line fills placeholders
    time.sleep(0.1)
"""

SPEC = """name: claims-57
class: recovery-path
summary: a file fault held in place until the test ends the drill
fault:
  type: corrupt-checkpoint
  targets: {ranks: [0]}
  params: {mode: flip-bytes, then_kill: false, older_ok: true}
  trigger: {at_step: 6}
steady: {warmup_steps: 2}
observe: {until_steps_after_recovery: 5000, window: WINDOW}   # no crash to recover from: held for the window
slo: {detect_within: 60s}
abort: {max_duration: 4m}
blast_radius: {max_share: 1.0}
"""


def config(tmp_path: Path, other: OtherUser, ckpt: Path) -> Path:
    def job(saves_to: str) -> dict:
        return {"signals": [{"kind": "step", "pattern": r"^step (?P<n>\d+)$", "ints": ["n"]}],
                "launch": {"command": [*other.prefix, PY, "-c", JOB, saves_to, "rank57"], "cwd": str(other.home),
                           "env": {"RANK": "0"}, "stop_timeout": "5s"},
                "ranks": {"cmdline": "rank57"}, "logs": ["{run_dir}/job.out"],
                "checkpoint": {"dir": str(ckpt), "layout": "custom", "glob": "step_*", "step_regex": r"step_(\d+)",
                               "marker": "COMPLETE", "metadata": "meta.json"}}
    path = tmp_path / "drill.yaml"
    path.write_text(json.dumps({"jobs": {"saver": job(str(ckpt)), "late": job("-")}}))
    return path


def spec(tmp_path: Path, name: str, window: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(SPEC.replace("WINDOW", window))
    return path


def private(path: Path) -> Path:
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def root_claims(monkeypatch):
    """The real /run/drillbit, as root's drills use it: no claims namespace. What the test's own
    clusters leave there (their lease files) is removed after it."""
    monkeypatch.delenv(NAMESPACE_VAR, raising=False)
    existed = ROOT_CLAIMS.exists()
    clusters: list[str] = []
    yield clusters
    for cluster in clusters:
        (ROOT_CLAIMS / f"drillbit-lease-{cluster}.lock").unlink(missing_ok=True)
    if not existed:
        for folder in (ROOT_CLAIMS / "file-claims", ROOT_CLAIMS):
            with contextlib.suppress(OSError):  # another drill's claims are in it now
                folder.rmdir()


def history_has(reports: Path, kind: str) -> bool:
    return any(f'"kind": "{kind}"' in p.read_text() or f'"kind":"{kind}"' in p.read_text()
               for p in reports.glob("*/history.jsonl"))


def test_a_second_root_drill_from_another_environment_is_refused_by_the_lease_and_by_the_file_claim(
        tmp_path, other_user, root_claims):  # noqa: F811 (the fixture)
    """Drill A (cron's environment: no XDG_RUNTIME_DIR, TMPDIR or DRILLBIT_LEASE_DIR) holds the
    cluster and has damaged the second user's checkpoint. Drill B, from a login shell's
    environment with all three set elsewhere: on the same cluster name it is refused by the
    lease, on another by the file claim; exit 2 naming the holder each time, nothing touched.
    A then heals the file byte for byte, and nothing was written where B's environment
    pointed."""
    ckpt = other_user.own(private(other_user.home / "ckpt"))
    path = config(tmp_path, other_user, ckpt)
    cluster, other_cluster = f"c57-{uuid.uuid4().hex[:8]}", f"c57-{uuid.uuid4().hex[:8]}"
    root_claims.extend([cluster, other_cluster])
    (tmp_path / "drill.yaml").write_text(json.dumps({**json.loads(path.read_text()), "clusters": {
        cluster: {"engine": "process"}, other_cluster: {"engine": "process"}}}))
    cron = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "TMPDIR", "DRILLBIT_LEASE_DIR")}
    login = {**cron, "XDG_RUNTIME_DIR": str(private(tmp_path / "xdg")), "TMPDIR": str(private(tmp_path / "tmp")),
             "DRILLBIT_LEASE_DIR": str(private(tmp_path / "leases"))}
    err = tmp_path / "a.err"
    with open(err, "w") as stderr:
        a = subprocess.Popen([drill_script(), "run", str(spec(tmp_path, "a", "120s")), "--job", "saver", "--config",
                              str(tmp_path / "drill.yaml"), "--cluster", cluster, "--reports", str(tmp_path / "ra")],
                             cwd=tmp_path, env=cron, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.time() + 120
        while not history_has(tmp_path / "ra", "fault.confirmed"):
            assert a.poll() is None and time.time() < deadline, err.read_text()[-3000:]
            time.sleep(0.2)
        model = ckpt / "step_3" / "model.pt"
        assert model.read_bytes() != MODEL  # A's damage is in place

        def b(on: str, job: str) -> subprocess.CompletedProcess:
            return subprocess.run([drill_script(), "run", str(spec(tmp_path, "b", "5s")), "--job", job, "--config",
                                   str(tmp_path / "drill.yaml"), "--cluster", on, "--reports", str(tmp_path / "rb")],
                                  cwd=tmp_path, env=login, capture_output=True, text=True, timeout=180)

        same = b(cluster, "saver")
        assert same.returncode == 2, same.stdout[-2000:] + same.stderr[-2000:]
        assert f"cluster {cluster!r} is held by" in same.stderr and f"pid {a.pid}" in same.stderr, same.stderr
        elsewhere = b(other_cluster, "late")
        assert elsewhere.returncode == 2, elsewhere.stdout[-2000:] + elsewhere.stderr[-2000:]
        said = elsewhere.stdout + elsewhere.stderr
        assert "already damaged by another drill's corrupt-checkpoint fault" in said, said
        assert model.read_bytes() != MODEL  # still A's damage, never B's "heal" of it
        a.send_signal(signal.SIGINT)  # A heals, and gives everything back
        a.wait(timeout=120)
        assert model.read_bytes() == MODEL, "the file was left damaged"
        assert history_has(tmp_path / "ra", "fault.heal")
        for folder in ("xdg", "tmp", "leases"):  # B's environment named them: no claim of B's went there
            assert not [p.name for p in (tmp_path / folder).rglob("*lease*")], folder
        assert not list((ROOT_CLAIMS / "file-claims").glob("*.json")) or all(
            json.loads(p.read_text()).get("file") != str(model) for p in (ROOT_CLAIMS / "file-claims").glob("*.json"))
    finally:
        if a.poll() is None:
            a.send_signal(signal.SIGINT)
            try:
                a.wait(timeout=60)
            except subprocess.TimeoutExpired:
                a.kill()
                a.wait()


USER_CLAIM = r"""
import sys
from drillbit.core import filelocks
from drillbit.core.errors import ConfigError
dev, ino, file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
try:
    filelocks.claim(dev, ino, file, sys.argv[4], "corrupt-checkpoint:1:1.0", "corrupt-checkpoint")
except ConfigError as exc:
    print(exc)
    sys.exit(2)
filelocks.release(dev, ino, sys.argv[4], "corrupt-checkpoint:1:1.0")
print("claimed")
"""


def test_a_users_drill_is_refused_the_file_a_root_drill_holds(tmp_path, other_user):  # noqa: F811 (the fixture)
    """The second user's own drill keeps its claims in its own state folder, which root's never
    sees; it still meets root's claim on the file, which is a lock on the file's folder: refused
    (naming root's drill by pid) while root's fault is in place, free once it is healed."""
    from tests.integration.test_audit import checkpoint_dir, custom

    root = other_user.own(private(other_user.home / "ckpt"))
    checkpoint_dir(root)
    other_user.own(root)
    model = root / "step_10" / "model.pt"
    agent = NodeAgent("n0", tmp_path / "agent-n0.json")
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    state = other_user.own(private(other_user.home / "state"))

    def users_claim() -> subprocess.CompletedProcess:
        info = model.stat()
        return other_user.run([PY, "-c", USER_CLAIM, str(info.st_dev), str(info.st_ino), str(model),
                               str(other_user.home / "agent-u.json")], capture_output=True, text=True, timeout=60,
                              env={"PYTHONPATH": f"{SRC}:{site_packages()}", "DRILLBIT_LEASE_DIR": str(state)})

    try:
        handle = agent.inject("corrupt-checkpoint", ProcRef.of(psutil.Process(victim.pid), rank=0),
                              {"checkpoint": custom(root), "mode": "flip-bytes", "then_kill": False})
        refused = users_claim()
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert f"locked by pid {os.getpid()}" in refused.stdout, refused.stdout
        assert agent.heal(handle).verified and model.read_bytes() == MODEL
        freed = users_claim()
        assert freed.returncode == 0 and "claimed" in freed.stdout, freed.stdout + freed.stderr
    finally:
        victim.kill()
        victim.wait()


def site_packages() -> str:
    return next(p for p in sys.path if p.endswith("site-packages") and Path(p, "psutil").exists())


def test_root_keeps_its_claims_in_run_drillbit_whatever_the_environment_says(tmp_path, root_claims):
    """XDG_RUNTIME_DIR, TMPDIR and DRILLBIT_LEASE_DIR move a user's state folder, never root's
    claims; a claims namespace is obeyed only where root marked the folder as one."""
    env = {k: v for k, v in os.environ.items() if k != NAMESPACE_VAR}
    code = "from drillbit.core.lease import lease_path; print(lease_path('x'))"
    for extra in ({}, {"XDG_RUNTIME_DIR": str(private(tmp_path / "xdg")), "TMPDIR": str(private(tmp_path / "tmp")),
                       "DRILLBIT_LEASE_DIR": str(private(tmp_path / "leases"))}):
        out = subprocess.run([sys.executable, "-c", code], env={**env, **extra}, capture_output=True, text=True,
                             check=True)
        assert out.stdout.strip() == str(ROOT_CLAIMS / "drillbit-lease-x.lock"), out.stdout
    unmarked = private(tmp_path / "unmarked")
    out = subprocess.run([sys.executable, "-c", code], env={**env, NAMESPACE_VAR: str(unmarked)}, capture_output=True,
                         text=True)
    assert out.returncode != 0 and "names no claims namespace" in out.stderr, out.stderr
