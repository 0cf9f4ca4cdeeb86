"""Where a hang is stuck: the Python stacks of a job's live ranks, and the frames they share.

When ranks stop making progress and that decides a drill (a stall, a restart that never
steps, a restore that hangs, a fault that wedges the job), the first question of whoever is
on call is *where*. The agent on each rank's node dumps its ranks with py-spy (PyPI's
``py-spy`` ships its binary; it reads the process's memory without pausing it,
``--nonblocking``), and :func:`shared_frames` finds the innermost frames the ranks of one
attempt have in common: "ranks 0–2 of attempt 1 stuck in init_process_group → rendezvous".

py-spy needs ptrace rights on the process (root, the same user with
``kernel.yama.ptrace_scope`` 0, or CAP_SYS_PTRACE); where it cannot attach, the dump says so
and nothing is concluded from it.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel

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


def shared_frames(stacks: list[RankStack], depth: int = 3) -> list[Frame]:
    """The innermost frames that every rank's main thread shares, outermost of them first:
    the path from the entry point inward that all of them took, cut where they part, its last
    ``depth`` frames. Empty when they share nothing but the entry point."""
    paths = [list(reversed(s.main())) for s in stacks if s.ok and s.main()]  # outermost first
    if not paths:
        return []
    common: list[Frame] = []
    for frames in zip(*paths, strict=False):
        first = frames[0]
        if all((f.name, f.file) == (first.name, first.file) for f in frames):
            common.append(first)
        else:
            break
    meaningful = [f for f in common if f.name not in _PLUMBING]
    return meaningful[-depth:]


def ranks_text(ranks: list[int | None], pids: list[int]) -> str:
    known = sorted(r for r in ranks if r is not None)
    if known and len(known) == len(ranks):
        if len(known) > 2 and known == list(range(known[0], known[-1] + 1)):
            return f"ranks {known[0]}–{known[-1]}"
        return ("rank " if len(known) == 1 else "ranks ") + ", ".join(map(str, known))
    return "pids " + ", ".join(map(str, pids))


def where_stuck(stacks: list[RankStack], attempt: int) -> str:
    """One sentence: which ranks of which attempt are stuck where, or why that is unknown."""
    read = [s for s in stacks if s.ok and s.main()]
    failed = [s for s in stacks if not s.ok]
    who = f"of attempt {attempt}" if attempt else "of the first attempt"
    if not read:
        if not stacks:
            return "no live rank to dump (the job's ranks were gone)"
        return "the ranks' stacks could not be read: " + "; ".join(sorted({s.error for s in failed}))
    shared = shared_frames(read)
    names = ranks_text([s.rank for s in read], [s.pid for s in read])
    if shared:
        text = f"{names} {who} stuck in " + " → ".join(f.name for f in shared)
        last = shared[-1]
        text += f" ({os.path.basename(last.file)}:{last.line})" if last.line else ""
    else:
        inner = "; ".join(f"{ranks_text([s.rank], [s.pid])} in {s.main()[0].short()}" for s in read)
        text = f"{names} {who} share no frame past the entry point: {inner}"
    if failed:
        text += f"; {len(failed)} rank(s) not read ({failed[0].error})"
    return text
