"""Where a hang is stuck: the Python stacks of a job's live ranks, and the frames they share.

When ranks stop making progress and that decides a drill (a stall, a restart that never
steps, a restore that hangs, a fault that wedges the job), the first question of whoever is
on call is *where*. The agent on each rank's node dumps its ranks with py-spy (PyPI's
``py-spy`` ships its binary; it reads the process's memory without pausing it,
``--nonblocking``; a process stopped by SIGSTOP is read as well, and stays stopped).
:func:`where_stuck` says it in one sentence: the path the ranks of one attempt share, quoted
once, then each rank's own innermost frame, ranks in one frame grouped, and the rank the fault
acted on named as such (:class:`Hit`). stall-nccl on the reference job: "ranks 0–1 of the first
attempt share main; rank 0 in Tensor.backward → … → _engine_run_backward (graph.py:979); rank
1, the one the fault stopped, in compute (train.py:195)". The rank a stall froze is elsewhere
than the ranks waiting for it, and that is the first thing to see.

py-spy needs ptrace rights on the process (root, the same user with
``kernel.yama.ptrace_scope`` 0, or CAP_SYS_PTRACE); where it cannot attach, the dump says so,
the sentence names that rank as not read, and nothing is concluded from it.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from drillbit.core.proc import ProcRef

PY_SPY_TIMEOUT_S = 20.0


class Frame(BaseModel):
    name: str
    file: str
    line: int | None = None

    def short(self) -> str:
        return f"{self.name} ({os.path.basename(self.file)}:{self.line})" if self.line else self.name


class RankStack(BaseModel):
    """One rank's dump: its threads' frames, innermost first, or why there is none."""

    node: str | None = None
    pid: int
    rank: int | None = None
    ok: bool
    error: str = ""
    threads: dict[str, list[Frame]] = {}   # thread name (or id) -> frames, innermost first

    def main(self) -> list[Frame]:
        """The thread that matters: the main thread where named, else the first with frames."""
        if "MainThread" in self.threads:
            return self.threads["MainThread"]
        return next((f for f in self.threads.values() if f), [])


def py_spy() -> str | None:
    """The py-spy binary: beside this Python (a virtual environment's bin), else on PATH."""
    here = Path(sys.executable).parent / "py-spy"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("py-spy")


def dump(ref: ProcRef, timeout: float = PY_SPY_TIMEOUT_S) -> RankStack:
    """The rank's Python stacks, read by py-spy without stopping it; never raises."""
    base = {"node": ref.node, "pid": ref.pid, "rank": ref.rank}
    binary = py_spy()
    if binary is None:
        return RankStack(**base, ok=False, error="py-spy is not installed on this node (pip install py-spy)")
    if not ref.alive():
        return RankStack(**base, ok=False, error="the process is gone")
    try:
        done = subprocess.run([binary, "dump", "--pid", str(ref.pid), "--json", "--nonblocking"],
                              capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return RankStack(**base, ok=False, error=f"py-spy did not answer within {timeout:g} s")
    except OSError as exc:
        return RankStack(**base, ok=False, error=f"py-spy could not run: {exc}")
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        return RankStack(**base, ok=False, error="py-spy cannot attach: " + (why[-1] if why else f"exit "
                                                                               f"{done.returncode}"))
    try:
        threads = json.loads(done.stdout)
    except json.JSONDecodeError:
        return RankStack(**base, ok=False, error="py-spy printed no JSON")
    out: dict[str, list[Frame]] = {}
    for i, t in enumerate(threads if isinstance(threads, list) else []):
        name = t.get("thread_name") or ("MainThread" if t.get("os_thread_id") == ref.pid else f"thread {i}")
        out[str(name)] = [Frame(name=str(f.get("name", "?")), file=str(f.get("filename", "?")), line=f.get("line"))
                          for f in t.get("frames") or []]
    return RankStack(**base, ok=True, threads=out)


# frames of the interpreter's and the launcher's own plumbing: never "where" a rank is stuck
_PLUMBING = ("<module>", "_run_module_as_main", "_run_code", "run_path", "wrapper")
SHARED_DEPTH = 3  # the shared path's innermost frames quoted
MAX_GROUPS = 4    # places (or reasons a rank was not read) listed one by one; the rest counted


def _same(a: ProcRef, b: ProcRef) -> bool:
    """One process: the same pid on the same node, started at the same moment (after boot
    where both know it, else by the wall clock to psutil's 10 ms)."""
    if (a.pid, a.node or "") != (b.pid, b.node or ""):
        return False
    if a.boot_start is not None and b.boot_start is not None:
        return a.boot_start == b.boot_start
    return abs(a.start_time - b.start_time) <= 0.01


class Hit(BaseModel):
    """The live ranks the fault acted on, by node and pid, and what it did to them (the fault's
    verb, "stopped"): :func:`where_stuck` names them apart, so the rank a stall froze is not
    read as one more rank waiting for it."""

    model_config = ConfigDict(frozen=True)

    verb: str = "hurt"
    procs: list[tuple[str, int]] = []  # (node, "" where none is named; pid)

    @classmethod
    def among(cls, ranks: list[ProcRef], targets: list[ProcRef], verb: str) -> "Hit":
        """Those of ``ranks`` that are the fault's ``targets`` themselves (a pid reused since
        is another process, and not named)."""
        return cls(verb=verb, procs=[(r.node or "", r.pid) for r in ranks if any(_same(r, t) for t in targets)])

    def of(self, stack: RankStack) -> bool:
        return (stack.node or "", stack.pid) in self.procs

    def phrase(self, many: bool) -> str:
        """"the one the fault stopped", in the fault's own verb."""
        who = "the ones" if many else "the one"
        if self.verb.startswith("behind "):
            return f"{who} {self.verb}"
        if self.verb.startswith("lost "):
            return f"{who} that {self.verb}"
        return f"{who} the fault {self.verb}"


def _path(stack: RankStack) -> list[Frame]:
    """The main thread's frames, outermost first."""
    return list(reversed(stack.main()))


def _common(paths: list[list[Frame]]) -> list[Frame]:
    """The frames every path took from the entry point inward, to where they part (a frame is
    its function: name and file; the line may differ)."""
    common: list[Frame] = []
    for frames in zip(*paths, strict=False):
        first = frames[0]
        if not all((f.name, f.file) == (first.name, first.file) for f in frames):
            break
        common.append(first)
    return common


def shared_frames(stacks: list[RankStack], depth: int = SHARED_DEPTH) -> list[Frame]:
    """The innermost frames that every rank's main thread shares, outermost of them first:
    the path from the entry point inward that all of them took, cut where they part, its last
    ``depth`` frames. Empty when they share nothing but the entry point."""
    paths = [_path(s) for s in stacks if s.ok and s.main()]
    if not paths:
        return []
    meaningful = [f for f in _common(paths) if f.name not in _PLUMBING]
    return meaningful[-depth:]


def _runs(numbers: list[int], most: int = 6) -> str:
    """0, 2–5, 7: consecutive numbers as a range; past ``most`` ranges, how many in all."""
    out: list[str] = []
    i = 0
    while i < len(numbers):
        j = i
        while j + 1 < len(numbers) and numbers[j + 1] == numbers[j] + 1:
            j += 1
        out.append(str(numbers[i]) if i == j else f"{numbers[i]}–{numbers[j]}")
        i = j + 1
    if len(out) > most:
        return ", ".join(out[:most - 1]) + f", … ({len(numbers)} in all)"
    return ", ".join(out)


def ranks_text(stacks: list[RankStack]) -> str:
    """"ranks 0, 2–5", and by pid those whose rank is unknown."""
    known = sorted({s.rank for s in stacks if s.rank is not None})
    pids = sorted(s.pid for s in stacks if s.rank is None)
    parts = []
    if known:
        parts.append(("rank " if len(known) == 1 else "ranks ") + _runs(known))
    if pids:
        shown = ", ".join(map(str, pids[:8])) + (f", … ({len(pids)} in all)" if len(pids) > 8 else "")
        parts.append(("pid " if len(pids) == 1 else "pids ") + shown)
    return " and ".join(parts)


def _place(path: list[Frame], shared: int) -> str:
    """Where one rank is, past the ``shared`` frames all ranks took: its innermost frame, after
    the first frame of its own where it has several ("training_step → … → forward (linear.py:125)")."""
    inner = path[-1]
    own = path[shared:-1]
    outer = next((i for i, f in enumerate(own) if f.name not in _PLUMBING), None)
    if outer is None:
        return inner.short()
    return own[outer].name + (" → … → " if outer < len(own) - 1 else " → ") + inner.short()


def _note(group: list[RankStack], hit: Hit) -> str:
    """The fault's targets in a group, named as such: ", the one the fault stopped,", or
    " (rank 1 the one the fault cut off)" where the group holds others too."""
    hits = [s for s in group if hit.of(s)]
    if not hits:
        return ""
    if len(hits) == len(group):
        return f", {hit.phrase(len(hits) > 1)},"
    return f" ({ranks_text(hits)} {hit.phrase(len(hits) > 1)})"


def _order(stack: RankStack) -> tuple[bool, int, int]:
    return (stack.rank is None, stack.rank or 0, stack.pid)


def _listed(groups: dict[str, list[RankStack]], hit: Hit, say: str, rest: str) -> list[str]:
    """Each group as "<ranks> <say> <key>", the fault's targets always, the others by rank up
    to MAX_GROUPS in all, the rest counted: "and 5 more ranks in 3 other frames"."""
    keys = sorted(groups, key=lambda k: min(_order(s) for s in groups[k]))
    shown = [k for k in keys if any(hit.of(s) for s in groups[k])]
    shown += [k for k in keys if k not in shown][:max(0, MAX_GROUPS - len(shown))]
    out = [f"{ranks_text(groups[k])}{_note(groups[k], hit)} {say}{k}" for k in keys if k in shown]
    left = [s for k in keys if k not in shown for s in groups[k]]
    if left:
        many = len(keys) - len(shown)
        out.append(f"and {len(left)} more rank{'s' if len(left) > 1 else ''} {rest.format(n=many, s='s' if many > 1 else '')}")
    return out


def where_stuck(stacks: list[RankStack], attempt: int, hit: Hit | None = None) -> str:
    """One sentence: where the live ranks of the attempt are stuck, or why that is unknown.
    The path they all took is quoted once, as shared; then each rank's own innermost frame,
    ranks in the same frame grouped (a few groups, the rest counted); the rank(s) the fault
    acted on (``hit``) are always named as such; a rank py-spy could not read is said to be
    unread, with why."""
    hit = hit or Hit()
    if not stacks:
        return "no live rank to dump (the job's ranks were gone)"
    read = sorted((s for s in stacks if s.ok and s.main()), key=_order)
    unread: dict[str, list[RankStack]] = {}
    for s in sorted((s for s in stacks if not (s.ok and s.main())), key=_order):
        unread.setdefault(s.error or "py-spy found no Python frame", []).append(s)
    not_read = _listed({f"({why})": group for why, group in unread.items()}, hit, "not read ",
                       "not read, for {n} other reason{s}")
    if not read:
        return "the ranks' stacks could not be read: " + "; ".join(not_read)
    who = f"of attempt {attempt}" if attempt else "of the first attempt"
    paths = {id(s): _path(s) for s in read}
    common = _common(list(paths.values()))
    meaningful = [f for f in common if f.name not in _PLUMBING]
    places: dict[str, list[RankStack]] = {}
    for s in read:
        places.setdefault(_place(paths[id(s)], len(common)), []).append(s)
    shared = ("… → " if len(meaningful) > SHARED_DEPTH else "") + " → ".join(f.name for f in meaningful[-SHARED_DEPTH:])
    if len(places) == 1:
        [(place, group)] = places.items()
        all_in_it = all(len(p) == len(common) for p in paths.values())  # the innermost frame is shared too
        where = (shared + (f" ({os.path.basename(common[-1].file)}:{common[-1].line})" if common[-1].line else "")
                 if all_in_it and meaningful and meaningful[-1] is common[-1] else
                 (f"{shared} → " if meaningful else "") + place)
        text = f"{ranks_text(group)} {who}{_note(group, hit)} stuck in {where}"
    else:
        head = f"{ranks_text(read)} {who} " + (f"share {shared}" if meaningful else "share no frame past the entry point")
        text = "; ".join([head, *_listed(places, hit, "in ", "in {n} other frame{s}")])
    return "; ".join([text, *not_read])
