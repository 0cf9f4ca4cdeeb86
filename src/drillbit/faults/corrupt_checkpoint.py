"""corrupt-checkpoint (recovery path): damage a checkpoint, then make the job restore.

Modes model what real runs met: ``flip-bytes`` (silent corruption on disk), ``truncate``
and ``delete-shard`` (a partial upload after a hardware error, OPT-175B), ``drop-marker``
(the completion marker never written), ``corrupt-metadata``. Aimed at the newest or the
N-th newest checkpoint. With ``then_kill`` (the default) a rank is SIGKILLed right after,
so the restart happens now and must skip the bad checkpoint.

Every file is copied aside before it is touched. Heal puts the original bytes back and
verifies their sha256 — unless the job has since replaced or removed that file itself
(it wrote a newer checkpoint under the same name, or pruned it): the job's newer data is
never overwritten, and the report says so.
"""
from __future__ import annotations

import random
import signal
from pathlib import Path
from typing import Literal

from pydantic import Field

from drillbit.faults.base import Evidence, Fault, Handle, HealReport, Params, Plan
from drillbit.faults.ckptfile import META, MARKER, pick, put_back, sha256, shard_of, take_aside, wait_gone
from drillbit.proc import ProcRef

Mode = Literal["flip-bytes", "truncate", "delete-shard", "drop-marker", "corrupt-metadata"]


class CorruptParams(Params):
    mode: Mode = "flip-bytes"
    nth_newest: int = Field(0, ge=0, description="0 = the newest checkpoint")
    flip_bytes: int = Field(64, ge=1)
    seed: int = 0
    then_kill: bool = Field(True, description="SIGKILL the target rank right after, forcing a restore now")
    checkpoint_dir: str | None = Field(None, description="default: the job profile's checkpoint_dir")


class CorruptCheckpoint(Fault):
    name = "corrupt-checkpoint"
    fault_class = "recovery-path"
    Params = CorruptParams
    expects = "crash"

    def plan(self, targets: list[ProcRef], params: CorruptParams) -> Plan:
        then = " then SIGKILL the target rank" if params.then_kill else ""
        return Plan(fault=self.name, targets=targets,
                    action=f"{params.mode} on checkpoint #{params.nth_newest} (0 = newest){then}",
                    heal="restore every touched file from its copy, verified by sha256")

    def inject(self, target: ProcRef, params: CorruptParams) -> Handle:
        ckpt = pick(params.checkpoint_dir, params.nth_newest, self.name)
        victim = {"flip-bytes": shard_of, "truncate": shard_of, "delete-shard": shard_of,
                  "drop-marker": lambda c: c / MARKER, "corrupt-metadata": lambda c: c / META}[params.mode](ckpt)
        state = take_aside(victim, self.scratch or Path(params.checkpoint_dir or "."))
        data = victim.read_bytes()
        if params.mode == "flip-bytes":
            rng = random.Random(params.seed)
            buf = bytearray(data)
            lo, hi = len(buf) // 4, max(len(buf) * 3 // 4, len(buf) // 4 + 1)
            for offset in rng.sample(range(lo, hi), min(params.flip_bytes, hi - lo)):
                buf[offset] ^= 0xFF
            victim.write_bytes(bytes(buf))
        elif params.mode == "truncate":
            with open(victim, "r+b") as fh:
                fh.truncate(len(data) // 2)
        elif params.mode in ("delete-shard", "drop-marker"):
            victim.unlink()
        else:  # corrupt-metadata
            victim.write_text('{"step": "not-a-step", "truncated": tru')
        state.update(corrupted_sha256=sha256(victim), mode=params.mode, killed=False)
        if params.then_kill:
            state["killed"] = target.send(signal.SIGKILL)
        return Handle(fault=self.name, target=target, params=params.model_dump(), state=state)

    def confirm(self, handle: Handle) -> Evidence | None:
        s = handle.state
        now = sha256(Path(s["file"]))
        if now == s["original_sha256"]:
            return None
        if handle.params.get("then_kill") and not (s.get("killed") and wait_gone(handle.target)):
            return None
        return Evidence(what=f"{s['mode']}: {Path(s['file']).name} changed",
                        data={"checkpoint": s["checkpoint"], "file": s["file"],
                              "original_sha256": s["original_sha256"], "now_sha256": now,
                              "killed_pid": handle.target.pid if s.get("killed") else None})

    def heal(self, handle: Handle) -> HealReport:
        s = handle.state
        return put_back(s, still_ours=sha256(Path(s["file"])) == s["corrupted_sha256"])
