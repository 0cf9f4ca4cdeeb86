"""The stand-in that fail-node-replacement puts first on the job's PATH, under the name of
the job's node-replacement command (the profile's ``replacement.command``).

While the fault holds, the next ``remaining`` calls misbehave as ``mode`` says; every other
call, and every call once the fault is healed (the shim is gone then), reaches the real
command further along PATH. ``state.json`` beside the shim holds the mode and the count;
``calls.jsonl`` records each call; a hanging call writes its pid under ``hung/`` so heal
can end it.

    <shim_dir>/<command>  ->  python -m drillbit.faults.provider_shim <shim_dir> <command> ARGS...
"""
from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from pathlib import Path

from drillbit.core.proc import which

STATE, CALLS, HUNG = "state.json", "calls.jsonl", "hung"


def script(python: str, shim_dir: Path, command: str) -> str:
    return (f"#!/bin/sh\n# drillbit fail-node-replacement: removed when the fault heals\n"
            f"exec '{python}' -m drillbit.faults.provider_shim '{shim_dir}' '{command}' \"$@\"\n")


def _take(shim_dir: Path) -> dict | None:
    """The misbehaviour this call gets (counting it down), or None to pass through."""
    path = shim_dir / STATE
    try:
        with open(shim_dir / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = json.loads(path.read_text())
            if state.get("remaining", 0) <= 0:
                return None
            state["remaining"] -= 1
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(state))
            os.replace(tmp, path)
            return state
    except (OSError, ValueError):
        return None


def _record(shim_dir: Path, **data: object) -> None:
    try:
        with open(shim_dir / CALLS, "a") as fh:
            fh.write(json.dumps({"t": time.time(), "pid": os.getpid(), **data}) + "\n")
    except OSError:
        pass


def _real(shim_dir: Path, command: str, args: list[str]) -> int:
    here = os.path.realpath(shim_dir)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and os.path.realpath(p) != here)
    found = which(command, path=path)  # PATH less the shim, else beside this interpreter
    if found is None or os.path.realpath(os.path.dirname(found)) == here:
        print(f"{command}: not found on PATH or beside {sys.executable} (drillbit's replacement shim passes "
              "calls through to it)",
              file=sys.stderr)
        return 127
    os.environ["PATH"] = path
    os.execv(found, [found, *args])
    return 127  # not reached


def main(argv: list[str]) -> int:
    shim_dir, command, args = Path(argv[0]), argv[1], argv[2:]
    state = _take(shim_dir)
    if state is None:
        _record(shim_dir, args=args, mode="pass")
        return _real(shim_dir, command, args)
    mode = state["mode"]
    _record(shim_dir, args=args, mode=mode)
    if mode == "fail":
        print("node replacement failed: no capacity (drillbit fail-node-replacement)", file=sys.stderr)
        return 1
    if mode == "same-node":
        flag = state.get("failed_arg")
        value = args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else ""
        print(value or state.get("bad_node", ""))
        return 0
    hung = shim_dir / HUNG
    hung.mkdir(exist_ok=True)
    (hung / str(os.getpid())).write_text(command)
    while True:  # hang: never answer, as OPT-175B's provider did for hours; heal ends this process
        time.sleep(3600)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
