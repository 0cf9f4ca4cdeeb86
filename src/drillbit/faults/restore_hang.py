"""restore-hang (fail-hang, on the recovery path): the checkpoint read hangs during restore.

OPT-175B's restore downloads "hung nondeterministically" (FACTS.md). The newest
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
import hashlib
import os
import shutil
import signal
import stat
import time
from pathlib import Path

from pydantic import Field

from drillbit.errors import FaultError
from drillbit.faults.base import Evidence, Fault, Handle, HealReport, Params, Plan
from drillbit.faults.corrupt_checkpoint import _shard, checkpoints
from drillbit.proc import ProcRef


class RestoreHangParams(Params):
    nth_newest: int = Field(0, ge=0)
    then_kill: bool = True
    checkpoint_dir: str | None = None


def _is_fifo(path: Path) -> bool:
    try:
        return stat.S_ISFIFO(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


class RestoreHang(Fault):
    name = "restore-hang"
    fault_class = "fail-hang"
    Params = RestoreHangParams
    expects = "crash"

    def plan(self, targets: list[ProcRef], params: RestoreHangParams) -> Plan:
        return Plan(fault=self.name, targets=targets,
                    action=f"swap checkpoint #{params.nth_newest}'s shard for a FIFO that never answers, "
                           "then SIGKILL the target rank",
                    heal="wake blocked readers, remove the FIFO, restore the shard byte for byte")

    def inject(self, target: ProcRef, params: RestoreHangParams) -> Handle:
        if not params.checkpoint_dir:
            raise FaultError("restore-hang needs a checkpoint_dir (set it in the job profile)")
        found = checkpoints(Path(params.checkpoint_dir))
        if len(found) <= params.nth_newest:
            raise FaultError(f"only {len(found)} checkpoint(s) in {params.checkpoint_dir}")
        shard = _shard(found[params.nth_newest])
        backup_dir = Path(self.scratch or params.checkpoint_dir).resolve() / f"backup-{os.getpid()}-{time.time_ns()}"
        backup_dir.mkdir(parents=True)
        backup = backup_dir / shard.name
        shutil.copy2(shard, backup)
        original = hashlib.sha256(backup.read_bytes()).hexdigest()
        tmp = shard.with_name(f".{shard.name}.fifo")
        os.mkfifo(tmp)
        os.replace(tmp, shard)
        state = {"checkpoint": str(shard.parent), "file": str(shard), "backup": str(backup),
                 "original_sha256": original, "killed": False}
        if params.then_kill:
            state["killed"] = target.send(signal.SIGKILL)
        return Handle(fault=self.name, target=target, params=params.model_dump(), state=state)

    def confirm(self, handle: Handle) -> Evidence | None:
        if not _is_fifo(Path(handle.state["file"])):
            return None
        if handle.state.get("killed"):
            deadline = time.time() + 10
            while handle.target.alive() and time.time() < deadline:
                time.sleep(0.01)
            if handle.target.alive():
                return None
        return Evidence(what="checkpoint read now blocks", data={"checkpoint": handle.state["checkpoint"],
                                                                "file": handle.state["file"], "hang": True})

    def heal(self, handle: Handle) -> HealReport:
        path, backup = Path(handle.state["file"]), Path(handle.state["backup"])
        if not _is_fifo(path):
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
        tmp = path.with_name(f".{path.name}.drillbit-heal")
        shutil.copy2(backup, tmp)
        os.replace(tmp, path)
        ok = hashlib.sha256(path.read_bytes()).hexdigest() == handle.state["original_sha256"]
        return HealReport(healed=ok, verified=ok,
                          detail=f"woke {woken} blocked reader(s); restored {path} byte for byte" if ok
                          else f"restored {path} but its sha256 does not match")
