"""Signals: how one kind of log line becomes one kind of history event.

A signal is an event kind, a regex over one line, which named groups to read as numbers,
and where the event's time comes from: a group named ``t`` read as epoch seconds, or with a
``time_format`` (``iso8601``, or a ``strptime`` format such as Python logging's
``%Y-%m-%d %H:%M:%S,%f``) and, for stamps without a zone, a ``timezone`` (``UTC``,
``+02:00``, ``Europe/Berlin``; default: this machine's). Without a ``t`` group the event
gets the time the line was read; each event says which (``t_source``: ``line`` or ``read``).
Signals come from presets (built-in names, or YAML files of the user's) and from a job
profile's own ``signals:``.
"""
from __future__ import annotations

import math
import re
from difflib import get_close_matches
from datetime import datetime, timedelta, timezone as dt_timezone, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator, model_validator

from drillbit.core.events import JOB_KINDS
from drillbit.spec.models import Strict, compile_regex

# The event kinds a signal may name, and what each needs from a signal's groups: the job
# payloads of core/events.py, whose docstrings say it.
KINDS: dict[str, str] = JOB_KINDS


class Signal(Strict):
    kind: str
    """the event the line is: step, detect, restart, restore, ckpt.save, blame, members, ... (drill probe lists them)"""
    pattern: str
    """a regex with named groups (?P<step>...), matched against each log line"""
    name: str | None = Field(None, description="what the line is, in words, where its pattern does not say "
                                               "(shown by drill probe)")
    ints: list[str] = Field(default_factory=list)
    """groups read as integers"""
    floats: list[str] = Field(default_factory=list)
    """groups read as numbers"""
    by: str | None = None
    """the group naming who printed the line (a rank, a replica), for per-rank signals"""
    time_format: str | None = Field(None, description="how group t is written: iso8601, or a strptime format; "
                                                      "none: epoch seconds")
    timezone: str | None = Field(None, description="for stamps without a zone: UTC, +02:00 or an IANA name")
    fields: dict[str, str | int | float | bool] = Field(default_factory=dict, description=(
        "fields every event of this signal carries, for what the line says by its words rather than a group: "
        "{tier: peer} for 'fetching from P2P'; a group of the same name wins"))
    lists: dict[str, str] = Field(default_factory=dict, description=(
        "groups read as lists: group -> a regex found again and again in that group's text; each find is one "
        "item, its named groups the item's fields (rank is read as a number; id names the item, default the "
        "whole find)"))

    @field_validator("pattern")
    @classmethod
    def _regex(cls, value: str) -> str:
        rx = compile_regex(value, "pattern")
        if rx.groups and not rx.groupindex:
            raise ValueError("name the groups (?P<name>...); unnamed groups are not read")
        return value

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str | None) -> str | None:
        if value is not None:
            zone_of(value)
        return value

    @model_validator(mode="after")
    def _fields(self) -> "Signal":
        if self.kind not in KINDS:
            near = get_close_matches(self.kind, KINDS, n=1)
            raise ValueError(f"kind {self.kind!r} is not one a signal can name"
                             + (f" (did you mean {near[0]!r}?)" if near else "") + f"; the kinds: {', '.join(KINDS)}")
        groups = set(re.compile(self.pattern).groupindex)
        missing = [g for g in self.ints + self.floats if g not in groups]
        if missing:
            raise ValueError(f"ints/floats name groups the pattern does not have: {missing}")
        reserved = sorted(groups & {"source", "kind"})
        if reserved:
            raise ValueError(f"group name(s) {reserved} are reserved (every event has them); rename the group")
        reserved = sorted(set(self.fields) & {"source", "kind", "t", "t_source"})
        if reserved:
            raise ValueError(f"fields {reserved} are reserved (every event has them); rename them")
        missing = [g for g in self.lists if g not in groups]
        if missing:
            raise ValueError(f"lists name groups the pattern does not have: {missing}")
        for name, rx in self.lists.items():
            compile_regex(rx, f"lists.{name}")
        if self.kind == "members" and "members" not in self.lists:
            raise ValueError("a members signal reads its group members as a list: give lists: {members: REGEX}")
        if self.kind == "step" and "n" not in groups:
            raise ValueError("a step signal needs a group n (the step number)")
        if self.time_format is not None:
            if "t" not in groups:
                raise ValueError("time_format reads group t, which the pattern does not have")
            if self.time_format != "iso8601":
                try:
                    datetime(2026, 1, 2, 3, 4, 5, 6000).strftime(self.time_format)
                except ValueError as exc:
                    raise ValueError(f"bad time_format: {exc}") from None
                if "%" not in self.time_format:
                    raise ValueError("time_format is iso8601 or a strptime format such as %Y-%m-%d %H:%M:%S,%f")
        return self

    def time_resolution(self, text: str) -> float:
        """How coarse group t is, in seconds: a stamp of whole seconds (Megatron's
        ``%Y-%m-%d %H:%M:%S``) says only that the line was written within that second."""
        if self.time_format is None or self.time_format == "iso8601":
            clock = text.strip().replace("Z", "")
            if "." in clock or "," in clock:
                return 0.0
            return 60.0 if self.time_format and clock.count(":") == 1 else 1.0
        if "%f" in self.time_format:
            return 0.0
        return 1.0 if "%S" in self.time_format or "%s" in self.time_format else 60.0

    def parse_time(self, text: str) -> float:
        """Group t as epoch seconds; ValueError when it cannot be read (a stamp of NaN or inf
        too: it names no moment, and the line then gets the time it was read)."""
        if self.time_format is None:
            t = float(text)
            if not math.isfinite(t):
                raise ValueError(f"{text!r} is not a time")
            return t
        if self.time_format == "iso8601":
            stamp = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        else:
            stamp = datetime.strptime(text.strip(), self.time_format)
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=zone_of(self.timezone)) if self.timezone else stamp.astimezone()
        return stamp.timestamp()


@lru_cache(maxsize=64)
def zone_of(name: str) -> tzinfo:
    if name.upper() in ("UTC", "Z"):
        return dt_timezone.utc
    m = re.fullmatch(r"([+-])(\d{2}):?(\d{2})", name)
    if m:
        sign = 1 if m.group(1) == "+" else -1
        return dt_timezone(sign * timedelta(hours=int(m.group(2)), minutes=int(m.group(3))))
    try:
        if len(name) > 64 or "\x00" in name:
            raise ValueError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: 'Europe' is a folder of zones
        raise ValueError(f"unknown timezone {name[:64]!r} (UTC, +02:00, or an IANA name such as Europe/Berlin)") from None
