"""corrupt-checkpoint (recovery path): damage a checkpoint, then make the job restore.

Modes model what real runs met: ``flip-bytes`` (silent corruption on disk), ``truncate``
and ``delete-shard`` (a partial upload after a hardware error, OPT-175B), ``drop-marker``
(the completion marker never written), ``corrupt-metadata``, and ``nan-fill``: the file
still loads, and the weights in it are NaN, as a local-tier checkpoint assembled wrong from
its replicas gave on Megatron-LM (issue 5281) — float32 NaNs over the middle half of the
largest tensor record of a ``torch.save`` file (a zip), or of the file itself. Aimed at the newest or the
N-th newest checkpoint. With ``then_kill`` (the default) a rank is SIGKILLed right after,
so the restart happens now and must skip the bad checkpoint.

Every file is copied aside before it is touched. Heal puts the original bytes back and
verifies their sha256 — unless the job has since replaced or removed that file itself
(it wrote a newer checkpoint under the same name, or pruned it): the job's newer data is
never overwritten, and the report says so.
"""
from __future__ import annotations

import io
import random
import signal
import struct
import time
import zipfile
from pathlib import Path
from typing import Literal

from pydantic import Field

from drillbit.core.evidence import FileDamage
from drillbit.spec.checkpoints import Checkpoint, CheckpointSpec, scan
from drillbit.faults.base import Evidence, Fault, HealReport, Plan, PlanStep
from drillbit.faults.ckptfile import (Backup, ReadWitness, ThisRun, backup_distrust, damage, data_of, discard, look,
                                      marker_of, metadata_of, pick, put_back, take_aside, this_run, wait_gone)
from drillbit.core.jobhands import Hands
from drillbit.core.proc import ProcRef

Mode = Literal["flip-bytes", "truncate", "delete-shard", "drop-marker", "corrupt-metadata", "nan-fill"]
NAN32 = struct.pack("<f", float("nan"))  # a quiet NaN, little-endian float32


class CorruptParams(ThisRun):
    mode: Mode = "flip-bytes"
    nth_newest: int = Field(0, ge=0, description="0 = the newest checkpoint")
    flip_bytes: int = Field(64, ge=1)
    seed: int = 0
    then_kill: bool = Field(True, description="SIGKILL the target rank right after, forcing a restore now")
    checkpoint: CheckpointSpec | None = Field(None, description="default: the job profile's checkpoint")


class CorruptState(Backup):
    mode: Mode
    listed: list[str] = []  # the checkpoints there were when the fault chose which to damage
    corrupted_sha256: str | None = None  # what the damage left (None: the file was removed)
    acted: bool = False  # the damage was done (and corrupted_sha256 says what it left)
    killed: bool = False
    older: bool = False  # the file predates the job's run, damaged because params.older_ok said so
    t_effect: float | None = None  # the damage, or the kill after it: the fault's moment


def victim_of(params: CorruptParams, fault: str) -> tuple[Checkpoint, Path]:
    """(the checkpoint, the file of it that the mode touches), through the job's layout."""
    ckpt = pick(params.checkpoint, params.nth_newest, fault)
    layout = params.checkpoint.layout if params.checkpoint else "?"
    if params.mode == "drop-marker":
        return ckpt, marker_of(ckpt, layout)
    if params.mode == "corrupt-metadata":
        return ckpt, metadata_of(ckpt, layout)
    return ckpt, data_of(ckpt)


