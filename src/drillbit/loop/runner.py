"""The drill loop: open (preflight, launch, steady), one fault at a time (due, inject,
confirm, watch, settle), close (heal, teardown, check).

A run is a stream of faults (:class:`Step`), as in Jepsen's generators: a drill is the
stream of its one fault (:class:`OneFault`, due at its trigger, watched until recovery);
a campaign is a stream of many (``drillbit.runs.campaign.CampaignFaults``), each due at its
arrival, healed and measured before the next. The runner composes the parts and owns
their order; each part is its own module:
the schedule (trigger and targets), the nemesis (inject / confirm / heal, which always
heals), the watch (probes built from the job profile, and the progress view) and the
``recovered`` predicate of :mod:`drillbit.judging.checks.recovery`. The nodes (the executor, any
transport) and the probe factory are passed in, so the whole loop runs in tests against a
fake transport and a fake job.

Whatever happens after the agents start — a pass, an SLO breach, an abort, SIGINT or
SIGTERM, a harness bug — the nemesis heals and teardown stops the job, with SIGINT and
SIGTERM held back meanwhile; the nodes heal what is still active before they let go; and
each agent's dead-man's switch heals on its own if this process is killed outright.
"""
from __future__ import annotations

import contextlib
import json
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal, Protocol

import psutil

from drillbit.core.atomic import write_atomic
from drillbit.spec.checkpoints import SavedTier, tier_steps
from drillbit.judging.checks import CheckResult, check
from drillbit.judging.checks.baseline import Baseline
from drillbit.judging.checks.predict import predict
from drillbit.judging.checks.recovery import Measurements, awaiting, measure, recovered
from drillbit.core.errors import ConfigError, DrillError, Inconclusive, LeaseError
from drillbit.faults import get as get_fault
from drillbit.faults.base import Handle
from drillbit.judging.fleet.simulate import Scenario
from drillbit.core import events as ev
from drillbit.core.history import Event, History
from drillbit.core.lease import LEASE_WAIT, take
from drillbit.loop.agentlogs import AgentLogProbe
from drillbit.loop.logcheck import NamedLogs
from drillbit.loop.bind import job_checkpoint, job_params
from drillbit.loop.preflight import cautions, refusals
from drillbit.loop.nemesis import HARNESS, HealAbandoned, Nemesis
from drillbit.loop.schedule import JobExited, choose_targets, describe_trigger, wait_trigger
from drillbit.loop.stop import UNREADABLE_S, StopWatch
from drillbit.loop.watch import Probe, ProbeFactory, Progress, log_probes
from drillbit.judging.probes.preset import signals_of
from drillbit.judging.probes.logs import LogProbe
from drillbit.judging.probes.prometheus import PrometheusProbe
from drillbit.core.proc import ProcRef
from drillbit.core.pystacks import Hit, where_stuck
from drillbit.spec.config import ClusterSpec, JobProfile
from drillbit.spec.models import DrillSpec
from drillbit.transport.nodes import Nodes

ErrorKind = Literal["config", "busy", "inconclusive", "harness"]  # busy: another drill holds the lease


class Interrupted(BaseException):
    """SIGINT or SIGTERM reached the controller. Like KeyboardInterrupt, not an Exception: the
    signal handler raises it wherever the controller is — inside an in-process agent's handler
    too — and no ``except Exception`` on the way may turn the operator's stop into a harness
    error (a sweep once went on to its next drill after a SIGTERM that landed in ``confirm``)."""


class Aborted(DrillError):
    """A safeguard stopped the drill."""


POLL_SHARE = 4.0  # the observe phase's stop test waits this many times its last measurement's cost
LEAVE_WINDOW_S = 5.0  # a second Ctrl-C within this while healing leaves the faults in place


class UI(Protocol):
    def phase(self, name: str, detail: str = "") -> None: ...
    def status(self, text: str) -> None: ...
    def close(self) -> None: ...  # the drill is over: no live status may outlive it


