"""Signals described in the job profile (inline, preset files, time formats), the checks
`drill validate` makes of them, and the tiny reporter read by the built-in `drillbit` preset
— its lines written by a real process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone

import pytest

from drillbit.core.errors import SpecError
from drillbit.judging.probes.preset import Matcher, load, signals_of
from drillbit.faults.loading import load_config
from drillbit.spec.signals import Signal

MEGATRON = [
    "[2026-11-30T01:25:12.222]  iteration        1/  100000 | consumed samples:          128 | elapsed time per "
    "iteration (ms): 228.3 | lm loss: 5.350661E-02 |",
    "[2026-11-30T01:25:14.601] saving checkpoint at iteration      10 to /runs/x/ckpt",
    "[2026-11-30T01:25:20.310]   successfully loaded checkpoint from /runs/x/ckpt at iteration 10",
]
MINE = """\
jobs:
  mine:
    presets: [torchrun]
    launch: {command: ["torchrun", "--nproc-per-node", "4", "train.py"]}
    ranks: {cmdline: 'train\\.py'}
    logs: ["{run_dir}/job.out"]
    signals:
      - kind: step
        pattern: '^\\[(?P<t>[^\\]]+)\\]\\s+iteration\\s+(?P<n>\\d+)/'
        ints: [n]
        time_format: iso8601
        timezone: UTC
      - kind: ckpt.save
        pattern: '^\\[(?P<t>[^\\]]+)\\] saving checkpoint at iteration\\s+(?P<step>\\d+) to (?P<path>\\S+)'
        ints: [step]
        time_format: iso8601
        timezone: UTC
      - kind: restore
        pattern: 'successfully loaded checkpoint from (?P<path>\\S+) at iteration (?P<step>\\d+)'
        ints: [step]
"""


def test_a_job_that_logs_like_megatron_is_read_through_its_profile_alone(tmp_path):
    (tmp_path / "drill.yaml").write_text(MINE)
    job = load_config(tmp_path / "drill.yaml").jobs["mine"]
    hits = [h for line in MEGATRON for h in Matcher(signals_of(job.presets, job.signals)).match(line)]
    assert [k for k, _, _ in hits] == ["step", "ckpt.save", "restore"]
    (_, t, step), (_, _, save), (_, t_read, restore) = hits
    assert step["n"] == 1 and step["t_source"] == "line"
    assert t == datetime(2026, 11, 30, 1, 25, 12, 222000, tzinfo=timezone.utc).timestamp()
    assert save["step"] == 10 and save["path"] == "/runs/x/ckpt"
    assert t_read is None and restore["t_source"] == "read" and restore["step"] == 10


@pytest.mark.parametrize("fmt, zone, stamp, expected", [
    ("%Y-%m-%d %H:%M:%S,%f", "UTC", "2026-11-30 01:25:12,222", datetime(2026, 11, 30, 1, 25, 12, 222000, timezone.utc)),
    ("iso8601", None, "2026-11-30T01:25:12.5+02:00", datetime(2026, 11, 29, 23, 25, 12, 500000, timezone.utc)),
    ("iso8601", "+05:30", "2026-11-30T01:25:12", datetime(2026, 11, 29, 19, 55, 12, tzinfo=timezone.utc)),
    (None, None, "1796000000.25", datetime.fromtimestamp(1796000000.25, timezone.utc)),
])
def test_time_formats(fmt, zone, stamp, expected):
    sig = Signal(kind="detect", pattern=r"^(?P<t>.+)$", time_format=fmt, timezone=zone)
    assert sig.parse_time(stamp) == pytest.approx(expected.timestamp())


@pytest.mark.parametrize("stamp", ["nan", "inf", "-inf", "1e400"])
def test_a_stamp_that_names_no_moment_is_unread_and_the_line_gets_the_time_it_was_read(stamp):
    """A job's line stamped NaN or inf went to the history with that time: written as null,
    History.load refused the file. Now it is a stamp that cannot be read, as any other."""
    sig = Signal(kind="detect", pattern=r"^t=(?P<t>\S+) worker failed$")
    with pytest.raises(ValueError):
        sig.parse_time(stamp)
    [(kind, t, data)] = Matcher([sig]).match(f"t={stamp} worker failed")
    assert kind == "detect" and t is None and data["t_source"] == "read" and data["t_unread"] == stamp


BROKEN_JOB = """\
jobs:
  broken:
    presets: [torchrun, torchrunn, ./presets/none.yaml]
    launch: {command: ["python", "train.py", "--out", "{rundir}"]}
    ranks: {cmdline: 'train'}
    logs: ["{run_dir}/job.out"]
