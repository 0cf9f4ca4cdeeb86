"""#45: the command line, tried with mistakes. Each is exit 2 with one error style
(``error: …``), the option or name it concerns, and a JSON error object under ``--json``; the
table in docs/cli.md is made from the same list (drillbit.entry.docgen.MISTAKES)."""
from __future__ import annotations

import json

import pytest

from drillbit.entry import docgen


@pytest.mark.parametrize("command,code", docgen.MISTAKES, ids=[c for c, _ in docgen.MISTAKES])
def test_a_mistake_is_exit_2_in_one_style_and_json_when_asked(command, code):
    got, stdout, stderr = docgen.answer(command)
    assert got == code, stderr
    assert stderr.startswith("error: "), stderr
    assert "Traceback" not in stderr and "drillbit bug" not in stderr
    as_json = command if "--json" in command else f"{command} --json"
    got, stdout, _ = docgen.answer(as_json)
    payload = json.loads(stdout)
    assert payload["exit"] == code and payload["error"], payload


@pytest.mark.parametrize("command,names", [
    ("drill simulate --scenario llama3-405b --trials 0", "--trials"),
    ("drill simulate --scenario llama3-405b --days -1", "--days"),
    ("drill simulate --scenario llama3-405b --gpus 0", "--gpus"),
    ("drill simulate --scenario llama3-405b --save-seconds 60 --interval 0s --detect 1m --restart 1m", "--interval"),
    ("drill run kill-rank --cluster locl", "did you mean 'local'"),
    ("drill run kill-rank --job refrence", "did you mean 'reference'"),
    ("drill run kill-rank --job my-job", "drill list --jobs"),
    ("drill results kill-rnk", "did you mean 'kill-rank'"),
    ("drill run kill-rank --config empty.yaml", "empty.yaml:1: empty"),
    ("drill run kill-rank --drills /nonexistent", "--drills"),
])
def test_the_message_names_what_was_wrong(command, names):
    code, _, stderr = docgen.answer(command)
    assert code == 2 and names in stderr, stderr


def test_h_is_help_on_every_command():
    for command in ("drill -h", "drill run -h", "drill suite run -h", "drill list -h"):
        code, stdout, _ = docgen.answer(command)
        assert code == 0 and "Usage:" in stdout, command
    code, stdout, _ = docgen.answer("drill probe -h")
    assert "Start the job" in " ".join(stdout.split()), stdout  # it says that it starts the job


def test_listings_keep_the_names_people_copy_whole_at_80_columns(monkeypatch):
    from drillbit.spec.load import catalogue

    monkeypatch.setenv("COLUMNS", "80")
    from drillbit.entry.cli import common

    monkeypatch.setattr(common.out, "_width", 80)
    code, stdout, _ = docgen.answer("drill list")
    assert code == 0
    rows = {line.split()[0] for line in stdout.splitlines() if line.strip()}
    cut = [name for name in catalogue() if name not in rows]
    assert not cut, cut
    assert "…" not in stdout  # prose wraps (folded), names are whole


def test_list_shows_suites_jobs_and_clusters():
    code, stdout, _ = docgen.answer("drill list --suites --json")
    assert code == 0 and {"pre-deploy", "known-defects"} <= {s["suite"] for s in json.loads(stdout)["suites"]}
    code, stdout, _ = docgen.answer("drill list --jobs --json")
    assert code == 0 and "reference" in {j["job"] for j in json.loads(stdout)["jobs"]}
    code, stdout, _ = docgen.answer("drill list --clusters --json")
    assert code == 0 and "local" in {c["cluster"] for c in json.loads(stdout)["clusters"]}


def test_drills_names_another_folder_on_every_command_that_looks_drills_up(tmp_path):
    from drillbit.entry.cli import cli

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "kill-mine.yaml").write_text(
        "name: kill-mine\nclass: fail-stop\nsummary: mine\nfault: {type: kill-rank, trigger: {at_step: 5}}\n")
    code, stdout, stderr = docgen.answer(f"drill list --drills {mine} --json")
    assert code == 0 and "kill-mine" in {d["drill"] for d in json.loads(stdout)["drills"]}, stderr
    code, stdout, stderr = docgen.answer(f"drill run kill-mine --drills {mine} --cluster local-process --dry-run")
    assert code == 0 and "kill-mine" in stdout, stderr
    code, _, stderr = docgen.answer("drill run kill-mine --cluster local-process --dry-run")
    assert code == 2  # the folder was for that command line only
    takes = {name for name, c in cli.commands.items() if any(p.name == "drills" for p in c.params)}
    takes |= {f"{g} {n}" for g in ("suite", "gameday") for n, c in cli.commands[g].commands.items()
              if any(p.name == "drills" for p in c.params)}
    assert {"run", "sweep", "probe", "list", "validate", "runbook", "gate", "compare", "suite run",
            "gameday run"} <= takes, takes
    pushes = {name for name, c in cli.commands.items() if any(p.name == "pushgateway" for p in c.params)}
    assert {"run", "gate", "compare"} <= pushes, pushes


def test_listings_off_a_terminal_are_full_width_with_no_cell_wrapped(tmp_path):
    """#56: piped (a CI log), `drill list` wrapped every summary at 80 columns, a word or two
    a line. Off a terminal a row is one line however long; $COLUMNS, where set, still rules."""
    import os
    import subprocess
    import sys

    from drillbit.faults.loading import load_drill
    from drillbit.spec.load import catalogue

    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "DRILLBIT_CONFIG")}
    done = subprocess.run([sys.executable, "-m", "drillbit.entry.cli", "list"], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=120)  # stdout a pipe: no terminal
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) > 80
    for name, path in catalogue().items():  # each drill one line: its name, then its whole summary
        summary = load_drill(path).summary
        assert any(line.split()[:1] == [name] and summary in line for line in lines), (name, summary)
    narrow = subprocess.run([sys.executable, "-m", "drillbit.entry.cli", "list"], capture_output=True, text=True,
                            cwd=tmp_path, env={**env, "COLUMNS": "100"}, timeout=120)
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 100


def test_every_command_that_takes_the_lease_can_wait_for_it():
    from drillbit.entry.cli import cli

    takes = {name for name, c in cli.commands.items() if any(p.name == "wait" for p in c.params)}
    takes |= {f"{g} {n}" for g in ("suite", "gameday") for n, c in cli.commands[g].commands.items()
              if any(p.name == "wait" for p in c.params)}
    assert takes == {"run", "probe", "sweep", "compare", "campaign", "gate", "suite run", "gameday run"}, takes
    code, _, stderr = docgen.answer("drill run kill-rank --cluster local-process --wait soon")
    assert code == 2 and "--wait" in stderr and "'soon' is not a duration" in stderr, stderr
