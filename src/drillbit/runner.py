"""The drill loop: preflight, launch, steady, inject, observe, heal, teardown, check, report.

The runner owns the heal guarantee: whatever happens after the first injection — a
passing drill, an SLO breach, an abort, SIGINT/SIGTERM, a harness bug — ``heal`` and
``teardown`` run in ``finally``; and the agent's guardian heals on its own if this
process is killed outright. Every action and observation is recorded in the history as
it happens.
"""
from __future__ import annotations

import random
import signal
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import psutil

from drillbit.checks import CheckResult, check
from drillbit.checks.recovery import Measurements, measure
from drillbit.errors import DrillError
from drillbit.executors import make_executor
from drillbit.executors.cluster import expand
from drillbit.faults import get as get_fault
from drillbit.faults.base import Handle
from drillbit.history import Event, History
from drillbit.model.simulate import Scenario
from drillbit.probes.logs import EventsProbe, HeartbeatProbe, LogProbe, ProgressProbe
from drillbit.probes.preset import load as load_preset
from drillbit.proc import ProcRef
from drillbit.spec.config import ClusterSpec, JobProfile
from drillbit.spec.models import DrillSpec, Targets

HARNESS = "harness"


class Interrupted(DrillError):
    """SIGINT or SIGTERM reached the controller."""


class Aborted(DrillError):
    """A safeguard stopped the drill."""


class UI(Protocol):
    def phase(self, name: str, detail: str = "") -> None: ...
    def status(self, text: str) -> None: ...


class QuietUI:
    def phase(self, name: str, detail: str = "") -> None:
        pass

    def status(self, text: str) -> None:
        pass


@dataclass
class RunOutcome:
    run_dir: Path
    history: History
    result: CheckResult
    targets: list[ProcRef] = field(default_factory=list)
    handles: list[Handle] = field(default_factory=list)
    error: str | None = None
    started_at: float = 0.0
    finished_at: float = 0.0


def select_targets(ranks: list[ProcRef], targets: Targets) -> list[ProcRef]:
    pool = [r for r in ranks if r.rank not in set(targets.exclude_ranks) and r.node not in set(targets.exclude_nodes)]
    if targets.ranks is not None:
        wanted = set(targets.ranks)
        chosen = [r for r in pool if r.rank in wanted]
        missing = wanted - {r.rank for r in chosen}
        if missing:
            raise DrillError(f"target ranks {sorted(missing)} not found; the job has ranks "
                             f"{sorted(r.rank for r in ranks)}")
        return chosen
    if len(pool) < targets.count:
        raise DrillError(f"{targets.count} targets wanted but only {len(pool)} eligible ranks were found")
    if targets.select == "first":
        return pool[: targets.count]
    if targets.select == "last":
        return pool[-targets.count:]
    return sorted(random.Random(targets.seed).sample(pool, targets.count), key=lambda r: r.rank or 0)


