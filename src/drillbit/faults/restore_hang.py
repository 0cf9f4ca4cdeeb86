"""restore-hang (fail-hang, on the recovery path): the checkpoint read hangs during restore.

OPT-175B's restore downloads "hung nondeterministically" (metaseq projects/OPT/chronicles). The newest
checkpoint's shard is swapped for a FIFO with no writer, so any process that opens it to
read blocks forever, exactly like a read from a storage mount that stopped answering; then
a rank is SIGKILLed so the job restarts and restores now. A recovery stack must notice the
restore is not progressing and fall back; a restore with no deadline waits forever.

The original file is copied aside first. Heal wakes any reader still blocked on the FIFO
(it opens it for writing once, so they read EOF), removes the FIFO and puts the original
back byte for byte (sha256 verified) — unless the job has replaced that file itself.
"""
from __future__ import annotations

import signal
from pathlib import Path

from pydantic import Field

from drillbit.core.evidence import FileDamage
from drillbit.spec.checkpoints import CheckpointSpec
from drillbit.faults.base import Evidence, Fault, HealReport, Plan, PlanStep
from drillbit.faults.ckptfile import (Backup, ReadWitness, ThisRun, backup_distrust, damage, data_of, discard, look,
                                      pick, put_back, take_aside, this_run, wait_gone)
from drillbit.core.jobhands import Hands
from drillbit.core.proc import ProcRef


class RestoreHangParams(ThisRun):
    nth_newest: int = Field(0, ge=0)
    then_kill: bool = True
    checkpoint: CheckpointSpec | None = Field(None, description="default: the job profile's checkpoint")


class RestoreHangState(Backup):
    acted: bool = False  # the FIFO was put in the shard's place
    killed: bool = False
    older: bool = False  # the file predates the job's run, taken because params.older_ok said so


class RestoreHang(ReadWitness, Fault[RestoreHangParams, RestoreHangState]):
    name = "restore-hang"
    needs = ("write access to the checkpoint folder and the job's signals (the job's user, or root)")
    blast_radius = ('one file of one checkpoint the job wrote in this run, swapped for a FIFO (the original put back '
                    'and verified), and one rank killed')
    binds = ("checkpoint",)
    evidence = (FileDamage,)
    needs_checkpoint = True
    fault_class = "fail-hang"
    Params = RestoreHangParams
    State = RestoreHangState
    expects = "crash"
    max_targets = 1  # one checkpoint file (or node pool) for every target

    def plan(self, targets: list[ProcRef], params: RestoreHangParams) -> Plan:
        return Plan(fault=self.name, targets=targets,
                    action=f"swap checkpoint #{params.nth_newest}'s shard for a FIFO that never answers, "
                           "then SIGKILL the target rank",
                    heal="wake blocked readers, remove the FIFO, restore the shard byte for byte")

    def describe(self, target: ProcRef, params: RestoreHangParams) -> PlanStep:
        step = super().describe(target, params)
        return step.model_copy(update={"files": [str(data_of(pick(params.checkpoint, params.nth_newest,
                                                                  self.name)))]})

    def prepare(self, target: ProcRef, params: RestoreHangParams) -> RestoreHangState:
        ckpt = pick(params.checkpoint, params.nth_newest, self.name)
        shard = data_of(ckpt)
        assert params.checkpoint is not None
        backup = take_aside(shard, self.scratch or ckpt.path.parent, ckpt.path, params.checkpoint.dir, self.name,
                            hands=Hands.of_target(target), writes="folder")  # the job's own hands: see corrupt-checkpoint
        older = this_run(backup, params, self.name)
        return RestoreHangState(**{**backup.model_dump(), "step": ckpt.step}, older=bool(older))

    def unprepare(self, target: ProcRef, params: RestoreHangParams, intent: RestoreHangState) -> None:
        discard(intent)

    def act(self, target: ProcRef, params: RestoreHangParams, intent: RestoreHangState) -> RestoreHangState:
        # a FIFO made under a fresh name in the shard's own folder and renamed over the shard (its inode)
        left = damage(intent, "fifo", mode=intent.file_mode if intent.file_mode is not None else 0o600)
        now = left.get("file") or {}
        state = intent.model_copy(update={"damage_kind": now.get("kind", "absent"), "damage_ino": now.get("ino"),
                                          "acted": True})
        self.watch_reads(params.checkpoint)  # from the swap on: who reads what
        state.killed = params.then_kill and target.send(signal.SIGKILL)
        return state

    def confirm(self, target: ProcRef, params: RestoreHangParams, state: RestoreHangState) -> Evidence | None:
        with self.own_reads():
            now = look(state).get("file") or {}
        if now.get("kind") != "fifo" or now.get("ino") != state.damage_ino:
            return None
        if params.then_kill and not (state.killed and wait_gone(target)):
            return None
        with self.own_reads():
            reads = self.read_evidence(params.checkpoint)
        older = " (a file the job did not write in this run: params.older_ok)" if state.older else ""
        return Evidence(what=f"checkpoint read now blocks{older}",
                        data={"checkpoint": state.checkpoint, "step": state.step, "file": state.file, "hang": True,
                              "written_before_run": state.older, **reads})

    def distrust(self, params: RestoreHangParams, state: RestoreHangState, scratch: Path | None, told: bool) -> str | None:
        return backup_distrust(state, params.checkpoint.dir if params.checkpoint else None, scratch)

    def heal(self, target: ProcRef, params: RestoreHangParams, state: RestoreHangState) -> HealReport:
        with self.own_reads():
            # by the job's hands: the readers blocked on the FIFO are woken (each open for writing
            # releases those waiting in open()), and the FIFO is exchanged for the original only
            # while it is still this fault's FIFO (its inode); what the job put there is the job's
            report = put_back(state, acted=state.acted)
        return report.model_copy(update={"observations": self.read_observations(final=report.healed)})
