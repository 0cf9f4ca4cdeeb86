"""Log following and signal presets on lines the real stacks print."""
from __future__ import annotations

from drillbit.core.history import History
from drillbit.judging.probes.logs import EventsProbe, HeartbeatProbe, ProgressProbe
from drillbit.judging.probes.preset import available, load, matcher, signals_of
from drillbit.judging.probes.tail import FileFollower

REF_STEP = "t=1795955211.613786 kind=step src=rank0 n=27 rank=0 dt=0.2610 loss=20.72880"
REF_RESTORE = "t=1795955232.573564 kind=restore src=rank0 step=10 path=/tmp/refk/ckpt/step_00000010 seconds=0.0027"
REF_DETECT = "t=1795955269.887163 kind=detect src=watchdog reason=no-progress silent_s=10.02 workers=4"
# Printed by torch 2.13's elastic agent (launcher.log of a real run)
TR_FAILED = ("E1129 12:27:07.386000 2109 .venv/lib/python3.11/site-packages/torch/distributed/elastic/"
             "multiprocessing/api.py:1002] failed (exitcode: -9) local_rank: 1 (pid: 2125) of binary: /x/python")
TR_GROUP = ("I1129 12:27:07.400000 2109 torch/distributed/elastic/agent/server/api.py:720] [default] "
            "Worker group FAILED. 3/3 attempts left; will restart worker group")


def test_follower_holds_partial_lines_and_survives_truncation(tmp_path):
    path = tmp_path / "log"
    follower = FileFollower(path)
    assert follower.read_lines() == []
    path.write_text("one\ntw")
    assert follower.read_lines() == ["one"]
    with open(path, "a") as fh:
        fh.write("o\n")
    assert follower.read_lines() == ["two"]
    path.write_text("new\n")  # truncated and rewritten
    assert follower.read_lines() == ["new"]


def test_presets_load():
    assert {"reference", "torchrun"} <= set(available())
    for name in available():
        assert load(name).signals


def test_reference_preset_reads_its_lines():
    m = matcher(signals_of(["reference"]))
    [(kind, t, data)] = m.match(REF_STEP)
    assert (kind, t, data["n"], data["rank"]) == ("step", 1795955211.613786, 27, 0)
    [(kind, _, data)] = m.match(REF_RESTORE)
    assert kind == "restore" and data["step"] == 10
    [(kind, _, data)] = m.match(REF_DETECT)
    assert kind == "detect" and data["by"] == "watchdog" and data["silent_s"] == 10.02
    assert m.match("t=1 kind=step src=rank3 n=27 rank=3 dt=0.2") == []  # only rank 0 is progress


def test_torchrun_preset_reads_agent_lines():
    m = matcher(signals_of(["torchrun"]))
    [(kind, t, data), (also, _, same)] = m.match(TR_FAILED)  # that a worker failed, and which (attribution)
    assert kind == "detect" and t is None and data == {"exitcode": -9, "local_rank": 1, "pid": 2125, "by": "torchrun",
                                                       "t_source": "read"}
    assert also == "blame" and same == data
    [(kind, _, data)] = m.match(TR_GROUP)
    assert kind == "detect" and data["left"] == 3


def test_probes_split_progress_from_events(tmp_path):
    log = tmp_path / "events.log"
    log.write_text("\n".join([REF_STEP, REF_DETECT, REF_RESTORE, "noise"]) + "\n")
    history = History()
    ProgressProbe(history, [log], signals_of(["reference"])).poll_once()
    EventsProbe(history, [log], signals_of(["reference", "torchrun"])).poll_once()
    assert [(e.source, e.kind) for e in history] == [
        ("probe:progress", "step"), ("probe:events", "detect"), ("probe:events", "restore")]
    assert history.first("step").rank == 0


def test_heartbeat_probe(tmp_path):
    beat = tmp_path / "hb"
    history = History()
    probe = HeartbeatProbe(history, beat)
    probe.poll_once()
    beat.write_text("7 1795955211.5\n")
    probe.poll_once()
    probe.poll_once()
    beat.write_text("8 1795955211.8\n")
    probe.poll_once()
    assert [(e.data["n"], e.t) for e in history.of("step")] == [(7, 1795955211.5), (8, 1795955211.8)]
