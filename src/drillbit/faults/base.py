"""The Fault protocol: plan, describe, inject, confirm, heal — with typed Params and State.

A fault runs inside a node's agent. ``inject`` returns the fault's :class:`State`: every
thing heal needs (the original bytes' copy, the previous clock settings, which process was
stopped), as plain data, so the dead-man's switch can heal it from disk after the
controller died. The agent wraps it in a :class:`Handle` (fault, target, params, state)
that travels between controller and agent; ``confirm`` and ``heal`` receive the Params
and State back as the fault's own models. ``heal`` is idempotent and safe when the target
is already gone.

The agent calls ``prepare`` (find what heal needs, touch nothing), records it durably,
then ``act``; a plugin may implement ``inject`` alone instead.

``plan`` says in words what the fault does to a set of targets; ``describe`` resolves the
concrete step on the target's node (which process, which files) without touching
anything — ``--dry-run`` prints those. ``confirm_progress`` is the fault's proof, on the
controller's side, that the job's global progress shows the effect (a stall stalls).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from drillbit.core.evidence import Effect
from drillbit.core.proc import ProcRef
from drillbit.spec.models import MAX_DURATION_S


Binding = Literal["checkpoint", "tier", "launcher", "replacement", "control_plane", "control_plane_address"]
# The params each binding fills (a fault that declares one must have them).
BINDING_PARAMS: dict[str, tuple[str, ...]] = {
    "checkpoint": ("checkpoint",), "tier": ("tier", "folder"), "launcher": ("launcher",), "replacement": ("hook",),
    "control_plane": ("name", "process", "node"), "control_plane_address": ("control_plane", "endpoint"),
}


class Progress(Protocol):
    """What a fault may ask of the loop's view of the job's progress, on the controller
    (``confirm_progress``); the loop's ``Progress`` (loop/watch.py) is one."""

    def wait_quiet(self, t_effect: float) -> float | None:
        """Seconds without a step since the effect, once they reach several baseline step
        times; None if steps keep coming."""


