"""Input never crashes the tool: a property-based fuzz over the catalogue's specs, the
suites and a drill.yaml with ray, ssh and protected clusters — every load either succeeds
or raises SpecError (a clean exit 2 with file:line), never anything else; plus the cases
found by hand: duplicate keys, alias bombs, tags, nan/inf/zero durations, a deadman
within two heartbeats, binary files, directories, a torn history."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drillbit.core.errors import SpecError
from drillbit.core.history import History
from drillbit.spec.load import catalogue, load_suite, suite_catalogue
from drillbit.faults.loading import load_config, load_drill

ROOT = Path(__file__).resolve().parents[2]
CONFIG = """\
default_cluster: staging
clusters:
  staging: {engine: ray, address: "ray-head:6379", nodes: 4, deadman: 5s, job_grace: 10s}
  slurm-a:
    engine: ssh
    known_hosts: ~/.ssh/known_hosts
    hosts:
      - {name: gpu001, host: gpu001.cluster, user: drill, python: /opt/drillbit/bin/python}
  prod: {engine: ray, address: "prod:6379", protected: true}
jobs:
  mine:
    presets: [torchrun]
    launch: {command: ["{python}", "train.py"], per_node: true, stop_timeout: 30s, env: {OMP_NUM_THREADS: "1"}}
    ranks: {cmdline: 'train\\.py'}
    logs: ["{run_dir}/job.out"]
    launcher: 'torchrun'
    checkpoint:
      {dir: "{run_dir}/ckpt", layout: custom, glob: "step_*", step_regex: 'step_(\\d+)', marker: done, metadata: meta.json}
    signals:
      - kind: step
        pattern: '^(?P<t>\\S+ \\S+) step (?P<n>\\d+)'
        ints: [n]
        time_format: '%Y-%m-%d %H:%M:%S'
        timezone: Europe/Berlin
    replacement: {command: scontrol, shim_dir: "{run_dir}/shim"}
  other:
    presets: [torchrun]
    launch: {command: [python, t.py], cwd: /srv/job}
    ranks: {cmdline: 't\\.py', pidfiles: "{run_dir}/pids/*.json"}
    logs: ["{run_dir}/t.out"]
    heartbeat_file: "{run_dir}/hb"
"""
SPECS = [p.read_text() for p in catalogue().values()]
SUITES = [p.read_text() for p in suite_catalogue().values()]
NASTY = [".nan", ".inf", "-.inf", "0", "0s", "-1", "", "~", "[", "]", "{", "}", "'", '"', "&a", "*a",
         "!!python/name:os.system", "!!python/object/apply:os.system ['true']", "!!binary AAAA", "? [a, b]",
         "<<: *a", "yes", "1e309", "9" * 40, "\t", "\x00", "é", "{a: [b, {c: d}]}", "- x", ": x", "---", "%TAG",
         # found by the second audit: explicit tags, regex limits, zones, home paths, NUL bytes, bounds
         "!!int x", "!!bool maybe", "!!timestamp 2026-13-45", "!!float x", "!!null x", "!!str", "!!set {a}",
         "!!omap [a]", "'a{4294967296}'", "'" + "(" * 1000 + "a" + ")" * 1000 + "'", "'x' ", "'(?P<n>'",
         "Europe", "'" + "A" * 300 + "'", "'~nosuchuser/p.yaml'", "['~nosuchuser/p.yaml']", "\"a\\0b\"",
         "\"\\x00\"", "9.3e9", "9.3e9s", "1e10", ".inf", "-.inf", "'A=B'", "{'A=B': x}", "{'': x}",
         "'../../victim.txt'", "/etc/passwd", "'.'", "'.*'", "''", "[]", "{}", "-1s", "1e-300", "0.0001ms",
         # empty and odd tagged scalars (IndexError, AttributeError inside PyYAML's constructors)
         "!!float ''", "!!int ''", "!!float", "!!int", "!!int '_'", "!!timestamp x", "!!timestamp ''", "!!bool ''",
         "!!binary ''", "!!float '.'", "!!int '0x'", "!!int '-'"]


def mutate(text: str, rnd) -> str:
    """A user's typo or a hostile edit: 1-4 of delete / duplicate / insert / truncate / indent a
    line, or give a key a nasty value. ``rnd`` has ``randint``, ``randrange`` and ``choice``
    (random.Random, or :class:`Drawn` under hypothesis)."""
    lines = text.splitlines()
    for _ in range(rnd.randint(1, 4)):
        if not lines:
            break
        i = rnd.randrange(len(lines))
        op = rnd.choice(["value", "delete", "duplicate", "insert", "truncate", "indent"])
        if op == "value" and ":" in lines[i]:
            lines[i] = f"{lines[i].split(':', 1)[0]}: {rnd.choice(NASTY)}"
        elif op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "insert":
            lines.insert(i, rnd.choice(NASTY))
        elif op == "truncate":
            lines[i] = lines[i][: rnd.randint(0, len(lines[i]))]
        else:
            lines[i] = " " * rnd.randint(1, 3) + lines[i]
    return "\n".join(lines) + "\n"


class Drawn:
    """random.Random's three methods, drawn by hypothesis (so failures shrink)."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data

    def randint(self, a: int, b: int) -> int:
        return self.data.draw(st.integers(a, b))

    def randrange(self, n: int) -> int:
        return self.data.draw(st.integers(0, n - 1))

    def choice(self, options):
        return self.data.draw(st.sampled_from(options))


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def loads_cleanly(load, path: Path) -> None:
    try:
        load(path)
    except SpecError as exc:
        assert exc.problems and all(str(p.file) == str(path) or p.file.startswith("--") or p.file
                                    for p in exc.problems)


