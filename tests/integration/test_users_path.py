"""The catalogue run as users run it: the installed ``drill``, called by its absolute path with
the virtual environment off PATH, from a project folder that holds the README's ``drill.yaml``
(``reports_dir: reports``, relative), from another working folder with a relative
``--config``, and with the reports folder a symlink to somewhere else. Every wrong verdict
this project has found appeared only off the tests' own path: a relative run folder once made
corrupt-checkpoint PASS a job that loaded the damaged checkpoint (#42: the fault recorded
``reports/<run>/…``, the kernel's reads named the absolute file, and a string comparison said
nobody opened it). The broken profile FAILs (exit 1) and the healthy one PASSes (exit 0)
under each shape; the run folder is where the shape says, and its reasons name the reads."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.integration.cli import drill_cli

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

# (job, exit code, a phrase of restore_skipped_corrupted's detail)
JOBS = {"reference-noverify": (1, "after it was damaged, and no other checkpoint after that"),
        "reference": (0, "the damaged one was rejected")}


def project(tmp_path: Path) -> Path:
    """A user's project folder with the README's drill.yaml, as the README says to keep it."""
    folder = tmp_path / "project"
    folder.mkdir()
    shutil.copy(REPO / "drill.yaml", folder / "drill.yaml")
    assert "reports_dir: reports\n" in (folder / "drill.yaml").read_text()
    return folder


def users_env(home: Path) -> dict[str, str]:
    """What cron or a systemd unit gives drill: no virtual environment on PATH, nothing of the
    test's own environment but where the temporary files go."""
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    # the suite's own plumbing, not the user's: a lease folder and root's claims namespace per test (tests
    # run side by side), the worker's name (its leftover check), the reference job's size
    for keep in ("TMPDIR", "DRILLBIT_LEASE_DIR", "DRILLBIT_CLAIMS_NAMESPACE", "PYTEST_XDIST_WORKER",
                 "PYTEST_XDIST_TESTRUNUID", "DRILLBIT_REFERENCE_STEP_MS"):
        if keep in os.environ:
            env[keep] = os.environ[keep]
    env["DRILLBIT_REFERENCE_NPROC"] = "2"  # six drills: two ranks each keep the tier's CPU down (the drill targets rank 1)
    return env


# every shape with the broken profile (a wrong PASS is what #42 was), and the healthy one on the
# README's own shape; the healthy one under the other two shapes is the extended tier's
SHAPES = [pytest.param(shape, job, id=f"{shape}-{job}",
                       marks=[pytest.mark.extended] if job == "reference" and shape != "relative" else [])
          for shape in ("relative", "config-from-elsewhere", "symlinked-reports") for job in sorted(JOBS)]


@pytest.mark.parametrize(("shape", "job"), SHAPES)
def test_corrupt_checkpoint_is_judged_right_from_a_users_project_folder(tmp_path, shape, job):
    proj = project(tmp_path)
    cwd, args, reports = proj, [], proj / "reports"
    if shape == "config-from-elsewhere":
        cwd = tmp_path / "elsewhere"
        cwd.mkdir()
        args = ["--config", "../project/drill.yaml"]  # reports_dir is relative to the config file
    elif shape == "symlinked-reports":
        (tmp_path / "store").mkdir()
        (proj / "reports").symlink_to(tmp_path / "store")
        reports = tmp_path / "store"
    done = drill_cli("run", "corrupt-checkpoint", "--job", job, "--cluster", "local-process", "--json", *args,
                     cwd=cwd, env=users_env(tmp_path))
    want, phrase = JOBS[job]
    assert done.returncode == want, (done.returncode, done.stdout[-3000:], done.stderr[-3000:])
    result = json.loads(done.stdout)
    folders = [p for p in reports.iterdir() if p.name.endswith("-corrupt-checkpoint")]
    assert len(folders) == 1, list(reports.iterdir())
    slo = next(s for s in result["slos"] if s["name"] == "restore_skipped_corrupted")
    assert slo["status"] == ("fail" if want else "pass") and phrase in slo["detail"], slo
    m = result["measurements"]
    damage = m["damaged_restore"]
    assert os.path.isabs(damage["checkpoint"]) and damage["checkpoint"].startswith(str(reports.resolve())), damage
    [heal] = result["fault"]["heals"]
    # put back byte for byte, or pruned by the job by then (the catalogue drill watches 10 steps on)
    assert heal["verified"] and ("byte for byte" in heal["detail"] or "newer data is kept" in heal["detail"]), heal
    if want == 0:  # fell back to the older checkpoint
        assert (m["corrupted_checkpoint"], m["restored_step"], m["rejected_corrupted"]) == ("step_00000020", 10, True)
    else:
        assert any("the checkpoint the harness had corrupted" in r for r in result["reasons"]), result["reasons"]
