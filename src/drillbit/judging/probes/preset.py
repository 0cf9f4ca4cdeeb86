"""Signal presets: log signatures per recovery stack, loaded from presets/*.yaml."""
from __future__ import annotations

import os
import re
import time
from functools import lru_cache
from pathlib import Path

from pydantic import field_validator

from drillbit.core import events
from drillbit.core.errors import Problem, SpecError
from drillbit.core.paths import entered
from drillbit.spec.load import suggest, read_yaml, validate
from drillbit.spec.models import Strict, compile_regex
from drillbit.spec.signals import Signal

PRESET_DIR = Path(__file__).parent / "presets"


class ErrorPattern(Strict):
    """A line that reports the job's own error (``errors:`` in a preset): the verdict of a
    failed restart quotes it. Group ``message`` is quoted (else the whole line); ``rank``,
    where the line names one."""

    pattern: str
    by: str | None = None
    name: str | None = None

    @field_validator("pattern")
    @classmethod
    def _regex(cls, value: str) -> str:
        compile_regex(value, "pattern")
        return value

    def signal(self, preset: str) -> Signal:
        return Signal(kind="error", pattern=self.pattern, ints=["rank"] if "(?P<rank>" in self.pattern else [],
                      by=self.by or preset, name=self.name)


class Preset(Strict):
    name: str
    description: str = ""
    signals: list[Signal]
    errors: list[ErrorPattern] = []

    def all_signals(self) -> list[Signal]:
        return self.signals + [e.signal(self.name) for e in self.errors]


# a line of these kinds begins a new attempt: the same step number after it is a step again
NEW_ATTEMPT = ("restart", "restore.begin", "restore")


class Matcher:
    """Compiled signals of one or more presets; turns a line into (kind, t, data)."""

    def __init__(self, signals: list[Signal], base: str | None = None) -> None:
        """``base``: the job's working folder, against which a relative ``path`` in its lines
        is taken (LitGPT prints 'Resuming training from out/step-000020/lit_model.pth')."""
        self.base = base
        self._signals = [(s, re.compile(s.pattern), {k: re.compile(v) for k, v in s.lists.items()})
                         for s in signals]

    def _place(self, data: dict) -> None:
        """A path in the line, absolute and resolved: a relative one against the job's own
        folder (not ours), resolved where the line is read (the node that wrote it), so a job
        that names its checkpoint through a link names the same file as the kernel's reads
        and the fault's record."""
        if isinstance(data.get("path"), str) and not os.path.isabs(data["path"]) and self.base:
            data["path"] = os.path.join(self.base, data["path"])
        if isinstance(data.get("path"), str) and os.path.isabs(data["path"]):
            data["path"] = entered(data["path"])

    def match(self, line: str, repeat_of: int | None = None) -> list[tuple[str, float | None, dict]]:
        """(kind, time from the line or None, data) for every signal the line matches. The
        data says where the time came from (t_source: line or read); a line whose time
        cannot be read is kept, with the time it was read. ``repeat_of``: the step number
        the reader saw last; a step line of that number again (the next rank's line of the
        same step) is left out before its payload is checked, unless the line began a new
        attempt (the reader drops it anyway; checking it was most of a node's parsing)."""
        hits: list[tuple[str, float | None, dict]] = []
        for sig, rx, lists in self._signals:
            if sig.kind == "error" and any(kind == "error" for kind, _, _ in hits):
                continue  # one error per line: the first pattern that names it
            m = rx.search(line)
            if not m:
                continue
            data: dict = {k: v for k, v in m.groupdict().items() if v is not None}
            t = _stamp(sig, data)
            data["t_source"] = "line" if t is not None else "read"
            if not _numbers(sig, data):
                continue  # a group that should be a number is not: the line is not this signal
            if (sig.kind == "step" and repeat_of is not None and data.get("n") == repeat_of
                    and not any(kind in NEW_ATTEMPT for kind, _, _ in hits)):
                hits.append((sig.kind, t, {"n": repeat_of}))  # a step, unchecked: the reader drops it as the same
                continue
            for name, item in lists.items():
                if name in data:
                    data[name] = [_item(m) for m in item.finditer(data[name])]
            for k, v in sig.fields.items():
                data.setdefault(k, v)
            self._place(data)
            if sig.by and "by" not in data:
                data["by"] = sig.by
            if sig.kind == "error":
                data["message"] = (data.get("message") or line).strip()[:300]
            data, problem = events.check(sig.kind, data)  # typed as its kind reads it (core/events.py)
            if problem is not None:
                continue  # a step with no step number: the line is not this signal
            hits.append((sig.kind, t, data))
        return hits


def _stamp(sig: Signal, data: dict) -> float | None:
    """The time a line gives (its group ``t``), or None where it gives none or one that
    cannot be read (kept as ``t_unread``)."""
    if "t" not in data:
        return None
    stamp = data.pop("t")
    try:
        t = sig.parse_time(stamp)
    except ValueError:
        data["t_unread"] = stamp
        return None
    # a coarse stamp (whole seconds) bounds the time from below; the line was read after it
    # was written, so a read within the stamp's span is the closer time (a restart's first
    # step then falls after its restore line)
    span, now = sig.time_resolution(stamp), time.time()
    return now if span and t <= now < t + span else t


def _numbers(sig: Signal, data: dict) -> bool:
    """The groups the signal reads as numbers, as numbers; False where one is not a number."""
    try:
        for k in sig.ints:
            if k in data:
                data[k] = int(data[k])
        for k in sig.floats:
            if k in data:
                data[k] = float(data[k])
    except ValueError:
        return False
    return True


def _item(m: re.Match) -> dict:
    """One find of a list regex: its named groups, rank as a number, and an id (the whole
    find unless the regex names one)."""
    item = {k: v for k, v in m.groupdict().items() if v is not None}
    item.setdefault("id", m.group(0))
    if "rank" in item:
        try:
            item["rank"] = int(item["rank"])
        except ValueError:
            del item["rank"]
    return item


def available() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def is_file(name: str) -> bool:
    """A preset named by a path (a YAML file of the user's) rather than a built-in name."""
    return name.endswith((".yaml", ".yml")) or "/" in name


@lru_cache(maxsize=None)
def load(name: str) -> Preset:
    """A built-in preset by name, or the user's preset file by path (./presets/my-stack.yaml)."""

    try:
        path = Path(name).expanduser() if is_file(name) else PRESET_DIR / f"{name}.yaml"
        exists = path.is_file()
    except (RuntimeError, OSError, ValueError) as exc:  # ~nosuchuser/…, a name too long, a NUL byte
        raise SpecError([Problem(name[:200], None, "", f"not a preset file drillbit can open ({exc})")]) from None
    if not exists:
        if is_file(name):
            raise SpecError([Problem(name, None, "", "no such preset file")])
        raise SpecError([Problem(name, None, "", "unknown signal preset" + suggest(name, available()))])
    data, lines = read_yaml(path)
    preset, problems = validate(Preset, data, path, lines)
    if problems:
        raise SpecError(problems)
    return preset


def signals_of(presets: list[str], inline: list[Signal] | None = None) -> list[Signal]:
    """Every signal a job profile reads its logs with: its presets', then its own."""
    return [s for name in presets for s in load(name).all_signals()] + list(inline or [])


def matcher(signals: list[Signal], kinds: set[str] | None = None, exclude: set[str] | None = None,
            base: str | None = None) -> Matcher:
    return Matcher([s for s in signals
                    if (kinds is None or s.kind in kinds) and (exclude is None or s.kind not in exclude)], base)
