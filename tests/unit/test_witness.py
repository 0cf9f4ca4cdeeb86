"""restore_skipped_corrupted from hand-built histories: the three witnesses (what the job read
after the damage, the step it resumed from, its restore line), compared by containment and
step, never by name; unknown when none can tell, which makes the drill inconclusive."""
from __future__ import annotations

from drillbit.judging.checks import check
from drillbit.judging.checks.witness import relation, within
from drillbit.core.history import History
from drillbit.spec.models import DrillSpec
from tests.unit.test_checks import BASE, prelude, steps

T = BASE + 5 + 24 * 0.25 + 0.1
ROOT = "/runs/r1/ckpt"
DAMAGED = f"{ROOT}/iter_0000020"
OLDER = f"{ROOT}/iter_0000010"


def spec() -> DrillSpec:
    return DrillSpec.model_validate({
        "name": "t", "class": "recovery-path", "summary": "s",
        "fault": {"type": "corrupt-checkpoint", "trigger": {"at_step": 25}},
        "slo": {"detect_within": 60, "first_step_within": 90}})


def evidence(reads: str = "fanotify", local: bool = True) -> dict:
    return {"evidence": [{"t": T, "what": "flip-bytes", "kind": "file-damage", "data": {
        "checkpoint": DAMAGED, "step": 20, "file": f"{DAMAGED}/mp_rank_00/model_optim_rng.pt", "root": ROOT,
        "checkpoints": {DAMAGED: 20, OLDER: 10}, "reads": reads, "reads_local": local,
        "reads_why": "" if reads != "none" else "fanotify and inotify refused"}}], "expects": "crash"}


def read(t: float, path: str, rank: int = 0) -> tuple:
    return (t, "ckpt.read", {"file": path, "pid": 4242, "rank": rank})


def history(resume_from: int, reads: list[tuple], restore: dict | None, how: str = "fanotify",
            local: bool = True) -> History:
    rows = prelude()
    rows += [(T - 0.01, "fault.inject"), (T, "fault.confirmed", evidence(how, local)),
             (T + 0.3, "detect", {"by": "torchrun"}), (T + 2, "restart", {"attempt": 1})]
    rows += reads
    if restore is not None:
        rows.append((T + 4, "restore", restore))
    rows += steps(resume_from + 1, resume_from + 10, T + 5)
    rows += [(T + 9, "observe.end"), (T + 9.1, "drill.end")]
    return History.build(sorted(rows, key=lambda r: r[0]))


def slo_of(result):
    return next(s for s in result.slos if s.name == "restore_skipped_corrupted")


MEGATRON_LINE = {"path": ROOT, "step": 20}  # 'successfully loaded checkpoint from {load_dir} … at iteration 20'


def test_a_restore_line_naming_the_load_folder_at_the_damaged_step_fails():
    """Megatron's line names the folder above the checkpoint: by basename it looked like another
    checkpoint and passed. By containment and step it is the damaged one."""
    h = history(20, [read(T + 3, f"{DAMAGED}/mp_rank_00/model_optim_rng.pt")], MEGATRON_LINE)
    result = check(spec(), h)
    assert result.verdict == "fail", result.reasons
    s = slo_of(result)
    assert s.status == "fail"
    assert any("rank 0 read iter_0000020/mp_rank_00/model_optim_rng.pt after it was damaged" in r
               and "training resumed from step 20" in r for r in result.reasons), result.reasons


def test_the_line_alone_still_fails_when_reads_cannot_be_seen():
    h = history(20, [], MEGATRON_LINE, how="none")
    assert slo_of(check(spec(), h)).status == "fail"


def test_a_verifier_that_reads_the_damaged_one_then_an_older_one_passes():
    h = history(10, [read(T + 3, f"{DAMAGED}/mp_rank_00/model_optim_rng.pt"),
                     read(T + 3.2, f"{OLDER}/mp_rank_00/model_optim_rng.pt")], {"path": ROOT, "step": 10})
    result = check(spec(), h)
    assert result.verdict == "pass", result.reasons
    assert "the damaged one was rejected" in slo_of(result).detail


def test_no_witness_is_unknown_and_the_drill_inconclusive():
    """No read watch, no restore line, no restart that stepped: nothing says what was loaded."""
    rows = prelude()
    rows += [(T - 0.01, "fault.inject"), (T, "fault.confirmed", evidence("none")),
             (T + 0.3, "detect", {"by": "torchrun"}), (T + 9, "observe.end"), (T + 9.1, "drill.end")]
    result = check(DrillSpec.model_validate({"name": "t", "class": "recovery-path", "summary": "s",
                                             "fault": {"type": "corrupt-checkpoint", "trigger": {"at_step": 25}},
                                             "slo": {"detect_within": 60}}), History.build(rows))
    s = slo_of(result)
    assert s.status == "unknown" and result.verdict == "inconclusive", (s, result.reasons)
    assert "restore signal" in s.detail  # how to supply the missing evidence


