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

import errno
import os
import signal
import stat
import time
from pathlib import Path

from pydantic import Field

from drillbit.core.evidence import FileDamage
from drillbit.spec.checkpoints import CheckpointSpec
from drillbit.faults.base import Evidence, Fault, HealReport, Plan, PlanStep
from drillbit.faults.ckptfile import (Backup, ReadWitness, ThisRun, backup_distrust, this_run, data_of, discard, pick,
    put_back, sha256, take_aside,
                                      wait_gone)
from drillbit.core.proc import ProcRef


class RestoreHangParams(ThisRun):
    nth_newest: int = Field(0, ge=0)
    then_kill: bool = True
    checkpoint: CheckpointSpec | None = Field(None, description="default: the job profile's checkpoint")


def _is_fifo(path: Path) -> bool:
    try:
        return stat.S_ISFIFO(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


class RestoreHangState(Backup):
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
        older = this_run(shard, params, self.name)
        backup = take_aside(shard, self.scratch or ckpt.path.parent, ckpt.path, params.checkpoint.dir, self.name)
        return RestoreHangState(**{**backup.model_dump(), "step": ckpt.step}, older=bool(older))

    def unprepare(self, target: ProcRef, params: RestoreHangParams, intent: RestoreHangState) -> None:
        discard(intent)

    def act(self, target: ProcRef, params: RestoreHangParams, intent: RestoreHangState) -> RestoreHangState:
        state = intent.model_copy()
        shard = Path(state.file)
        tmp = shard.with_name(f".{shard.name}.fifo")
        os.mkfifo(tmp)
        os.replace(tmp, shard)
        self.watch_reads(params.checkpoint)  # from the swap on: who reads what
        state.killed = params.then_kill and target.send(signal.SIGKILL)
        return state

    def confirm(self, target: ProcRef, params: RestoreHangParams, state: RestoreHangState) -> Evidence | None:
        if not _is_fifo(Path(state.file)):
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
            report = self._put_back(state)
        return report.model_copy(update={"observations": self.read_observations(final=report.healed)})

    def _put_back(self, state: RestoreHangState) -> HealReport:
        path = Path(state.file)
        if not _is_fifo(path):
            if sha256(path) == state.original_sha256:  # never swapped (cut short), or already put back
                discard(state)
                return HealReport(healed=True, verified=True, detail=f"{path.name} intact")
            return HealReport(healed=True, verified=True,
                              detail=f"{path} is no longer the FIFO (the job replaced or removed it); left alone")
        woken = 0
        for _ in range(64):  # each open for writing releases the readers blocked in open()
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no reader waiting
                    break
                raise
            os.close(fd)
            woken += 1
            time.sleep(0.01)
        report = put_back(state, still_ours=True)
        return report.model_copy(update={"detail": f"woke {woken} blocked reader(s); {report.detail}"})
