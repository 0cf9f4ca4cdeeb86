"""External progress watchdog for the reference job (a separate process).

It reads the job's event log and watches *progress*, not liveness: when no ``step`` has
landed for ``--deadline`` seconds it logs ``detect`` and SIGKILLs every worker of the
torchrun agent, so torchrun restarts the worker group (and the workers restore from the
newest good checkpoint). A stopped (SIGSTOPped) rank is as dead to it as a killed one.
BLOOM lost ~18 h to a hang that a liveness check called "running" (FACTS.md).
"""
from __future__ import annotations

import argparse
import signal
import time
from pathlib import Path

import psutil

from drillbit.probes.tail import FileFollower
from drillbit.reference import checkpoint
from drillbit.reference.eventlog import EventLog, parse_line


def worker_processes(agent_pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(agent_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--events", required=True)
    p.add_argument("--agent-pid", type=int, required=True, help="the torchrun agent's pid")
    p.add_argument("--deadline", type=float, default=10.0, help="seconds without a step")
    p.add_argument("--startup-grace", type=float, default=90.0,
                   help="seconds a (re)started worker group may take to its first step")
    p.add_argument("--restore-deadline", type=float, default=10.0,
                   help="seconds one checkpoint read during restore may take before it is quarantined")
    p.add_argument("--poll", type=float, default=0.25)
    args = p.parse_args(argv)

    log = EventLog(args.events, source="watchdog")
    follower = FileFollower(args.events, from_start=False)
    started = time.time()
    last_step: float | None = None  # None: waiting for the first step of an attempt
    waiting_since = started
    log.emit("watchdog.start", deadline=args.deadline, agent_pid=args.agent_pid)
    reading: tuple[str, float] | None = None  # a restore read in progress: (path, since)
    while psutil.pid_exists(args.agent_pid):
        for line in follower.read_lines():
            fields = parse_line(line)
            if not fields:
                continue
            if fields["kind"] == "step":
                last_step, reading = time.time(), None
            elif fields["kind"] == "worker.start":
                # a new worker group: it gets the start-up grace, not the step deadline
                last_step, waiting_since, reading = None, time.time(), None
            elif fields["kind"] == "restore.begin":
                reading = (fields["path"], time.time())
            elif fields["kind"] in ("restore", "ckpt.reject"):
                reading = None
        now = time.time()
        extra = {}
        if reading is not None and now - reading[1] > args.restore_deadline:
            # a restore that hangs on its read (OPT's restore downloads did): quarantine that
            # checkpoint so the next attempt falls back to an older one
            path = Path(reading[0])
            checkpoint.quarantine(path.parent, path.name)
            silent, limit, why = now - reading[1], args.restore_deadline, "restore-hang"
            extra = {"path": path}
            reading = None
        elif last_step is not None:
            silent, limit, why = now - last_step, args.deadline, "no-progress"
        else:
            silent, limit, why = now - waiting_since, args.startup_grace, "no-first-step"
        if silent > limit:
            victims = worker_processes(args.agent_pid)
            log.emit("detect", reason=why, silent_s=f"{silent:.2f}", workers=len(victims), **extra)
            for proc in victims:
                try:
                    proc.send_signal(signal.SIGKILL)
                except psutil.NoSuchProcess:
                    pass
            last_step, waiting_since = None, time.time()
        time.sleep(args.poll)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
