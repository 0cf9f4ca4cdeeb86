"""The event vocabulary: every kind of event a history holds, and what each carries.

An event is an envelope (:class:`drillbit.core.history.Event`: when, who recorded it, which
node and rank) around a payload. Each kind has one payload model here, and
:meth:`History.record <drillbit.core.history.History.record>` validates the payload against
it as the event is recorded: a field of the wrong type, a field the kind does not have, or
a kind that is not in :class:`Kind` is a drillbit bug. Recording never raises on it (a heal
that records its outcome must not fail on the record): the event is kept as given, an
``event.invalid`` event names the problem, and the verdict is inconclusive.

Two families:

- :class:`JobPayload`: what the job's own lines say, through a preset's signals (the kinds a
  ``signals:`` entry may name, :data:`JOB_KINDS`). Every group the signal's pattern names
  rides along; the fields declared here are the ones drillbit reads, typed. A number that
  cannot be read where one is optional reads as unknown (None); a step without a step
  number is not a step.
- :class:`HarnessPayload`: what drillbit itself records (the controller, its agents, the
  cluster engines, the probes' own errors): closed, every field declared.

Checkers read payloads typed: ``Restore.of(event).step`` is an ``int | None``, checked
against the kind. The history file keeps its format (an envelope and a ``data`` object per
line), so an older run folder still loads; a payload an older drillbit wrote that these
models do not read surfaces as a measurer's error (unknown figures, an inconclusive
verdict), never as a wrong figure.
"""
from __future__ import annotations

import math
import os
import typing
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Protocol, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, ValidationError



class _Recorded(Protocol):
    """An event as history.py records it (the envelope this module does not import)."""

    @property
    def seq(self) -> int: ...

    @property
    def kind(self) -> str: ...

    @property
    def payload(self) -> "Payload": ...


class Kind(StrEnum):
    # the job's own lines (a preset's signals)
    STEP = "step"
    METRICS = "metrics"
    DETECT = "detect"
    RESTART = "restart"
    RESTORE_BEGIN = "restore.begin"
    RESTORE = "restore"
    RESTORE_COPY = "restore.copy"
    RESTORE_FAILED = "restore.failed"
    CKPT_SAVE_BEGIN = "ckpt.save.begin"
    CKPT_SAVE = "ckpt.save"
    CKPT_REJECT = "ckpt.reject"
    STRAGGLER = "straggler"
    RANK_TIME = "rank.time"
    ESCALATE = "escalate"
    REPLACE_REQUEST = "replace.request"
    REPLACE_FAILED = "replace.failed"
    REPLACE_DONE = "replace.done"
    BLAME = "blame"
    ERROR = "error"
    MEMBERS = "members"
    # the drill's own course (the controller)
    DRILL_START = "drill.start"
    DRILL_END = "drill.end"
    PREDICTED = "predicted"
    STEADY = "steady"
    OBSERVE_END = "observe.end"
    ABORT = "abort"
    INCONCLUSIVE = "inconclusive"
    HARNESS_ERROR = "harness.error"
    INTERRUPT_HELD = "interrupt.held"
    STACKS = "stacks"
    EVENT_INVALID = "event.invalid"
    PROBE_ERROR = "probe.error"
    # the job, as the harness launched, found and stopped it
    JOB_LAUNCH = "job.launch"
    JOB_ATTACH = "job.attach"
    JOB_RANKS = "job.ranks"
    JOB_EXIT = "job.exit"
    JOB_STOP = "job.stop"
    CKPT_TIERS = "ckpt.tiers"
    # the fault
    FAULT_PLAN = "fault.plan"
    FAULT_INJECT = "fault.inject"
    FAULT_CONFIRMED = "fault.confirmed"
    FAULT_UNCONFIRMED = "fault.unconfirmed"
    FAULT_EXPIRE = "fault.expire"
    FAULT_HEAL = "fault.heal"
    FAULT_ABANDONED = "fault.abandoned"
    HEAL_FAILED = "heal.failed"
    HEAL_RETRY = "heal.retry"
    CKPT_READ = "ckpt.read"
    # the agents
    AGENT_READY = "agent.ready"
    AGENT_CLOCK = "agent.clock"
    AGENT_FAILED = "agent.failed"
    AGENT_LOST = "agent.lost"
    ORPHAN_DONE = "orphan.done"
    # the stop conditions (Prometheus)
    STOP_ARMED = "stop.armed"
    STOP_LIVE = "stop.live"
    STOP_FIRED = "stop.fired"
    # the engines: network namespaces, Slurm
    TOPOLOGY_UP = "topology.up"
    TOPOLOGY_DOWN = "topology.down"
    SERVICE_UP = "service.up"
    SLURM_SUBMIT = "slurm.submit"
    JOB_STATE = "job.state"
    JOB_NODES = "job.nodes"
    REQUEUE = "requeue"
    # a campaign (several faults in one run)
    CAMPAIGN_MIX = "campaign.mix"
    CAMPAIGN_FAULT = "campaign.fault"
    CAMPAIGN_SEGMENT_END = "campaign.segment.end"
    CAMPAIGN_END = "campaign.end"
    # a graded sweep in one launch (runs/graded.py)
    GRADED_START = "graded.start"
    GRADED_GAP = "graded.gap"
    GRADED_SEGMENT = "graded.segment"
    GRADED_SEGMENT_END = "graded.segment.end"
    GRADED_END = "graded.end"
    # the same job run once without the fault (matches_uninterrupted: runs/twin.py)
    UNINTERRUPTED = "uninterrupted"
    UNINTERRUPTED_STEP = "uninterrupted.step"


