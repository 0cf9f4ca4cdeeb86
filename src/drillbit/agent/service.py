"""AgentService: one node's agent behind the method table of :mod:`drillbit.agent.api`.

:meth:`AgentService.dispatch` is the only door: it looks the method up in ``METHODS``,
validates the request against its model, calls the handler of that name and returns an
:class:`~drillbit.agent.api.Envelope` as plain data. Every transport calls it and nothing
else; an unknown method or a malformed request is refused, and the agent lives on.

The service holds the NodeAgent, the job it launched on its node, the cluster lease (SSH)
and the heartbeat side of the dead-man's switch: once armed, a controller that sends no
heartbeat for ``deadman_s`` is taken for gone and :func:`drillbit.agent.deadman.orphan`
runs here; ``on_orphaned`` is called after (a Ray actor exits there). ``skew_s`` shifts
every time this agent reports, to test the controller's clock-offset correction.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable

import psutil

import drillbit
from drillbit.agent import api
from drillbit.agent.deadman import DeadmanLog, orphan, read_records
from drillbit.agent.jobproc import LaunchedJob, free_port, start_job
from drillbit.agent.logtail import LogTail
from drillbit.judging.probes.tail import folder_listing
from drillbit.agent.node import NodeAgent
from drillbit.core.errors import ConfigError, LeaseError
from drillbit.faults import get as get_fault
from drillbit.faults import registry as fault_registry
from drillbit.faults.base import HealReport
from drillbit.core.lease import Lease
from drillbit.core.proc import ProcRef
from drillbit.core import pystacks
from drillbit.core.slurm.scheduler import job_processes
from drillbit.core.statedir import private_dir


class AgentService:
    def __init__(self, node: str, state_dir: str | Path, *, skew_s: float = 0.0, version: str | None = None,
                 node_id: str | None = None, slurm_job: str | None = None, scheduler: bool = False) -> None:
        self.node = node
        self.scheduler = scheduler  # acts through the cluster's scheduler: node faults only, on the job's nodes
        self.slurm_job = slurm_job  # an agent inside a Slurm job's allocation: the job's processes here
        self.state_dir = private_dir(state_dir)  # refused if someone else could plant a registry there
        self.agent = NodeAgent(node, self.state_dir / f"agent-{node}.json")
        self.agent.node_id = node_id
        self.skew_s = skew_s
        self.version = version or drillbit.__version__  # a test may pretend to be another release
        self._job: LaunchedJob | None = None
        self._found: set[tuple[int, float]] = set()  # (pid, start time) of every rank discovered this drill
        self._lease: Any = None
        self._tail: LogTail | None = None
        self._beat = time.time()
        self._armed: api.Arm | None = None
        self._stop = threading.Event()
        self.orphaned = threading.Event()
        self.on_orphaned: Callable[[], None] = lambda: None
        self._handlers: dict[str, Callable[[Any], api.Message]] = {
            name: getattr(self, f"_{name}") for name in api.METHODS}
        self._monitor = threading.Thread(target=self._watch, name="deadman", daemon=True)
        self._monitor.start()

    # --- the one door --------------------------------------------------------------------
    def dispatch(self, method: Any, payload: Any) -> dict[str, Any]:
        parsed = api.parse_request(method, payload)
        if isinstance(parsed, api.RemoteError):
            return api.Envelope(error=parsed).model_dump(mode="json")
        spec, request = parsed
        try:
            reply = self._handlers[method](request)
        except Exception as exc:  # the error goes back to the controller; the agent lives on
            return api.Envelope(error=remote_error(exc)).model_dump(mode="json")
        assert isinstance(reply, spec.reply), f"{method} answered {type(reply).__name__}"
        return api.Envelope(ok=reply.model_dump(mode="json")).model_dump(mode="json")

    # --- time and liveness ---------------------------------------------------------------
    def clock(self) -> float:
        return time.time() + self.skew_s

    def _info(self, req: api.InfoRequest) -> api.Info:
        if req.controller_version is not None and req.controller_version != self.version:
            raise Refused(f"version mismatch: the controller runs drillbit {req.controller_version}, this agent "
                          f"on {self.node} runs drillbit {self.version}; install the same version on both")
        return api.Info(node=self.node, pid=os.getpid(), host=socket.gethostname(), t=self.clock(),
                        version=self.version, protocol=api.PROTOCOL, faults=sorted(fault_registry()))

    def _clock(self, req: api.Empty) -> api.Clock:
        return api.Clock(t=self.clock())

    def _heartbeat(self, req: api.Empty) -> api.Clock:
        self._beat = time.time()
        return api.Clock(t=self.clock())

    def _arm(self, req: api.Arm) -> api.Empty:
        self._beat = time.time()
        self._armed = req
        self.agent.arm(ProcRef.of(psutil.Process()), req.job_grace_s, req.offset_s, req.deadman_s)
        return api.Empty()

    def _disarm(self, req: api.Empty) -> api.Empty:
        held = self.agent.active()
        if held:  # the switch stays armed for what is not healed: its guardian retries until it is
            raise Refused(f"not disarmed: {len(held)} fault(s) still active ({', '.join(h.fault for h in held)}); "
                          "the dead-man's switch keeps healing them, or `drill heal --abandon REASON` gives them up")
        self._armed = None
        self.agent.disarm()
        return api.Empty()

    def shutdown(self) -> None:
        """The controller is done with this agent: a job it launched does not outlive it."""
        self._armed = None
        self._stop.set()
        if self._tail is not None:
            self._tail.stop()
            self._tail = None
        if self._job is not None and not self._job.stopped:  # exited, it may still have left strays
            self._stop_job(api.StopJob(timeout=20.0))
        self.agent.disarm()

    def lapse(self) -> None:
        """The controller's channel closed: no heartbeat will come again."""
        self._beat = 0.0

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            armed = self._armed
            if armed is not None and time.time() - self._beat > armed.deadman_s:
                self._armed = None
                silent = time.time() - self._beat
                log = DeadmanLog(self.agent.log_path, self.node, armed.offset_s, self.clock)
                orphan(log, f"no heartbeat for {silent:.1f} s (deadman {armed.deadman_s:g} s)",
                       self.agent.pending, self._heal_reported, job_running=self._job_running,
                       stop_job=lambda: self._stop_job(api.StopJob(timeout=20.0)).code,
                       job_grace_s=armed.job_grace_s, wait=self._stop.wait, stopped=self._stop.is_set)
                self.agent.disarm()  # done, unless a fault is still held: then the guardian keeps it
                self.orphaned.set()
                self.on_orphaned()

    def _heal_reported(self, handle):  # agent-clock times, as the records expect
        return self._skewed(self.agent.heal(handle))

    def _skewed(self, report: HealReport) -> HealReport:
        seen = [o.model_copy(update={"t": o.t + self.skew_s}) for o in report.observations]
        return report.model_copy(update={"t": report.t + self.skew_s, "observations": seen})

    def _records(self, req: api.Empty) -> api.Records:
        return api.Records(records=read_records(self.agent.log_path))

    # --- the job on this node ------------------------------------------------------------
    def _launch(self, req: api.Launch) -> api.Launched:
        if self._job is not None and self._job.exit_code() is None:
            raise Refused(f"a job launched by this agent is still running (pid {self._job.pid})")
        if self._job is not None and not self._job.stopped:
            self._stop_job(api.StopJob(timeout=2.0))  # what the last one left in its cgroup, and the cgroup
        self._job = start_job(req.argv, req.env, req.cwd, req.out_path, stop_timeout=req.stop_timeout, node=self.node)
        self.agent.register_job(self._job.ref, self._job.mark, self._job.cgroup)
        return api.Launched(proc=self._job.ref, contained=self._job.contained)

    def _job_running(self) -> bool:
        return self._job is not None and self._job.exit_code() is None

    def _job_status(self, req: api.Empty) -> api.JobStatus:
        return api.JobStatus(code=None if self._job is None else self._job.exit_code())

    def _stop_job(self, req: api.StopJob) -> api.JobStatus:
        if self._job is None:
            return api.JobStatus(code=None)
        code = self._job.stop(req.timeout)
        self.agent.release_job()
        return api.JobStatus(code=code)

    def _lease_acquire(self, req: api.LeaseAcquire) -> api.Empty:
        """Hold the cluster's lease (a file lock on this host) for as long as this agent lives."""

        self._lease = Lease(req.cluster, req.holder)
        self._lease.acquire()
        return api.Empty()

    def _lease_release(self, req: api.Empty) -> api.Empty:
        if self._lease is not None:
            self._lease.release()
            self._lease = None
        return api.Empty()

    # --- the job's logs, read here ------------------------------------------------------
    def _tail_start(self, req: api.TailStart) -> api.Empty:
        if self._tail is not None:
            self._tail.stop()
        self._tail = LogTail(req.paths, req.signals, clock=self.clock, max_buffer=req.max_buffer, base=req.base)
        return api.Empty()

    def _tail_batch(self, max_events: int) -> api.TailBatch:
        tail = self._tail
        if tail is None:
            return api.TailBatch(events=[], more=False, lines=0, unmatched=[], paused=0)
        events, more = tail.fetch(max_events)
        return api.TailBatch(events=[api.TailEvent(**e) for e in events], more=more,
                             lines=tail.reader.lines, unmatched=tail.reader.unmatched, paused=tail.paused,
                             missing=tail.files.missing())

    def _tail_fetch(self, req: api.TailFetch) -> api.TailBatch:
        return self._tail_batch(req.max_events)

    def _list_folders(self, req: api.ListFolders) -> api.Listing:
        return api.Listing(folders={folder: folder_listing(folder, ignore=req.ignore) for folder in req.folders})

    def _tail_stop(self, req: api.Empty) -> api.TailBatch:
        if self._tail is None:
            return self._tail_batch(1)
        self._tail.stop()
        batch = self._tail_batch(10**9)
        self._tail = None
        return batch

    def _free_port(self, req: api.Empty) -> api.Port:
        return api.Port(port=free_port())

    # --- faults --------------------------------------------------------------------------
    def _find_ranks(self, req: api.FindRanks) -> api.Ranks:
        """Ranks under the launcher this agent started, or under the attached job's root
        (the same pid *and* start time) where it lives on this node; nothing else."""
        if self._job is None and self.slurm_job is not None and req.discovery.pidfiles is None:

            mine = os.environ.get("SLURM_STEP_ID")
            ranks = self.agent.pick_ranks(req.discovery, job_processes(self.slurm_job, self.node, exclude_step=mine))
            self._found |= {r.key for r in ranks}
            return api.Ranks(ranks=ranks)
        if self._job is not None:
            root: ProcRef | None = self._job.ref
        else:
            root = req.attach if req.attach is not None and req.attach.alive() else None
        not_before = self._job.ref if self._job is not None else root
        ranks = self.agent.find_ranks(req.discovery, root=root, not_before=not_before)
        self._found |= {r.key for r in ranks}
        return api.Ranks(ranks=ranks)

    def _stacks(self, req: api.StacksRequest) -> api.Stacks:
        """py-spy dumps of ranks this agent found for the job (by pid and start time); any
        other process is refused, so the controller cannot read an arbitrary process."""
        strangers = [r for r in req.ranks if r.key not in self._found]
        if strangers:
            raise Refused(f"pid {strangers[0].pid} is not a rank this agent found for the job")
        return api.Stacks(stacks=[pystacks.dump(r) for r in req.ranks])

    def _plan(self, req: api.PlanRequest) -> api.Planned:
        return api.Planned(step=self.agent.describe(req.fault, req.target, req.params))

    def _inject(self, req: api.Inject) -> api.Injected:
        self._may_inject(req.fault, req.target, req.params)
        handle = self.agent.inject(req.fault, req.target, req.params)
        return api.Injected(handle=handle.model_copy(update={"injected_at": handle.injected_at + self.skew_s}))

    def _may_inject(self, fault: str, target: ProcRef, params: dict) -> None:
        """Refused unless this agent may put this fault on this target."""
        through_scheduler = get_fault(fault).acts_through == "scheduler"
        if through_scheduler != self.scheduler:
            raise Refused(f"{fault} acts through {'the scheduler' if through_scheduler else 'a node agent'}; "
                          f"this agent is {'the scheduler agent' if self.scheduler else 'a node agent'}")
        if self.scheduler and not (params or {}).get("job_id"):
            raise Refused(f"{fault}: the scheduler agent acts only on the node of a job the drill runs (no job_id)")
        if not self.scheduler and target.key not in self._found:
            raise Refused(f"pid {target.pid} is not a rank this agent found for this drill; faults go only to "
                          "processes its own rank discovery returned")

    def _plan_all(self, req: api.InjectAll) -> api.PlannedAll:
        return api.PlannedAll(steps=[self.agent.describe(req.fault, t, req.params) for t in req.targets])

    def _inject_all(self, req: api.InjectAll) -> api.InjectedAll:
        """``inject`` on each target in order, as that many calls would, to the first that
        fails (refused here, or by the fault): what was injected before it is answered with the
        failure, so the controller holds (and heals) every fault that landed. The agent writes
        its registry twice for the whole call (:meth:`NodeAgent.inject_all`)."""
        allowed: list[ProcRef] = []
        refused: Exception | None = None
        for target in req.targets:
            try:
                self._may_inject(req.fault, target, req.params)
            except Refused as exc:  # the targets before it go on
                refused = exc
                break
            allowed.append(target)
        handles, failed = self.agent.inject_all(req.fault, allowed, req.params) if allowed else ([], None)
        failed = failed if failed is not None else refused  # one among the allowed comes first
        return api.InjectedAll(handles=[h.model_copy(update={"injected_at": h.injected_at + self.skew_s})
                                        for h in handles],
                               error=None if failed is None else remote_error(failed))

    def _confirm_all(self, req: api.OfHandles) -> api.ConfirmedAll:
        return api.ConfirmedAll(evidence=[self._confirm(api.OfHandle(handle=h)).evidence for h in req.handles])

    def _confirm(self, req: api.OfHandle) -> api.Confirmed:
        evidence = self.agent.confirm(req.handle)
        if evidence is not None:
            evidence = evidence.model_copy(update={"t": evidence.t + self.skew_s})
        return api.Confirmed(evidence=evidence)

    def _heal(self, req: api.OfHandle) -> api.Healed:
        return api.Healed(report=self._heal_reported(req.handle))

    def _heal_all(self, req: api.OfHandles) -> api.HealedAll:
        """Each fault healed in order, as one heal alone is (:meth:`NodeAgent.heal_all`)."""
        return api.HealedAll(reports=[self._skewed(r) for r in self.agent.heal_all(req.handles)])

    def _active(self, req: api.Empty) -> api.Active:
        return api.Active(handles=self.agent.active())


class Refused(Exception):
    """The agent will not do this (a version mismatch, a second launch)."""


def remote_error(exc: Exception) -> api.RemoteError:
    """What a handler raised, as the controller is told it."""
    if isinstance(exc, Refused):
        return api.RemoteError(kind="refused", message=str(exc))
    if isinstance(exc, LeaseError):  # another drill holds the cluster: its holder, for the controller to name
        return api.RemoteError(kind="busy", message=exc.held)
    if isinstance(exc, ConfigError):  # the job's description does not fit what the node holds (exit 2)
        return api.RemoteError(kind="config", message=str(exc))
    return api.RemoteError(kind="failed", message=f"{exc.__class__.__name__}: {exc}")
