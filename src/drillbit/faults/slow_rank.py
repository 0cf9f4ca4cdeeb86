"""slow-rank (fail-slow): slow one rank by a given percentage without a GPU.

A duty cycle of SIGSTOP/SIGCONT: in every period the rank is stopped for a fraction
f = s / (1 + s) of it, so work that only progresses while the rank runs takes (1 + s) times
as long. The cycler measures the stop fraction it actually achieved, and that is the
fault's proof of effect. BLOOM's bad node was ~2.4% slow in its own benchmark and cost
the job 5.4% (bigscience train/tr11-176B-ml/chronicles.md, 2022-04-28); a fleet-relative detector has to see 3%.

Heal stops the cycler and sends a final SIGCONT (through a pidfd, to the same pid and
start time), then verifies the rank runs. If the controller dies, the cycler thread dies
with it and the dead-man's switch sends the SIGCONT. The cycler belongs to the fault
instance the agent keeps while the fault is active (no module globals).
"""
from __future__ import annotations

import signal
import threading
import time

from pydantic import Field

from drillbit.core.evidence import Slowed
from drillbit.faults.base import Evidence, Fault, HealReport, Params, Plan, State
from drillbit.faults.hang_collective import resume
from drillbit.core.proc import ProcRef


class SlowParams(Params):
    slowdown: float = Field(0.03, gt=0, le=4.0, description="0.03 = the rank runs 3% slower")
    period_ms: float = Field(100.0, ge=10, le=5000)
    confirm_s: float = Field(3.0, gt=0, description="how long the achieved duty cycle is measured for")


class _Cycler(threading.Thread):
    def __init__(self, target: ProcRef, stop_fraction: float, period: float) -> None:
        super().__init__(daemon=True, name=f"slow-rank-{target.pid}")
        self.target, self.fraction, self.period = target, stop_fraction, period
        self.halt = threading.Event()
        self.stopped_s = 0.0
        self.started = time.perf_counter()
        self.started_wall = time.time()
        self.lost = False

    def run(self) -> None:
        next_cycle = time.perf_counter()
        while not self.halt.is_set():
            t0 = time.perf_counter()
            if not self.target.send(signal.SIGSTOP):
                self.lost = True
                return
            # integral control: stop for what keeps the running stop fraction on target, so
            # signal and sleep overshoot do not add up to a larger slowdown than asked for
            owed = self.fraction * (t0 - self.started + self.period) - self.stopped_s
            time.sleep(min(max(owed, 0.0), self.period))
            self.target.send(signal.SIGCONT)
            self.stopped_s += time.perf_counter() - t0
            next_cycle += self.period
            self.halt.wait(max(0.0, next_cycle - time.perf_counter()))

    def achieved(self) -> float:
        return self.stopped_s / max(time.perf_counter() - self.started, 1e-9)


class SlowState(State):
    stop_fraction: float
    started_at: float


class SlowRank(Fault[SlowParams, SlowState]):
    """The duty cycle runs in a thread owned by this fault instance; the agent keeps the
    instance for as long as the fault is active."""

    name = "slow-rank"
    needs = ("to signal the job's processes: the job's user, or root")
    blast_radius = ('one rank, stopped and continued on a duty cycle until the heal')
    evidence = (Slowed,)
    verb = "slowed"
    fault_class = "fail-slow"
    Params = SlowParams
    State = SlowState
    expects = "slow"

    def __init__(self, scratch=None) -> None:
        super().__init__(scratch)
        self._cycler: _Cycler | None = None

    def plan(self, targets: list[ProcRef], params: SlowParams) -> Plan:
        f = params.slowdown / (1 + params.slowdown)
        return Plan(fault=self.name, targets=targets,
                    action=f"SIGSTOP for {f * params.period_ms:.1f} ms of every {params.period_ms:g} ms "
                           f"(a {params.slowdown:.1%} slowdown)",
                    heal="stop the duty cycle, SIGCONT, verify the rank runs")

    def prepare(self, target: ProcRef, params: SlowParams) -> SlowState:
        return SlowState(stop_fraction=params.slowdown / (1 + params.slowdown), started_at=0.0)

    def act(self, target: ProcRef, params: SlowParams, intent: SlowState) -> SlowState:
        self._cycler = _Cycler(target, intent.stop_fraction, params.period_ms / 1000.0)
        self._cycler.start()
        return intent.model_copy(update={"started_at": self._cycler.started_wall})

    def confirm(self, target: ProcRef, params: SlowParams, state: SlowState) -> Evidence | None:
        cycler = self._cycler
        if cycler is None:
            return None
        time.sleep(params.confirm_s)
        achieved = cycler.achieved()
        if cycler.lost or achieved <= 0:
            return None
        # the effect starts with the first SIGSTOP, not when the measurement ends
        return Evidence(t=state.started_at, what="duty cycle running", data={
            "target_slowdown": params.slowdown,
            "stop_fraction_target": round(state.stop_fraction, 5),
            "stop_fraction_achieved": round(achieved, 5),
            "slowdown_achieved": round(achieved / (1 - achieved), 5) if achieved < 1 else None,
        })

    def heal(self, target: ProcRef, params: SlowParams, state: SlowState) -> HealReport:
        cycler, self._cycler = self._cycler, None
        detail = ""
        if cycler is not None:
            cycler.halt.set()
            cycler.join(timeout=5)
            detail = f"duty cycle stopped after {cycler.stopped_s:.2f} s stopped ({cycler.achieved():.2%}); "
        report = resume(target)
        return report.model_copy(update={"detail": detail + report.detail})