def _number(value: Any) -> Any:
    """An optional number from a job's line: one that cannot be read is unknown, not an error
    (a step is still a step when its loss prints as 'n/a')."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _count(value: Any) -> Any:
    number = _number(value)
    return int(number) if number is not None and math.isfinite(number) and number == int(number) else None


def _grouped_count(value: Any) -> Any:
    """A count as a person prints it, digits grouped ('1,024', '1_024')."""
    return _count(value.replace(",", "").replace("_", "") if isinstance(value, str) else value)


def _text_of_number(value: Any) -> Any:
    """A number kept as the line printed it: its digits say how precise it is."""
    if value is None or isinstance(value, bool):
        return None
    return value if isinstance(value, str) else repr(value)


def _absolute(value: str) -> str:
    """A path drillbit itself found (a read the kernel named): absolute and normal, so it is
    compared as a place, never as text (a relative path once reached a checker that took
    every path for absolute, and a false PASS followed)."""
    if not os.path.isabs(value):
        raise ValueError(f"{value!r} is not an absolute path")
    return os.path.normpath(value)


AbsolutePath = Annotated[str, AfterValidator(_absolute)]
Number = Annotated[float | None, BeforeValidator(_number)]
Count = Annotated[int | None, BeforeValidator(_count)]
Word = str | int | None  # a name the line gives (who, which peer): a number where the group was read as one

P = TypeVar("P", bound="Payload")


class Payload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    KIND: ClassVar[Kind]

    @classmethod
    def of(cls: type[P], event: _Recorded) -> P:
        """This event's payload, typed; a TypeError where the event is of another kind."""
        payload = event.payload
        if not isinstance(payload, cls):
            raise TypeError(f"event {event.seq} is {event.kind!r}, not {cls.KIND.value!r}")
        return payload


class JobPayload(Payload):
    """A line of the job's, read through a signal: the pattern's other groups ride along."""

    model_config = ConfigDict(extra="allow", frozen=True)
    t_source: str | None = None  # line: the time is the line's own; read: when it was read
    t_unread: str | None = None  # a stamp the signal's time_format could not read
    by: Word = None              # who printed it (the signal's by:, or a group)


class HarnessPayload(Payload):
    """What drillbit records itself; closed."""


PAYLOADS: dict[Kind, type[Payload]] = {}
JOB_KINDS: dict[str, str] = {}  # kind -> what a signal of that kind means, for drill probe and the docs


def _kind(kind: Kind):
    def register(cls: type[P]) -> type[P]:
        cls.KIND = kind
        PAYLOADS[kind] = cls
        if issubclass(cls, JobPayload):
            JOB_KINDS[kind.value] = " ".join((cls.__doc__ or "").split())
        return cls
    return register


# --- the job's own lines ----------------------------------------------------------------------
@_kind(Kind.STEP)
class Step(JobPayload):
    """a training step finished; group n (the step number) required — every drill needs it"""

    n: int
    dt: Number = None
    loss: Number = None
    lr: Number = None
    samples: Number = None
    tokens: Number = None
    since: Number = None        # a step read from a metric: it happened after this time
    new_attempt: bool | None = None


