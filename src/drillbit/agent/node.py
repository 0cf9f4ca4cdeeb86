"""NodeAgent: finds rank processes on one node, applies and heals faults, keeps the registry.

The registry (``agent-<node>.json``) holds every active fault's Handle, the job this agent
launched, and the dead-man's switch settings; it is rewritten atomically on every change,
so the guardian (:mod:`drillbit.agent.deadman`) can heal from it when this process is gone.
A fault instance may hold live state (slow-rank's duty-cycle thread); the agent keeps the
instance for as long as its fault is active.
"""
from __future__ import annotations

import fcntl
import hashlib
import glob
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import contextlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import psutil

from drillbit.agent.jobcgroup import JobCgroup
from drillbit.core.atomic import write_private
from drillbit.core import filelocks
from drillbit.core.errors import ConfigError, FaultError
from drillbit.faults import get as get_fault
from drillbit.faults.base import Evidence, Fault, Handle, HealReport, PlanStep
from drillbit.core.proc import ProcRef, named_by, started_before
from drillbit.spec.config import RankDiscovery


def typed(name: str, fault: Fault, evidence: Evidence) -> Evidence:
    """The evidence checked against the fault's own models (drillbit.core.evidence) and tagged with
    the one it fits: a fault that hands the checks a field they do not know, or lacks one they
    need, is refused here rather than read as "nothing seen" later."""
    problems = []
    for model in fault.evidence:
        try:
            data = model.model_validate(evidence.data)
        except ValueError as exc:
            problems.append(f"{model.__name__}: {exc}")
            continue
        return evidence.model_copy(update={"kind": model.kind, "data": data.model_dump(mode="json")})
    raise FaultError(f"{name}: its evidence fits none of its models ({'; '.join(problems)})")