def test_witnesses_that_disagree_are_unknown_and_say_so():
    # the line claims step 10, but the job read only the damaged checkpoint and resumed from 20
    h = history(20, [read(T + 3, f"{DAMAGED}/mp_rank_00/model_optim_rng.pt")], {"path": OLDER, "step": 10})
    s = slo_of(check(spec(), h))
    assert s.status == "unknown" and "the witnesses disagree" in s.detail, s


def test_never_opening_the_damaged_checkpoint_settles_it():
    # a local tier held step 20 too: resumed from 20, but the damaged persistent copy was never opened
    h = history(20, [read(T + 3, f"{OLDER}/x.pt")], None)
    s = slo_of(check(spec(), h))
    assert s.status == "pass" and "cannot have loaded it" in s.detail, s


def test_never_opened_on_a_network_filesystem_proves_nothing():
    h = history(20, [], None, local=False)
    s = slo_of(check(spec(), h))
    assert s.status == "fail" and "resumed from step 20" in s.detail  # the resumed step alone decides


def test_containment_not_basename():
    assert within(f"{DAMAGED}/mp_rank_00/x.pt", DAMAGED) and not within(f"{DAMAGED}0/x", DAMAGED)
    assert relation(ROOT, DAMAGED) == "parent" and relation(f"{DAMAGED}/", DAMAGED) == "same"
    assert relation("/elsewhere/iter_0000020", DAMAGED) == "other"  # same name, another folder
    assert relation("iter_0000020", DAMAGED) == "same" and relation("ckpt", DAMAGED) == "parent"


def test_a_restart_that_never_reached_its_restore_proves_nothing_about_the_damaged_checkpoint():
    rows = prelude()
    rows += [(T - 0.01, "fault.inject"), (T, "fault.confirmed", evidence()), (T + 0.3, "detect", {"by": "torchrun"}),
             (T + 2, "restart", {"attempt": 1}), (T + 30, "observe.end"), (T + 30.1, "drill.end")]
    s = slo_of(check(spec(), History.build(rows)))
    assert s.status == "unknown" and "never reached its restore" in s.detail, s


def test_a_save_between_the_choice_and_the_kill_makes_a_skip_unknown_not_a_pass():
    """A CI run: the fault chose iter_0000020, the job saved iter_0000025 before the kill landed,
    and the restart loaded 25. No witness saw the damaged one loaded, but the restart never had to
    choose between it and an older one: unknown, and the drill inconclusive — not PASS."""
    newer = f"{ROOT}/iter_0000025"

    def with_save(since: dict) -> History:
        h = history(25, [read(T + 3, f"{newer}/mp_rank_00/model_optim_rng.pt")], {"path": ROOT, "step": 25})
        rows = [(e.t, e.kind, {**e.data, **({"rank": e.rank} if e.rank is not None else {})}) for e in h]
        for _i, (_t, kind, data) in enumerate(rows):
            if kind == "fault.confirmed":
                damage = data["evidence"][0]["data"]
                damage["checkpoints"] = {**damage["checkpoints"], newer: 25}
                damage["saved_since"] = since
        return History.build(rows)

    result = check(spec(), with_save({newer: 25}))
    slo = slo_of(result)
    assert slo.status == "unknown" and result.verdict == "inconclusive", (slo, result.reasons)
    assert "saved iter_0000025 (step 25) after the fault chose iter_0000020 and before the kill" in slo.detail, slo
    assert "resumed from step 25" in slo.detail
    # the same restart where iter_0000025 was there before the fault chose (nth_newest: 1): judged as before
    assert slo_of(check(spec(), with_save({}))).status == "pass"


