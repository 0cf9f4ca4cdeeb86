"""External progress watchdog for the reference job (a separate process).

It reads the job's event log and watches *progress*, not liveness: when no ``step`` has
landed for ``--deadline`` seconds it logs ``detect`` and SIGKILLs every worker of the
torchrun agent, so torchrun restarts the worker group (and the workers restore from the
newest good checkpoint). A stopped (SIGSTOPped) rank is as dead to it as a killed one.
BLOOM lost ~18 h to a hang that a liveness check called "running" (bigscience train/tr11-176B-ml/chronicles.md, 2022-04-30).

``--watch liveness`` makes it that liveness check instead, for the drills that must tell
the two apart: each worker's thread touches ``ALIVE_DIR/<pid>`` every second
(train.py ``--alive-dir``), and the watchdog acts only when one of those goes stale — a
stopped or dead worker, never one that is alive but waiting on a network that dropped it.
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
    p.add_argument("--watch", choices=["progress", "liveness"], default="progress")
    p.add_argument("--alive-dir", default=None, help="--watch liveness: the workers' heartbeat files")
    args = p.parse_args(argv)
    if args.watch == "liveness":
        return watch_liveness(args)

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


def stale_workers(agent_pid: int, alive_dir: Path, deadline: float, grace: float) -> list[psutil.Process]:
    """The agent's workers whose heartbeat file is older than ``deadline`` (a worker that has
    written none yet gets ``grace`` from its start)."""
    now = time.time()
    stale = []
    try:
        workers = psutil.Process(agent_pid).children()
    except psutil.NoSuchProcess:
        return []
    for proc in workers:
        try:
            beat = (alive_dir / str(proc.pid)).stat().st_mtime
            limit = deadline
        except OSError:
            try:
                beat, limit = proc.create_time(), grace
            except psutil.NoSuchProcess:
                continue
        if now - beat > limit:
            stale.append(proc)
    return stale


def watch_liveness(args: argparse.Namespace) -> int:
    log = EventLog(args.events, source="watchdog")
    alive = Path(args.alive_dir)
    log.emit("watchdog.start", deadline=args.deadline, agent_pid=args.agent_pid, watch="liveness")
    while psutil.pid_exists(args.agent_pid):
        stale = stale_workers(args.agent_pid, alive, args.deadline, args.startup_grace)
        if stale:
            victims = worker_processes(args.agent_pid)
            log.emit("detect", reason="no-heartbeat", stale=",".join(str(p.pid) for p in stale), workers=len(victims))
            for proc in victims:
                try:
                    proc.send_signal(signal.SIGKILL)
                except psutil.NoSuchProcess:
                    pass
        time.sleep(args.poll)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
