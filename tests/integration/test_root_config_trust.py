"""Root trusts configuration as git trusts a repository (#57, findings 1, 6, 7 and 11): each
attack is run as a second local user (tests/integration/otheruser.py) against a root `drill`,
and nothing outside what the attack targets is written.

- 1: a drill.yaml of another user's, read by root's `drill heal --cluster` from that user's
  folder, ran its ssh cluster's proxy_command as root;
- 6: `drill heal` on a run folder another user planted said "not trusted", yet rewrote its
  history.jsonl as root;
- 7: a drills.db link planted in a shared reports folder made root's `drill run --reports`
  create an SQLite file at the link's target, even for a drill refused with a config error;
- 11: a refused drill (exit 2) was recorded as an aborted verdict in the results store and fed
  the aborted figures of metrics.prom.
"""
from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path

from tests.integration.cli import drill_cli
from tests.integration.otheruser import OtherUser, other_user  # noqa: F401 (a fixture)

SETTING = "DRILLBIT_SAFE_DIRECTORY"

# refused by the loop's preflight (a config error, exit 2) before anything is launched: the
# reference job reads no membership signal that steady.members could wait for
REFUSED_DRILL = """\
name: refused-members
class: fail-stop
summary: refused at preflight; steady.members needs a membership signal the reference job lacks
job: reference
fault:
  type: kill-rank
  targets: {count: 1, select: random, exclude_ranks: [0]}
  params: {signal: SIGKILL}
  trigger: {at_step: 25}
steady: {warmup_steps: 5, members: 2}
observe: {until_steps_after_recovery: 10, window: 60s}
slo: {detect_within: 60s}
abort: {max_duration: 2m}
"""


def env_without_setting() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in (SETTING, "SUDO_UID")}


def snapshot(folder: Path) -> dict[str, tuple]:
    """Every name under ``folder``: its kind, owner, mode, inode and bytes."""
    out = {}
    for p in sorted([folder, *folder.rglob("*")]):
        info = os.lstat(p)
        body = p.read_bytes() if stat.S_ISREG(info.st_mode) else os.readlink(p) if stat.S_ISLNK(info.st_mode) else None
        out[str(p.relative_to(folder))] = (stat.S_IFMT(info.st_mode), info.st_uid, stat.S_IMODE(info.st_mode),
                                           info.st_ino, body)
    return out


def test_root_never_reads_a_drill_yaml_another_user_owns(other_user: OtherUser, tmp_path):  # noqa: F811 (the fixture)
    """Finding 1: root's `drill heal --cluster` in another user's folder read that user's
    drill.yaml and ran its proxy_command as root (uid=0 in the file; exit 5)."""
    proof = other_user.root_base / "proof"  # a root-owned folder: only root could write it
    config = other_user.home / "drill.yaml"
    (other_user.home / "known_hosts").write_text("")  # read before the proxy starts: it must be there
    config.write_text(f"clusters:\n  victim:\n    engine: ssh\n    known_hosts: {other_user.home / 'known_hosts'}\n"
                      "    hosts:\n      - {name: n0, host: 127.0.0.1, port: 9, "
                      f"proxy_command: \"sh -c 'id > {proof}'\"}}\n")
    other_user.own(other_user.home)
    done = drill_cli("heal", "--cluster", "victim", cwd=other_user.home, env=env_without_setting(), timeout=120)
    assert not proof.exists(), proof.read_text()  # before: "uid=0(root) …", the proxy run as root
    assert done.returncode == 2, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert f"belongs to uid {other_user.uid}" in said and f"{SETTING}={other_user.home}" in said, said
    # the same file named by --config, and by $DRILLBIT_CONFIG, from a folder of root's
    for args, extra in ((["--config", str(config)], {}), ([], {"DRILLBIT_CONFIG": str(config)})):
        done = drill_cli("list", "--clusters", *args, cwd=tmp_path, env={**env_without_setting(), **extra},
                         timeout=120)
        assert done.returncode == 2 and f"belongs to uid {other_user.uid}" in done.stderr, done.stderr
    # root's own file in that user's folder: the folder's owner could swap it
    os.chown(config, 0, 0)
    done = drill_cli("list", "--clusters", cwd=other_user.home, env=env_without_setting(), timeout=120)
    assert done.returncode == 2 and f"{other_user.home} belongs to uid {other_user.uid}" in done.stderr, done.stderr
    # a drills folder of that user's, named by --drills
    drills = other_user.home / "drills"
    drills.mkdir()
    other_user.own(drills)
    done = drill_cli("list", "--drills", str(drills), cwd=tmp_path, env=env_without_setting(), timeout=120)
    assert done.returncode == 2 and f"drills folder {drills} is not trusted" in done.stderr, done.stderr
    # trusted once root says so (as git's safe.directory), or when that user is the one who ran sudo
    config.write_text("clusters:\n  theirs: {engine: process}\n")
    other_user.own(config)
    for extra in ({SETTING: str(other_user.home)}, {"SUDO_UID": str(other_user.uid)}):
        done = drill_cli("list", "--clusters", "--json", cwd=other_user.home, env={**env_without_setting(), **extra},
                         timeout=120)
        assert done.returncode == 0 and "theirs" in done.stdout, done.stdout + done.stderr
    assert not proof.exists()


