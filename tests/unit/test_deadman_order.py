"""The dead-man's switch's routine, from hand-built handles (the loop only; the guardian on
real processes is tests/integration/test_audit.py): a heal that fails is retried with
backoff until it heals or leaves the registry; a heal that must wait for the job to stop
(kill-during-save's restore_after) comes after the job is stopped, never before."""
from __future__ import annotations

from drillbit.agent.deadman import DeadmanLog, backoff, orphan
from drillbit.faults.base import Handle, HealReport
from drillbit.core.proc import ProcRef


def handle(fault: str, pid: int, after_job: bool = False) -> Handle:
    return Handle(fault=fault, target=ProcRef(pid=pid, start_time=1.0, rank=pid), after_job=after_job)


def test_a_folder_restore_waits_until_the_job_is_stopped(tmp_path):
    held = [handle("hang-collective", 1), handle("kill-during-save", 2, after_job=True)]
    order: list[str] = []

    def heal(h: Handle) -> HealReport:
        order.append(h.fault)
        held.remove(h)
        return HealReport(healed=True, verified=True, detail="ok")

    def stop_job() -> int:
        order.append("job.stop")
        return 0

    assert orphan(DeadmanLog(tmp_path / "log.jsonl", "n0"), "test", lambda: list(held), heal, job_running=lambda: True,
                  stop_job=stop_job, job_grace_s=0.0, wait=lambda s: None)
    # before: restore_after moved the live folder, with the job's newer checkpoints, from under it
    assert order == ["hang-collective", "job.stop", "kill-during-save"]


def test_a_failing_heal_is_retried_with_backoff_until_it_heals(tmp_path):
    held = [handle("corrupt-checkpoint", 1)]
    tries: list[int] = []
    waits: list[float] = []

    def heal(h: Handle) -> HealReport:
        tries.append(1)
        if len(tries) < 4:
            return HealReport(healed=False, verified=False, detail="disk busy")
        held.remove(h)
        return HealReport(healed=True, verified=True, detail="restored")

    log = DeadmanLog(tmp_path / "log.jsonl", "n0")
    assert orphan(log, "test", lambda: list(held), heal, job_running=lambda: False, stop_job=lambda: 0,
                  job_grace_s=0.0, wait=waits.append)
    assert len(tries) == 4 and waits == [1.0, 2.0, 4.0]
    assert [backoff(n) for n in (1, 2, 7, 30)] == [1.0, 2.0, 60.0, 60.0]
    kinds = [line.split('"kind":"')[1].split('"')[0] for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert kinds == ["agent.lost", "heal.failed", "heal.retry", "heal.failed", "heal.retry", "heal.failed",
                     "heal.retry", "fault.heal", "orphan.done"]
