"""#46: the event vocabulary (core/events.py). A checker that reads a kind nothing records (a
typo, a kind renamed on one side) would silently measure nothing, and a payload recorded
with a field its kind does not have would be read as missing. Every kind the code reads or
records by name — a comparison, a history lookup, a measurer's declared ``reads``, a
``record`` call — is one of :class:`Kind`, and every payload is validated as it is recorded."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from drillbit.core.events import JOB_KINDS, PAYLOADS, Kind, Restore, Step
from drillbit.core.history import History
from drillbit.judging.checks.recovery import MEASURERS
from drillbit.entry import layers
from drillbit.spec.signals import KINDS, Signal

SRC = Path(__file__).resolve().parents[2] / "src" / "drillbit"
READ = re.compile(r'(?:\bkind\s*(?:==|!=)\s*|\.(?:first|last|of)\(\s*|\bfirst\(\s*)"([a-z_.]+)"')
READ_IN = re.compile(r'\b(?:e\.|event\.)?kind in \(([^)]*)\)')
RECORDED = re.compile(r'(?:\b\w*\.record\(\s*[A-Za-z_.]+,\s*|\b\w*\.record\(\s*|\brec\(\s*[A-Za-z_.]+,\s*|'
                      r'\bnote\(\s*|_note\(\s*|\.emit\(\s*|\bkind=)"([a-z_.]+)"')
# strings compared with a `kind` that are not event kinds: a save's file events (core/saves.py),
# Prometheus result and metric types
NOT_EVENTS = {"create", "close", "delete", "publish", "torn", "vector", "scalar", "counter", "stateset", "gauge"}


def _scan() -> tuple[dict[str, set[str]], set[str]]:
    read: dict[str, set[str]] = {}
    recorded: set[str] = set()
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        where = str(path.relative_to(SRC))
        for m in READ.finditer(text):
            read.setdefault(m.group(1), set()).add(where)
        for m in READ_IN.finditer(text):
            for kind in re.findall(r'"([a-z_.]+)"', m.group(1)):
                read.setdefault(kind, set()).add(where)
        recorded |= set(RECORDED.findall(text))
    return read, recorded


VOCABULARY = {k.value for k in Kind}
# strings the record scan finds that are not recorded kinds: the reference job's own event-log kinds
# (drillbit.fixtures.reference.eventlog, read by its own watchdog, never by a preset) and error kinds
JOB_OWN = {"worker.start", "compute", "watchdog.start", "refused", "failed", "config", "busy", "tcp", "gate",
           "sweep", "graded", "repeat", "compare", "gameday", "harness", "test"}


def test_every_kind_the_code_reads_is_in_the_vocabulary():
    read, _ = _scan()
    orphans = {k: sorted(v) for k, v in read.items() if k not in VOCABULARY and k not in NOT_EVENTS | JOB_OWN}
    assert not orphans, f"read but not an event kind: {orphans}"


def test_every_kind_the_code_records_by_name_is_in_the_vocabulary():
    _, recorded = _scan()
    assert not recorded - VOCABULARY - JOB_OWN, sorted(recorded - VOCABULARY - JOB_OWN)


def test_every_kind_a_measurer_declares_it_reads_is_in_the_vocabulary():
    missing = {m.name: [k for k in m.reads if k not in VOCABULARY] for m in MEASURERS}
    assert not {k: v for k, v in missing.items() if v}, missing


def test_every_kind_has_one_payload_model_and_the_signal_kinds_are_the_job_payloads():
    assert set(PAYLOADS) == set(Kind)
    assert KINDS is JOB_KINDS and {"step", "restore", "ckpt.save", "members", "error"} <= set(KINDS)
    assert not set(KINDS) & {"fault.inject", "steady", "job.launch", "event.invalid"}  # the harness's own


def _record_calls() -> list[tuple[str, int, str, set[str], bool]]:
    """Every call that records an event by a literal kind (history.record, a Nodes' or an
    agent's note, the Slurm probe's rec): where, the kind, the payload's field names, and
    whether it spreads a mapping whose names cannot be read here."""
    calls = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(layers.parse(path)):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            literal = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if name not in ("record", "note", "rec") or not literal:
                continue
            kind = literal[-1]  # record(source, kind, ...) or note(kind, ...)
            names = {k.arg for k in node.keywords if k.arg} | {
                k.value for a in node.args if isinstance(a, ast.Dict) for k in a.keys if isinstance(k, ast.Constant)}
            spread = any(k.arg is None for k in node.keywords)
            calls.append((str(path.relative_to(SRC)), node.lineno, kind, names - {"t", "node", "rank"}, spread))
    return calls


def test_every_record_call_gives_the_fields_its_kind_has():
    """A payload that a run would refuse only on the path that records it (a harness bug's
    abort, a heal that failed) is found here, without running that path."""
    wrong = []
    calls = [c for c in _record_calls() if c[2] not in ("harness", "test")]  # a Nodes' note passes its kind on
    assert len(calls) > 50
    for where, line, kind, names, spread in calls:
        if kind not in VOCABULARY:
            wrong.append(f"{where}:{line}: {kind!r} is not a kind")
            continue
        model = PAYLOADS[Kind(kind)]
        if model.model_config.get("extra") != "allow" and names - set(model.model_fields):
            wrong.append(f"{where}:{line}: {kind} has no {sorted(names - set(model.model_fields))}")
        required = {n for n, f in model.model_fields.items() if f.is_required()}
        if not spread and required - names:
            wrong.append(f"{where}:{line}: {kind} needs {sorted(required - names)}")
    assert not wrong, wrong


def test_a_payload_is_validated_as_it_is_recorded_and_kept_as_given_when_it_is_wrong():
    h = History()
    step = h.record("probe:logs", "step", n="12", loss="n/a", dt="0.25", epoch="3")
    assert step.data == {"n": 12, "loss": None, "dt": 0.25, "epoch": "3"}  # typed; a group of its own rides along
    assert Step.of(step).n == 12 and Step.of(step).loss is None and Step.of(step).model_extra == {"epoch": "3"}
    wrong = h.record("harness", "fault.heal", fault="kill-rank", pid=7, healed=True, verifed=True)  # a typo
    typo = h.record("harness", "restor", step=3)
    assert wrong.data["verifed"] is True and typo.kind == "restor"  # nothing the harness said is lost
    said = [(e.data["recorded_as"], e.data["seq"], e.data["problem"]) for e in h.of("event.invalid")]
    assert said == [("fault.heal", wrong.seq, "verifed: Extra inputs are not permitted"),
                    ("restor", typo.seq, "'restor' is not an event kind")]
    with pytest.raises(TypeError, match="is 'step', not 'restore'"):
        Restore.of(step)


def test_a_read_drillbit_saw_is_an_absolute_normal_path_or_not_a_read():
    """The truth issue's lesson: a path compared as text (a relative one against an absolute
    one) made a false PASS. A checkpoint read the kernel named is absolute; anything else is
    a drillbit bug, named, and the verdict cannot stand on it."""
    h = History()
    ok = h.record("agent:n0", "ckpt.read", pid=7, file="/ckpt/step_20/../step_20/model.pt", how="fanotify")
    h.record("agent:n0", "ckpt.read", pid=7, file="ckpt/step_20/model.pt", how="fanotify")
    assert ok.data["file"] == "/ckpt/step_20/model.pt"
    assert [e.data["problem"] for e in h.of("event.invalid")] == [
        "file: Value error, 'ckpt/step_20/model.pt' is not an absolute path"]


def test_a_step_without_a_step_number_is_not_a_step():
    h = History()
    h.record("probe:logs", "step", n="twelve")
    assert [e.kind for e in h] == ["step", "event.invalid"] and "n: " in h.last("event.invalid").data["problem"]


def test_a_signal_naming_a_kind_that_is_not_one_is_refused_with_the_kinds():
    with pytest.raises(ValueError, match=r"kind 'restor' is not one a signal can name \(did you mean 'restore'\?\)"):
        Signal(kind="restor", pattern=r"restored (?P<step>\d+)")
    with pytest.raises(ValueError, match="not one a signal can name"):
        Signal(kind="fault.inject", pattern=r"x")  # the harness's own: no line of the job's is one


def test_a_history_another_version_wrote_says_so_and_one_this_version_marked_reads(tmp_path):
    from drillbit.core.errors import ConfigError
    from drillbit.runs.session import rerender

    run = tmp_path / "run"
    run.mkdir()
    rows = [(1.0, "drill.start", {"drill": "kill-rank", "cluster": "local", "job": "reference", "fault": "kill-rank"}),
            (2.0, "steady", {"baseline_step_s": 0.25, "step": 5})]
    h = History.build(rows)
    lines = [e.model_dump_json() for e in h]
    lines[1] = lines[1].replace(', "step": 5', "").replace(',"step":5', "")  # an older steady, without its step
    (run / "history.jsonl").write_text("\n".join(lines) + "\n")
    (run / "spec.json").write_text(_spec_json())
    with pytest.raises(ConfigError, match=r"written by another version of drillbit: 1 event\(s\) do not read as this "
                                          r"version's \(line 2, steady: step: Field required\)"):
        rerender(run)
    assert len(History.load(run / "history.jsonl").unreadable()) == 1
    marked = History()
    marked.record("harness", "steady", baseline_step_s=0.25)  # recorded wrong by this version: marked, readable
    assert marked.unreadable() == []


def _spec_json() -> str:
    from drillbit.spec.models import DrillSpec

    return DrillSpec.model_validate({"name": "t", "class": "fail-stop", "summary": "s",
                                     "fault": {"type": "kill-rank", "trigger": {"at_step": 5}}}).model_dump_json()


def test_the_scan_sees_a_misspelt_kind(tmp_path):
    read = {m.group(1) for m in READ.finditer('if e.kind == "restroe":\n    pass\nhistory.first("stepp")')}
    _, recorded = _scan()
    assert read == {"restroe", "stepp"} and not read & recorded
