"""Checkpoint layouts on the trees the libraries write (torch.distributed.checkpoint run for
real here; Megatron, DeepSpeed and Orbax trees as their savers name them), the Megatron
preset against lines made with Megatron's own format strings (megatron-core needs CUDA),
progress bars that redraw with carriage returns, and a restore that names no step."""
from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path

import pytest

from drillbit.spec.checkpoints import CheckpointSpec, scan
from drillbit.core.errors import FaultError
from drillbit.faults.ckptfile import data_of, marker_of, metadata_of, pick
from drillbit.judging.probes.preset import load, matcher
from drillbit.judging.probes.tail import FileFollower


def touch(path: Path, data: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_dcp_layout_on_checkpoints_torch_wrote(tmp_path):
    torch = pytest.importorskip("torch")
    import torch.distributed.checkpoint as dcp

    for step in (10, 20):  # torchtitan's layout: <dir>/step-N, each a DCP checkpoint
        dcp.save({"w": torch.ones(4) * step}, checkpoint_id=str(tmp_path / f"step-{step}"))
    found = scan(CheckpointSpec(dir=str(tmp_path), layout="dcp"))
    assert [c.step for c in found] == [20, 10] and all(c.complete for c in found)
    newest = found[0]
    assert data_of(newest).suffix == ".distcp" and metadata_of(newest, "dcp").name == ".metadata"
    os.unlink(newest.marker)  # a save cut short before .metadata: not complete
    assert scan(CheckpointSpec(dir=str(tmp_path), layout="dcp"))[0].complete is False


def test_megatron_deepspeed_orbax_layouts(tmp_path):
    meg = tmp_path / "meg"
    for it in (100, 200):
        touch(meg / f"iter_{it:07d}" / "mp_rank_00" / "model_optim_rng.pt")
    (meg / "latest_checkpointed_iteration.txt").write_text("100")  # 200 was never finalised
    found = scan(CheckpointSpec(dir=str(meg), layout="megatron"))
    assert [c.step for c in found] == [200, 100] and found[0].complete is False
    assert data_of(found[0]).name == "model_optim_rng.pt"
    ds = tmp_path / "ds"
    touch(ds / "global_step5" / "mp_rank_00_model_states.pt")
    touch(ds / "global_step5" / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    (ds / "latest").write_text("global_step5")
    (c,) = scan(CheckpointSpec(dir=str(ds), layout="deepspeed"))
    assert c.step == 5 and c.complete and data_of(c).name == "mp_rank_00_model_states.pt"
    ob = tmp_path / "ob"
    touch(ob / "3" / "default" / "array.zarr")
    touch(ob / "3" / "_CHECKPOINT_METADATA", b"{}")
    touch(ob / "7" / "default" / "array.zarr")  # no metadata yet: still being written
    found = scan(CheckpointSpec(dir=str(ob), layout="orbax"))
    assert [(c.step, c.complete) for c in found] == [(7, False), (3, True)]


def test_lightning_orders_by_time_and_glob_by_step(tmp_path):
    for i, name in enumerate(["epoch=0-step=5.ckpt", "epoch=0-step=10.ckpt", "last.ckpt"]):
        p = touch(tmp_path / name)
        os.utime(p, (time.time() + i, time.time() + i))
    found = scan(CheckpointSpec(dir=str(tmp_path), layout="lightning"))
    assert [c.name for c in found] == ["last.ckpt", "epoch=0-step=10.ckpt", "epoch=0-step=5.ckpt"]
    assert found[0].step is None and data_of(found[0]) == found[0].path  # a file checkpoint is its own data
    with pytest.raises(FaultError, match="no completion marker"):
        marker_of(found[0], "lightning")
    plain = tmp_path / "plain"
    for n in (3, 12, 7):
        touch(plain / f"ckpt_{n}.pt")
    spec = CheckpointSpec(dir=str(plain), layout="glob", glob="ckpt_*.pt", step_regex=r"ckpt_(\d+)")
    assert [c.step for c in scan(spec)] == [12, 7, 3]
    assert pick(spec, 1, "corrupt-checkpoint").name == "ckpt_7.pt"
    with pytest.raises(FaultError, match="only 3 checkpoint"):
        pick(spec, 3, "corrupt-checkpoint")


def test_custom_layout_and_bad_specs(tmp_path):
    touch(tmp_path / "save-000040" / "weights.bin")
    touch(tmp_path / "save-000040" / "DONE")
    touch(tmp_path / "save-000040" / "info.json", b"{}")
    spec = CheckpointSpec(dir=str(tmp_path), layout="custom", glob="save-*", step_regex=r"save-(\d+)",
                          marker="DONE", metadata="info.json", data="*.bin")
    (c,) = scan(spec)
    assert (c.step, c.complete, data_of(c).name, metadata_of(c, "custom").name) == (40, True, "weights.bin", "info.json")
    with pytest.raises(ValueError, match="needs glob and step_regex"):
        CheckpointSpec(dir="x", layout="custom")
    with pytest.raises(ValueError, match="group for the step"):
        CheckpointSpec(dir="x", layout="glob", glob="*", step_regex=r"step_\d+")
    with pytest.raises(ValueError, match="are for layout glob or custom"):
        CheckpointSpec(dir="x", layout="hf", glob="*")


def test_megatron_preset_reads_lines_made_with_megatrons_format_strings():
    # the format strings of megatron/training/training.py and checkpointing.py
    stamp = datetime(2026, 11, 30, 1, 25, 12)
    lines = [f" [{stamp.strftime('%Y-%m-%d %H:%M:%S')}]" + " iteration {:8d}/{:8d} |".format(10, 100000)
             + " consumed samples: {:12d} |".format(1280) + " elapsed time per iteration (ms): {:.1f} |".format(228.3)
             + " learning rate: {:.6E} |".format(3e-4) + " global batch size: {:5d} |".format(128)
             + " lm loss: {:.6E} |".format(7.25) + " loss scale: {:.1f} |".format(1.0),
             "saving checkpoint at iteration {:7d} to {} in {} format".format(10, "/runs/x/ckpt", "torch_dist"),
             "  successfully saved checkpoint from iteration {:7d} to {}".format(10, "/runs/x/ckpt"),
             f"  successfully loaded checkpoint from /runs/x/ckpt [ t 1/1, p 1/1 ] at iteration {10}"]
    m = matcher(load("megatron").signals)
    hits = [m.match(line) for line in lines]
    kind, t, data = hits[0][0]
    assert (kind, data["n"], data["total"]) == ("step", 10, 100000) and t == stamp.timestamp()
    assert (data["samples"], data["lr"], data["loss"]) == (1280, 3e-4, 7.25)  # restore_fidelity's groups
    assert [(k, d["step"]) for k, _, d in (h[0] for h in hits[1:])] == [("ckpt.save.begin", 10), ("ckpt.save", 10),
                                                                         ("restore", 10)]


def test_a_progress_bar_redrawn_with_carriage_returns_is_one_line_per_redraw(tmp_path):
    log = tmp_path / "out.log"
    log.write_bytes(b"  8%|# | 1/12 [00:00<00:02]\r 17%|## | 2/12 [00:00<00:02]\r")
    follower = FileFollower(log)
    assert follower.read_lines() == ["  8%|# | 1/12 [00:00<00:02]", " 17%|## | 2/12 [00:00<00:02]"]
    with open(log, "ab") as fh:
        fh.write(b"\ndone\r\n")
    assert follower.read_lines() == ["done"]  # the \n after a \r, and the \r\n, make no empty lines


def test_a_restore_that_names_no_step_counts_from_the_first_step_after_it():
    from drillbit.judging.checks.recovery import measure
    from drillbit.core.history import History

    rows = [(100.0 + i, "step", {"n": i}) for i in range(1, 13)]
    rows += [(112.5, "fault.confirmed", {}), (113.0, "restart", {"attempt": 1}),
             (115.0, "restore", {"path": "out/checkpoints/last.ckpt"})]
    rows += [(115.5 + i, "step", {"n": 10 + i}) for i in range(1, 6)]
    m = measure(History.build([(100.0, "steady", {"step": 3})] + rows))
    assert m.restored_step == 10 and m.lost_steps == 2 and m.restarts == 1


def test_torchtitan_preset_reads_lines_made_with_torchtitans_format_strings():
    red, green, reset = "\x1b[31m", "\x1b[32m", "\x1b[39m"
    stamp = "2026-11-30 01:25:12,222"
    prefix = f"[rank0]:[titan] {stamp} - root - INFO - "
    lines = [prefix + f"{red}step: {7:2}  {green}loss: {5.1234:7.4f}  {reset}",
             prefix + "Saving the checkpoint (or staging if async is enabled).",
             prefix + "Finished saving the checkpoint (or staging if async is enabled)" + f"in {0.42:.2f} seconds.",
             prefix + f"Loading the checkpoint at step {10}."]
    m = matcher(load("torchtitan").signals)
    (kind, t, data), = m.match(lines[0])
    assert (kind, data["n"], data["loss"]) == ("step", 7, 5.1234)
    assert t == datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
    assert [h[0][0] for h in map(m.match, lines[1:])] == ["ckpt.save.begin", "ckpt.save", "restore"]
    assert m.match(lines[2])[0][2]["seconds"] == 0.42 and m.match(lines[3])[0][2]["step"] == 10


def test_torchrun_detects_a_failure_when_it_starts_stopping_the_other_workers():
    """Lines torch 2.13's agent printed in the CI run: the SIGTERM to the surviving workers came
    0.07 s after the kill, 'failed (exitcode: -9)' 30 s later (a Lightning rank handled SIGTERM)."""
    m = matcher(load("torchrun").signals)
    first = ("W1130 07:05:13.368000 18501 .venv/lib/python3.11/site-packages/torch/distributed/elastic/"
             "multiprocessing/api.py:1028] Sending process 18508 closing signal SIGTERM")
    late = ("E1130 07:05:43.434000 18501 .venv/lib/python3.11/site-packages/torch/distributed/elastic/"
            "multiprocessing/api.py:1002] failed (exitcode: -9) local_rank: 2 (pid: 18510) of binary: python3")
    assert [(k, d["pid"]) for k, _, d in m.match(first)] == [("detect", 18508)]
    assert [(k, d["exitcode"]) for k, _, d in m.match(late)] == [("detect", -9), ("blame", -9)]  # that, and who


def test_a_file_rewritten_in_place_is_a_layout_and_a_layout_that_fits_nothing_is_a_description_error(tmp_path):
    """layout: file names the fixed files a job rewrites in place (newest first by time, no step
    in the name); a folder whose files the layout takes none of is the profile's problem (exit
    2, with what to write), not a harness error."""
    import os

    import pytest as _pytest

    from drillbit.spec.checkpoints import CheckpointSpec, scan
    from drillbit.core.errors import ConfigError
    from drillbit.faults.ckptfile import pick

    (tmp_path / "ckpt.prev.pt").write_bytes(b"older")
    (tmp_path / "ckpt.pt").write_bytes(b"newer")
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    os.utime(tmp_path / "ckpt.prev.pt", (1, 1))
    spec = CheckpointSpec(dir=str(tmp_path), layout="file", files=["ckpt.pt", "ckpt.prev.pt"])
    found = scan(spec)
    assert [(c.name, c.step, c.data) for c in found] == [("ckpt.pt", None, [tmp_path / "ckpt.pt"]),
                                                         ("ckpt.prev.pt", None, [tmp_path / "ckpt.prev.pt"])]
    for bad, words in (({"layout": "file"}, "needs files"), ({"layout": "file", "files": ["*.pt"]}, "no wildcards"),
                       ({"layout": "file", "files": ["../x"]}, "plain names"),
                       ({"layout": "glob", "glob": "*", "step_regex": "(\\d+)", "files": ["a"]}, "for layout file")):
        with _pytest.raises(ValueError, match=words):
            CheckpointSpec(dir="x", **bad)
    wrong = CheckpointSpec(dir=str(tmp_path), layout="glob", glob="step_*", step_regex=r"step_(\d+)")
    with _pytest.raises(ConfigError, match=r"takes none of them.*layout: file, files: \[ckpt.prev.pt\]"):
        pick(wrong, 0, "corrupt-checkpoint")
    # a folder with only other files (a config, a log) has not been saved to yet: not the profile's fault
    (tmp_path / "ckpt.pt").unlink()
    (tmp_path / "ckpt.prev.pt").unlink()
    with _pytest.raises(Exception, match="only 0 checkpoint") as raised:
        pick(wrong, 0, "corrupt-checkpoint")
    assert not isinstance(raised.value, ConfigError)


def test_readiness_is_what_the_drills_own_preflight_would_say(tmp_path):
    """drill probe's "ready": the fault's engine, its binding to the profile (a tier's folder),
    and saves seen as saves — not just a step signal (it once said yes to kill-during-save on a
    job whose saves it never saw, to lose-local-tier without tiers, to node-down off Slurm)."""
    from drillbit.runs.onboard import readiness
    from drillbit.core.proc import ProcRef
    from drillbit.spec.config import JobProfile
    from drillbit.spec.load import catalogue
    from drillbit.faults.loading import load_drill
    from drillbit.faults.loading import load_config

    config = load_config(None)
    drills = {name: load_drill(path, config) for name, path in catalogue(None).items()}
    job = JobProfile.model_validate({"launch": {"command": ["python", "train.py"]}, "presets": ["torchrun"],
                                     "ranks": {"cmdline": "train"}, "logs": ["/tmp/x.log"],
                                     "checkpoint": {"dir": "/tmp/x", "layout": "file", "files": ["ckpt.pt"]}})
    ranks = [ProcRef(pid=1, start_time=0.0, rank=r) for r in range(4)]
    kinds = {"step", "detect", "restart", "restore"}

    from drillbit.loop.preflight import refusals
    from drillbit.transport import connect

    cluster = config.clusters["local-process"]
    nodes = connect("local-process", cluster, tmp_path)

    def missing(name: str, **kw) -> str:
        refused = refusals(drills[name], job, "j", cluster, "local-process", nodes, tmp_path)
        return "; ".join(readiness(drills[name], job, kinds, ranks, [object()], refused=refused, **kw))

    assert "a save seen in /tmp/x" in missing("kill-during-save", saves_seen=0)
    assert missing("kill-during-save", saves_seen=2) == ""
    assert "tiers" in missing("lose-local-tier") and "tiers" in missing("restore-tier-kill")
    assert "engine slurm" in missing("node-down") and "engine slurm" in missing("node-crash")
    assert missing("kill-rank") == "" and missing("corrupt-checkpoint") == ""


def test_the_step_a_restarted_job_steps_again_after_its_restore_line_is_a_step(tmp_path):
    """A job killed at step 21 that restored step 20 prints step 21 again: the same number twice in
    a row, with its restore line between. Taken for a progress bar redrawn, the new attempt's first
    step was lost (first step 22, "resumed from step 21"). The controller's progress probe reads
    only step lines, so it is told the restore lines apart."""
    from drillbit.core.history import History
    from drillbit.judging.probes.logs import LineReader, ProgressProbe

    step = " [2026-12-03 09:42:30] iteration {:8d}/{:8d} |"
    lines = [step.format(20, 100), "saving checkpoint at iteration      20 to /c in torch format",
             step.format(21, 100), "  successfully loaded checkpoint from /c [ t 0/1, p 0/1 ] at iteration 20",
             step.format(21, 100), step.format(21, 100), step.format(22, 100)]
    signals = load("megatron").signals
    reader = LineReader(matcher(signals))  # a node's log tail: every signal, in the order written
    assert [d["n"] for line in lines for k, _, _, d in reader.hits(line) if k == "step"] == [20, 21, 21, 22]
    log = tmp_path / "job.out"
    log.write_text("\n".join(lines) + "\n")
    history = History()
    probe = ProgressProbe(history, [log], signals)
    probe.poll_once()
    assert [e.data["n"] for e in history if e.kind == "step"] == [20, 21, 21, 22]
    # and says which is the new attempt's first: a whole-second stamp may put it before the fault
    assert [bool(e.data.get("new_attempt")) for e in history if e.kind == "step"] == [False, False, True, False]


def test_nanogpt_preset_reads_lines_made_with_its_format_strings():
    m = matcher(load("nanogpt").signals)
    iter_num, lossf, dt, mfu = 120, 2.34567, 0.09512, 0.1234
    (kind, _, data), = m.match(f"iter {iter_num}: loss {lossf:.4f}, time {dt*1000:.2f}ms, mfu {mfu*100:.2f}%")
    assert (kind, data["n"], data["loss"]) == ("step", 120, 2.3457)
    assert m.match("saving checkpoint to out")[0][0] == "ckpt.save.begin"
    assert m.match("Resuming training from out")[0][0] == "restore"


def test_lightning_preset_reads_a_loss_the_module_shows_on_its_bar():
    m = matcher(load("lightning").signals)
    [(_, _, data)] = m.match("Epoch 0:  43%|████▎     | 3/7 [00:00<00:00,  4.58it/s, v_num=0, train_loss=0.123]")
    assert (data["n"], data["loss"]) == (3, 0.123)
    [(_, _, data)] = m.match("Epoch 0:  43%|████▎     | 3/7 [00:00<00:00,  4.58it/s]")
    assert "loss" not in data  # not shown: not measured, never guessed
