"""Paths are absolute and resolved where they enter (drillbit.core.paths): the run folder, the
config's folders (relative to the config file), a checkpoint folder of the profile (relative
to the job's working folder), the read watch's root, and a path a job's line names."""
from __future__ import annotations

import os

import pytest
from pydantic import BaseModel, ValidationError

from drillbit.faults.loading import load_config
from drillbit.loop.bind import job_checkpoint
from drillbit.core.paths import AbsPath, entered, is_within
from drillbit.judging.probes.preset import Matcher
from drillbit.core.readwatch import ReadWatch
from drillbit.core.runfolder import new_folder
from drillbit.spec.config import JobProfile
from drillbit.spec.signals import Signal


def test_entered_is_absolute_and_follows_links(tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    monkeypatch.chdir(tmp_path)
    assert entered("link/x") == str(real / "x")
    assert entered("x", base=tmp_path / "link") == str(real / "x")
    assert entered(str(tmp_path / "link" / ".." / "real")) == str(real)


def test_a_run_folder_under_a_relative_symlinked_reports_is_absolute_and_real(tmp_path, monkeypatch):
    (tmp_path / "store").mkdir()
    (tmp_path / "reports").symlink_to(tmp_path / "store")
    monkeypatch.chdir(tmp_path)
    folder = new_folder("reports", "corrupt-checkpoint")
    assert folder.is_absolute() and folder.parent == tmp_path / "store"


def test_the_configs_folders_are_relative_to_the_config_file_not_to_where_drill_runs(tmp_path, monkeypatch):
    project = tmp_path / "project"
    project.mkdir()
    (project / "drill.yaml").write_text("reports_dir: reports\nresults_db: db/drills.db\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_config(project / "drill.yaml")
    assert config.reports_dir == str(project / "reports")
    assert config.results_db == str(project / "db" / "drills.db")


def test_a_profiles_relative_checkpoint_folder_is_taken_against_the_jobs_working_folder(tmp_path):
    job = JobProfile.model_validate({"presets": ["torchrun"], "launch": {"command": ["python", "t.py"],
                                                                         "cwd": str(tmp_path / "job")},
                                     "ranks": {"cmdline": r"t\.py"}, "logs": ["{run_dir}/t.out"],
                                     "checkpoint": {"dir": "out/ckpt", "layout": "reference"}})
    assert job_checkpoint(job, tmp_path / "run").dir == str(tmp_path / "job" / "out" / "ckpt")
    job = job.model_copy(update={"checkpoint": job.checkpoint.model_copy(update={"dir": "{run_dir}/ckpt"})})
    assert job_checkpoint(job, tmp_path / "run").dir == str(tmp_path / "run" / "ckpt")


def test_the_read_watch_names_its_root_as_the_kernel_does(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert ReadWatch(tmp_path / "link").root == tmp_path / "real"


def test_a_job_line_naming_its_checkpoint_through_a_link_is_resolved_where_it_is_read(tmp_path):
    (tmp_path / "real" / "step_20").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    m = Matcher([Signal(kind="restore", pattern=r"loaded (?P<path>\S+) at step (?P<step>\d+)", ints=["step"])])
    [(kind, _, data)] = m.match(f"loaded {tmp_path}/link/step_20 at step 20")
    assert kind == "restore" and data["path"] == str(tmp_path / "real" / "step_20")
    [(_, _, data)] = m.match("loaded ckpt/step_20 at step 20")
    assert data["path"] == "ckpt/step_20"  # relative: the job's own folder is not known here; matched by tail


def test_an_abspath_field_refuses_a_relative_path():
    class M(BaseModel):
        p: AbsPath

    assert M(p="/a/b/../c").p == "/a/c"
    with pytest.raises(ValidationError, match="relative path"):
        M(p="reports/x")
    assert is_within("/a/b/c", "/a/b") and not is_within("a/b/c", "a/b") and not is_within("/a/bc", "/a/b")
    assert os.path.isabs(entered("."))


def test_a_relative_path_in_a_job_line_is_taken_against_the_jobs_folder_not_ours(tmp_path, monkeypatch):
    """LitGPT prints 'Resuming training from out/step-000020/lit_model.pth', relative to its own
    working folder; read from another folder, the restore-line witness took it for another
    checkpoint (found by drilling the installed litgpt, tests/integration/test_pypi_programs.py)."""
    from drillbit.judging.checks.witness import relation

    job = tmp_path / "project"
    (job / "out" / "step-000020").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)  # drill runs elsewhere
    restore = Signal(kind="restore", pattern=r"^Resuming training from (?P<path>\S+)")
    [(_, _, data)] = Matcher([restore], base=str(job)).match("Resuming training from out/step-000020/lit_model.pth")
    assert data["path"] == str(job / "out" / "step-000020" / "lit_model.pth")
    assert relation(data["path"], str(job / "out" / "step-000020")) == "same"
    # with no folder to place it, its leading components still name the checkpoint it is in
    assert relation("out/step-000020/lit_model.pth", str(job / "out" / "step-000020")) == "same"
    assert relation("out/step-000010/lit_model.pth", str(job / "out" / "step-000020")) == "other"


def test_a_link_swapped_while_it_is_resolved_is_read_again_and_never_raises(tmp_path, monkeypatch):
    """CI: a second user flipped a folder and a link while a root drill read a job line naming
    it; realpath's readlink met a folder where its lstat had seen a link (EINVAL), and the log
    probe's thread died with a traceback."""
    import errno

    real, calls = os.path.realpath, []

    def racing(p, *args, **kwargs):
        calls.append(p)
        if len(calls) <= 2:
            raise OSError(errno.EINVAL, "Invalid argument", p)
        return real(p, *args, **kwargs)

    monkeypatch.setattr(os.path, "realpath", racing)
    assert entered(tmp_path / "ckpt") == real(tmp_path / "ckpt") and len(calls) == 3
    monkeypatch.setattr(os.path, "realpath", lambda p, *a, **k: (_ for _ in ()).throw(OSError(errno.EINVAL, "x")))
    assert entered(str(tmp_path) + "/a/../ckpt") == os.path.normpath(str(tmp_path) + "/ckpt")


def test_a_log_probe_whose_read_fails_records_it_and_reads_on(tmp_path):
    import time

    from drillbit.core.history import History
    from drillbit.judging.probes.logs import LogProbe
    from drillbit.judging.probes.preset import matcher

    log = tmp_path / "job.log"
    log.write_text("step 1\n")
    history = History()
    probe = LogProbe(history, [log], matcher([Signal(kind="step", pattern=r"step (?P<n>\d+)")]), poll=0.05)
    real, failed = probe._read, []

    def once_broken() -> None:
        if not failed:
            failed.append(True)
            raise OSError(22, "Invalid argument")
        real()

    probe._read = once_broken  # type: ignore[method-assign]
    probe.start()
    try:
        deadline = time.time() + 10
        while not history.of("step") and time.time() < deadline:
            time.sleep(0.05)
    finally:
        probe.stop()
    assert [e.data["detail"] for e in history.of("probe.error")] == ["OSError: [Errno 22] Invalid argument"]
    assert [e.data["n"] for e in history.of("step")] == [1]
