"""The hf-trainer and lightning presets fed real-looking lines (and odd ones). Found by an adversarial
review of #56's change: each test failed at 1d98abb, unless named test_held_ (a guard that held)."""
from __future__ import annotations

import pytest

from drillbit.core.history import History
from drillbit.judging.checks import check
from drillbit.judging.probes.preset import load, matcher
from tests.unit.test_checks import spec


def hits(preset: str, line: str) -> list[tuple[str, dict]]:
    return [(k, d) for k, _, d in matcher(load(preset).signals).match(line)]


def steps_of(preset: str, line: str) -> list[int]:
    return [d["n"] for k, d in hits(preset, line) if k == "step"]


# ---------------------------------------------------------------------------------------------------
# P1 (wrong PASS / wrong FAIL, whole drill): the Trainer's *evaluation* progress bar has no prefix,
# exactly like the training bar, so the hf-trainer step signal reads its counts as training steps.
# Lines below are what transformers 5.25's ProgressCallback wrote to a file here (on_step_end, then
# on_prediction_step x4 for an eval of 4 batches; tqdm's \r redraws split as drillbit splits them):
#   ' 30%|███       | 12/40 [00:01<00:03,  8.22it/s]'
#   ' 50%|█████     | 2/4 [00:00<00:00, 13.29it/s]\x1b[A'      <- eval bar: read as "step 2"
#   '100%|██████████| 4/4 [00:00<00:00,  8.36it/s]\x1b[A'      <- eval bar: read as "step 4"
# eval_strategy="steps" with save_steps == eval_steps is what load_best_model_at_end requires.
# ---------------------------------------------------------------------------------------------------

EVAL_BAR = [" 50%|█████     | 2/4 [00:00<00:00, 13.29it/s]\x1b[A",
            "100%|██████████| 4/4 [00:00<00:00,  8.36it/s]\x1b[A"]


def test_P1_the_evaluation_bar_is_no_training_step():
    assert steps_of("hf-trainer", " 30%|███       | 12/40 [00:01<00:03,  8.22it/s]") == [12]  # held
    assert [steps_of("hf-trainer", line) for line in EVAL_BAR] == [[], []]


def _train_bar(n: int, total: int = 100) -> str:
    pct = n * 100 // total
    return f"{pct:3d}%|{'█' * (pct // 10):<10}| {n}/{total} [00:0{n % 10}<00:09,  4.51it/s]"


def _hf_history(*, eval_after: int, fault_after: int, restored: int, resumed_to: int) -> History:
    """A Trainer job under torchrun as the hf-trainer preset reads it: bar lines per step, an evaluation
    (4 batches) after step ``eval_after``, the fault right after that evaluation, a restart that loads
    checkpoint-``restored`` and steps on to ``resumed_to``."""
    m = matcher(load("hf-trainer").signals)
    h = History()
    t = 1000.0

    def put(line: str) -> None:
        nonlocal t
        t += 0.25
        for kind, _, data in m.match(line):
            h.record("probe", kind, t=t, **data)

    h.record("harness", "drill.start", t=t)
    h.record("harness", "job.launch", t=t)
    for n in range(1, fault_after + 1):
        put(_train_bar(n))
        if n == 5:
            h.record("harness", "steady", t=t + 0.01, baseline_step_s=0.25, step=n)
        if n % 10 == 0:
            put(f"[transformers] Saving model checkpoint to out/checkpoint-{n}")
            put(f"[transformers] Model weights saved in out/checkpoint-{n}/model.safetensors")
        if n == eval_after:
            for line in EVAL_BAR:
                put(line)
    t += 0.1
    h.record("harness", "fault.inject", t=t - 0.01, rank=1, fault="kill-rank")
    h.record("harness", "fault.confirmed", t=t, expects="crash", hurts="rank", verb="kill", evidence=[])
    h.record("probe", "detect", t=t + 0.2, by="torchrun")
    h.record("probe", "restart", t=t + 1.0, attempt=1, by="torchrun")
    t += 2.0
    put(f"[transformers] Loading model from out/checkpoint-{restored}.")
    for n in range(restored + 1, resumed_to + 1):
        put(_train_bar(n))
    h.record("harness", "observe.end", t=t + 0.1, reason="recovered")
    return h


def test_P1_a_fault_just_after_an_evaluation_still_counts_the_steps_it_lost():
    """Fault after step 30's evaluation; the restart loads checkpoint-20: 10 steps lost. drillbit takes
    the eval bar's last count (4) for the step at the fault, computes max(0, 4 - 20) = 0 lost steps and
    PASSes max_lost_steps: 5."""
    h = _hf_history(eval_after=30, fault_after=30, restored=20, resumed_to=45)
    result = check(spec(max_lost_steps=5), h)
    m = result.measurements
    assert (m.step_at_fault, m.lost_steps) == (30, 10), (m.step_at_fault, m.lost_steps)
    assert result.verdict == "fail", (result.verdict, result.reasons)