"""


def test_validate_names_every_problem_of_a_profile_with_its_line(tmp_path):
    (tmp_path / "drill.yaml").write_text(BROKEN_JOB + """\
    signals:
      - {kind: step, pattern: 'iteration (\\d+)'}
      - {kind: detect, pattern: 'x(?P<t>\\d+', time_format: '%Q'}
""")
    with pytest.raises(SpecError) as exc:
        load_config(tmp_path / "drill.yaml")
    text = "\n".join(str(p) for p in exc.value.problems)
    assert "drill.yaml:8: jobs.broken.signals.0.pattern" in text and "name the groups" in text
    assert "drill.yaml:9: jobs.broken.signals.1.pattern" in text and "bad regex" in text


def test_validate_finds_unknown_presets_placeholders_and_no_progress_signal(tmp_path):
    (tmp_path / "drill.yaml").write_text(BROKEN_JOB)
    with pytest.raises(SpecError) as exc:
        load_config(tmp_path / "drill.yaml")
    text = "\n".join(str(p) for p in exc.value.problems)
    assert "jobs.broken.presets.1: unknown signal preset (did you mean 'torchrun'?)" in text
    assert "jobs.broken.presets.2: no such preset file" in text
    assert "jobs.broken.launch.command.3: unknown placeholder {rundir}" in text
    assert "jobs.broken: no step signal and no heartbeat_file" in text


def test_a_preset_file_of_the_users(tmp_path):
    (tmp_path / "stack.yaml").write_text("name: my-stack\nsignals:\n"
                                         "  - {kind: step, pattern: 'step=(?P<n>\\d+)', ints: [n]}\n")
    assert [s.kind for s in load(str(tmp_path / "stack.yaml")).signals] == ["step"]


REPORTER = """
import os, sys
from drillbit import job
for n in range(1, 4):
    job.step(n)
job.checkpoint_save_begin(3, "/ckpt/step 3")
job.checkpoint_saved(3, "/ckpt/step 3", seconds=0.25)
job.restored(3, "/ckpt/step 3")
os.environ["DRILLBIT_EVENTS"] = "/no/such/folder/events.log"
job.step(4)  # cannot be written: dropped and counted, never raised
print(job.dropped)
"""


def test_the_reporter_writes_what_the_drillbit_preset_reads(tmp_path):
    events = tmp_path / "events.log"
    beat = tmp_path / "heartbeat"
    out = subprocess.run([sys.executable, "-c", REPORTER], capture_output=True, text=True, check=True,
                         env={**os.environ, "DRILLBIT_EVENTS": str(events), "DRILLBIT_HEARTBEAT": str(beat),
                              "RANK": "0"})
    assert out.stdout.strip() == "1"
    matcher = Matcher(load("drillbit").signals)
    hits = [h for line in events.read_text().splitlines() for h in matcher.match(line)]
    assert [k for k, _, _ in hits] == ["step"] * 3 + ["ckpt.save.begin", "ckpt.save", "restore"]
    assert [d["n"] for k, _, d in hits if k == "step"] == [1, 2, 3]
    save = hits[4][2]
    assert save["step"] == 3 and save["path"] == "/ckpt/step 3" and save["seconds"] == 0.25
    assert beat.read_text().split()[0] == "4"  # the heartbeat file does not need the events file


def test_a_reporter_step_from_another_rank_is_not_a_second_step():
    matcher = Matcher(load("drillbit").signals)
    assert matcher.match("drillbit-event t=1.0 kind=step n=5 rank=3") == []
    assert matcher.match("drillbit-event t=1.0 kind=step n=5 rank=0")[0][0] == "step"
    assert json.dumps(matcher.match("drillbit-event t=1.0 kind=step n=5")[0][2]) == '{"n": 5, "t_source": "line"}'


def test_a_stamp_of_whole_seconds_takes_the_read_time_within_its_second():
    """Megatron's training_log stamps whole seconds: a step read 0.3 s into its second was
    written then, not at the second's start (a restart's first step would otherwise fall
    before the restore line read just before it)."""
    import time
    from datetime import datetime

    from drillbit.judging.probes.preset import load, matcher

    match = matcher(load("megatron").signals)
    line = lambda when: f" [{when.strftime('%Y-%m-%d %H:%M:%S')}] iteration       21/     100 | lm loss: 1.0 |"  # noqa: E731
    before = time.time()
    [(kind, t, data)] = [h for h in match.match(line(datetime.now())) if h[0] == "step"]
    assert kind == "step" and data["n"] == 21 and before <= t <= time.time()
    old = datetime.fromtimestamp(before - 3600)
    [(_, t_old, _)] = [h for h in match.match(line(old)) if h[0] == "step"]
    assert t_old == float(int(before - 3600))  # read long after its second: the stamp stands