def test_drill_heal_never_writes_in_a_run_folder_another_user_planted(other_user: OtherUser, tmp_path):  # noqa: F811 (the fixture)
    """Finding 6: `drill heal RUN_DIR` said "not trusted … nothing it names was touched", yet
    merged the planted dead-man records into the planted history.jsonl, rewriting it as root."""
    run = other_user.home / "20261206-101010-kill-rank"
    run.mkdir()
    (run / "spec.json").write_text("{}\n")
    (run / "history.jsonl").write_text(json.dumps({"seq": 0, "t": 1.0, "source": "harness", "kind": "drill.start",
                                                   "node": None, "rank": None,
                                                   "data": {"cluster": "local-process"}}) + "\n")
    (run / "agent-local.deadman.jsonl").write_text(json.dumps({"t": 2.0, "kind": "orphan.done", "node": "local",
                                                               "rank": None, "data": {"by": "dead-man"}}) + "\n")
    other_user.own(run)
    before = snapshot(run)
    done = drill_cli("heal", str(run), cwd=tmp_path, env=env_without_setting(), timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert "its history was not merged" in said and f"belongs to uid {other_user.uid}" in said, said
    assert snapshot(run) == before  # before: history.jsonl rewritten whole, owned by root
    # `drill report` on it: refused before anything in it is read or written
    done = drill_cli("report", str(run), cwd=tmp_path, env=env_without_setting(), timeout=120)
    assert done.returncode == 2 and "run folder" in done.stderr and "not trusted" in done.stderr, done.stderr
    assert snapshot(run) == before


def test_a_drills_db_link_in_a_shared_reports_folder_is_never_followed(other_user: OtherUser, tmp_path):  # noqa: F811 (the fixture)
    """Finding 7: a drills.db link planted in a shared reports folder (root's, 1777, as a team
    keeps one): root's `drill run --reports` made an SQLite file at the link's target, even for
    a drill refused with a config error."""
    shared = other_user.root_base / "shared-reports"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    target = other_user.root_base / "planted-target.db"  # where the user cannot write, root can
    elsewhere = other_user.root_base / "elsewhere"  # root's, 0755: a folder the user chose for root to write in
    elsewhere.mkdir()
    for link, to in ((shared / "drills.db", target), (shared / "sub", elsewhere)):
        assert other_user.run(["ln", "-s", str(to), str(link)]).returncode == 0
    (tmp_path / "refused.yaml").write_text(REFUSED_DRILL)
    before = snapshot(shared)
    # the shared folder as the reports folder; a reports folder in it that is the user's link
    for reports in (shared, shared / "sub" / "reports"):
        done = drill_cli("run", str(tmp_path / "refused.yaml"), "--cluster", "local-process", "--reports",
                         str(reports), cwd=tmp_path, env=env_without_setting(), timeout=300)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "not trusted" in done.stderr, done.stderr
        assert not target.exists() and snapshot(shared) == before and list(elsewhere.iterdir()) == []
    said = " ".join(drill_cli("run", str(tmp_path / "refused.yaml"), "--cluster", "local-process", "--reports",
                              str(shared), cwd=tmp_path, env=env_without_setting(), timeout=300).stderr.split())
    assert f"reports folder {shared} is not trusted" in said and "anyone can write it" in said, said
    assert f"{SETTING}={shared}" in said
    # trusted by the setting: the link itself is still never followed
    done = drill_cli("run", str(tmp_path / "refused.yaml"), "--cluster", "local-process", "--reports", str(shared),
                     cwd=tmp_path, env={**env_without_setting(), SETTING: str(shared)}, timeout=300)
    assert done.returncode == 2 and "a symbolic link" in done.stderr, done.stderr
    assert not target.exists() and snapshot(shared) == before and list(elsewhere.iterdir()) == []


def test_a_refused_drill_is_no_verdict_in_the_results_store_or_the_metrics(other_user: OtherUser, tmp_path):  # noqa: F811 (the fixture)
    """Finding 11: a drill refused with exit 2 (here by the loop's preflight; a file claimed by
    another drill ends the same way) was recorded as verdict aborted in drills.db and counted
    in metrics.prom's aborted runs. The second user is the bystander whose folder the
    refusal must leave alone: their checkpoint folder, named nowhere, stays as it was."""
    theirs = snapshot(other_user.home)
    (tmp_path / "refused.yaml").write_text(REFUSED_DRILL)
    reports = tmp_path / "reports"
    done = drill_cli("run", str(tmp_path / "refused.yaml"), "--cluster", "local-process", "--reports", str(reports),
                     "--json", cwd=tmp_path, env=env_without_setting(), timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    payload = json.loads(done.stdout)
    assert payload["exit_code"] == 2 and payload["error_kind"] == "config", payload
    assert "steady.members needs a membership signal" in payload["error"]
    rows = sqlite3.connect(reports / "drills.db").execute("SELECT drill, verdict FROM runs").fetchall()
    assert rows == []  # before: [('refused-members', 'aborted')]
    assert not (reports / "metrics.prom").exists()  # before: drillbit_runs_total{…verdict="aborted"} 1
    (run,) = [p for p in reports.iterdir() if p.is_dir()]  # the run folder says why
    assert json.loads((run / "result.json").read_text())["error_kind"] == "config"
    assert snapshot(other_user.home) == theirs


def test_a_reports_dir_from_drill_yaml_through_a_planted_link_is_never_followed(other_user: OtherUser, tmp_path):  # noqa: F811 (the fixture)
    """The same planted link, named by root's own drill.yaml (reports_dir) rather than --reports:
    the config loader resolved it when the file was read, so the trust walk saw only the link's
    target (root's folder) and root's run folder went where the planter chose."""
    shared = other_user.root_base / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    elsewhere = other_user.root_base / "cron.d"  # root's, 0755
    elsewhere.mkdir()
    assert other_user.run(["ln", "-s", str(elsewhere), str(shared / "reports")]).returncode == 0
    project = tmp_path / "project"
    project.mkdir()
    (project / "drill.yaml").write_text(f"reports_dir: {shared / 'reports'}\n")
    (project / "refused.yaml").write_text(REFUSED_DRILL)
    done = drill_cli("run", "refused.yaml", "--cluster", "local-process", cwd=project, env=env_without_setting(),
                     timeout=300)
    assert done.returncode == 2 and "not trusted" in done.stderr, done.stdout + done.stderr
    assert list(elsewhere.iterdir()) == [], "root's run folder went where the planted link pointed"
