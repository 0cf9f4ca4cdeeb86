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

import hashlib
import os
import random
import shutil
import signal
import time
from pathlib import Path
from typing import Literal

from pydantic import Field

from drillbit.errors import FaultError
from drillbit.faults.base import Evidence, Fault, Handle, HealReport, Params, Plan
from drillbit.proc import ProcRef

Mode = Literal["flip-bytes", "truncate", "delete-shard", "drop-marker", "corrupt-metadata"]
PREFIX, MARKER, META = "step_", "COMPLETE", "meta.json"


class CorruptParams(Params):
    mode: Mode = "flip-bytes"
    nth_newest: int = Field(0, ge=0, description="0 = the newest checkpoint")
    flip_bytes: int = Field(64, ge=1)
    seed: int = 0
    then_kill: bool = Field(True, description="SIGKILL the target rank right after, forcing a restore now")
    checkpoint_dir: str | None = Field(None, description="default: the job profile's checkpoint_dir")


def _sha(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def checkpoints(ckpt_dir: Path) -> list[Path]:
    found = [p for p in ckpt_dir.iterdir() if p.is_dir() and p.name.startswith(PREFIX)] if ckpt_dir.is_dir() else []
    return sorted(found, key=lambda p: int("".join(ch for ch in p.name if ch.isdigit()) or 0), reverse=True)


def _shard(ckpt: Path) -> Path:
    shards = sorted(p for p in ckpt.iterdir() if p.is_file() and p.name not in (MARKER, META, "MANIFEST.json"))
    if not shards:
        raise FaultError(f"{ckpt} has no shard to corrupt")
    return shards[0]


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
        if not params.checkpoint_dir:
            raise FaultError("corrupt-checkpoint needs a checkpoint_dir (set it in the job profile)")
        found = checkpoints(Path(params.checkpoint_dir))
        if len(found) <= params.nth_newest:
            raise FaultError(f"only {len(found)} checkpoint(s) in {params.checkpoint_dir}; "
                             f"cannot corrupt #{params.nth_newest}")
        ckpt = found[params.nth_newest]
        victim = {"flip-bytes": _shard, "truncate": _shard, "delete-shard": _shard,
                  "drop-marker": lambda c: c / MARKER, "corrupt-metadata": lambda c: c / META}[params.mode](ckpt)
        backup_root = Path(self.scratch or params.checkpoint_dir).resolve() / f"backup-{os.getpid()}-{time.time_ns()}"
        backup_root.mkdir(parents=True)
        backup = backup_root / victim.name
        shutil.copy2(victim, backup)
        original = _sha(backup)
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
        state = {"checkpoint": str(ckpt), "file": str(victim), "backup": str(backup), "original_sha256": original,
                 "corrupted_sha256": _sha(victim), "mode": params.mode, "killed": False}
        if params.then_kill:
            state["killed"] = target.send(signal.SIGKILL)
        return Handle(fault=self.name, target=target, params=params.model_dump(), state=state)

    def confirm(self, handle: Handle) -> Evidence | None:
        s = handle.state
        now = _sha(Path(s["file"]))
        if now == s["original_sha256"]:
            return None
        if s.get("killed") or handle.params.get("then_kill"):
            deadline = time.time() + 10
            while handle.target.alive() and time.time() < deadline:
                time.sleep(0.01)
            if handle.target.alive():
                return None
        return Evidence(what=f"{s['mode']}: {Path(s['file']).name} changed",
                        data={"checkpoint": s["checkpoint"], "file": s["file"],
                              "original_sha256": s["original_sha256"], "now_sha256": now,
                              "killed_pid": handle.target.pid if s.get("killed") else None})

    def heal(self, handle: Handle) -> HealReport:
        s = handle.state
        path, backup = Path(s["file"]), Path(s["backup"])
        current = _sha(path)
        if current == s["original_sha256"]:
            return HealReport(healed=True, verified=True, detail=f"{path.name} already intact")
        if not backup.exists():
            return HealReport(healed=False, verified=False, detail=f"backup {backup} is missing")
        if current != s["corrupted_sha256"] or not path.parent.exists():
            return HealReport(healed=True, verified=True,
                              detail=f"{path} was since replaced or removed by the job; its newer data is kept "
                                     f"(original kept at {backup})")
        tmp = path.with_name(f".{path.name}.drillbit-heal")
        shutil.copy2(backup, tmp)
        os.replace(tmp, path)
        ok = _sha(path) == s["original_sha256"]
        return HealReport(healed=ok, verified=ok,
                          detail=f"restored {path} byte for byte (sha256 {s['original_sha256'][:12]}…)" if ok
                          else f"restored {path} but its sha256 does not match the original")
