"""The Fault protocol: plan, inject, confirm, heal.

A fault runs inside a NodeAgent. ``inject`` returns a :class:`Handle` that carries
everything needed to heal (the target named by pid *and* start time, the original state),
and is plain data so the agent's dead-man's switch can heal it from disk after the
controller died. ``heal`` is idempotent and safe when the target is already gone.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from drillbit.proc import ProcRef


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Plan(BaseModel):
    fault: str
    targets: list[ProcRef]
    action: str
    heal: str


class Handle(BaseModel):
    fault: str
    target: ProcRef
    params: dict[str, Any] = Field(default_factory=dict)
    state: dict[str, Any] = Field(default_factory=dict)
    injected_at: float = Field(default_factory=time.time)


class Evidence(BaseModel):
    t: float = Field(default_factory=time.time)
    what: str
    data: dict[str, Any] = Field(default_factory=dict)


class HealReport(BaseModel):
    t: float = Field(default_factory=time.time)
    healed: bool
    verified: bool
    detail: str


class Fault:
    """Base class for injectors. Subclasses set name, Params, and the four methods."""

    name: ClassVar[str]
    fault_class: ClassVar[str]
    Params: ClassVar[type[Params]] = Params
    # What the job's progress should do once the fault took effect: "stall" faults are
    # confirmed only when global progress stops too.
    expects: ClassVar[Literal["crash", "stall", "slow"]] = "crash"
    # A folder of the drill's own where a fault may keep copies of what it touches; set
    # by the agent before inject.
    scratch: Path | None = None

    def plan(self, targets: list[ProcRef], params: Params) -> Plan:
        raise NotImplementedError

    def inject(self, target: ProcRef, params: Params) -> Handle:
        raise NotImplementedError

    def confirm(self, handle: Handle) -> Evidence | None:
        raise NotImplementedError

    def heal(self, handle: Handle) -> HealReport:
        raise NotImplementedError