class NodeAgent:
    def __init__(self, node: str, registry_path: Path) -> None:
        self.node = node
        self.registry_path = Path(registry_path)
        self.registry_path.parent.mkdir(parents=True, exist_ok=True)
        self._active: dict[str, tuple[Handle, Fault]] = {}
        self._job: dict | None = None
        self._armed: dict[str, Any] | None = None
        self._abandoned: list[dict[str, Any]] = []
        self._written: set[str] = set()  # the faults this agent's last registry write listed
        self._unreleased: dict[str, Handle] = {}  # healed (by digest); claim held until a write drops them
        self._lock = threading.Lock()
        self._busy: dict[str, threading.Lock] = {}  # one per handle: act and heal never overlap
        self._healed: dict[str, HealReport] = {}  # what each finished heal reported
        self._guardian: subprocess.Popen | None = None
        self.node_id: str | None = None  # the Ray node id, where the agent is a Ray actor
        self.job_root: ProcRef | None = None  # the root the job's ranks were last found under
        self.job_not_before: ProcRef | None = None  # the launcher or attached root pid files are judged by
        self._distrusted: dict[str, str] = {}  # handles read from disk that are not obeyed, and why

    @property
    def scratch(self) -> Path:
        return self.registry_path.parent / f"scratch-{self.node}"

    @property
    def log_path(self) -> Path:
        """Where the dead-man's switch writes what it did (one Record per line)."""
        return self.registry_path.with_suffix(".deadman.jsonl")

    # --- discovery ---------------------------------------------------------------------
    def find_ranks(self, discovery: RankDiscovery, root: ProcRef | None = None,
                   not_before: ProcRef | None = None) -> list[ProcRef]:
        """Rank processes on this node: the command line matches and the rank is in the
        environment, among the descendants of ``root`` only (the job's launcher, or the
        attached job's root, named by pid *and* start time) — never a scan of every process
        on the node, so another job's ranks are never touched. With pid files, a file's
        process must be alive, on this node, started no earlier than ``not_before`` (the
        job's launcher, or the attached root) and at the start time its file names, and match ``cmdline`` if given.
        """
        if discovery.pidfiles is not None:
            self.job_not_before = not_before
            return self._ranks_from_pidfiles(discovery, not_before)
        if root is None:
            return []
        self.job_root = root  # a fault that takes the node's job (kill-node) never climbs above it
        proc = root.process()
        if proc is None:
            return []
        try:
            return self.pick_ranks(discovery, proc.children(recursive=True))
        except psutil.NoSuchProcess:
            return []

    def pick_ranks(self, discovery: RankDiscovery, candidates: list[psutil.Process]) -> list[ProcRef]:
        """The ranks among ``candidates`` (one job's processes on this node): the command line
        matches, the rank is in the environment, and the process is not a rank's helper."""
        assert discovery.cmdline is not None
        pattern = re.compile(discovery.cmdline)
        exclude = re.compile(discovery.exclude_cmdline) if discovery.exclude_cmdline else None
        found = []
        for proc in candidates:
            try:
                cmd = " ".join(proc.cmdline())
                if not pattern.search(cmd) or (exclude and exclude.search(cmd)):
                    continue
                rank = proc.environ().get(discovery.rank_env)
                if rank is None or proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                found.append((proc.ppid(), ProcRef.of(proc, rank=int(rank), node=self.node)))
            except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
                continue
        # a rank's own helpers (DataLoader workers) are forked copies with the same command
        # line and environment: the rank is the one whose parent is not a rank
        pids = {ref.pid for _, ref in found}
        ranks = [ref for ppid, ref in found if ppid not in pids]
        return sorted(ranks, key=lambda r: r.rank if r.rank is not None else -1)

    def _ranks_from_pidfiles(self, discovery: RankDiscovery, not_before: ProcRef | None) -> list[ProcRef]:
        assert discovery.pidfiles is not None
        pattern = re.compile(discovery.cmdline) if discovery.cmdline else None
        found: dict[int, ProcRef] = {}
        # {node}: this node's own files only (a glob of every node's files, read by every agent,
        # is a fleet's N x N reads: 13 s of discovery on 256 simulated nodes, bench/fleet_scale.py)
        for path in sorted(glob.glob(discovery.pidfiles.replace("{node}", glob.escape(self.node)))):
            try:
                info = json.loads(Path(path).read_text())
                if info.get("node_id") not in (self.node, self.node_id):
                    continue
                proc = psutil.Process(int(info["pid"]))
                if proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                if not named_by(proc, info):
                    continue  # the pid was reused by another process
                ref = ProcRef.of(proc, rank=int(info["rank"]), node=self.node)
                if not_before is not None and started_before(ref, not_before):
                    continue  # older than the job: not one of its ranks
                if pattern is not None and not pattern.search(" ".join(proc.cmdline())):
                    continue
            except (OSError, ValueError, KeyError, TypeError, psutil.NoSuchProcess, psutil.AccessDenied):
                continue  # a rank of an earlier attempt, or a file half written
            found[ref.rank] = ref  # type: ignore[index]
        return [found[r] for r in sorted(found)]

    # --- faults ------------------------------------------------------------------------
    def describe(self, fault_name: str, target: ProcRef, params: dict) -> PlanStep:
        fault = get_fault(fault_name, self.scratch)
        return fault.describe(target, fault.Params.model_validate(params))

    def _prepared(self, fault_name: str, target: ProcRef, params: dict, before: list[_Prepared]) -> _Prepared:
        """A fault made ready for one target: its params completed and checked, its intent
        prepared and its file claimed; nothing recorded or acted yet. A refusal (ConfigError,
        FaultError) undoes what it prepared. ``before``: those prepared earlier in the same call.

        One fault of a kind on one process at a time (the registry keys a fault by its name and
        the process): a second, in this call or still active from an earlier one, is refused
        before it prepares anything. Let through, it took the first one's slot, and the first
        was never healed (a duty-cycle thread left running, a partition left up)."""
        key = self._key_of(fault_name, target)
        with self._lock:
            taken = key in self._active
        if taken or any(r.key == key for r in before):
            raise FaultError(f"{fault_name} is already {'active' if taken else 'asked for'} on pid {target.pid} "
                             f"(rank {target.rank}); one {fault_name} a process at a time")
        fault = get_fault(fault_name, self.scratch)
        if "root" in fault.Params.model_fields and params.get("root") is None and self.job_root is not None:
            params = {**params, "root": self.job_root.model_dump()}
        started = self.job_root or self.job_not_before
        if "job_started" in fault.Params.model_fields and started is not None and started.start_time is not None:
            params = {**params, "job_started": started.start_time}  # this node's clock, as the files' times
        validated = fault.Params.model_validate(params)
        intent = fault.prepare(target, validated)
        handle = Handle(fault=fault_name, target=target, params=validated.model_dump(),
                        state=intent.model_dump() if intent is not None else {},
                        after_job=fault.heals_after_job(validated))
        try:
            with self._lock:
                self._check_files(handle, [r.handle for r in before])  # this agent's own first: the clearer refusal
            self._claim(handle)  # one file, one fault, across every drill on this host
        except (ConfigError, FaultError):
            if intent is not None:
                fault.unprepare(target, validated, intent)
            raise
        return _Prepared(self._key(handle), handle, fault, validated, intent)

    def _unprepared(self, ready: _Prepared) -> None:
        """A prepared fault that will not act: its intent undone, its file let go, unless a fault
        of the same key that another call recorded holds it (two injects of one target at once,
        a retry beside the call it retries: the claim is one per fault and file, and the second
        prepare found it taken by the first; helper-21)."""
        if ready.intent is not None:
            ready.fault.unprepare(ready.handle.target, ready.params, ready.intent)
        with self._lock:
            held = self._active.get(ready.key)
        if held is None or not _same_file(held[0], ready.handle):
            self._release(ready.handle)

    def inject(self, fault_name: str, target: ProcRef, params: dict) -> Handle:
        """Record, then act: the fault's intent and everything its heal needs go to the
        registry (fsynced) before the fault touches anything, so an interrupt in between
        leaves a fault the dead-man's switch or ``drill heal`` can still undo. A fault that
        raises half-way through acting stays registered (its heal copes with a partial act),
        except on FaultError, a fault's word that it refused and changed nothing."""
        handles, failed = self.inject_all(fault_name, [target], params)
        if failed is not None:
            raise failed
        return handles[0]

    def inject_all(self, fault_name: str, targets: list[ProcRef],
                   params: dict) -> tuple[list[Handle], Exception | None]:
        """:meth:`inject` on each target in order, to the first that fails: the handles of those
        that acted, and that failure (None if none did). The same record-then-act, with one
        registry write for all the intents before the first act and one for all the states
        after the last (two fsyncs a call, not two a target): an interrupt between leaves every
        acted fault registered with its intent, which its heal copes with, as it must after an
        interrupt between one fault's act and its second write."""
        ready: list[_Prepared] = []
        failed: Exception | None = None
        for target in targets:
            try:
                ready.append(self._prepared(fault_name, target, params, ready))
            except Exception as exc:  # noqa: BLE001 — the targets before it go on; it is answered
                failed = exc
                break
        if not ready:
            return [], failed
        acted: list[Handle] = []
        with contextlib.ExitStack() as held:
            for key in sorted(r.key for r in ready):  # distinct (see _prepared); one order for every caller
                held.enter_context(self._busy_lock(key))
            held.enter_context(heal_lock(self.registry_path))  # a heal that comes now waits for the acts
            with self._lock:
                recorded: list[_Prepared] = []
                for r in ready:
                    try:
                        if r.key in self._active:  # another call's, landed since this one prepared
                            raise FaultError(f"{fault_name} is already active on pid {r.handle.target.pid}")
                        self._check_files(r.handle)
                    except FaultError as exc:  # before any later target's failure, in their order
                        failed = exc
                        break
                    self._active[r.key] = (r.handle, r.fault)
                    self._healed.pop(r.key, None)
                    recorded.append(r)
                self._save()
            for r in ready[len(recorded):]:  # refused at the record: never registered
                self._unprepared(r)
            for i, r in enumerate(recorded):
                try:
                    state = r.fault.act(r.handle.target, r.params, r.intent)
                except Exception as exc:  # noqa: BLE001 — answered, with the faults that acted before it
                    failed = exc
                    # FaultError: a clean refusal, nothing changed; anything else stays registered,
                    # its heal copes with a partial act. The targets after it never acted.
                    dropped = recorded[i:] if isinstance(exc, FaultError) else recorded[i + 1:]
                    with self._lock:
                        for d in dropped:
                            self._active.pop(d.key, None)
                    for d in dropped:
                        self._unprepared(d)
                    break
                acted.append(r.handle.model_copy(update={"state": state.model_dump()}))
                with self._lock:
                    self._active[r.key] = (acted[-1], r.fault)
            with self._lock:
                self._save()
        self._release_written()  # a heal whose own write raised: its claim goes once a write has landed
        return acted, failed

    def _busy_lock(self, key: str) -> threading.Lock:
        with self._lock:
            return self._busy.setdefault(key, threading.Lock())

    def _check_files(self, handle: Handle, also: Sequence[Handle] = ()) -> None:
        """Two active faults never hold the same file: the second's backup would be the
        first one's damage (corrupt-checkpoint with two targets once did exactly that).
        ``also``: the faults prepared before this one in the same call."""
        mine = handle.state.get("file")
        for held in [*(h for h, _ in self._active.values()), *also]:
            if mine is not None and held.state.get("file") == mine:
                raise FaultError(f"{handle.fault}: {mine} is already held by an active {held.fault} fault "
                                 f"(rank {held.target.rank}); give each target its own file")

    def _instance(self, handle: Handle) -> Fault:
        with self._lock:
            held = self._active.get(self._key(handle))
        return held[1] if held is not None else get_fault(handle.fault, self.scratch)

    def confirm(self, handle: Handle) -> Evidence | None:
        fault = self._instance(handle)
        evidence = fault.confirm(handle.target, fault.Params.model_validate(handle.params),
                                 fault.State.model_validate(handle.state))
        if evidence is None or evidence.data.get("unconfirmed"):
            return evidence
        return typed(handle.fault, fault, evidence)

    def heal(self, handle: Handle) -> HealReport:
        """Heal one fault — after its act has landed (the same handle's lock, and across
        processes the registry's heal lock: the guardian, ``drill heal`` and a retry never
        heal one fault at once), from the state the act recorded."""
        return self._heal_each([handle], answer_errors=False)[0]

    def heal_all(self, handles: list[Handle]) -> list[HealReport]:
        """:meth:`heal` on each handle in order, in one call. A heal that raises is answered as
        that fault's failed report and the rest go on. Each fault is healed as one heal alone
        is (its own locks, the registry written as it leaves it): a heal that hangs keeps no
        fault healed before it on disk or its file claimed, and a retry of a healed fault finds
        it healed at once (helper-20: with the call's locks held to its end, such retries timed
        out and healed faults were reported left in place)."""
        return self._heal_each(handles, answer_errors=True)

    def _heal_each(self, handles: list[Handle], answer_errors: bool) -> list[HealReport]:
        reports: list[HealReport] = []
        for handle in handles:
            key = self._key(handle)
            with self._lock:  # healed already (a retry after its caller gave up waiting): said at once,
                done = None if key in self._active else self._healed.get(key)  # not behind another's heal
            if done is not None:
                reports.append(done)
                continue
            try:
                with self._busy_lock(key), heal_lock(self.registry_path):
                    report, acted = self._heal_held(handle)
                    if acted is not None:
                        with self._lock:
                            self._unreleased[digest(acted)] = acted
                            self._save()
                        self._release_written()
            except Exception as exc:
                if not answer_errors:
                    raise
                report = HealReport(healed=False, verified=False, detail=f"heal raised {exc.__class__.__name__}: {exc}")
            reports.append(report)
        return reports

    def _heal_held(self, handle: Handle) -> tuple[HealReport, Handle | None]:
        """One fault's heal, its locks held by the caller: the report, and the handle healed
        (gone from this agent's memory; the caller writes the registry at once), or None."""
        key = self._key(handle)
        with self._lock:
            held = self._active.get(key)
        if held is not None:
            handle = held[0]  # the act's final state, not the intent a timed-out inject handed back
        elif key in self._healed:  # a retry of a heal that finished meanwhile (its caller gave up waiting)
            return self._healed[key], None
        elif self._gone_from_disk(key):
            return HealReport(healed=True, verified=False, detail="no longer in the registry: healed or "
                              "abandoned by another process (see the dead-man log)"), None
        fault = self._instance(handle)
        if key in self._distrusted:
            return HealReport(healed=False, verified=False, detail=f"not trusted: {self._distrusted[key]}; "
                              "nothing it names was touched"), None
        if not handle.state:  # a plugin fault without prepare() that died before it could say what it did
            return HealReport(healed=False, verified=False, detail=f"{handle.fault} acted before it recorded its "
                              "state; check the target by hand"), None
        report = fault.heal(handle.target, fault.Params.model_validate(handle.params),
                            fault.State.model_validate(handle.state))
        if not report.healed:
            return report, None
        with self._lock:
            self._active.pop(key, None)
            self._healed[key] = report
        return report, handle

    def _claim(self, handle: Handle) -> None:
        state = handle.state
        if state.get("dev") is not None and state.get("ino") is not None and state.get("file"):
            filelocks.claim(int(state["dev"]), int(state["ino"]), str(state["file"]), str(self.registry_path),
                            self._key(handle), handle.fault)

    def _release_written(self) -> None:
        """Release the file claims of healed faults that the registry on disk no longer lists:
        at once after a heal's write, or at a later write where that one raised (a full disk):
        a claim is let go only once no registry names its fault."""
        with self._lock:
            done = [self._unreleased.pop(d) for d, h in list(self._unreleased.items())
                    if self._key(h) not in self._written]
        for handle in done:
            self._release(handle)

    def _release(self, handle: Handle) -> None:
        state = handle.state
        if state.get("dev") is not None and state.get("ino") is not None:
            filelocks.release(int(state["dev"]), int(state["ino"]), str(self.registry_path), self._key(handle))

    def _keys_on_disk(self) -> set[str] | None:
        """The faults the registry file lists now (another process may have healed or
        abandoned some); None when it cannot be read."""
        try:
            payload = json.loads(self.registry_path.read_text())
            return {self._key(Handle.model_validate(h)) for h in payload.get("faults", [])}
        except (OSError, ValueError):
            return None

    def _gone_from_disk(self, key: str) -> bool:
        on_disk = self._keys_on_disk()
        return on_disk is not None and key not in on_disk

    def pending(self) -> list[Handle]:
        """The faults still to heal: those held here that the registry on disk still lists
        (``drill heal`` in another process may have healed or abandoned some since)."""
        with self._lock:
            held = dict(self._active)
        on_disk = self._keys_on_disk()
        if on_disk is None:
            return [h for h, _ in held.values()]
        gone = [k for k in held if k not in on_disk]
        if gone:
            with self._lock:
                for k in gone:
                    self._active.pop(k, None)
        return [h for k, (h, _) in held.items() if k in on_disk]

    def abandon(self, reason: str) -> list[Handle]:
        """An operator's word that these faults will not be healed by drillbit (``drill heal
        --abandon REASON``): they leave the registry, so no guardian retries them; the
        registry keeps them under ``abandoned`` with the reason."""
        with heal_lock(self.registry_path), self._lock:
            left = [h for h, _ in self._active.values()]
            self._abandoned += [{"handle": h.model_dump(), "reason": reason, "t": time.time()} for h in left]
            self._active.clear()
            self._save()
        return left

    def active(self) -> list[Handle]:
        with self._lock:
            return [h for h, _ in self._active.values()]

    def restore(self, handles: list[Handle], job: dict | None, armed: dict | None,
                told: set[str] | None = None) -> None:
        """Take over a registry another process wrote (the guardian after its agent died,
        ``drill heal``): each fault gets a fresh instance, which heals from its recorded State —
        unless the handle is not to be obeyed: a path outside the folders it names, a command
        read from disk (:meth:`Fault.distrust`), or, for the guardian (``told``: the digests its
        agent sent it over a pipe), a handle its agent never told it of (changed on disk)."""
        self._distrusted = {}
        active = {self._key(h): (h, get_fault(h.fault, self.scratch)) for h in handles}
        for key, (h, fault) in active.items():
            if told is not None and digest(h) not in told:
                self._distrusted[key] = ("the registry on disk says other than its agent told its guardian (changed "
                                         "on disk since)")
                continue
            try:
                why = fault.distrust(fault.Params.model_validate(h.params), fault.State.model_validate(h.state),
                                     self.scratch, told is not None)
            except ValueError as exc:
                why = f"its state does not read as {h.fault}'s: {str(exc)[:200]}"
            if why is not None:
                self._distrusted[key] = why
        with self._lock:
            self._active = active
            self._written = set(active)  # as read from the registry
            self._job, self._armed = job, armed
            try:
                self._abandoned = list(json.loads(self.registry_path.read_text()).get("abandoned") or [])
            except (OSError, ValueError, AttributeError):
                self._abandoned = []

    # --- the launched job, for the dead-man's switch -------------------------------------
    def register_job(self, proc: ProcRef, mark: str, cgroup: JobCgroup | None = None) -> None:
        """The launched job, for whoever must stop it if this agent cannot: its launcher by
        (pid, start time), the mark every process of it carries (never a bare pgid, which
        an unrelated session may have reused by then) and the cgroup that holds it, if any."""
        with self._lock:
            self._job = {"proc": proc.model_dump(), "mark": mark,
                         **({"cgroup": str(cgroup.path)} if cgroup is not None else {})}
            self._save()

    def release_job(self) -> None:
        with self._lock:
            self._job = None
            self._save()

    # --- dead-man's switch ---------------------------------------------------------------
    def arm(self, watch: ProcRef, job_grace_s: float = 0.0, offset_s: float = 0.0,
            deadman_s: float | None = None) -> None:
        """Start the guardian: it heals this registry if ``watch`` (this agent's process, or
        the controller's when the agent lives in it) dies without releasing it first."""
        with self._lock:
            self._armed = {"job_grace_s": job_grace_s, "offset_s": offset_s, "watch": watch.model_dump(),
                           **({"deadman_s": deadman_s} if deadman_s is not None else {})}
            self._save()
        if self._guardian is not None and self._guardian.poll() is None:
            return
        self._guardian = subprocess.Popen(
            [sys.executable, "-m", "drillbit.agent", "guard", "--registry", str(self.registry_path),
             "--watch-pid", str(watch.pid), "--watch-start", repr(watch.start_time),
             *(["--watch-boot-start", repr(watch.boot_start)] if watch.boot_start is not None else [])],
            stdin=subprocess.PIPE, start_new_session=True,
        )
        with self._lock:
            self._tell_guardian()

    def disarm(self) -> bool:
        """Release the guardian (the controller healed for itself) — refused, False, while any
        fault is still active: the guardian and the switch keep it until it is healed or an
        operator abandons it."""
        with self._lock:
            if self._active:
                return False
            self._armed = None
            self._save()
        self._release_written()  # a heal whose own write raised: its claim goes with this one
        if self._guardian is not None and self._guardian.poll() is None:
            self._guardian.terminate()
            try:
                self._guardian.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._guardian.kill()
                self._guardian.wait()
        if self._guardian is not None and self._guardian.stdin is not None:
            self._guardian.stdin.close()
        self._guardian = None
        return True

    def _tell_guardian(self) -> None:
        """What the registry is about to hold, told to the guardian over its stdin (a pipe only
        this agent holds): the guardian obeys no handle it was not told of."""
        guardian = self._guardian
        if guardian is None or guardian.stdin is None or guardian.poll() is not None:
            return
        try:
            guardian.stdin.write((json.dumps([digest(h) for h, _ in self._active.values()]) + "\n").encode())
            guardian.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass

    @staticmethod
    def _key_of(fault: str, target: ProcRef) -> str:
        return f"{fault}:{target.pid}:{target.start_time}"

    @classmethod
    def _key(cls, handle: Handle) -> str:
        return cls._key_of(handle.fault, handle.target)

    def _save(self) -> None:
        """Write the registry whole, from this agent's memory (the caller holds ``_lock``). A fault
        `drill heal` healed in another process comes back with the next write and is healed again
        by this agent: heals are idempotent, and some faults hold machinery only the agent that
        injected them can stop (slow-rank's duty cycle, a flapping partition), so the file is not
        proof enough to forget one (helper-21: a merge with the file lost live faults)."""
        self._tell_guardian()  # first: an agent that dies between the two leaves a told state on disk
        payload = {"node": self.node, "host": socket.gethostname(),
                   "faults": [h.model_dump() for h, _ in self._active.values()],
                   "job": self._job, "armed": self._armed, "abandoned": self._abandoned}
        write_private(self.registry_path, json.dumps(payload))
        self._written = set(self._active)


@dataclass(frozen=True)
class _Prepared:
    key: str
    handle: Handle
    fault: Fault
    params: Any  # the fault's own Params, validated
    intent: Any  # what its prepare() gave (None: nothing to undo)


def _same_file(a: Handle, b: Handle) -> bool:
    """Whether two handles name the same file (device and inode), as a file claim does."""
    return (a.state.get("dev"), a.state.get("ino")) == (b.state.get("dev"), b.state.get("ino"))


def digest(handle: Handle) -> str:
    """What names one handle's whole content (fault, target, params, state)."""
    return hashlib.sha256(json.dumps(handle.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()


@contextmanager
def heal_lock(registry: Path) -> Iterator[None]:
    """One process at a time acts on or heals the faults of one registry (an flock beside
    it; the kernel drops it with a dead holder)."""
    fd = os.open(f"{registry}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