@_kind(Kind.METRICS)
class Metrics(JobPayload):
    """a step's figures printed on a line of their own (loss, lr, samples or tokens) — restore_fidelity;
    they are the step the line names (group n or step, or epoch with steps_per_epoch), else the next
    step's in the same attempt, and then a mismatch they show is unknown, never a fail"""

    n: Count = None
    step: Count = None
    loss: Number = None
    lr: Number = None
    samples: Number = None
    tokens: Number = None
    # the step bound by the line's own evidence where it names none: the fraction of epochs done
    # (kept as printed: its digits say how precisely it places a step) and the optimizer steps in
    # an epoch, from a line of the attempt's own (the Hugging Face Trainer's "Num update steps per
    # epoch = 1,024"; a line may carry only this)
    epoch: Annotated[str | None, BeforeValidator(_text_of_number)] = None
    steps_per_epoch: Annotated[int | None, BeforeValidator(_grouped_count)] = None
    # batches an optimizer step accumulates ("Gradient Accumulation steps = 4"): the Trainer's epoch
    # counts batches, so only without accumulation is it steps over steps per epoch
    accumulation: Annotated[int | None, BeforeValidator(_grouped_count)] = None


@_kind(Kind.DETECT)
class Detect(JobPayload):
    """the stack noticed the fault (by: who) — detect_within, time_to_detect"""

    pid: Count = None
    exitcode: Count = None
    local_rank: Count = None
    reason: str | None = None
    silent_s: Number = None


@_kind(Kind.RESTART)
class Restart(JobPayload):
    """the stack restarted the job or worker group (attempt) — time_to_restart, restarts"""

    attempt: Count = None
    waiting: Count = None       # torchrun's "Detected N new nodes": a restart for a node that joined


@_kind(Kind.RESTORE_BEGIN)
class RestoreBegin(JobPayload):
    """a checkpoint load started"""

    path: str | None = None
    step: Count = None


@_kind(Kind.RESTORE)
class Restore(JobPayload):
    """a checkpoint was loaded; groups step and path (tier: where from) — time_to_restore, lost steps,
    restore checks, restore_tier"""

    step: Count = None
    path: str | None = None
    tier: str | None = None
    digest: str | None = None
    seconds: Number = None
    peer: Word = None


@_kind(Kind.RESTORE_COPY)
class RestoreCopy(JobPayload):
    """a copy of a live peer's state finished (groups peer: where from, seconds: how long) —
    peer_copy_s, named when a first step or restore came late"""

    peer: Word = None
    seconds: Number = None


@_kind(Kind.RESTORE_FAILED)
class RestoreFailed(JobPayload):
    """one way of restoring failed (tier, reason) and the job may fall back to another — shown on
    the timeline"""

    reason: str | None = None
    tier: str | None = None
    path: str | None = None
    step: Count = None


@_kind(Kind.CKPT_SAVE_BEGIN)
class SaveBegin(JobPayload):
    """a checkpoint save started (step, path)"""

    step: Count = None
    path: str | None = None


@_kind(Kind.CKPT_SAVE)
class Save(JobPayload):
    """a checkpoint save finished; groups step, path, seconds — cadence, checkpoint-save badput"""

    step: Count = None
    path: str | None = None
    seconds: Number = None
    digest: str | None = None
    tier: str | None = None


@_kind(Kind.CKPT_REJECT)
class Reject(JobPayload):
    """the stack refused a checkpoint (path, reason) — corrupt-checkpoint's restore_skipped_corrupted"""

    path: str | None = None
    reason: str | None = None
    step: Count = None
    tier: str | None = None


@_kind(Kind.STRAGGLER)
class Straggler(JobPayload):
    """the stack named a slow rank (rank, node) — slow-rank and throttle-clocks"""

    node: str | None = None
    score: Number = None


@_kind(Kind.RANK_TIME)
class RankTime(JobPayload):
    """one rank's own time in one step, before it waits for its peers (rank, n, s seconds):
    drillbit names a slowed rank from these itself (fail-slow)"""

    n: int
    s: Number = None


@_kind(Kind.ESCALATE)
class Escalate(JobPayload):
    """the stack gave up and called a person — recover_or_escalate_within"""


@_kind(Kind.REPLACE_REQUEST)
class ReplaceRequest(JobPayload):
    """node replacement asked for a node — fail-node-replacement"""

    attempt: Count = None


@_kind(Kind.REPLACE_FAILED)
class ReplaceFailed(JobPayload):
    """a replacement request failed — fail-node-replacement"""

    attempt: Count = None
    reason: str | None = None


