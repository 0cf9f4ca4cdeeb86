"""The agent API: the one protocol between the controller and a node's agent.

Every call is a method name and a request model; every answer is a reply model or an
error. The table :data:`METHODS` is the whole API: an agent serves only what is in it,
and every transport (in-process, Ray actor, SSH JSON lines) carries the same two things,
``(method, request as JSON data)`` one way and an :class:`Envelope` the other. An unknown
method or a malformed request is refused with a clear error, and the agent lives on.

Times in replies are on the agent's clock; the controller's client moves them onto its own.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from drillbit.faults.base import Evidence, Handle, HealReport, PlanStep
from drillbit.core.proc import ProcRef
from drillbit.core.pystacks import RankStack
from drillbit.spec.config import RankDiscovery
from drillbit.spec.signals import Signal

# Bumped when a method, a request or a reply changes shape. The drillbit version is
# compared too: controller and agent must run the same code (Ray pickles by reference).
PROTOCOL = 8  # 4: stacks; 5: globs in tail_start, the logs missing, list_folders; busy, an error kind;
#              6: launch says what contains the job (its cgroup, or the subreaper alone);
#              7: plan_all, inject_all, confirm_all (one node's targets in one round trip);
#              8: heal_all


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Empty(Message):
    pass


class RemoteError(BaseModel):
    # config: the description is wrong; busy: another drill holds the cluster's lease
    kind: Literal["unknown-method", "bad-request", "refused", "failed", "config", "busy"]
    message: str


# --- requests ---------------------------------------------------------------------------
class InfoRequest(Message):
    controller_version: str | None = None


class FindRanks(Message):
    discovery: RankDiscovery
    attach: ProcRef | None = None  # an attached job's root, by pid and start time


class Launch(Message):
    argv: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    out_path: str
    stop_timeout: float = Field(20.0, gt=0)


class Inject(Message):
    fault: str
    target: ProcRef
    params: dict[str, Any] = Field(default_factory=dict)


class PlanRequest(Inject):
    pass


class InjectAll(Message):
    """One fault on several targets of one agent, in their order."""
    fault: str
    targets: list[ProcRef] = Field(min_length=1)
    params: dict[str, Any] = Field(default_factory=dict)


class OfHandle(Message):
    handle: Handle


class OfHandles(Message):
    handles: list[Handle] = Field(min_length=1)


class StopJob(Message):
    timeout: float = Field(20.0, gt=0)


class Arm(Message):
    deadman_s: float = Field(gt=0)
    job_grace_s: float = Field(ge=0)
    offset_s: float = 0.0  # the agent's clock minus the controller's, as the controller measured it


class StacksRequest(Message):
    ranks: list[ProcRef]  # ranks this agent found (find_ranks); any other process is refused


class LeaseAcquire(Message):
    cluster: str
    holder: str


# --- replies ----------------------------------------------------------------------------
class Info(Message):
    node: str
    pid: int
    host: str
    t: float
    version: str
    protocol: int
    faults: list[str]


class Ranks(Message):
    ranks: list[ProcRef]


class Launched(Message):
    proc: ProcRef
    contained: str | None = Field(None, description="what holds every process of the job: its cgroup (which "
                                                    "hierarchy, where), or why only its init's subreaper does")


class Stacks(Message):
    stacks: list[RankStack]


class Injected(Message):
    handle: Handle


class InjectedAll(Message):
    """The handles of the targets injected, in their order, up to the first that failed; that
    failure (the targets after it were not tried), or None."""
    handles: list[Handle]
    error: RemoteError | None = None


class Planned(Message):
    step: PlanStep


class PlannedAll(Message):
    steps: list[PlanStep]


class Confirmed(Message):
    evidence: Evidence | None


class ConfirmedAll(Message):
    evidence: list[Evidence | None]


class Healed(Message):
    report: HealReport


class HealedAll(Message):
    """Each fault's heal report, in the handles' order (a heal that raised is a failed report)."""
    reports: list[HealReport]


class Active(Message):
    handles: list[Handle]


class JobStatus(Message):
    code: int | None


class Clock(Message):
    t: float


class Port(Message):
    port: int


class Record(Message):
    """One line the dead-man's switch wrote: an event on the controller's clock."""

    t: float
    kind: str
    node: str | None = None
    rank: int | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class Records(Message):
    records: list[Record]


class TailStart(Message):
    paths: list[str]  # already expanded for this node; a glob follows each file it matches, as it appears
    signals: list[Signal]
    base: str | None = Field(None, description="the job's working folder: a relative path in its lines is taken "
                                               "against it")
    max_buffer: int = Field(20_000, ge=1, description="events held before the agent stops reading (back-pressure)")


class TailFetch(Message):
    max_events: int = Field(5_000, ge=1)


class TailEvent(Message):
    kind: str
    t: float
    rank: int | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class TailBatch(Message):
    events: list[TailEvent]
    more: bool  # more are waiting: fetch again now
    lines: int  # lines read so far
    unmatched: list[str]  # the first lines no signal matched
    paused: int  # polls skipped because the buffer was full
    missing: list[str] = Field(default_factory=list, description="the logs followed that no file answers yet: a "
                                                                 "path not there, a glob that matches none")


class ListFolders(Message):
    folders: list[str] = Field(max_length=64)
    ignore: list[str] = Field(default_factory=list, description="names not listed (globs): drillbit's own files")


class Listing(Message):
    folders: dict[str, str]  # each folder: what it holds, in words (tail.folder_listing)


class Method(BaseModel):
    request: type[Message]
    reply: type[Message]
    doc: str


METHODS: dict[str, Method] = {
    "info": Method(request=InfoRequest, reply=Info, doc="who the agent is: node, pid, version, faults"),
    "clock": Method(request=Empty, reply=Clock, doc="the agent's clock, for the offset"),
    "heartbeat": Method(request=Empty, reply=Clock, doc="the controller is alive"),
    "arm": Method(request=Arm, reply=Empty, doc="start the dead-man's switch"),
    "disarm": Method(request=Empty, reply=Empty, doc="stop it (only once nothing is active)"),
    "find_ranks": Method(request=FindRanks, reply=Ranks, doc="rank processes on this node"),
    "launch": Method(request=Launch, reply=Launched, doc="start the job's launcher on this node"),
    "job_status": Method(request=Empty, reply=JobStatus, doc="the launched job's exit code, None if running"),
    "stop_job": Method(request=StopJob, reply=JobStatus, doc="stop the launched job"),
    "plan": Method(request=PlanRequest, reply=Planned, doc="what inject would do to this target; touches nothing"),
    "inject": Method(request=Inject, reply=Injected, doc="apply a fault"),
    "confirm": Method(request=OfHandle, reply=Confirmed, doc="proof that it took effect"),
    "plan_all": Method(request=InjectAll, reply=PlannedAll, doc="plan on each of this node's targets, in one call"),
    "inject_all": Method(request=InjectAll, reply=InjectedAll,
                         doc="inject on each of this node's targets in order, to the first that fails, in one call"),
    "confirm_all": Method(request=OfHandles, reply=ConfirmedAll, doc="confirm each of these faults, in one call"),
    "heal": Method(request=OfHandle, reply=Healed, doc="undo it; idempotent"),
    "heal_all": Method(request=OfHandles, reply=HealedAll,
                       doc="heal each of these faults in order, in one call; one that fails does not stop the rest"),
    "active": Method(request=Empty, reply=Active, doc="the faults this agent holds"),
    "records": Method(request=Empty, reply=Records, doc="what the dead-man's switch did"),
    "free_port": Method(request=Empty, reply=Port, doc="a free TCP port on this node"),
    "lease_acquire": Method(request=LeaseAcquire, reply=Empty, doc="hold the cluster's lease on this host"),
    "lease_release": Method(request=Empty, reply=Empty, doc="let it go"),
    "tail_start": Method(request=TailStart, reply=Empty, doc="follow the job's logs on this node, matching signals"),
    "tail_fetch": Method(request=TailFetch, reply=TailBatch, doc="the matched events waiting, oldest first"),
    "tail_stop": Method(request=Empty, reply=TailBatch, doc="stop following; the last events"),
    "list_folders": Method(request=ListFolders, reply=Listing,
                           doc="what folders on this node hold (a log the job was said to write and did not)"),
    "stacks": Method(request=StacksRequest, reply=Stacks, doc="the Python stacks of ranks it found (py-spy)"),
}


class Envelope(BaseModel):
    """What every transport carries back: a reply's data, or an error."""

    ok: dict[str, Any] | None = None
    error: RemoteError | None = None


def parse_request(method: str, payload: Any) -> tuple[Method, Message] | RemoteError:
    """The request model for ``method``, or the reason it is refused."""
    spec = METHODS.get(method) if isinstance(method, str) else None
    if spec is None:
        return RemoteError(kind="unknown-method",
                           message=f"unknown method {method!r}; the agent serves: {', '.join(sorted(METHODS))}")
    try:
        return spec, spec.request.model_validate(payload if payload is not None else {})
    except ValidationError as exc:
        where = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(request)'}: {e['msg']}" for e in exc.errors())
        return RemoteError(kind="bad-request", message=f"malformed {method} request: {where}")