class Params(BaseModel):
    """A fault's parameters. Numbers are finite; a time (a field named ``*_s``) is at most a
    year: a timeout of 9.3e9 s overflows the thread that waits on it."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, use_attribute_docstrings=True)

    @model_validator(mode="after")
    def _bounded_times(self) -> "Params":
        for name, value in self:
            if name.endswith("_s") and isinstance(value, (int, float)) and not isinstance(value, bool) \
                    and abs(value) > MAX_DURATION_S:
                raise ValueError(f"{name}: {value:g} s is more than a year; give a real duration")
        return self


class State(BaseModel):
    """What a fault did, kept for confirm and heal. Subclasses add their fields."""

    model_config = ConfigDict(extra="forbid")


P = TypeVar("P", bound=Params)
S = TypeVar("S", bound=State)


class PlanStep(BaseModel):
    """One concrete action on one process: what --dry-run prints and fault.plan records."""

    node: str | None
    pid: int
    rank: int | None
    cmdline: str = ""
    action: str
    files: list[str] = Field(default_factory=list)
    heal: str = ""


class Plan(BaseModel):
    fault: str
    targets: list[ProcRef]
    action: str
    heal: str
    steps: list[PlanStep] = Field(default_factory=list)


class Handle(BaseModel):
    fault: str
    target: ProcRef
    params: dict[str, Any] = Field(default_factory=dict)
    state: dict[str, Any] = Field(default_factory=dict)
    injected_at: float = Field(default_factory=time.time)
    after_job: bool = False  # healed once the job the drill launched has stopped (Fault.heals_after_job)


class Evidence(BaseModel):
    t: float = Field(default_factory=time.time)
    what: str
    data: dict[str, Any] = Field(default_factory=dict)
    kind: str | None = None  # the fault's evidence model that ``data`` fits (drillbit.core.evidence), set by the agent


class Observation(BaseModel):
    """Something the fault saw on its node while it was active, for the history: a
    ``ckpt.read`` (which process read which file of the damaged checkpoint's folder)."""

    t: float
    kind: str
    rank: int | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class HealReport(BaseModel):
    t: float = Field(default_factory=time.time)
    healed: bool
    verified: bool
    detail: str
    # what the fault watched on its node until the heal (recorded as events of its agent)
    observations: list[Observation] = Field(default_factory=list)


class Fault(Generic[P, S]):
    """Base class for injectors. Subclasses set name, Params, State and the methods."""

    name: ClassVar[str]
    fault_class: ClassVar[str]
    Params: ClassVar[type[Params]] = Params
    State: ClassVar[type[State]] = State
    # What the job's progress should do once the fault took effect: "stall" faults are
    # confirmed only when global progress stops too (confirm_progress).
    expects: ClassVar[Literal["crash", "stall", "slow"]] = "crash"
    # which of a job's timeouts can see this fault (JobTimeouts' names), for the predicted
    # detection; None: by what it expects (a crash: the launcher's poll; a stall: a progress
    # watchdog or the collective the peers wait in; a slowdown: none)
    detected_by: ClassVar[tuple[str, ...] | None] = None

    @classmethod
    def seen_by(cls, params: Any = None) -> tuple[str, ...]:
        """The job timeouts (JobTimeouts' names) that can detect this fault (with ``params``)."""
        if cls.detected_by is not None:
            return cls.detected_by
        return {"crash": ("monitor_interval",), "stall": ("watchdog", "collective"), "slow": ()}[cls.expects]
    # A fault that touches one shared thing for all its targets (a checkpoint file, the node
    # pool) takes at most this many; a wider selection is refused before anything is touched.
    max_targets: ClassVar[int | None] = None
    # The fault works on the job's checkpoints: a job profile without checkpoint: is refused
    # before anything runs (a config error), not at inject.
    needs_checkpoint: ClassVar[bool] = False
    # What it takes from the job profile where the drill's params leave it unset
    # (loop/bind.py): "checkpoint" (param checkpoint: the job's checkpoints), "tier" (params
    # tier and folder: that tier's folder), "launcher" (param launcher), "replacement"
    # (param hook: the job's node-replacement command), "control_plane" (params name, process
    # and node: one of the profile's control_plane entries, its placeholders filled for the
    # node it runs on once the job is launched).
    binds: ClassVar[tuple[Binding, ...]] = ()
    # What the fault does to its target, in a reason ("only rank 1 was stopped").
    verb: ClassVar[str] = "hurt"
    # Where it acts: on the target's node (its agent), or through the cluster's scheduler
    # (the controller machine's scheduler agent: Slurm's node faults)
    acts_through: ClassVar[Literal["node", "scheduler"]] = "node"
    # The one engine it works on (None: every engine); elsewhere a config error before launch
    needs_engine: ClassVar[str | None] = None
    # Works on a node's network (partition, lossy-link, flap, slow-link): the nodes must each
    # be a network namespace of their own, apart from the agent's; where a cluster knows its
    # nodes share this machine's network, a config error before launch
    needs_node_netns: ClassVar[bool] = False
    # What the agent must be allowed to do for it (root, CAP_NET_ADMIN, the job's user, a
    # scheduler's operator rights) and what it touches: the catalogue's privileges page
    needs: ClassVar[str] = "to signal the job's processes: the job's user, or root"
    blast_radius: ClassVar[str] = ""
    # What confirm hands over as Evidence.data, as typed models (drillbit.core.evidence): the agent
    # validates it against the first that fits, so the checks read fields, never guessed keys
    evidence: ClassVar[tuple[type[Effect], ...]] = (Effect,)

    def hurts(self, params: P) -> Literal["rank", "node"]:
        """Whom the fault hurts, for attribution: the target rank, or every rank of its node."""
        return "rank"

    def target_nodes(self, params: P) -> list[str] | None:
        """The nodes its targets must be on (a control plane's node: the fault acts there,
        through that node's agent); None: any node."""
        return None

    def __init__(self, scratch: Path | None = None) -> None:
        # a folder of the drill's own where the fault may keep copies of what it touches
        self.scratch = scratch

    def plan(self, targets: list[ProcRef], params: P) -> Plan:
        raise NotImplementedError

    def plan_lines(self, params: P) -> list[str]:
        """What the fault will load or run on a node, as --dry-run prints it before any
        target exists (the network faults: their nftables table, their tc command)."""
        return []

    def describe(self, target: ProcRef, params: P) -> PlanStep:
        """The concrete step on ``target``'s node, touching nothing. Faults that touch files
        override it to name them."""
        plan = self.plan([target], params)
        proc = target.process()
        cmd = " ".join(proc.cmdline()) if proc is not None else "(gone)"
        return PlanStep(node=target.node, pid=target.pid, rank=target.rank, cmdline=cmd[:200],
                        action=plan.action, heal=plan.heal)

    def prepare(self, target: ProcRef, params: P) -> S | None:
        """Everything heal will need, found *before* acting (a backup of the file, the
        previous settings, which process to stop); the agent records it durably, then calls
        :meth:`act`. None (the default) for a fault that only implements :meth:`inject`."""
        return None

    def unprepare(self, target: ProcRef, params: P, intent: S) -> None:
        """The intent was refused before anything was touched: drop what prepare made (a
        backup copy). Default: nothing to drop."""

    def act(self, target: ProcRef, params: P, intent: S) -> S:
        """Do it, from the recorded intent; returns the State with what was done."""
        return self.inject(target, params)

    def inject(self, target: ProcRef, params: P) -> S:
        """Prepare and act in one (plugins may implement this instead of the two)."""
        intent = self.prepare(target, params)
        if intent is None:
            raise NotImplementedError
        return self.act(target, params, intent)

    def confirm(self, target: ProcRef, params: P, state: S) -> Evidence | None:
        raise NotImplementedError

    def heal(self, target: ProcRef, params: P, state: S) -> HealReport:
        raise NotImplementedError

    def distrust(self, params: P, state: S, scratch: Path | None, told: bool) -> str | None:
        """Why a heal read from a file on disk (``drill heal``, the guardian) must not do what
        this handle says, or None: every path it names must lie inside the folder its own
        params name (the checkpoint, the tier) or the agent's scratch folder, and a command it
        runs comes from the drill's own spec: ``told`` when the agent that wrote the handle told
        its guardian so over a pipe, never when it is read from a file alone. Faults that touch
        paths or run commands override it; the default names none."""
        return None

    def heals_after_job(self, params: P) -> bool:
        """Whether this fault's heal must wait until the job has stopped (a heal that puts a
        whole folder back would otherwise move it from under a job still writing it). The
        drill then heals it after teardown, and a dead-man's switch after it stopped the job."""
        return False

    def confirm_wait(self, params: P) -> float:
        """How long the controller keeps asking ``confirm`` (each answer bounded by the
        transport's timeout) before the fault counts as unconfirmed: 0 for a fault whose
        effect is immediate; an armed fault (kill-during-save waits for a save) says more.
        Evidence whose data has ``unconfirmed`` is a no, with that reason."""
        return 0.0

    # A fault that watches the job's saves itself, on the node: a during_save trigger arms
    # it at once and hands it the save number, file offset and delay (loop/schedule.py).
    arms_on_save: ClassVar[bool] = False

    def confirm_progress(self, progress: Progress, t_effect: float, params: Any = None) -> dict[str, Any] | None:
        """On the controller: does the job's progress show the effect (of ``params``)? ``{}``
        when nothing more is needed; None when it does not (the fault stays unconfirmed)."""
        return {}
