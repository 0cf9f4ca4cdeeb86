"""The one exception family of drillbit."""
from __future__ import annotations

from dataclasses import dataclass


class DrillError(Exception):
    """Base of every error drillbit raises on purpose."""


class ConfigError(DrillError):
    """The input or the environment is wrong (exit 2): fix it and run again."""


@dataclass(frozen=True)
class Problem:
    """One problem in a spec or config file, with where it is."""

    file: str
    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        field = f" {self.path}:" if self.path else ""
        return f"{where}:{field} {self.message}"


class SpecError(ConfigError):
    """Every problem found in the input, all at once."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class Inconclusive(DrillError):
    """The drill could not establish anything about the recovery path (exit 3): the job
    exited or never stepped before steady state, so nothing was injected. Not a harness bug,
    and not a recovery that failed."""


class FaultError(DrillError):
    """A fault could not be planned, injected or healed."""


class LeaseError(ConfigError):
    """The cluster is held by another drill (exit 2 on every command that takes the lease:
    nothing was started). ``held`` names the holder (who, pid, host, since); ``hint`` says
    what to do about it."""

    def __init__(self, held: str, hint: str = "wait for it to finish (--wait), or stop it") -> None:
        self.held = held
        self.hint = hint
        super().__init__(f"{held}; {hint}" if hint else held)


class Stopped(DrillError):
    """The operator stopped the command (Ctrl-C, SIGTERM) before it took the cluster: nothing
    was started, nothing is left to heal (exit 4, aborted)."""
