"""Spec and config loading: every error at once, each with file:line and field path."""
from __future__ import annotations

import textwrap

import pytest

from drillbit.core.errors import SpecError
from drillbit.spec.load import catalogue
from drillbit.faults.loading import load_config, load_drill
from drillbit.spec.models import parse_duration


def write(tmp_path, text, name="d.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def test_catalogue_specs_all_valid():
    config = load_config(None)
    names = catalogue()
    assert {"kill-rank", "stall-nccl"} <= set(names)
    for path in names.values():
        load_drill(path, config)


def test_all_errors_at_once_with_lines(tmp_path):
    path = write(tmp_path, """
        name: Bad Name
        class: fail-stop
        summary: x
        colour: blue
        fault:
          type: kill-rank
          params: {signal: SIGHUP}
          trigger: {at_step: 0}
        slo:
          detect_within: soon
    """)
    with pytest.raises(SpecError) as info:
        load_drill(path)
    problems = {(p.line, p.path) for p in info.value.problems}
    assert (1, "name") in problems
    assert (4, "colour") in problems
    assert (7, "fault.params.signal") in problems
    assert (8, "fault.trigger.at_step") in problems
    assert (10, "slo.detect_within") in problems
    text = str(info.value)
    assert f"{path}:4: colour: unknown field" in text
    assert "is not a duration" in text


def test_unknown_fault_suggests(tmp_path):
    path = write(tmp_path, """
        name: x
        class: fail-stop
        summary: x
        fault:
          type: kill-rnk
          trigger: {at_step: 3}
    """)
    with pytest.raises(SpecError, match=r"d.yaml:5: fault.type: unknown fault 'kill-rnk' \(did you mean 'kill-rank'\?\)"):
        load_drill(path)


def test_unknown_job_profile(tmp_path):
    path = write(tmp_path, """
        name: x
        class: fail-stop
        summary: x
        job: refrence
        fault: {type: kill-rank, trigger: {at_step: 3}}
    """)
    with pytest.raises(SpecError, match="did you mean 'reference'"):
        load_drill(path, load_config(None))


def test_missing_fields_and_trigger_rule(tmp_path):
    path = write(tmp_path, """
        name: x
        fault:
          type: kill-rank
          trigger: {at_step: 3, after: 10s}
    """)
    with pytest.raises(SpecError) as info:
        load_drill(path)
    paths = {p.path: p for p in info.value.problems}
    assert "class" in paths and "summary" in paths
    assert paths["fault.trigger"].line == 4
    assert "exactly one of at_step, after or during_save" in paths["fault.trigger"].message


def test_yaml_syntax_error_has_line(tmp_path):
    path = write(tmp_path, "name: x\nfault: [\n  type: 1\n")
    with pytest.raises(SpecError) as info:
        load_drill(path)
    assert info.value.problems[0].line is not None
    assert "YAML syntax" in info.value.problems[0].message


def test_config_errors_and_builtins(tmp_path):
    path = write(tmp_path, """
        clusters:
          staging: {engine: local, protectd: true}
        jobs:
          mine:
            logs: [train.log]
    """, name="drill.yaml")
    with pytest.raises(SpecError) as info:
        load_config(path)
    found = {(p.line, p.path) for p in info.value.problems}
    assert (2, "clusters.staging.protectd") in found
    assert (4, "jobs.mine.ranks") in found
    config = load_config(None)
    assert "local" in config.clusters and "reference-nowatchdog" in config.jobs


def test_a_tier_is_a_folder_or_known_from_saves_and_a_bad_one_names_only_its_own_fields(tmp_path):
    path = write(tmp_path, """
        jobs:
          mine:
            ranks: {cmdline: train.py}
            logs: [out.log]
            tiers:
              memory: {known_from: saves}
              disk: {dir: /c, layout: orbax}
              bad: {known_from: memory}
              worse: {dir: /c, layout: nope}
    """, name="drill.yaml")
    with pytest.raises(SpecError) as info:
        load_config(path)
    found = {(p.line, p.path) for p in info.value.problems}
    assert found == {(8, "jobs.mine.tiers.bad.known_from"), (9, "jobs.mine.tiers.worse.layout")}, found
    good = path.read_text().replace("known_from: memory", "known_from: saves").replace("nope", "glob, glob: '*', "
                                                                                          "step_regex: '(\\d+)'")
    path.write_text(good)
    tiers = load_config(path).jobs["mine"].tiers
    assert list(tiers) == ["memory", "disk", "bad", "worse"] and tiers["memory"].lost_with == "node"


@pytest.mark.parametrize("text,seconds", [("60s", 60), ("10m", 600), ("1.5h", 5400), ("250ms", 0.25), (7, 7)])
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["soon", "-5s", True, -1])
def test_bad_durations(bad):
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_every_catalogue_drill_has_a_dry_run_plan():
    """--dry-run prints every catalogue drill's plan (its trigger in words included)."""
    from drillbit.runs.session import plan_text, resolve

    from drillbit.faults import get as get_fault
    from drillbit.faults.loading import load_drill

    for name in catalogue():
        # a drill that cuts a node's network plans on a cluster whose nodes are namespaces
        netns = get_fault(load_drill(catalogue()[name]).fault.type).needs_node_netns
        text = plan_text(resolve(name, cluster="local-netns" if netns else "local-process"))
        assert "fault" in text and "observe" in text, name
    assert "during save #2" in plan_text(resolve("kill-during-save", cluster="local-process"))