@_kind(Kind.REPLACE_DONE)
class ReplaceDone(JobPayload):
    """a replacement node arrived (node_name) — fail-node-replacement"""

    attempt: Count = None
    node_name: str | None = None


@_kind(Kind.BLAME)
class Blame(JobPayload):
    """the stack named a culprit (restarted, excluded or flagged it): group rank, pid or blamed_node —
    attribution"""

    pid: Count = None
    exitcode: Count = None
    local_rank: Count = None
    blamed_node: str | None = None


@_kind(Kind.ERROR)
class Error(JobPayload):
    """the job's own error line (group message, else the whole line; rank where the line names one): the
    first per rank per failed attempt is quoted in the verdict"""

    message: str = ""


@_kind(Kind.MEMBERS)
class Members(JobPayload):
    """the stack's membership now (a quorum, a worker group): group members, read with lists; a member
    that drops out or comes back as a new incarnation was blamed — attribution"""

    members: list[dict[str, Any]] = []


# --- the drill's course -------------------------------------------------------------------------
@_kind(Kind.DRILL_START)
class DrillStart(HarnessPayload):
    drill: str | None = None
    cluster: str | None = None
    job: str | None = None
    fault: str | None = None


@_kind(Kind.DRILL_END)
class DrillEnd(HarnessPayload):
    error: str | None = None
    error_kind: str | None = None


@_kind(Kind.PREDICTED)
class Predicted(HarnessPayload):
    """Detection as the job's declared timeouts predict it (judging/checks/predict.py)."""

    detect_s: float | None = None
    by: str | None = None
    never: bool = False
    why: str = ""
    slos: list[Any] = []
    warnings: list[Any] = []


@_kind(Kind.STEADY)
class SteadyReached(HarnessPayload):
    baseline_step_s: float | None  # None: a campaign segment whose baseline was never measured
    step: int


@_kind(Kind.OBSERVE_END)
class ObserveEnd(HarnessPayload):
    reason: str


class _Reason(HarnessPayload):
    reason: str


@_kind(Kind.ABORT)
class Abort(_Reason):
    where: list[str] | None = None  # a harness bug's traceback, its last frames


@_kind(Kind.INCONCLUSIVE)
class Inconclusive(_Reason):
    pass


@_kind(Kind.HARNESS_ERROR)
class HarnessError(HarnessPayload):
    phase: str
    detail: str


@_kind(Kind.INTERRUPT_HELD)
class InterruptHeld(HarnessPayload):
    signal: str


@_kind(Kind.STACKS)
class Stacks(HarnessPayload):
    attempt: int
    where: str
    ranks: list[Any] = []


@_kind(Kind.EVENT_INVALID)
class EventInvalid(HarnessPayload):
    """An event recorded with a payload its kind does not have (a drillbit bug)."""

    recorded_as: str  # the kind it was recorded as
    seq: int          # the event, kept as it was given
    problem: str


@_kind(Kind.PROBE_ERROR)
class ProbeError(HarnessPayload):
    query: str | None = None
    error: str | None = None
    detail: str | None = None


# --- the job ------------------------------------------------------------------------------------
@_kind(Kind.JOB_LAUNCH)
class JobLaunch(HarnessPayload):
    pid: int | None = None
    command: list[str] | None = None
    job_id: str | None = None
    reads: list[str] = []        # the event kinds the job's profile can read
    contained: dict[str, str] = {}  # by node: what holds every process of the job (its cgroup, or why only
    #                                 its init's subreaper does); none where a scheduler runs it


@_kind(Kind.JOB_ATTACH)
class JobAttach(HarnessPayload):
    pid: int
    reads: list[str] = []


@_kind(Kind.JOB_RANKS)
class JobRanks(HarnessPayload):
    ranks: list[dict[str, Any]]


@_kind(Kind.JOB_EXIT)
class JobExit(HarnessPayload):
    code: int | None = None


@_kind(Kind.JOB_STOP)
class JobStop(HarnessPayload):
    code: int | None = None
    exited_before: bool | None = None
    pid: int | None = None
    by: str | None = None
    agent_t: float | None = None


@_kind(Kind.CKPT_TIERS)
class CkptTiers(HarnessPayload):
    tiers: dict[str, Any]
    saved: dict[str, Any] | None = None


# --- the fault ----------------------------------------------------------------------------------
@_kind(Kind.FAULT_PLAN)
class FaultPlan(HarnessPayload):
    action: str
    heal: str
    targets: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []


