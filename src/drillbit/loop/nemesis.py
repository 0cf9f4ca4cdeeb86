"""Nemesis: one fault's inject, confirm and heal on its targets, through the nodes' agents.

Used as a context manager, it heals on the way out whatever happened inside: a pass, a
failed SLO, an abort, an interrupt, a harness bug. Heal asks each node's agent once for all
of its faults, the nodes in parallel (one dead agent does not keep the others' faults in
place), each fault with a deadline and one retry; a fault that still cannot be healed is
recorded as ``heal.failed``, which fails the drill.
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Any

from drillbit.agent.deadman import heal_all_with_deadline, heal_with_deadline
from drillbit.faults.base import Evidence, Fault, Handle, HealReport, Params, Plan, PlanStep
from drillbit.core.history import History
from drillbit.loop.watch import Progress
from drillbit.transport.nodes import FAN_OUT, Nodes, per_node
from drillbit.core.proc import ProcRef

HARNESS = "harness"


class HealAbandoned(BaseException):
    """The operator asked to leave the faults in place (a second Ctrl-C while healing)."""


class Nemesis:
    def __init__(self, nodes: Nodes, fault_name: str, fault: Fault, params: Params, history: History,
                 heal_timeout: float = 60.0) -> None:
        self.nodes = nodes
        self.fault_name = fault_name
        self.fault = fault
        self.params = params
        self.history = history
        self.heal_timeout = heal_timeout
        self.handles: list[Handle] = []
        self.healing = False
        self.abandoned = False  # the operator left the faults in place (a second Ctrl-C while healing)

    def __enter__(self) -> "Nemesis":
        return self

    def __exit__(self, *exc: object) -> None:
        self.heal()

    # --- plan ----------------------------------------------------------------------------
    def plan(self, targets: list[ProcRef]) -> Plan:
        """The fault's plan with the concrete step on each target, resolved by its agent."""
        plan = self.fault.plan(targets, self.params)
        params = self.params.model_dump()
        steps: list[PlanStep | None] = [None] * len(targets)

        def unresolved(target: ProcRef, exc: Exception) -> PlanStep:
            return PlanStep(node=target.node, pid=target.pid, rank=target.rank, action=plan.action,
                            heal=plan.heal, cmdline=f"(not resolved: {exc})")

        def group(idx: list[int]) -> None:
            try:
                got = self.nodes.plan_group(self.fault_name, [targets[i] for i in idx], params)
            except Exception:  # noqa: BLE001 — which target it was: each asked on its own
                got = []
                for i in idx:
                    try:
                        got.append(self.nodes.plan(self.fault_name, targets[i], params))
                    except Exception as exc:  # the plan is a description; inject will raise for real
                        got.append(unresolved(targets[i], exc))
            for i, step in zip(idx, got, strict=True):
                steps[i] = step

        self._each_agent(targets, group)
        return plan.model_copy(update={"steps": steps})

    def _route(self, target: ProcRef) -> str:
        return self.nodes.route(self.fault_name, target)

    def _each_agent(self, targets: list[ProcRef], fn: Any) -> None:
        """``fn(indexes)`` once for each agent's targets (their indexes, in order), the agents
        in parallel: one call to an agent carries all its targets. The first failure, in the
        targets' order, is raised once every agent is done."""
        groups: dict[str, list[int]] = {}
        for i, target in enumerate(targets):
            groups.setdefault(self._route(target), []).append(i)
        per_node(list(groups.values()), lambda idx: self._route(targets[idx[0]]), fn)

    # --- inject and confirm --------------------------------------------------------------
    def inject(self, targets: list[ProcRef]) -> None:
        plan = self.plan(targets)
        self.history.record(HARNESS, "fault.plan", action=plan.action, heal=plan.heal,
                            targets=[t.model_dump() for t in targets], steps=[s.model_dump() for s in plan.steps])
        params = self.params.model_dump()
        done: dict[int, Handle] = {}

        def group(idx: list[int]) -> None:  # each agent's targets in one call, in order
            t_call = time.time()
            handles, failed = self.nodes.inject_group(self.fault_name, [targets[i] for i in idx], params)
            for i, handle in zip(idx, handles, strict=False):  # what landed is held, whatever failed after it
                done[i] = handle
                target = targets[i]
                self.history.record(HARNESS, "fault.inject", t=t_call, node=target.node, rank=target.rank,
                                    pid=target.pid, fault=self.fault_name, params=params)
            if failed is not None:
                raise failed

        try:
            self._each_agent(targets, group)
        finally:  # what was injected is held, in the targets' order, whatever failed
            self.handles += [done[i] for i in sorted(done)]

    def confirm(self, progress: Progress) -> bool:
        """Proof of effect from every target's agent, then from the job's progress."""
        evidence = self._confirm_each(self.handles)
        deadline = time.time() + self.fault.confirm_wait(self.params)
        while any(e is None for e in evidence) and time.time() < deadline:  # an armed fault: ask again
            progress.tick(0.1)
            again = iter(self._confirm_each([h for h, e in zip(self.handles, evidence, strict=True) if e is None]))
            evidence = [e if e is not None else next(again) for e in evidence]
        said = [e.data["unconfirmed"] for e in evidence if e is not None and e.data.get("unconfirmed")]
        if said:
            self.history.record(HARNESS, "fault.unconfirmed", reason="; ".join(said))
            return False
        if any(e is None for e in evidence):
            missing = [h.target.rank for h, e in zip(self.handles, evidence, strict=False) if e is None]
            self.history.record(HARNESS, "fault.unconfirmed", reason=f"no evidence of effect on rank(s) {missing}")
            return False
        t_effect = max(e.t for e in evidence if e is not None)
        data: dict[str, Any] = {"evidence": [e.model_dump() for e in evidence if e is not None],
                                "expects": self.fault.expects, "hurts": self.fault.hurts(self.params),
                                "verb": self.fault.verb}
        extra = self.fault.confirm_progress(progress, t_effect, self.params)
        if extra is None:
            self.history.record(HARNESS, "fault.unconfirmed",
                                reason="the target took the fault but the job's progress did not show it "
                                       f"(expected: {self.fault.expects})")
            return False
        self.history.record(HARNESS, "fault.confirmed", t=t_effect, **data, **extra)
        return True

    def _confirm_each(self, handles: list[Handle]) -> list[Evidence | None]:
        """Each handle's evidence, each agent asked once for all of its own, in parallel."""
        evidence: list[Evidence | None] = [None] * len(handles)

        def group(idx: list[int]) -> None:
            for i, e in zip(idx, self.nodes.confirm_group([handles[i] for i in idx]), strict=True):
                evidence[i] = e

        self._each_agent([h.target for h in handles], group)
        return evidence

    # --- heal ----------------------------------------------------------------------------
    def heal(self, job_running: bool = False) -> None:
        """Heal every fault still active on any node; idempotent. A HealAbandoned (the
        operator's second Ctrl-C) leaves the rest in place, each recorded as heal.failed.
        While the drill's job still runs, a fault whose heal waits for the job to stop
        (``after_job``) is left for the heal after teardown."""
        if self.abandoned:
            return  # the operator's word: what is left stays, for the switches
        self.healing = True
        left: list[Handle] = []
        recorded: set[int] = set()
        stop = threading.Event()
        try:
            for node, held in self.nodes.active_by_node().items():
                if isinstance(held, Exception):
                    self.history.record(HARNESS, "heal.failed", node=node,
                                        detail=f"cannot reach the agent to heal: {held}")
                    continue
                left += [h for h in held if not (job_running and h.after_job)]
            self._heal_all(left, recorded, stop)
        except HealAbandoned as exc:
            stop.set()  # no heal call begins after the operator's word (one in flight ends on its node)
            self.abandoned = True
            for i, handle in enumerate(left):
                if i in recorded:
                    continue
                t = handle.target
                self.history.record(HARNESS, "heal.failed", node=t.node, rank=t.rank, pid=t.pid, fault=handle.fault,
                                    detail=f"left in place: {exc}")
        finally:
            self.healing = False

    def _heal_all(self, handles: list[Handle], recorded: set[int], stop: threading.Event) -> None:
        """Each agent's faults in one call (``heal_all``), the agents in parallel, at most
        FAN_OUT at once: one dead or slow agent does not keep the others' faults in place. A
        call gets twice the heal deadline for each of its faults (what each had for its
        attempt and its retry when they went one by one); a fault it did not heal, or every
        fault of a call that did not answer in time, is tried once more on its own (one the
        call healed meanwhile says so at once). Every record is written here, on the caller's
        thread, as each agent answers: the operator's second Ctrl-C (``stop`` set) leaves at
        once, no further call begins, and the faults not yet recorded healed are the ones said
        to be left in place."""
        if not handles:
            return
        groups: dict[str, list[int]] = {}
        for i, handle in enumerate(handles):
            groups.setdefault(self.nodes.route(handle.fault, handle.target), []).append(i)
        work: queue.SimpleQueue[list[int]] = queue.SimpleQueue()
        for idx in groups.values():
            work.put(idx)
        done: queue.SimpleQueue[tuple[int, HealReport, HealReport | None]] = queue.SimpleQueue()

        def heal_groups() -> None:  # a worker: one agent's faults after another, until none are left
            while not stop.is_set():
                try:
                    idx = work.get_nowait()
                except queue.Empty:
                    return
                batch = [handles[i] for i in idx]
                try:
                    first = heal_all_with_deadline(self.nodes.heal_group, batch, 2 * self.heal_timeout * len(batch))
                    for i, report in zip(idx, first, strict=True):
                        if stop.is_set():
                            return
                        again = None if report.healed else heal_with_deadline(self.nodes.heal, handles[i],
                                                                              self.heal_timeout)
                        done.put((i, report, again))
                except Exception as exc:  # noqa: BLE001 — a bug here must not leave the caller waiting
                    failed = HealReport(healed=False, verified=False, detail=f"heal raised {exc.__class__.__name__}: {exc}")
                    for i in idx:
                        done.put((i, failed, failed))

        for n in range(min(FAN_OUT, len(groups))):
            threading.Thread(target=heal_groups, daemon=True, name=f"heal-{n}").start()
        while len(recorded) < len(handles):
            try:
                i, first, again = done.get(timeout=0.5)  # woken for the operator's Ctrl-C in between
            except queue.Empty:
                continue
            if i not in recorded:
                self._record_heal(handles[i], first, again)
                recorded.add(i)

    def _record_heal(self, handle: Handle, first: HealReport, again: HealReport | None) -> None:
        """One fault's heal in the history: what it watched, then healed (with the attempt),
        or a retry and, when the retry failed too, heal.failed."""
        target = handle.target
        for attempt, report in ((1, first), (2, again)):
            if report is None:
                break
            for seen in report.observations:  # what the fault watched on its node (ckpt.read)
                self.history.record(f"agent:{target.node}", seen.kind, t=seen.t, node=target.node, rank=seen.rank,
                                    **seen.data)
            if report.healed:
                self.history.record(HARNESS, "fault.heal", t=report.t, node=target.node, rank=target.rank,
                                    pid=target.pid, fault=handle.fault, healed=True, verified=report.verified,
                                    detail=report.detail, attempt=attempt)
                return
            if attempt == 1:
                self.history.record(HARNESS, "heal.retry", node=target.node, rank=target.rank, pid=target.pid,
                                    fault=handle.fault, detail=report.detail)
        self.history.record(HARNESS, "heal.failed", node=target.node, rank=target.rank, pid=target.pid,
                            fault=handle.fault, detail=(again or first).detail)