class QuietUI:
    def phase(self, name: str, detail: str = "") -> None:
        pass

    def status(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


class Step(Protocol):
    """One fault of a run's stream: the drill it is measured as, and what the runner asks of
    it around the fault's inject and confirm."""

    spec: DrillSpec

    def due(self, runner: "DrillRunner") -> bool:
        """Wait until the fault is due; False ends the stream here (the job is gone)."""

    def watch(self, runner: "DrillRunner") -> None:
        """Watch the recovery from a confirmed fault."""

    def settle(self, runner: "DrillRunner", confirmed: bool) -> None:
        """After the watch: what the stream does before its next fault (heal it, measure it)."""


Stream = Callable[["DrillRunner"], Iterable[Step]]


class OneFault:
    """A drill's stream: its one fault, due at the trigger, watched until recovery, healed
    with the run's close."""

    def __init__(self, spec: DrillSpec) -> None:
        self.spec = spec

    def due(self, runner: "DrillRunner") -> bool:
        runner.wait_for_trigger()
        return True

    def watch(self, runner: "DrillRunner") -> None:
        runner.observe()

    def settle(self, runner: "DrillRunner", confirmed: bool) -> None:
        pass


@dataclass
class RunOutcome:
    run_dir: Path
    history: History
    result: CheckResult
    targets: list[ProcRef] = field(default_factory=list)
    handles: list[Handle] = field(default_factory=list)
    error: str | None = None
    error_kind: ErrorKind | None = None
    started_at: float = 0.0
    finished_at: float = 0.0
    leased: bool = False  # the drill held the cluster's lease; False: it touched nothing on the cluster


class DrillRunner:
    def __init__(self, spec: DrillSpec, cluster_name: str, cluster: ClusterSpec, job_name: str,
                 job: JobProfile, run_dir: Path, ui: UI | None = None, *, nodes: Nodes,
                 probes: ProbeFactory | None = None, baseline: Baseline | None = None,
                 scenarios: dict[str, Scenario] | None = None, heal_timeout: float = 60.0) -> None:
        self.spec = spec
        self.cluster_name = cluster_name
        self.cluster = cluster
        self.job_name = job_name
        self.job = job
        self.run_dir = run_dir
        self.ui = ui or QuietUI()
        self.baseline = baseline
        self.scenarios = scenarios or {}
        self.history = History(run_dir / "history.jsonl")
        self.nodes = nodes
        # the probes of the drill: None, the job profile's own (its logs, read by the agents on
        # their nodes where the cluster says so); a test gives a factory of its own
        self.make_probes = probes
        self.heal_timeout = heal_timeout
        self.handles: list[Handle] = []  # every fault's, in the order they were injected
        self.use(spec)
        self.progress = Progress(self.history, self.tick)
        self.launched: Any = None  # the job the drill started (NodeJobs, a Slurm job), if it did
        self.attached: ProcRef | None = None
        self.probes: list[Probe] = []
        self.targets: list[ProcRef] = []
        self._deadline = 0.0
        self._holding = False  # SIGINT/SIGTERM held back while healing
        self.stopwatch: StopWatch | None = None  # abort.when, once armed
        self.held_signals: list[tuple[float, str]] = []
        self._closing_error: str | None = None  # the first error in giving a resource back
        self.leased = False  # the cluster's lease was taken (before it, nothing on the cluster was touched)

    # --- helpers -------------------------------------------------------------------------
    def record(self, kind: str, **data: Any) -> Event:
        return self.history.record(HARNESS, kind, **data)

    def job_exit_code(self) -> int | None:
        if self.launched is not None:
            return self.launched.exit_code()
        if self.attached is not None and self.nodes.local and not self.attached.alive():
            return -1
        return None

    def tick(self, delay: float = 0.1) -> None:
        if time.time() > self._deadline:
            raise Aborted(f"max_duration of {self.spec.abort.max_duration:g} s reached")
        if self.stopwatch is not None and self.stopwatch.fired is not None:
            raise Aborted(self.stopwatch.fired)
        if self.nodes.problem is not None:
            raise Aborted(self.nodes.problem)
        time.sleep(delay)

    def _signal(self, signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        if not self._holding:
            raise Interrupted(f"interrupted by {name}")
        now = time.time()
        self.held_signals.append((now, name))
        earlier = [t for t, _ in self.held_signals[:-1] if now - t <= LEAVE_WINDOW_S]
        if earlier and self.nemesis.healing:
            raise HealAbandoned(f"{name} twice while healing: the operator chose to leave the faults in place")
        print(f"drillbit: healing — {name} is held until the faults are undone; press Ctrl-C again within "
              f"{LEAVE_WINDOW_S:g} s to leave them in place (their agents' dead-man's switches will still heal "
              "them, and `drill heal RUN_DIR` can)", file=sys.stderr)

    def use(self, spec: DrillSpec) -> None:
        """Measure what follows as this drill: its fault, bound to the job profile, with a
        nemesis of its own (a campaign's next fault)."""
        self.spec = spec
        self.fault = get_fault(spec.fault.type)
        self.params = job_params(spec, self.job, self.run_dir)
        self.nemesis = Nemesis(self.nodes, spec.fault.type, self.fault, self.params, self.history, self.heal_timeout)

    # --- the loop ------------------------------------------------------------------------
    def run(self, faults: Stream | None = None) -> RunOutcome:
        """Open, the stream's faults one at a time (a drill's own one by default), close.
        Each resource is a context manager that gives it back beside where it is taken (held
        signals, the lease, the agents, the faults, the job, the probes), all on one
        ExitStack: however the drill ends, its ending is recorded first, then the resources
        are given back in the reverse order they were taken, each even when one before it
        failed (:meth:`_phase`)."""
        started = time.time()
        self._deadline = started + self.spec.abort.max_duration
        self.record("drill.start", drill=self.spec.name, cluster=self.cluster_name, job=self.job_name,
                    fault=self.spec.fault.type)
        self.nodes.attach(self.history)
        error: str | None = None
        kind: ErrorKind | None = None
        with contextlib.ExitStack() as stack:
            stack.enter_context(self._signals_held())
            stack.callback(self._after_close)
            try:
                self._drill(stack, faults)
            except Exception as exc:
                error, kind = self._ended_by(exc)
            except Interrupted as exc:  # not an Exception (like KeyboardInterrupt)
                self.record("abort", reason=str(exc))
            self._holding = True  # from here on, a Ctrl-C waits for the heal
        if error is None and self._closing_error is not None:
            error, kind = self._closing_error, "harness"
        self.record("drill.end", error=error, error_kind=kind)
        self.history.close()
        self.ui.close()  # a game day's next prompt must not sit behind this drill's spinner
        result = check(self.spec, self.history, baseline=self.baseline, scenarios=self.scenarios)
        return RunOutcome(run_dir=self.run_dir, history=self.history, result=result, targets=self.targets,
                          handles=self.handles, error=error, error_kind=kind, started_at=started,
                          finished_at=time.time(), leased=self.leased)

    def _drill(self, stack: contextlib.ExitStack, faults: Stream | None) -> None:
        """Each resource as it is taken (its giving back on ``stack``), then the job's steady
        state and its faults."""
        stack.enter_context(self._cluster())
        stack.enter_context(self._faults_healed())
        stack.enter_context(self._job_running())
        stack.enter_context(self._probes_reading())
        stack.enter_context(self._healed_while_running())
        if self.stopwatch is not None:
            self.stopwatch.start()
        self.steady()
        if self.stopwatch is not None:
            self.stopwatch.counting = True  # the job is up: its brakes may go live
        for step in (faults or (lambda _runner: [OneFault(self.spec)]))(self):
            if not self.one_fault(step):
                break

    def _phase(self, phase: str, action: Callable[[], object]) -> None:
        """One giving back: an error is recorded (the first is the drill's, as a harness
        error) and the ones after it still run."""
        try:
            action()
        except Exception as exc:
            text = f"{phase}: {exc.__class__.__name__}: {exc}"
            self.record("harness.error", phase=phase, detail=text)
            self._closing_error = self._closing_error or text

    @contextlib.contextmanager
    def _signals_held(self) -> Iterator[None]:
        """SIGINT and SIGTERM go to the drill (held back while a heal runs), and back to
        whoever had them when it ends."""
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        for s in previous:
            signal.signal(s, self._signal)
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    @contextlib.contextmanager
    def _cluster(self) -> Iterator[None]:
        """The cluster: checked (preflight), leased for this drill alone (queued behind another
        drill's lease where ``--wait`` asks), an agent started on every node; at the end the
        agents closed (each checked to hold no fault), then the lease given back. Closing runs
        whatever got this far (an engine may have started something before it failed)."""
        lease = None
        try:
            self.preflight()
            asked = time.time()
            holder = f"drill {self.spec.name} ({self.run_dir.name})"
            lease = take(lambda: self.nodes.acquire(holder), LEASE_WAIT.get(), lambda text: self.ui.phase("lease", text))
            self.leased = True
            self._deadline += time.time() - asked  # abort.max_duration counts from the lease, not the queue
            try:
                self.nodes.start(ProcRef.of(psutil.Process()))
            finally:
                self._record_notes()
            yield
        finally:
            self._phase("close", self._close)
            if lease is not None:
                self._phase("lease", lease.release)

    @contextlib.contextmanager
    def _faults_healed(self) -> Iterator[None]:
        """Every fault injected healed, the ones that wait for the job to stop too (given back
        after the job: a fault whose heal is ``after_job``)."""
        try:
            yield
        finally:
            self._phase("heal", self.nemesis.heal)

    @contextlib.contextmanager
    def _job_running(self) -> Iterator[None]:
        """The job launched (or attached to), and stopped at the end if the drill launched it."""
        try:
            self.launch()
            yield
        finally:
            self._phase("teardown", self.stop_job)

    @contextlib.contextmanager
    def _probes_reading(self) -> Iterator[None]:
        """The job's signals read (its logs, here or by the agents; the engine's own; Prometheus)."""
        try:
            self.start_probes()
            yield
        finally:
            self._phase("teardown", self.stop_probes)

    @contextlib.contextmanager
    def _healed_while_running(self) -> Iterator[None]:
        """The faults healed first while the job still runs (a frozen rank thawed before its job
        is stopped), a Ctrl-C held from then on."""
        try:
            yield
        finally:
            self._holding = True
            self.ui.phase("heal", f"{len(self.handles)} fault(s) injected")
            self._phase("heal", lambda: self.nemesis.heal(job_running=self.launched is not None))

    def _ended_by(self, exc: Exception) -> tuple[str | None, ErrorKind | None]:
        """How the drill ended early, recorded: the error and its kind (None for an abort)."""
        if isinstance(exc, Aborted):
            self.record("abort", reason=str(exc))
            return None, None
        if isinstance(exc, Inconclusive):
            self.record("inconclusive", reason=str(exc))
            return str(exc), "inconclusive"
        if isinstance(exc, LeaseError):  # another drill holds the cluster: nothing was touched
            self.record("abort", reason=f"busy: {exc}")
            return str(exc), "busy"
        if isinstance(exc, ConfigError):
            self.record("abort", reason=f"config error: {exc}")
            return str(exc), "config"
        if isinstance(exc, DrillError):
            self.record("abort", reason=f"harness error: {exc}")
            return str(exc), "harness"
        # a harness bug: still heal, record, report
        error = f"{exc.__class__.__name__}: {exc}"
        self.record("abort", reason=f"harness error: {error}",
                    where=traceback.format_exception(exc)[-3:] if not isinstance(exc, RecursionError)
                    else traceback.format_exception(exc, limit=12))
        return error, "harness"

    def _after_close(self) -> None:
        # after teardown: a Ctrl-C held while the job was being stopped counts too (a suite,
        # a repeat or a comparison stops after this drill)
        for t, name in self.held_signals:
            self.history.record(HARNESS, "interrupt.held", t=t, signal=name)
        if self.stopwatch is not None:
            self.stopwatch.stop()

    def _close(self) -> None:
        try:
            self.nodes.close()
        finally:
            self._record_notes()

    def _record_notes(self) -> None:
        """What the nodes learned (agents ready, clock offsets) or their switches did: the
        nodes record it into the drill's history themselves (Nodes.attach); this only makes
        sure nothing waits."""
        self.nodes.flush()

    def preflight(self) -> None:
        self.ui.phase("preflight", f"cluster {self.cluster_name}, job {self.job_name}")
        # the same refusals drill probe shows as "ready" (loop/preflight.py)
        refused = refusals(self.spec, self.job, self.job_name, self.cluster, self.cluster_name, self.nodes,
                           self.run_dir)
        if refused:
            raise ConfigError("; ".join(refused))
        for caution in cautions(self.job, self.job_name):
            self.ui.phase("preflight", f"warning: {caution}")
        self.nodes.allowed_hosts = self.cluster.allowed_hosts  # checked at each agent's handshake
        if self.nodes.launches(self.job) is None and self.job.attach_pid is not None:
            self.attached = self.nodes.attach_root(self.job.attach_pid, self.job.attach_start_time)
        if self.spec.abort.when:  # read once before anything is touched: a brake that does not work is refused
            assert self.cluster.prometheus is not None
            self.stopwatch = StopWatch(self.spec.abort.when, self.cluster.prometheus, self.spec.abort.check_every,
                                       self.history, counting=False)
            self.stopwatch.check_ready()
        prediction = predict(self.fault.seen_by(self.params), self.fault.verb, self.job.timeouts, self.spec.slo)
        if prediction is not None:  # from the job's declared timeouts, before anything runs
            self.record("predicted", **prediction.model_dump())

    def launch(self) -> None:
        launches = self.nodes.launches(self.job)
        if launches is not None:
            self.ui.phase("launch", launches)
            try:
                self.launched = self.nodes.launch(self.job)
            finally:
                self._record_notes()  # what the engine did to launch (a submission, agents in the job)
            self.record("job.launch", pid=self.launched.pid,
                        command=self.job.launch.command if self.job.launch else None, reads=self._reads(),
                        **({"job_id": self.launched.job_id} if self.launched.job_id else {}),
                        **({"contained": self.launched.contained} if getattr(self.launched, "contained", None) else {}))
        else:
            self.ui.phase("launch", f"attaching to pid {self.job.attach_pid}")
            self.record("job.attach", pid=self.job.attach_pid, reads=self._reads())

    def start_probes(self) -> None:
        if self.make_probes is None and self.cluster.logs_on_agents and self._reads_steps():
            self.probes = [AgentLogProbe(self.history, self.nodes, self.job)]
        else:
            make = self.make_probes or log_probes
            self.probes = make(self.history, self.job, self.nodes.log_paths(self.job), self.nodes.values)
        self.probes += self.nodes.probes(self.history)
        by_url: dict[str, list] = {}
        for sig in self.job.prometheus:
            by_url.setdefault(sig.url or self.cluster.prometheus or "", []).append(sig)
        self.probes += [PrometheusProbe(self.history, url, sigs) for url, sigs in by_url.items()]
        for probe in self.probes:
            probe.start()

    def _reads(self) -> list[str]:
        """The event kinds the job's signals can produce: a check that needs a kind the profile
        cannot read says unknown, not fail."""
        return sorted({s.kind for s in signals_of(self.job.presets, self.job.signals)})

    def _reads_steps(self) -> bool:
        """Steps come from log lines (the agents can read them where they are written); a job
        that shows progress only through its heartbeat file is read by the controller."""
        return any(s.kind == "step" for s in signals_of(self.job.presets, self.job.signals))

    def steady(self) -> None:
        want, members = self.spec.steady.warmup_steps, self.spec.steady.members
        self.ui.phase("steady", f"waiting for {want} steps" + (f" and {members} members" if members else ""))
        limit = time.time() + self.spec.steady.timeout
        named = NamedLogs(self.job, self.nodes, self.probes, self.run_dir, self.attached)
        while self.progress.advances() < want or self._members_short(members):
            named.check(stepped=bool(self.progress.steps))  # a log never written: exit 2 within logs_grace
            code = self.job_exit_code()
            if code is not None:
                self.record("job.exit", code=code)
                raise Inconclusive(f"the job exited (code {code}) before steady state ({len(self.progress.steps)} steps)")
            if time.time() > limit:
                if self.progress.advances() >= want:
                    raise Inconclusive(f"no steady state: {len(self.progress.steps)} steps in "
                                       f"{self.spec.steady.timeout:g} s, but {self._members_short(members)}")
                why = "; ".join(said for said in (p.explain() for p in self.probes) if said)
                raise Inconclusive(f"no steady state: {len(self.progress.steps)} steps in {self.spec.steady.timeout:g} s "
                                 f"(presets {self.job.presets}, {len(self.job.signals)} signal(s) of the profile's own"
                                 + (f"; {why}" if why else "") + ")")
            self.tick()
        baseline, step = self.progress.baseline(want)
        self.record("steady", baseline_step_s=round(baseline, 6), step=step)
        self.ui.status(f"baseline {baseline * 1000:.0f} ms/step")

    def _members_short(self, want: int | None) -> str:
        """What the newest membership lacks of ``want`` members ('' when it holds them, or none is asked)."""
        if want is None:
            return ""
        newest = self.history.last("members")
        have = len(ev.Members.of(newest).members) if newest is not None else 0
        if have >= want:
            return ""
        by = f" ({ev.Members.of(newest).by})" if newest is not None and ev.Members.of(newest).by else ""
        return (f"the newest membership{by} held {have} of the {want} members steady.members asks for"
                if newest is not None else f"no membership was printed (steady.members asks for {want})")

    def one_fault(self, step: Step) -> bool:
        """One fault of the stream: due, targets, inject, confirm, watch, settle. False: the
        stream ends here."""
        if step.spec is not self.spec:
            self.use(step.spec)
        if not step.due(self):
            return False
        # what the fault takes from the profile, with the values the job was launched with
        self.params = self.nemesis.params = job_params(self.spec, self.job, self.run_dir, self.nodes.node_launch_values())
        # every rank as the fault found them: attribution maps a pid the stack blames to its rank
        self.targets = choose_targets(self.nodes, self.job, self.spec, self.attached, self.fault.max_targets,
                                      found=lambda ranks: self.record("job.ranks", ranks=[
                                          {"rank": r.rank, "pid": r.pid, "node": r.node} for r in ranks]),
                                      on_nodes=self.fault.target_nodes(self.params))
        label = getattr(step, "label", "")
        self.ui.phase("inject", f"{label}{self.spec.fault.type} on rank(s) "
                                f"{', '.join(str(t.rank) for t in self.targets)}")
        if self.job.tiers and not self.cluster.logs_on_agents:  # what each tier held when the fault hit
            saved = {name: t.lost_with for name, t in self.job.tiers.items() if isinstance(t, SavedTier)}
            self.record("ckpt.tiers", tiers=tier_steps(self.job.tiers, {"run_dir": str(self.run_dir)}),
                        **({"saved": saved} if saved else {}))
        self._await_live_brakes()
        self._read_logs_to_the_end()
        try:
            self.nemesis.inject(self.targets)
        finally:
            self.handles += self.nemesis.handles
        confirmed = self.nemesis.confirm(self.progress)
        if confirmed:
            step.watch(self)
        step.settle(self, confirmed)
        return True

    def _read_logs_to_the_end(self) -> None:
        """Read the job's logs on this machine to their end now, just before the fault: a line
        without a time of its own is stamped when it is read, and one the job wrote just
        before the fault could otherwise be stamped after it (a DLRover save of the step after
        the trigger was read 56 ms after the kill was confirmed). The agents' tails read on
        their nodes, on their own time."""
        for probe in self.probes:
            if isinstance(probe, LogProbe):
                probe.poll_once()

    def _await_live_brakes(self, limit_s: float = UNREADABLE_S) -> None:
        """No fault before every stop condition can brake: each must have read healthy since the
        steady state (StopWatch); up to ``limit_s`` for a scrape to catch up, else the drill is aborted
        with nothing injected."""
        if self.stopwatch is None or not self.stopwatch.not_live():
            return
        deadline = time.monotonic() + limit_s
        while self.stopwatch.not_live() and time.monotonic() < deadline:
            self.tick()
        if self.stopwatch.not_live():
            names = ", ".join(repr(n) for n in self.stopwatch.not_live())
            raise Aborted(f"stop condition {names} held since the steady state and never read healthy in the "
                          f"{limit_s:g} s before the fault, so it could not brake the drill: nothing was injected")

    def wait_for_trigger(self) -> None:
        """A drill's fault is due when its trigger fires (a step, a time, a save)."""
        trigger = self.spec.fault.trigger
        self.ui.phase("inject", f"waiting: {describe_trigger(trigger)}")
        try:
            wait_trigger(trigger, self.progress, self.job_exit_code, self._ckpt_dir_here(), self.fault.arms_on_save)
        except JobExited as exc:
            self.record("job.exit", code=exc.code)
            raise

    def _ckpt_dir_here(self) -> Path | None:
        """The job's checkpoint folder when this machine sees it (local clusters, a shared
        filesystem); None where only the nodes do — a during_save trigger then follows the
        save signal."""
        checkpoint = job_checkpoint(self.job, self.run_dir)
        if checkpoint is None or self.cluster.logs_on_agents:
            return None
        return Path(checkpoint.dir)

    def job_ended(self) -> int | None:
        """While a fault is watched: the job's exit code once it has ended (its logs read to
        their end first, and the exit recorded), else None."""
        code = self.job_exit_code()
        if code is not None:
            for probe in self.probes:
                probe.poll_once()
            self.record("job.exit", code=code)
        return code

    def observe(self) -> None:
        obs = self.spec.observe
        confirmed = self.history.first("fault.confirmed")
        assert confirmed is not None
        t0 = confirmed.t
        self.ui.phase("observe", f"until {obs.until_steps_after_recovery} steps after recovery, at most {obs.window:g} s")
        seen = -1
        m: Measurements | None = None
        due = 0.0  # when the stop test may measure again
        duration = self.spec.fault.duration
        while True:
            now = time.time()
            if duration is not None and now - t0 >= duration:
                duration = None
                self.record("fault.expire", after_s=self.spec.fault.duration)
                self.ui.phase("observe", f"the fault's {self.spec.fault.duration:g} s are over: healing, still watching")
                self.nemesis.heal()
            # judge again only when something new was recorded, and not before observe.at_least.
            # A measurement reads the whole history: one that took c seconds waits POLL_SHARE
            # for the next, so a fleet's thousands of lines a second cost the stop test at most a
            # fifth of a core, and it answers later the longer the history (the figures are the
            # events' own times, never the poll's)
            if now - t0 >= obs.at_least and len(self.history) != seen and time.monotonic() >= due:
                seen = len(self.history)
                began = time.monotonic()
                m = measure(self.history, poll=True)
                due = time.monotonic() + POLL_SHARE * (time.monotonic() - began)
                if recovered(self.history, obs.until_steps_after_recovery, m):
                    reason = "recovered"
                    break
            code = self.job_ended()
            if code is not None:
                reason = f"job exited with code {code}"
                break
            if now - t0 >= obs.window:
                reason = "window elapsed"
                break
            last = self.progress.last
            self.ui.status(f"+{now - t0:5.1f} s since fault · last step {ev.Step.of(last).n if last else '-'} · "
                           f"{self.progress.rate():.1f} steps/s · awaiting "
                           f"{awaiting(self.history, obs.until_steps_after_recovery, m)}")
            self.tick(0.2)
        self.record("observe.end", reason=reason)
        if reason == "window elapsed" and not recovered(self.history, obs.until_steps_after_recovery):
            self.dump_stacks(t0)  # the ranks stopped making progress, and that decides the drill: where?

    def dump_stacks(self, t_fault: float) -> None:
        """The live ranks' Python stacks (py-spy, by the agent on each rank's node), after the
        window (its time is not the job's) and before the heal and the teardown change them: stacks.json in the run
        folder, and a ``stacks``
        event with where the ranks of the attempt now running are stuck (pystacks.where_stuck)."""
        self.ui.phase("observe", "no recovery: dumping the live ranks' stacks")
        restarts = [e for e in self.history.of("restart") if e.t >= t_fault]
        attempt = max((a for e in restarts if (a := ev.Restart.of(e).attempt) is not None), default=len(restarts))
        try:
            ranks = self.nodes.find_ranks(self.job.ranks, self.attached)
            stacks = self.nodes.stacks(ranks)
        except DrillError as exc:
            self.record("stacks", attempt=attempt, where=f"the ranks' stacks could not be read: {exc}", ranks=[])
            return
        hit = self.fault_hit(ranks)
        write_atomic(self.run_dir / "stacks.json", json.dumps([s.model_dump() for s in stacks], indent=1))
        self.record("stacks", attempt=attempt, where=where_stuck(stacks, attempt, hit),
                    ranks=[{"rank": s.rank, "pid": s.pid, "node": s.node, "ok": s.ok, "error": s.error,
                            "hit": hit.of(s), "frames": [f.short() for f in s.main()[:12]]} for s in stacks])

    def fault_hit(self, ranks: list[ProcRef]) -> Hit:
        """Which of the live ``ranks`` the fault acted on (fault.plan's targets, named by pid and
        start time), and its verb (fault.confirmed's): the rank a stall stopped is named as such."""
        plan, confirmed = self.history.first("fault.plan"), self.history.first("fault.confirmed")
        targets = [ProcRef.model_validate(t) for t in ev.FaultPlan.of(plan).targets] if plan is not None else []
        verb = ev.FaultConfirmed.of(confirmed).verb if confirmed is not None else "hurt"
        return Hit.among(ranks, targets, verb)

    def stop_probes(self) -> None:
        for probe in self.probes:
            probe.stop()

    def stop_job(self) -> None:
        if self.launched is not None:
            self.ui.phase("teardown", "stopping the job")
            try:
                already = self.launched.exit_code()
            except Exception:
                already = None
            code = self.launched.stop()
            self.record("job.stop", code=code, exited_before=already is not None)