@_kind(Kind.FAULT_INJECT)
class FaultInject(HarnessPayload):
    fault: str
    pid: int | None = None
    params: dict[str, Any] = {}


@_kind(Kind.FAULT_CONFIRMED)
class FaultConfirmed(HarnessPayload):
    """The agents' evidence that the fault took effect (core/evidence.py), and what the fault
    expects of the job; a fault's ``confirm_progress`` adds what the job's progress showed."""

    model_config = ConfigDict(extra="allow", frozen=True)
    evidence: list[dict[str, Any]]
    expects: str
    hurts: str = "rank"
    verb: str = "hurt"
    progress_quiet_s: float | None = None


@_kind(Kind.FAULT_UNCONFIRMED)
class FaultUnconfirmed(_Reason):
    pass


@_kind(Kind.FAULT_EXPIRE)
class FaultExpire(HarnessPayload):
    after_s: float | None = None


class _Heal(HarnessPayload):
    fault: str | None = None
    pid: int | None = None
    detail: str | None = None
    attempt: int | None = None
    by: str | None = None         # drill heal, the dead-man: who healed it, where not the controller
    agent_t: float | None = None  # the agent's own clock, in a dead-man's record


@_kind(Kind.FAULT_HEAL)
class FaultHeal(_Heal):
    healed: bool = True
    verified: bool = False


@_kind(Kind.HEAL_FAILED)
class HealFailed(_Heal):
    healed: bool = False
    verified: bool = False
    faults: list[str] | None = None


@_kind(Kind.HEAL_RETRY)
class HealRetry(_Heal):
    in_s: float | None = None
    faults: list[str] | None = None


@_kind(Kind.FAULT_ABANDONED)
class FaultAbandoned(_Heal):
    reason: str | None = None


@_kind(Kind.CKPT_READ)
class CkptRead(HarnessPayload):
    """A process opened a file of the watched checkpoint (faults/ckptfile.py's witnesses)."""

    pid: int
    file: AbsolutePath
    how: str
    cmdline: str = ""


# --- the agents ---------------------------------------------------------------------------------
@_kind(Kind.AGENT_READY)
class AgentReady(HarnessPayload):
    pid: int
    host: str
    version: str
    job_id: str | None = None
    restarts: int | None = None


@_kind(Kind.AGENT_CLOCK)
class AgentClock(HarnessPayload):
    offset_s: float
    rtt_s: float


@_kind(Kind.AGENT_FAILED)
class AgentFailed(HarnessPayload):
    detail: str


@_kind(Kind.AGENT_LOST)
class AgentLost(HarnessPayload):
    reason: str
    by: str | None = None
    agent_t: float | None = None


@_kind(Kind.ORPHAN_DONE)
class OrphanDone(HarnessPayload):
    by: str | None = None
    agent_t: float | None = None


# --- stop conditions ----------------------------------------------------------------------------
@_kind(Kind.STOP_ARMED)
class StopArmed(HarnessPayload):
    prometheus: str
    conditions: list[str] = []


@_kind(Kind.STOP_LIVE)
class StopLive(HarnessPayload):
    condition: str


@_kind(Kind.STOP_FIRED)
class StopFired(HarnessPayload):
    condition: str
    query: str | None = None
    reason: str
    series: str | None = None
    value: float | None = None


# --- engines ------------------------------------------------------------------------------------
@_kind(Kind.TOPOLOGY_UP)
class TopologyUp(HarnessPayload):
    namespaces: list[str]
    service_host: str
    addresses: dict[str, Any] = {}
    frontend: dict[str, Any] | None = None
    frontend_mbit: float | None = None


@_kind(Kind.TOPOLOGY_DOWN)
class TopologyDown(HarnessPayload):
    verified: bool
    left: list[Any] = []


@_kind(Kind.SERVICE_UP)
class ServiceUp(HarnessPayload):
    name: str
    pid: int
    address: str


@_kind(Kind.SLURM_SUBMIT)
class SlurmSubmit(HarnessPayload):
    job_id: str
    sbatch: list[str]


@_kind(Kind.JOB_STATE)
class JobState(HarnessPayload):
    state: str
    reason: str = ""
    restarts: int = 0
    nodes: list[str] = []
    eligible: str | None = None


@_kind(Kind.JOB_NODES)
class JobNodes(HarnessPayload):
    nodes: list[str]
    restarts: int = 0


