"""The second audit's input findings, each a clean exit 2 with file:line now (each was a
traceback, or was accepted and went wrong later): explicit YAML tags, regex limits, zones,
home paths, NUL bytes, numeric bounds, a YAML size cap, env names, paths that leave the
checkpoint folder or the shim folder, launcher regexes that match anything — and the node
heal that resumes only the DOWN it caused (on a fake Slurm: the boundary only)."""
from __future__ import annotations

import pytest

from drillbit.core.atomic import write_private
from drillbit.core.errors import ConfigError, SpecError
from drillbit.faults import slurm_node
from drillbit.faults.base import HealReport
from drillbit.faults.kill_node import KillNodeParams
from drillbit.transport.slurm import batch_script
from drillbit.spec.config import BUILTIN_JOBS, LaunchSpec
from drillbit.spec.load import MAX_BYTES, load_suite
from drillbit.faults.loading import load_config, load_drill

JOB = """\
jobs:
  j:
    launch: {{command: [python, t.py]{launch}}}
    ranks: {{cmdline: {cmdline}}}
    logs: [t.log]
    heartbeat_file: hb{extra}
"""


def problems(tmp_path, text: str, load=load_config) -> list[str]:
    path = tmp_path / "drill.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as exc:
        load(path)
    return [str(p) for p in exc.value.problems]


def job(cmdline="'t\\.py'", launch="", extra="") -> str:
    return JOB.format(cmdline=cmdline, launch=launch, extra=extra)


@pytest.mark.parametrize("text, words", [
    ("reports_dir: !!int x\n", "'x' is not a valid int"),
    ("reports_dir: !!bool maybe\n", "'maybe' is not a valid bool"),
    ("reports_dir: !!timestamp 2026-13-45\n", "is not a valid timestamp"),
    ("reports_dir: !!float x\n", "'x' is not a valid float"),
])
def test_explicit_tags_with_bad_values_are_clean_errors(tmp_path, text, words):
    [msg] = problems(tmp_path, text)
    assert "drill.yaml:1" in msg and words in msg, msg


@pytest.mark.parametrize("cmdline, words", [
    ("'a{4294967296}'", "a regex the compiler cannot take (OverflowError"),
    ("'" + "(" * 1000 + "a" + ")" * 1000 + "'", "cannot take"),
    ("'" + "a" * 5000 + "'", "a pattern is at most 4096"),
])
def test_regexes_past_what_re_takes_are_clean_errors(tmp_path, cmdline, words):
    out = problems(tmp_path, job(cmdline=cmdline))
    assert any(words in m and "drill.yaml:4" in m for m in out), out


@pytest.mark.parametrize("zone", ["Europe", "A" * 300, "'a\\0b'", "../../etc/passwd"])
def test_zones_that_are_folders_or_absurd_are_clean_errors(tmp_path, zone):
    extra = ("\n    signals: [{kind: step, pattern: '^(?P<t>\\S+) step (?P<n>\\d+)', ints: [n], "
             f"time_format: iso8601, timezone: {zone}}}]")
    out = problems(tmp_path, job(extra=extra))
    assert any("unknown timezone" in m for m in out), out


def test_a_preset_under_a_home_that_does_not_exist_is_a_clean_error(tmp_path):
    out = problems(tmp_path, job(extra="\n    presets: ['~nosuchuser/p.yaml']"))
    assert any("presets.0: not a preset file drillbit can open" in m for m in out), out


def test_a_nul_byte_in_a_suite_drill_name_is_a_clean_error(tmp_path):
    out = problems(tmp_path, 'name: s\ndrills:\n  - drill: "kill\\0rank"\n',
                   lambda p: load_suite(str(p), load_config(None)))
    assert out, out


@pytest.mark.parametrize("value, words", [("9300000000", "more than a year"), (".inf", "finite"),
                                          ("9.3e9", "not a duration")])
def test_durations_past_a_year_or_infinite_are_refused(tmp_path, value, words):
    text = f"clusters:\n  c: {{engine: process, job_grace: {value}}}\n"
    out = problems(tmp_path, text)
    assert any("job_grace" in m and words in m for m in out), out


def test_fault_timeouts_must_be_finite_and_at_most_a_year(tmp_path):
    base = "name: d\nfault:\n  type: kill-rank\n  trigger: {at_step: 5}\n  params: {confirm_timeout_s: %s}\n"
    for value, words in ((".inf", "finite"), ("9.3e9", "more than a year")):
        out = problems(tmp_path, base % value, lambda p: load_drill(p, load_config(None)))
        assert any(words in m for m in out), out