@FUZZ
@given(st.data())
def test_fuzzed_drill_specs_load_or_fail_cleanly(tmp_path, data):
    path = tmp_path / "spec.yaml"
    path.write_text(mutate(data.draw(st.sampled_from(SPECS)), Drawn(data)))
    config = load_config(None)
    loads_cleanly(lambda p: load_drill(p, config), path)


@FUZZ
@given(st.data())
def test_fuzzed_configs_load_or_fail_cleanly(tmp_path, data):
    path = tmp_path / "drill.yaml"
    path.write_text(mutate(CONFIG, Drawn(data)))
    loads_cleanly(load_config, path)


@FUZZ
@given(st.data())
def test_fuzzed_suites_load_or_fail_cleanly(tmp_path, data):
    path = tmp_path / "suite.yaml"
    path.write_text(mutate(data.draw(st.sampled_from(SUITES)), Drawn(data)))
    loads_cleanly(lambda p: load_suite(str(p), load_config(None)), path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300))
def test_arbitrary_bytes_are_refused_cleanly(tmp_path, blob):
    path = tmp_path / "blob.yaml"
    path.write_bytes(blob)
    loads_cleanly(load_config, path)


def problems(load, tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "f.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as exc:
        load(path)
    return [str(p) for p in exc.value.problems]


def test_a_second_cluster_key_does_not_silently_drop_protected(tmp_path):
    text = ("clusters:\n  prod: {engine: ray, address: 'p:1', protected: true}\n"
            "  prod: {engine: ray, address: 'p:1'}\n")
    [msg] = problems(load_config, tmp_path, text)
    assert "f.yaml:3" in msg and "duplicate key 'prod' (first on line 2)" in msg


def test_an_alias_bomb_is_refused_in_under_a_second(tmp_path):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=False))
    assert len(bomb.encode()) < 400
    t0 = time.perf_counter()
    [msg] = problems(load_config, tmp_path, bomb)
    assert time.perf_counter() - t0 < 1.0
    assert "once aliases are expanded; refused" in msg


@pytest.mark.parametrize("value", [".nan", ".inf", "0", "0s", "-5"])
def test_durations_must_be_finite_and_positive(tmp_path, value):
    spec = catalogue()["kill-rank"].read_text()
    out = problems(lambda p: load_drill(p, load_config(None)), tmp_path,
                   spec.replace("abort: {max_duration: 10m}", f"abort: {{max_duration: {value}}}")
                   if "abort: {max_duration: 10m}" in spec else spec + f"abort: {{max_duration: {value}}}\n")
    assert any("abort.max_duration" in m for m in out), out


def test_deadman_must_exceed_two_heartbeats(tmp_path):
    out = problems(load_config, tmp_path, "clusters:\n  c: {engine: process, deadman: 1.5s}\n")
    assert any("deadman must exceed twice the heartbeat" in m for m in out)
    out = problems(load_config, tmp_path, "clusters:\n  c: {engine: process, deadman: .nan}\n")
    assert any("finite" in m for m in out)


@pytest.mark.parametrize("text, words", [
    ("a: !!python/name:os.system\n", "not plain data"),
    ("? [a, b]\n: c\n", "a key must be a plain value"),
    ("clusters: [\n", "YAML syntax"),
])
def test_tags_complex_keys_and_syntax_are_clean_errors(tmp_path, text, words):
    assert any(words in m for m in problems(load_config, tmp_path, text))


def test_binary_files_and_directories_are_clean_errors(tmp_path):
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(SpecError, match="not a text file"):
        load_config(tmp_path / "bin.yaml")
    with pytest.raises(SpecError, match="a directory"):
        load_config(tmp_path)


def test_a_torn_last_history_line_is_left_out(tmp_path):
    path = tmp_path / "history.jsonl"
    good = History(path)
    good.record("t", "drill.start")
    good.record("t", "step", n=1)
    good.close()
    with open(path, "a") as fh:
        fh.write('{"seq": 2, "t": 1.0, "sou')  # the controller died mid-write
    assert [e.kind for e in History.load(path)] == ["drill.start", "step"]
    path.write_text(path.read_text().replace('"step"', '"st', 1) + "\n" + json.dumps({"x": 1}) + "\n")
    with pytest.raises(ValueError, match="history.jsonl:2"):
        History.load(path)
