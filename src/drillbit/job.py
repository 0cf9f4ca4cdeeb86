"""A tiny reporter for teams who own their training loop: tell drillbit what the job does.

    from drillbit import job
    job.step(n)                               # after every optimizer step
    job.checkpoint_save_begin(step, path)     # a save starts
    job.checkpoint_saved(step, path)          # a save finished (and is complete)
    job.restored(step, path)                  # the job loaded a checkpoint

Each call writes one line, ``drillbit-event t=<epoch> kind=<kind> ... [path=<path>]``, that
the built-in ``drillbit`` preset reads: appended to the file named by ``$DRILLBIT_EVENTS``
(list it in the job profile's ``logs``), else to standard error. ``$DRILLBIT_HEARTBEAT``, if
set, names a file rewritten with ``<step> <epoch>`` at every step (the no-log alternative:
the profile's ``heartbeat_file``). The rank comes from ``$RANK`` when set.

With ``$DRILLBIT_METRICS_PORT`` set and ``prometheus_client`` installed (the ``metrics``
extra), the same calls also count on a Prometheus ``/metrics`` endpoint of the process, on
``$DRILLBIT_METRICS_ADDR`` (default 127.0.0.1) and port ``$DRILLBIT_METRICS_PORT + rank`` (one
per rank on a host): ``drillbit_job_step``, ``drillbit_job_steps_total``,
``drillbit_job_last_step_timestamp_seconds``, ``drillbit_job_checkpoint_saves_total`` and
``drillbit_job_restores_total``, labelled by ``rank``. Without ``prometheus_client`` nothing
is served (and ``job.metrics_error`` says why).

Standard library only otherwise. It never raises and never blocks: a line that cannot be
written at once (no such folder, a full pipe) is dropped and counted in ``job.dropped``; safe
to leave in production code.
"""
from __future__ import annotations

import os
import time

dropped = 0
metrics_error: str | None = None
_fd: int | None = None
_fd_for: str | None = None
_metrics: dict | None = None  # the process's metrics once served (or {} when they cannot be)


def _rank() -> str:
    rank = os.environ.get("RANK", "0")
    return rank if rank.isdigit() else "0"


def _counters() -> dict:
    """The Prometheus metrics of this process, served on first use when asked for."""
    global _metrics, metrics_error
    if _metrics is not None:
        return _metrics
    _metrics = {}
    port = os.environ.get("DRILLBIT_METRICS_PORT", "")
    if not port:
        return _metrics
    try:
        import prometheus_client as pc

        registry = pc.CollectorRegistry()
        labels = ["rank"]
        made = {
            "step": pc.Gauge("drillbit_job_step", "The number of the job's latest optimizer step", labels,
                             registry=registry),
            "steps": pc.Counter("drillbit_job_steps", "Optimizer steps this process finished", labels,
                                registry=registry),
            "last": pc.Gauge("drillbit_job_last_step_timestamp_seconds", "When the latest step finished (Unix time)",
                             labels, registry=registry),
            "saves": pc.Counter("drillbit_job_checkpoint_saves", "Checkpoint saves this process finished", labels,
                                registry=registry),
            "restores": pc.Counter("drillbit_job_restores", "Checkpoints this process restored", labels,
                                   registry=registry),
        }
        pc.start_http_server(int(port) + int(_rank()), addr=os.environ.get("DRILLBIT_METRICS_ADDR", "127.0.0.1"),
                             registry=registry)
        _metrics = {k: m.labels(rank=_rank()) for k, m in made.items()}
    except Exception as exc:  # no prometheus_client, a port in use: the events still go out
        metrics_error = f"{exc.__class__.__name__}: {exc}"
    return _metrics


def _out() -> int | None:
    """The file descriptor to write to, opened once per $DRILLBIT_EVENTS value."""
    global _fd, _fd_for
    target = os.environ.get("DRILLBIT_EVENTS", "")
    if _fd is not None and _fd_for == target:
        return _fd
    if _fd is not None and _fd_for:
        os.close(_fd)
    _fd, _fd_for = None, target
    if target:
        _fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644)
    else:
        _fd = os.dup(2)
        os.set_blocking(_fd, False)
    return _fd


def _emit(kind: str, path: str | None = None, **fields: object) -> None:
    global dropped
    try:
        rank = os.environ.get("RANK")
        parts = [f"drillbit-event t={time.time():.6f} kind={kind}"]
        parts += [f"{k}={v}" for k, v in fields.items() if v is not None]
        if rank is not None and rank.isdigit():
            parts.append(f"rank={rank}")
        if path is not None:
            parts.append(f"path={path}")
        line = (" ".join(parts).replace("\n", " ") + "\n").encode()
        fd = _out()
        if fd is None or os.write(fd, line) != len(line):
            dropped += 1
    except Exception:  # never raise into the training loop; the count says it happened
        dropped += 1


def _count(*names: str, step: int | None = None) -> None:
    global dropped
    try:
        m = _counters()
        if not m:
            return
        for name in names:
            m[name].inc()
        if step is not None:
            m["step"].set(step)
            m["last"].set(time.time())
    except Exception:
        dropped += 1


def step(n: int) -> None:
    """An optimizer step finished; ``n`` is its number."""
    _emit("step", n=int(n))
    _count("steps", step=int(n))
    beat = os.environ.get("DRILLBIT_HEARTBEAT")
    if beat:
        global dropped
        try:
            tmp = f"{beat}.{os.getpid()}.tmp"
            with open(tmp, "w") as fh:
                fh.write(f"{int(n)} {time.time():.6f}\n")
            os.replace(tmp, beat)
        except Exception:  # as above: counted, never raised
            dropped += 1


def checkpoint_save_begin(step: int, path: str) -> None:
    _emit("ckpt.save.begin", path=str(path), step=int(step))


def checkpoint_saved(step: int, path: str, seconds: float | None = None) -> None:
    _emit("ckpt.save", path=str(path), step=int(step), seconds=None if seconds is None else f"{seconds:.6f}")
    _count("saves")


def restored(step: int, path: str) -> None:
    _emit("restore", path=str(path), step=int(step))
    _count("restores")
