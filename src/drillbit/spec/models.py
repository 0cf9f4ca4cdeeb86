"""Typed models of a drill spec. Unknown fields are errors everywhere."""
from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|min|m|h|d)?\s*$")


def parse_duration(value: Any) -> float:
    """'90s', '10m', '1.5h', '250ms' or a bare number of seconds -> seconds."""
    if isinstance(value, bool):
        raise ValueError("a duration such as 60s, 10m or 1h")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            return float(match.group(1)) * _UNITS[match.group(2) or "s"]
    raise ValueError(f"{value!r} is not a duration (write 60s, 10m, 1h or 250ms)")


Duration = Annotated[float, BeforeValidator(parse_duration)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Targets(Strict):
    """Which rank processes a fault hits."""

    ranks: list[int] | None = Field(None, description="explicit global ranks")
    count: int = Field(1, ge=1, description="how many ranks when not explicit")
    select: Literal["random", "first", "last"] = "random"
    exclude_ranks: list[int] = Field(default_factory=list)
    seed: int | None = None


class Trigger(Strict):
    """When the fault is injected: at a training step, or seconds after steady state."""

    at_step: int | None = Field(None, ge=1)
    after: Duration | None = None

    @model_validator(mode="after")
    def _one(self) -> "Trigger":
        if (self.at_step is None) == (self.after is None):
            raise ValueError("give exactly one of at_step or after")
        return self


class FaultSpec(Strict):
    type: str
    targets: Targets = Field(default_factory=Targets)
    params: dict[str, Any] = Field(default_factory=dict)
    trigger: Trigger


class Steady(Strict):
    warmup_steps: int = Field(5, ge=1)
    timeout: Duration = 300.0


class Observe(Strict):
    until_steps_after_recovery: int = Field(10, ge=1)
    window: Duration = 240.0


class SLO(Strict):
    """Limits the checkers judge. Absent limits are not judged."""

    detect_within: Duration | None = None
    restart_within: Duration | None = None
    restore_within: Duration | None = None
    first_step_within: Duration | None = None
    max_lost_steps: int | None = Field(None, ge=0)
    goodput_min: float | None = Field(None, ge=0, le=1)


class Abort(Strict):
    max_duration: Duration = 600.0


FaultClass = Literal["fail-stop", "fail-hang", "fail-slow", "recovery-path"]


class DrillSpec(Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    class_: FaultClass = Field(alias="class")
    summary: str
    runbook: str | None = None
    job: str | None = None
    fault: FaultSpec
    steady: Steady = Field(default_factory=Steady)
    observe: Observe = Field(default_factory=Observe)
    slo: SLO = Field(default_factory=SLO)
    abort: Abort = Field(default_factory=Abort)