def test_reads_before_a_coarsely_stamped_first_step_still_count():
    """ci51: Megatron stepped 21 again within the second it was killed in, so the new attempt's
    first step carried a whole-second stamp from before the fault, and the reads of the
    damaged iter_0000020 made by the restart (0.2 s after the damage) fell after that stamp:
    cut off there, the reads witness said no process opened it and PASSed a job that had loaded
    it. The reads that count end where the first step was made: no earlier than the restore
    line that began its attempt."""
    rows = prelude(until_step=21)
    t = BASE + 5 + 20 * 0.25 + 0.07  # just after step 21's line
    rows += [(t - 0.02, "fault.inject"), (t, "fault.confirmed", evidence()),
             (t + 0.05, "detect", {"by": "torchrun"}), (t + 0.16, "restart", {"attempt": 1}),
             (t + 0.26, "restore", MEGATRON_LINE),
             (t - 0.46, "step", {"n": 21, "new_attempt": True})]  # stamped in the second before
    rows += steps(22, 30, t + 0.9)
    rows += [(t + 3.5, "observe.end"),
             read(t + 0.21, f"{ROOT}/latest_checkpointed_iteration.txt"),
             read(t + 0.21, f"{DAMAGED}/mp_rank_00/model_optim_rng.pt"),  # reported with the heal
             read(t + 0.22, f"{DAMAGED}/mp_rank_00/model_optim_rng.pt", rank=1),
             (t + 3.6, "fault.heal", {"healed": True}), (t + 4, "drill.end")]
    result = check(spec(), History.build(rows))
    s = slo_of(result)
    assert s.status == "fail" and result.verdict == "fail", (s, result.reasons)
    assert any("read iter_0000020/mp_rank_00/model_optim_rng.pt after it was damaged" in r for r in result.reasons), \
        result.reasons


def _with_damage(h: History, **update) -> History:
    rows = [(e.t, e.kind, {**e.data, **({"rank": e.rank} if e.rank is not None else {})}) for e in h]
    for _, kind, data in rows:
        if kind == "fault.confirmed":
            data["evidence"][0]["data"].update(update)
    return History.build(rows)


def test_a_checkpoint_recorded_relative_never_vetoes_the_reads_of_it():
    """The false PASS of a relative reports_dir: the fault recorded reports/<run>/ckpt/…, the
    reads came absolute, and a string comparison said no process opened the damaged checkpoint,
    overruling the two witnesses that saw it loaded. A relative path cannot be placed: the
    reads witness is unknown, and the other two decide."""
    rel = "reports/r1/ckpt"
    h = _with_damage(history(20, [read(T + 3, f"{DAMAGED}/mp_rank_00/model_optim_rng.pt")], MEGATRON_LINE),
                     checkpoint=f"{rel}/iter_0000020", root=rel, file=f"{rel}/iter_0000020/model.pt",
                     checkpoints={f"{rel}/iter_0000020": 20, f"{rel}/iter_0000010": 10})
    result = check(spec(), h)
    s = slo_of(result)
    assert s.status == "fail" and result.verdict == "fail", (s, result.reasons)
    assert "cannot have loaded" not in s.detail


def test_reads_placed_outside_the_watched_folder_are_a_harness_inconsistency_not_a_veto():
    """A symlinked reports folder: the checkpoint named through the link, the kernel's reads by
    the real path. The watch watched the folder only, so a read it places outside it means the
    names disagree: the reads witness says so and is unknown."""
    real = "/data/real/r1/ckpt/iter_0000020/mp_rank_00/model_optim_rng.pt"
    h = history(20, [read(T + 3, real), read(T + 3.1, real, rank=1)], MEGATRON_LINE)
    result = check(spec(), h)
    s = slo_of(result)
    assert s.status == "fail", (s, result.reasons)
    assert "harness inconsistency" in s.detail and "outside it" in s.detail, s.detail


def test_silence_from_a_watch_that_placed_no_read_at_all_is_no_veto():
    """No read seen at all, while training resumed from the damaged step and the line named it:
    a watch that placed nothing has not shown it was listening, so its silence vetoes nothing."""
    result = check(spec(), history(20, [], MEGATRON_LINE))
    s = slo_of(result)
    assert s.status == "fail", (s, result.reasons)
    assert "placed no read at all" in s.detail, s.detail


def test_a_relative_path_is_within_nothing():
    assert not within("ckpt/iter_0000020/x.pt", "ckpt/iter_0000020")
    assert not within(f"{DAMAGED}/x.pt", "ckpt")


def test_the_reason_names_the_damaged_file_not_the_first_file_read_beside_it():
    """A Trainer reads config.json before the model.safetensors the fault damaged: the reason
    named config.json (#56); it names the damaged file, where the reader read it."""
    h = history(20, [read(T + 3, f"{DAMAGED}/config.json"), read(T + 3.1, f"{DAMAGED}/mp_rank_00/model_optim_rng.pt"),
                     read(T + 3.2, f"{DAMAGED}/trainer_state.json")], MEGATRON_LINE)
    result = check(spec(), h)
    assert any("rank 0 read iter_0000020/mp_rank_00/model_optim_rng.pt after it was damaged" in r
               for r in result.reasons), result.reasons
    # a reader that never opened the damaged file itself is still placed in the damaged checkpoint, by what it read
    h = history(20, [read(T + 3, f"{DAMAGED}/config.json")], MEGATRON_LINE)
    assert any("rank 0 read iter_0000020/config.json after it was damaged" in r for r in check(spec(), h).reasons)