@_kind(Kind.REQUEUE)
class Requeue(HarnessPayload):
    restarts: int
    reason: str = ""
    previous_nodes: list[str] = []


# --- campaigns ----------------------------------------------------------------------------------
@_kind(Kind.CAMPAIGN_MIX)
class CampaignMix(HarnessPayload):
    """The faults a campaign drew and their rates (runs/campaign.py)."""

    model_config = ConfigDict(extra="allow", frozen=True)


@_kind(Kind.CAMPAIGN_FAULT)
class CampaignFault(HarnessPayload):
    index: int
    fault: str


@_kind(Kind.CAMPAIGN_SEGMENT_END)
class CampaignSegmentEnd(HarnessPayload):
    index: int
    fault: str


@_kind(Kind.CAMPAIGN_END)
class CampaignEnd(HarnessPayload):
    faults: int


# --- a graded sweep in one launch --------------------------------------------------------------
@_kind(Kind.GRADED_START)
class GradedStart(HarnessPayload):
    """The sweep's axis: the parameter, its levels, repeats, the quiet gap and the window."""

    param: str
    levels: list[str]
    repeats: int
    gap_s: float
    window_s: float
    survives_s: float | None = None  # the hang axis: the job's collective timeout, a pause it would outlast


@_kind(Kind.GRADED_GAP)
class GradedGap(HarnessPayload):
    """A quiet gap with no fault on ended (it began at t0); ``after``: the ranks the segment
    before it slowed."""

    t0: float
    after: list[int] = []


@_kind(Kind.GRADED_SEGMENT)
class GradedSegment(HarnessPayload):
    index: int
    level: str
    repeat: int


@_kind(Kind.GRADED_SEGMENT_END)
class GradedSegmentEnd(HarnessPayload):
    index: int
    level: str


@_kind(Kind.GRADED_END)
class GradedEnd(HarnessPayload):
    segments: int


@_kind(Kind.UNINTERRUPTED)
class Uninterrupted(HarnessPayload):
    """The uninterrupted run: its folder, the step it was to reach and the one it reached, a
    checkpoint it restored (then it was not uninterrupted), and why it ended early."""
    run_dir: str
    until_step: int
    reached: int | None = None
    restored: int | None = None
    restored_from: str | None = None
    error: str | None = None


@_kind(Kind.UNINTERRUPTED_STEP)
class UninterruptedStep(HarnessPayload):
    """A step of the uninterrupted run, with the figures its line printed (the first time it
    printed that step)."""
    n: int
    loss: Number = None
    lr: Number = None
    samples: Number = None
    tokens: Number = None
    digest: str | None = None


assert set(PAYLOADS) == set(Kind), sorted(set(Kind) - set(PAYLOADS))


def check(kind: str, data: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The payload as it will be kept (numbers read as numbers; only the fields given), and
    the problem with it, if any (None: none)."""
    try:
        model = PAYLOADS[Kind(kind)]
    except ValueError:
        return data, f"{kind!r} is not an event kind"
    try:
        typed = model.model_validate(data).model_dump(exclude_unset=True)
    except ValidationError as exc:
        return data, "; ".join(f"{'.'.join(map(str, err['loc'])) or kind}: {err['msg']}" for err in exc.errors())
    return {k: typed[k] for k in data if k in typed} | typed, None  # in the order given


def read(kind: str, data: dict[str, Any]) -> Payload:
    """A recorded payload, typed (the kind's model; an unknown kind's, open, for an old history)."""
    try:
        model = PAYLOADS[Kind(kind)]
    except ValueError:
        return _Unknown.model_validate(data)
    return model.model_validate(data)


def stand_ins(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    """Plain values for the fields ``kind`` requires and ``data`` leaves out (a string "test",
    an empty list or mapping, zero), for a hand-built history (History.build)."""
    try:
        model = PAYLOADS[Kind(kind)]
    except ValueError:
        return {}
    plain = {str: "test", list: [], dict: {}, int: 0, float: 0.0, bool: False}
    out: dict[str, Any] = {}
    for name, spec in model.model_fields.items():
        if spec.is_required() and name not in data:
            if type(None) in typing.get_args(spec.annotation):
                out[name] = None
                continue
            base: Any = typing.get_origin(spec.annotation) or spec.annotation
            path = any(getattr(m, "func", None) is _absolute for m in spec.metadata)
            out[name] = "/test" if path else plain.get(base, "test")
    return out


class _Unknown(Payload):
    model_config = ConfigDict(extra="allow", frozen=True)