# ---------------------------------------------------------------------------------------------------
# P2 (figures in the wrong field, lightning): the loss and lr lookaheads take the first postfix item
# whose name merely ends in loss / lr.
# ---------------------------------------------------------------------------------------------------

BAR = "Epoch 0:  43%|████▎     | 3/7 [00:00<00:00,  4.58it/s, v_num=0, "


@pytest.mark.parametrize("postfix, field, want", [
    # validation loss logged with prog_bar before the training loss in the postfix: loss = 9.99
    ("val_loss=9.99, train_loss=0.123]", "loss", 0.123),
    # a scheduler's floor logged next to the learning rate: lr = 1e-06 (min_lr's)
    ("min_lr=1e-6, lr=0.001, train_loss=0.5]", "lr", 0.001),
])
def test_P2_a_lightning_postfix_item_lands_in_its_own_field(postfix, field, want):
    [(kind, data)] = hits("lightning", BAR + postfix)
    assert kind == "step" and data.get(field) == want, data


def test_P2_learning_rate_monitor_names_per_param_group_are_read():
    """LearningRateMonitor names a learning rate per parameter group 'lr-AdamW/pg1', 'lr-AdamW/pg2'
    (lightning 2.6: with more than one group); the preset's comment says LearningRateMonitor's names are
    read, but these give no lr at all."""
    [(kind, data)] = hits("lightning", BAR + "lr-AdamW/pg1=0.001, lr-AdamW/pg2=0.002, train_loss=0.123]")
    assert data.get("lr") == 0.001, data


# ---------------------------------------------------------------------------------------------------
# P3 (a not-a-number figure silently dropped): -inf is what Python (and tqdm's format_num) print for a
# negative infinity. Both presets accept 'nan' and 'inf' but not '-inf': Lightning's step loses its loss,
# and the Trainer's whole dict (loss, learning rate, epoch) is not read. restore_fidelity's NaN/inf
# judgement (a non-number after the restore fails) never sees it.
# ---------------------------------------------------------------------------------------------------

def test_P3_a_negative_infinite_loss_is_read_as_one():
    [(_, data)] = hits("lightning", BAR + "train_loss=-inf]")
    assert data.get("loss") == float("-inf"), data
    got = hits("hf-trainer", "{'loss': '-inf', 'grad_norm': 'nan', 'learning_rate': '1.5e-05', 'epoch': '0.04102'}")
    assert got and got[0][1].get("loss") == float("-inf"), got


# ---------------------------------------------------------------------------------------------------
# Guards that held.
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("postfix, loss, lr", [
    ("train_loss=0.123, lr-AdamW=0.001]", 0.123, 0.001),
    ("lr-AdamW=0.001, v_num=0, train_loss=0.123]", 0.123, 0.001),
    ("train_loss=0.5, lr-SGD-momentum=0.9, lr-SGD=0.1]", 0.5, 0.1),
    ("train_loss_epoch=0.9, train_loss_step=0.5]", 0.5, None),
    ("train_loss=1.23e-5, lr=1e-3]", 1.23e-5, 0.001),
    ("train_loss=-.5, lr=2e-5]", -0.5, 2e-5),
])
def test_held_lightning_postfix_orders(postfix, loss, lr):
    [(_, data)] = hits("lightning", BAR + postfix)
    assert data.get("loss") == loss and data.get("lr") == lr, data


@pytest.mark.parametrize("line, want", [
    ("{'loss': '4.595', 'grad_norm': '2.69', 'learning_rate': '1.5e-05', 'entropy': '2.1', 'num_tokens': '1100', "
     "'mean_token_accuracy': '0.4', 'epoch': '0.04102'}", {"loss": 4.595, "lr": 1.5e-05, "tokens": 1100.0}),
    ("{'loss': 'nan', 'grad_norm': 'nan', 'learning_rate': '1.5e-05', 'epoch': '0.04102'}", {"lr": 1.5e-05}),
    ("{'loss': 4.595, 'grad_norm': 2.69, 'learning_rate': 1.5e-05, 'epoch': 0.04}", {"loss": 4.595}),
])
def test_held_trainer_dicts(line, want):
    [(kind, data)] = hits("hf-trainer", line)
    assert kind == "metrics" and all(data[k] == v for k, v in want.items()), data


@pytest.mark.parametrize("line", [
    "{'train_runtime': '10.1', 'train_samples_per_second': '3.1', 'train_loss': '4.1', 'epoch': '1'}",
    "{'eval_loss': '4.2', 'eval_runtime': '0.1', 'epoch': '1'}",
    "Writing model shards: 100%|██████████| 1/1 [00:00<00:00,  4.51it/s]",
])
def test_held_not_training_figures(line):
    assert hits("hf-trainer", line) == []
