"""fail-node-replacement (recovery path): a node dies and its replacement goes wrong.

The target rank's node is declared dead (the profile's ``replacement.declare_dead``, the
command a real health check would run: ``scontrol update … state=down``, ``kubectl cordon``)
and the rank SIGKILLed. The job's own node-replacement command (``replacement.command``,
which the stack finds on PATH) is made to misbehave for the next ``count`` calls: ``fail``
(no capacity), ``hang`` (never answers) or ``same-node`` (hands the dead node back).
OPT-175B: replacement "can take hours" and often returned the same bad machine; a 5-host
burst once met a 4-host spare pool (metaseq projects/OPT/chronicles). A recovery stack must time out, check what
it got, try another spare, or escalate — not wait.

The misbehaviour is a stand-in of the same name in ``replacement.shim_dir``, which drillbit
puts first on the job's PATH at launch (faults/provider_shim.py); calls beyond ``count`` pass
through to the real command. Heal ends any call still hanging and removes the stand-in, so
the real command answers again. The node's death is the node's, and stays.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal

import psutil
from pydantic import Field

from drillbit.core.evidence import ReplacementBroken
from drillbit.core.errors import FaultError
from drillbit.faults import provider_shim
from drillbit.faults.base import Evidence, Fault, HealReport, Params, Plan, State
from drillbit.faults.ckptfile import wait_gone
from drillbit.core.proc import ProcRef
from drillbit.spec.config import ReplacementHook
from drillbit.spec.placeholders import expand
import contextlib


class ReplacementParams(Params):
    mode: Literal["fail", "hang", "same-node"] = "hang"
    count: int = Field(1, ge=1, description="how many replacement requests misbehave")
    hook: ReplacementHook | None = Field(None, description="default: the job profile's replacement")


class ReplacementState(State):
    shim_dir: str
    shim: str
    created_dir: bool
    node: str | None
    declared_dead: bool = False
    killed: bool = False


def _calls(shim_dir: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in (shim_dir / provider_shim.CALLS).read_text().splitlines() if line]
    except (OSError, ValueError):
        return []


class FailNodeReplacement(Fault[ReplacementParams, ReplacementState]):
    name = "fail-node-replacement"
    needs = ("whatever the profile's replacement.declare_dead command needs (scontrol: a Slurm operator; kubectl "
             "cordon: RBAC on nodes), write access to replacement.shim_dir, and the job's signals")
    blast_radius = ('one node declared dead in the scheduler (it stays so: heal does not revive it unless told), the '
                    "job's replacement command answered by a stand-in for `count` calls")
    binds = ("replacement",)
    evidence = (ReplacementBroken,)
    fault_class = "recovery-path"
    Params = ReplacementParams
    State = ReplacementState
    expects = "crash"
    max_targets = 1  # one provider stand-in for every target

    def plan(self, targets: list[ProcRef], params: ReplacementParams) -> Plan:
        command = params.hook.command if params.hook else "?"
        return Plan(fault=self.name, targets=targets,
                    action=f"declare the target's node dead, SIGKILL it; the next {params.count} call(s) of "
                           f"{command} {params.mode}",
                    heal=f"end calls still hanging, remove the stand-in for {command}")

    def prepare(self, target: ProcRef, params: ReplacementParams) -> ReplacementState:
        hook = params.hook
        if hook is None:
            raise FaultError("fail-node-replacement needs the job's replacement command: set replacement: "
                             "{command, failed_arg, declare_dead} in the job profile")
        shim_dir = Path(hook.shim_dir)
        shim = shim_dir / hook.command
        if shim.exists():
            raise FaultError(f"{shim} already exists: another fault holds the replacement command")
        return ReplacementState(shim_dir=str(shim_dir), shim=str(shim), created_dir=not shim_dir.exists(),
                                node=target.node)

    def unprepare(self, target: ProcRef, params: ReplacementParams, intent: ReplacementState) -> None:
        self._remove(intent)

    def act(self, target: ProcRef, params: ReplacementParams, intent: ReplacementState) -> ReplacementState:
        assert params.hook is not None
        shim_dir, shim = Path(intent.shim_dir), Path(intent.shim)
        shim_dir.mkdir(parents=True, exist_ok=True)
        (shim_dir / provider_shim.STATE).write_text(json.dumps({
            "mode": params.mode, "remaining": params.count, "failed_arg": params.hook.failed_arg,
            "bad_node": intent.node}))
        tmp = shim.with_name(f".{shim.name}.tmp")
        tmp.write_text(provider_shim.script(sys.executable, shim_dir, shim.name))
        tmp.chmod(0o755)
        os.replace(tmp, shim)
        state = intent.model_copy()
        if params.hook.declare_dead:
            argv = [expand(a, {"node": intent.node or ""}) for a in params.hook.declare_dead]
            try:
                out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            except (OSError, subprocess.TimeoutExpired) as exc:
                self._remove(state)
                raise FaultError(f"declare_dead {argv[0]}: {exc}") from exc
            if out.returncode != 0:
                self._remove(state)
                raise FaultError(f"declare_dead exited {out.returncode}: {out.stderr.strip()[:300]}")
            state.declared_dead = True
        state.killed = target.send(signal.SIGKILL)
        return state

    def confirm(self, target: ProcRef, params: ReplacementParams, state: ReplacementState) -> Evidence | None:
        if not Path(state.shim).exists():
            return None
        if not (state.killed and wait_gone(target)):
            return None
        return Evidence(what=f"node {state.node} declared dead; {Path(state.shim).name} set to {params.mode}",
                        data={"node": state.node, "shim": state.shim, "mode": params.mode,
                              "declared_dead": state.declared_dead})

    def distrust(self, params: ReplacementParams, state: ReplacementState, scratch: Path | None, told: bool) -> str | None:
        """The stand-in lies in its shim folder; a revive read from a file on disk (not told by the
        agent that ran declare_dead) is never run: it is printed for the operator to run."""
        if os.path.dirname(os.path.normpath(state.shim)) != os.path.normpath(state.shim_dir):
            return f"its stand-in {state.shim} is not in its shim folder {state.shim_dir}"
        if state.declared_dead and not told:
            argv = [expand(a, {"node": state.node or ""}) for a in (params.hook.revive if params.hook else None) or []]
            return (f"node {state.node} was declared dead, and its revive is read from a file on disk, which drillbit "
                    "never runs; check it and run it yourself" + (f": {' '.join(argv)}" if argv else "") +
                    ", then `drill heal RUN_DIR --abandon 'revived by hand'`")
        return None

    def heal(self, target: ProcRef, params: ReplacementParams, state: ReplacementState) -> HealReport:
        shim_dir = Path(state.shim_dir)
        calls = _calls(shim_dir)
        ended = self._end_hung(shim_dir)
        self._remove(state)
        ok = not Path(state.shim).exists()
        misbehaved = sum(1 for c in calls if c.get("mode") != "pass")
        detail = (f"removed the stand-in for {Path(state.shim).name}; it misbehaved on {misbehaved} of "
                  f"{len(calls)} call(s)" + (f", and ended {ended} call(s) still hanging" if ended else ""))
        if state.declared_dead:  # what declare_dead told the stack's health check is taken back
            revived, why = self._revive(params, state)
            ok = ok and revived
            detail += f"; {why}"
        return HealReport(healed=ok, verified=ok, detail=detail)

    @staticmethod
    def _revive(params: ReplacementParams, state: ReplacementState) -> tuple[bool, str]:
        hook = params.hook
        if hook is None or not hook.revive:
            return False, f"node {state.node} was declared dead and the profile names no revive to undo it"
        argv = [expand(a, {"node": state.node or ""}) for a in hook.revive]
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, f"revive {argv[0]}: {exc}"
        if out.returncode != 0:
            return False, f"revive exited {out.returncode}: {out.stderr.strip()[:300]}"
        return True, f"ran revive ({' '.join(argv)[:120]}): exit 0"

    @staticmethod
    def _end_hung(shim_dir: Path) -> int:
        ended = 0
        hung = shim_dir / provider_shim.HUNG
        for entry in (hung.iterdir() if hung.is_dir() else []):
            try:
                proc = psutil.Process(int(entry.name))
                if "drillbit.faults.provider_shim" in " ".join(proc.cmdline()) and str(shim_dir) in proc.cmdline():
                    proc.kill()  # not waited for here: its parent (the job) reaps it
                    deadline = time.time() + 5
                    while time.time() < deadline and proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                        time.sleep(0.02)
                    ended += 1
            except (ValueError, psutil.Error):
                pass
        return ended

    @staticmethod
    def _remove(state: ReplacementState) -> None:
        shim_dir = Path(state.shim_dir)
        Path(state.shim).unlink(missing_ok=True)
        for name in (provider_shim.STATE, ".lock", provider_shim.CALLS):
            (shim_dir / name).unlink(missing_ok=True)
        shutil.rmtree(shim_dir / provider_shim.HUNG, ignore_errors=True)
        if state.created_dir:
            with contextlib.suppress(OSError):
                shim_dir.rmdir()