def nan_filled(data: bytes) -> bytes:
    """``data`` with float32 NaNs over the middle half of its largest tensor record (a
    ``torch.save`` zip: its biggest ``…/data/N`` member, stored uncompressed), else over the middle
    half of the file, 4-byte aligned to where that span starts."""
    start, size = 0, len(data)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            # a record only as large as the file holds (a central directory may claim 4 GiB in 190 bytes)
            records = [i for i in z.infolist() if "/data/" in i.filename and i.compress_type == zipfile.ZIP_STORED
                       and i.header_offset >= 0 and i.header_offset + 30 + i.file_size <= len(data)]
        if records:
            rec = max(records, key=lambda i: i.file_size)
            name_len, extra_len = struct.unpack("<HH", data[rec.header_offset + 26:rec.header_offset + 30])
            start, size = rec.header_offset + 30 + name_len + extra_len, rec.file_size
            if start + size > len(data):
                start, size = 0, len(data)
    except (zipfile.BadZipFile, struct.error, ValueError, OverflowError):
        pass
    lo = start + (size // 4) // 4 * 4
    count = max(1, (size // 2) // 4)
    buf = bytearray(data)
    buf[lo:lo + 4 * count] = NAN32 * count
    return bytes(buf[:len(data)])


class CorruptCheckpoint(ReadWitness, Fault[CorruptParams, CorruptState]):
    name = "corrupt-checkpoint"
    needs = ("write access to the checkpoint folder and the job's signals (the job's user, or root); naming the "
             "reader of the damaged file needs fanotify (root or CAP_SYS_ADMIN), else inotify or the job's restore "
             'line is the witness')
    blast_radius = ('files of one checkpoint the job wrote in this run (copied aside first, put back and '
                    'sha256-verified), and one rank killed (then_kill)')
    binds = ("checkpoint",)
    evidence = (FileDamage,)
    needs_checkpoint = True
    fault_class = "recovery-path"
    Params = CorruptParams
    State = CorruptState
    expects = "crash"
    max_targets = 1  # one checkpoint file (or node pool) for every target

    def plan(self, targets: list[ProcRef], params: CorruptParams) -> Plan:
        then = " then SIGKILL the target rank" if params.then_kill else ""
        return Plan(fault=self.name, targets=targets,
                    action=f"{params.mode} on checkpoint #{params.nth_newest} (0 = newest){then}",
                    heal="restore every touched file from its copy, verified by sha256")

    def describe(self, target: ProcRef, params: CorruptParams) -> PlanStep:
        step = super().describe(target, params)
        return step.model_copy(update={"files": [str(victim_of(params, self.name)[1])]})

    def prepare(self, target: ProcRef, params: CorruptParams) -> CorruptState:
        ckpt, victim = victim_of(params, self.name)
        assert params.checkpoint is not None
        # read and copied aside by the job's own hands (its uid, gid and groups), from descriptors
        # that follow no link: whatever a folder swapped for a link reaches, the job could write
        backup = take_aside(victim, self.scratch or ckpt.path.parent, ckpt.path, params.checkpoint.dir, self.name,
                            hands=Hands.of_target(target),
                            writes="folder" if params.mode in ("delete-shard", "drop-marker") else "file")
        older = this_run(backup, params, self.name)
        return CorruptState(**{**backup.model_dump(), "step": ckpt.step}, mode=params.mode, older=bool(older),
                            listed=[str(c.path) for c in scan(params.checkpoint)])

    def unprepare(self, target: ProcRef, params: CorruptParams, intent: CorruptState) -> None:
        discard(intent)

    def act(self, target: ProcRef, params: CorruptParams, intent: CorruptState) -> CorruptState:
        data = Path(intent.backup).read_bytes()  # the agent's own copy: the same bytes, verified by sha256
        if params.mode == "flip-bytes":
            rng = random.Random(params.seed)
            buf = bytearray(data)
            lo, hi = len(buf) // 4, max(len(buf) * 3 // 4, len(buf) // 4 + 1)
            for offset in rng.sample(range(lo, hi), min(params.flip_bytes, hi - lo)):
                buf[offset] ^= 0xFF
            left = damage(intent, "write", bytes(buf))
        elif params.mode == "nan-fill":
            left = damage(intent, "write", nan_filled(data))
        elif params.mode == "truncate":
            left = damage(intent, "truncate", size=len(data) // 2)
        elif params.mode in ("delete-shard", "drop-marker"):
            left = damage(intent, "unlink")
        else:  # corrupt-metadata: what a torn write leaves (JSON, a tracker's number, or a binary header)
            left = damage(intent, "write", b'{"step": "not-a-step", "truncated": tru')
        now = left.get("file")
        state = intent.model_copy(update={"corrupted_sha256": left.get("sha256"), "acted": True,
                                          "damage_kind": "absent" if now is None else now["kind"],
                                          "damage_ino": None if now is None else now["ino"]})
        self.watch_reads(params.checkpoint)  # from the damage on: who reads what
        if params.then_kill:
            state.killed = target.send(signal.SIGKILL)
        state.t_effect = time.time()
        return state

    def confirm(self, target: ProcRef, params: CorruptParams, state: CorruptState) -> Evidence | None:
        with self.own_reads():
            now = look(state).get("sha256")
        if now == state.original_sha256:
            return None
        if params.then_kill and not (state.killed and wait_gone(target)):
            return None
        with self.own_reads():
            reads = self.read_evidence(params.checkpoint)
        # a save that landed between the choice and the kill: the restart then had a newer checkpoint than
        # the damaged one to load, and never had to choose between the damaged one and an older one
        since = {path: step for path, step in reads["checkpoints"].items() if path not in state.listed
                 and (step is None or state.step is None or step > state.step)} if state.listed else {}
        # the moment of the damage (and kill), not of this look: a launcher that sees the killed rank
        # before the agent gets to confirm it has detected the fault, and its line must count
        older = " (a file the job did not write in this run: params.older_ok)" if state.older else ""
        return Evidence(t=state.t_effect or time.time(), what=f"{state.mode}: {Path(state.file).name} changed{older}",
                        data={"checkpoint": state.checkpoint, "step": state.step, "file": state.file,
                              "written_before_run": state.older,
                              "original_sha256": state.original_sha256, "now_sha256": now,
                              "killed_pid": target.pid if state.killed else None, "saved_since": since, **reads})

    def distrust(self, params: CorruptParams, state: CorruptState, scratch: Path | None, told: bool) -> str | None:
        return backup_distrust(state, params.checkpoint.dir if params.checkpoint else None, scratch)

    def heal(self, target: ProcRef, params: CorruptParams, state: CorruptState) -> HealReport:
        with self.own_reads():
            # by the job's hands: the damage is swapped for the original only while it is still
            # what the damage left (removed, for delete-shard and drop-marker; its inode and digest
            # otherwise), or the act was cut short and nothing is there but the original; a file
            # the job wrote anew (it saved the same step again), before or during the heal, is the job's
            report = put_back(state, acted=state.acted)
        return report.model_copy(update={"observations": self.read_observations(final=report.healed)})