class DrillRunner:
    def __init__(self, spec: DrillSpec, cluster_name: str, cluster: ClusterSpec, job_name: str,
                 job: JobProfile, run_dir: Path, ui: UI | None = None, *,
                 baseline: Measurements | None = None, scenarios: dict[str, Scenario] | None = None) -> None:
        self.spec = spec
        self.cluster_name = cluster_name
        self.cluster = cluster
        self.job_name = job_name
        self.job = job
        self.run_dir = run_dir
        self.ui = ui or QuietUI()
        self.baseline = baseline
        self.scenarios = scenarios or {}
        self.fault = get_fault(spec.fault.type)
        self.params = self.fault.Params.model_validate(spec.fault.params)
        for name in ("checkpoint_dir", "node_pool"):  # where the job keeps them, unless the spec says
            if getattr(self.params, name, "unset") is None and getattr(job, name):
                self.params = self.params.model_copy(update={name: expand(getattr(job, name), {"run_dir": str(run_dir)})})
        self.history = History(run_dir / "history.jsonl")
        self.executor = make_executor(cluster_name, cluster, run_dir)
        self.launched = None
        self.probes: list[LogProbe] = []
        self.handles: list[Handle] = []
        self.targets: list[ProcRef] = []
        self._deadline = 0.0
        self._steps: list[Event] = []
        self.history.subscribe(self._on_event)

    # --- helpers -------------------------------------------------------------------------
    def record(self, kind: str, **data: object) -> Event:
        return self.history.record(HARNESS, kind, **data)

    def _on_event(self, event: Event) -> None:
        if event.kind == "step":
            self._steps.append(event)

    def _last_step(self) -> Event | None:
        return self._steps[-1] if self._steps else None

    def _job_exited(self) -> int | None:
        if self.launched is not None:
            return self.launched.exit_code()
        if self.job.attach_pid is not None and not psutil.pid_exists(self.job.attach_pid):
            return -1
        return None

    def _tick(self, delay: float = 0.1) -> None:
        if time.time() > self._deadline:
            raise Aborted(f"max_duration of {self.spec.abort.max_duration:g} s reached")
        time.sleep(delay)

    # --- the loop ------------------------------------------------------------------------
    def run(self) -> RunOutcome:
        started = time.time()
        self._deadline = started + self.spec.abort.max_duration
        self.record("drill.start", drill=self.spec.name, cluster=self.cluster_name, job=self.job_name,
                    fault=self.spec.fault.type)
        error: str | None = None
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

        def interrupt(signum: int, _frame: object) -> None:
            raise Interrupted(f"interrupted by {signal.Signals(signum).name}")

        for s in previous:
            signal.signal(s, interrupt)
        lease = None
        try:
            self.preflight()
            lease = self.executor.acquire(f"drill {self.spec.name} ({self.run_dir.name})")
            try:
                self.executor.start(ProcRef.of(psutil.Process()))
            finally:
                self._record_notes()
            self.launch()
            self.steady()
            self.inject()
            if self.history.first("fault.confirmed") is not None:
                self.observe()
        except (Interrupted, Aborted) as exc:
            self.record("abort", reason=str(exc))
        except DrillError as exc:
            error = str(exc)
            self.record("abort", reason=f"harness error: {exc}")
        except Exception as exc:  # a harness bug: still heal, record, report
            error = f"{exc.__class__.__name__}: {exc}"
            self.record("abort", reason=f"harness error: {error}")
        finally:
            try:
                self.heal()
                self.teardown()
            finally:
                try:
                    self.executor.close()
                finally:
                    if lease is not None:
                        lease.release()
                for s, handler in previous.items():
                    signal.signal(s, handler)
        self.record("drill.end", error=error)
        self.history.close()
        result = check(self.spec, self.history, baseline=self.baseline, scenarios=self.scenarios)
        return RunOutcome(run_dir=self.run_dir, history=self.history, result=result, targets=self.targets,
                          handles=self.handles, error=error, started_at=started, finished_at=time.time())

    def _record_notes(self) -> None:
        """What the executor learned while starting (agents ready, clock offsets)."""
        for kind, data in self.executor.notes:
            self.record(kind, **data)
        self.executor.notes.clear()

    def preflight(self) -> None:
        self.ui.phase("preflight", f"cluster {self.cluster_name}, job {self.job_name}")
        if self.cluster.protected:
            raise DrillError(f"cluster {self.cluster_name!r} is protected; drills are refused there")
        if self.job.launch is None and self.job.attach_pid is None:
            raise DrillError(f"job profile {self.job_name!r} has neither launch nor attach_pid")
        if self.job.launch is not None and self.cluster.engine != "ray" and any(
                "{ray_address}" in a for a in self.job.launch.command):
            raise DrillError(f"job profile {self.job_name!r} runs on Ray; cluster {self.cluster_name!r} is "
                             f"engine {self.cluster.engine} (try --cluster local)")

    def launch(self) -> None:
        if self.job.launch is not None:
            self.ui.phase("launch", " ".join(self.job.launch.command))
            self.launched = self.executor.launch(self.job)
            self.record("job.launch", pid=self.launched.pid, command=self.job.launch.command)
        else:
            self.ui.phase("launch", f"attaching to pid {self.job.attach_pid}")
            self.record("job.attach", pid=self.job.attach_pid)
        logs = self.executor.log_paths(self.job)
        progress: LogProbe
        if self.job.heartbeat_file and not any(s.kind == "step" for p in self.job.presets for s in load_preset(p).signals):
            progress = HeartbeatProbe(self.history, Path(self.job.heartbeat_file.replace("{run_dir}", str(self.run_dir))))
        else:
            progress = ProgressProbe(self.history, logs, self.job.presets)
        self.probes = [progress, EventsProbe(self.history, logs, self.job.presets)]
        for probe in self.probes:
            probe.start()

    def steady(self) -> None:
        want = self.spec.steady.warmup_steps
        self.ui.phase("steady", f"waiting for {want} steps")
        limit = time.time() + self.spec.steady.timeout
        while len(self._steps) < want + 1:
            code = self._job_exited()
            if code is not None:
                self.record("job.exit", code=code)
                raise DrillError(f"the job exited (code {code}) before steady state ({len(self._steps)} steps)")
            if time.time() > limit:
                raise DrillError(f"no steady state: {len(self._steps)} steps in {self.spec.steady.timeout:g} s")
            self._tick()
        recent = self._steps[-(want + 1):]
        deltas = [b.t - a.t for a, b in zip(recent, recent[1:])]
        baseline = statistics.median(deltas)
        self.record("steady", baseline_step_s=round(baseline, 6), step=recent[-1].data["n"])
        self.ui.status(f"baseline {baseline * 1000:.0f} ms/step")

    def _wait_trigger(self) -> None:
        trig = self.spec.fault.trigger
        if trig.at_step is not None:
            self.ui.phase("inject", f"waiting for step {trig.at_step}")
            while True:
                last = self._last_step()
                if last is not None and last.data["n"] >= trig.at_step:
                    return
                code = self._job_exited()
                if code is not None:
                    self.record("job.exit", code=code)
                    raise DrillError(f"the job exited (code {code}) before the trigger step {trig.at_step}")
                self._tick(0.02)
        assert trig.after is not None
        self.ui.phase("inject", f"in {trig.after:g} s")
        until = time.time() + trig.after
        while time.time() < until:
            self._tick(0.05)

    def inject(self) -> None:
        self._wait_trigger()
        discovery = self.job.ranks
        if discovery.pidfiles:
            discovery = discovery.model_copy(update={"pidfiles": expand(discovery.pidfiles, {"run_dir": str(self.run_dir)})})
        ranks = self.executor.find_ranks(discovery, self.job.attach_pid)
        self.targets = select_targets(ranks, self.spec.fault.targets)
        plan = self.fault.plan(self.targets, self.params)
        self.record("fault.plan", action=plan.action, heal=plan.heal,
                    targets=[t.model_dump() for t in self.targets])
        self.ui.phase("inject", f"{self.spec.fault.type} on rank(s) {', '.join(str(t.rank) for t in self.targets)}")
        params = self.params.model_dump()
        for target in self.targets:
            t_call = time.time()
            handle = self.executor.inject(self.spec.fault.type, target, params)
            self.handles.append(handle)
            self.history.record(HARNESS, "fault.inject", t=t_call, node=target.node, rank=target.rank,
                                pid=target.pid, fault=self.spec.fault.type, params=params)
        evidence = [self.executor.confirm(h) for h in self.handles]
        if any(e is None for e in evidence):
            missing = [h.target.rank for h, e in zip(self.handles, evidence) if e is None]
            self.record("fault.unconfirmed", reason=f"no evidence of effect on rank(s) {missing}")
            return
        t_effect = max(e.t for e in evidence if e is not None)
        data = {"evidence": [e.model_dump() for e in evidence if e is not None], "expects": self.fault.expects}
        if self.fault.expects == "stall":
            quiet = self._confirm_stall(t_effect)
            if quiet is None:
                self.record("fault.unconfirmed", reason="the rank stopped but global progress did not stall")
                return
            data["progress_quiet_s"] = round(quiet, 3)
        self.history.record(HARNESS, "fault.confirmed", t=t_effect, **data)

    def _confirm_stall(self, t_effect: float) -> float | None:
        """Global progress stalls: no step for several baseline step times after the effect."""
        steady = self.history.first("steady")
        baseline = steady.data["baseline_step_s"] if steady else 0.5
        need = max(5 * baseline, 2.0)
        limit = time.time() + need + 10 * baseline + 5.0
        while time.time() < limit:
            last = self._last_step()
            since = time.time() - max(t_effect, last.t if last else t_effect)
            if since >= need:
                return since
            self._tick(0.05)
        return None

    def observe(self) -> None:
        obs = self.spec.observe
        confirmed = self.history.first("fault.confirmed")
        assert confirmed is not None
        t0 = confirmed.t
        self.ui.phase("observe", f"until {obs.until_steps_after_recovery} steps after recovery, at most {obs.window:g} s")
        while True:
            now = time.time()
            m = measure(self.history)
            recovered = m.time_to_straggler if m.expects == "slow" else m.time_to_first_step
            if recovered is not None and m.steps_after_recovery >= obs.until_steps_after_recovery:
                reason = "recovered"
                break
            code = self._job_exited()
            if code is not None:
                for probe in self.probes:
                    probe.poll_once()
                self.record("job.exit", code=code)
                reason = f"job exited with code {code}"
                break
            if now - t0 >= obs.window:
                reason = "window elapsed"
                break
            last = self._last_step()
            awaited = ("the straggler to be named" if m.expects == "slow" and m.time_to_straggler is None else
                       "detection" if m.time_to_detect is None and m.expects != "slow" else
                       "restart" if m.time_to_restart is None and m.time_to_first_step is None else
                       "first step after recovery" if m.time_to_first_step is None else
                       f"{obs.until_steps_after_recovery - m.steps_after_recovery} more steps")
            recent = [e for e in self._steps[-50:] if e.t >= now - 5.0]
            rate = len(recent) / 5.0
            self.ui.status(f"+{now - t0:5.1f} s since fault · last step {last.data['n'] if last else '-'} · "
                           f"{rate:.1f} steps/s · awaiting {awaited}")
            self._tick(0.2)
        self.record("observe.end", reason=reason)

    def heal(self, timeout: float = 60.0) -> None:
        """Heal every active fault. Each heal runs with a deadline, so one that blocks cannot
        keep teardown from stopping the job; it is recorded as a failed heal instead."""
        active = self.executor.active()
        self.ui.phase("heal", f"{len(active)} active fault(s)")
        for handle in active:
            box: list = []
            worker = threading.Thread(target=lambda h=handle: box.append(self.executor.heal(h)), daemon=True)
            worker.start()
            worker.join(timeout)
            if not box:
                self.record("heal.failed", rank=handle.target.rank, pid=handle.target.pid,
                            detail=f"the heal did not finish in {timeout:g} s")
                continue
            report = box[0]
            self.history.record(HARNESS, "fault.heal", t=report.t, node=handle.target.node, rank=handle.target.rank,
                                pid=handle.target.pid,
                                healed=report.healed, verified=report.verified, detail=report.detail)
        left = self.executor.active()
        if left:
            self.record("heal.failed", faults=[h.model_dump() for h in left])

    def teardown(self) -> None:
        for probe in self.probes:
            probe.stop()
        if self.launched is not None:
            self.ui.phase("teardown", "stopping the job")
            already = self.launched.exit_code()
            code = self.launched.stop()
            self.record("job.stop", code=code, exited_before=already is not None)