@pytest.mark.parametrize("env", ["{'A=B': x}", "{'': x}", "{'X=1; touch /tmp/p; Y': x}", "{'1A': x}"])
def test_env_names_a_shell_would_not_take_are_refused(tmp_path, env):
    out = problems(tmp_path, job(launch=f", env: {env}"))
    assert any("not names a shell or execve takes" in m for m in out), out


def test_the_batch_script_refuses_an_env_name_built_in_code_and_is_written_0600(tmp_path):
    bad = BUILTIN_JOBS["reference-slurm"].model_copy(update={"launch": LaunchSpec.model_construct(
        command=["true"], env={"X=1; touch /tmp/p; Y": "v"}, per_node=False, cwd=None, stop_timeout=5.0)})
    with pytest.raises(ConfigError, match="not an environment variable name"):
        batch_script(bad, {"python": "py", "run_dir": str(tmp_path)})
    path = write_private(tmp_path / "sbatch.sh", "#!/bin/bash\nexport TOKEN=\"secret\"\n")
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_file_over_the_size_cap_is_refused_before_it_is_parsed(tmp_path):
    path = tmp_path / "drill.yaml"
    path.write_text("# " + "x" * MAX_BYTES + "\n")
    with pytest.raises(SpecError, match="at most 1048576 bytes"):
        load_config(path)


@pytest.mark.parametrize("field, value", [("metadata", "../../victim.txt"), ("marker", "/etc/passwd"),
                                          ("data", "../*.pt"), ("glob", "../step_*")])
def test_layout_names_that_leave_the_checkpoint_folder_are_refused(tmp_path, field, value):
    ckpt = {"dir": "ckpt", "layout": "custom", "glob": "step_*", "step_regex": "step_(\\d+)", field: value}
    text = job(extra=f"\n    checkpoint: {ckpt}")
    out = problems(tmp_path, text)
    assert any("must stay inside it" in m and value in m for m in out), out


@pytest.mark.parametrize("command", ["../x", "/usr/bin/scontrol", ".."])
def test_a_replacement_command_that_leaves_the_shim_folder_is_refused(tmp_path, command):
    out = problems(tmp_path, job(extra=f"\n    replacement: {{command: '{command}'}}"))
    assert any("a command name as the stack runs it from PATH" in m for m in out), out


def test_declare_dead_needs_its_undo(tmp_path):
    out = problems(tmp_path, job(extra="\n    replacement: {command: provider, declare_dead: [scontrol, x]}"))
    assert any("declare_dead needs its undo, revive" in m for m in out), out


@pytest.mark.parametrize("launcher", [".", ".*", "", "bash|python"])
def test_a_launcher_regex_that_matches_anything_is_refused(tmp_path, launcher):
    out = problems(tmp_path, job(extra=f"\n    launcher: '{launcher}'"))
    assert any("no launcher" in m for m in out), out
    with pytest.raises(ValueError, match="no launcher"):
        KillNodeParams(launcher=launcher)


class FakeSlurm:
    """Slurm as scontrol would answer (the boundary only): one node, its state and reason."""

    def __init__(self, state: str, reason: str) -> None:
        self.info = {"State": state, "Reason": reason}
        self.resumed = 0

    def nodes(self):
        return {"n1": self.info}

    def update_node(self, node, state, reason=None):
        self.resumed += 1
        self.info = {"State": "IDLE", "Reason": ""}


@pytest.mark.parametrize("state, reason, resumed", [
    ("DOWN", "drillbit drill", True),  # ours
    ("DOWN+DRAIN", "disk replaced [admin@12:00]", False),  # an administrator's, since
    ("DOWN", "Not responding", False),  # a real failure, not node-down's
])
def test_fake_slurm_node_down_heal_resumes_only_its_own_down(monkeypatch, state, reason, resumed):
    slurm = FakeSlurm(state, reason)
    monkeypatch.setattr(slurm_node, "_slurm", lambda params: slurm)
    params = slurm_node.NodeFaultParams(heal_timeout_s=2)
    report: HealReport = slurm_node.NodeDown().heal(None, params, slurm_node.NodeDownState(node="n1"))
    assert slurm.resumed == (1 if resumed else 0), report
    assert report.healed
    if not resumed:
        assert not report.verified and "left as it is, for its owner" in report.detail
