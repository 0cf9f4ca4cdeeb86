"""The cluster lease: one drill at a time per cluster.

For the embedded local cluster the lease is an exclusive ``flock`` on a file named after
the cluster: the kernel drops it when the holder dies, so a dead holder's lease expires
by itself. The file says who holds it, for the refusal message. It is in the claims home
(:func:`drillbit.core.statedir.claims_home`): root's ``/run/drillbit`` whatever the
environment says, so two root drills on one cluster name always meet there; a user's own
state folder otherwise (a root drill and a user's drill on one cluster name hold two leases).

A busy cluster is refused (LeaseError: exit 2, naming the holder) unless the command was
told to wait (``--wait [DURATION]``, :data:`LEASE_WAIT`): then :func:`take` asks again, with
backoff, through the engine's own atomic acquire — the same one a single try uses — so
waiting never lets two drills hold one cluster; it only retries what would be refused.
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import psutil

from drillbit.core.errors import ConfigError, LeaseError
from drillbit.core.statedir import claims_home


def lease_path(cluster: str) -> Path:
    """In the claims home, a folder only its owner can write (a shared /tmp file could be
    created, and flocked, by anyone first: every drill would be refused)."""
    return claims_home() / f"drillbit-lease-{cluster}.lock"


class Lease:
    def __init__(self, cluster: str, holder: str) -> None:
        self.cluster = cluster
        self.holder = holder
        self.path = lease_path(cluster)
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            # the state folder is wrong, not busy: no wait would mend it
            raise ConfigError(f"cluster {self.cluster!r}: cannot open its lease file {self.path} "
                              f"({exc.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                info = json.loads(os.pread(fd, 4096, 0) or b"{}")
            except ValueError:
                info = {}
            os.close(fd)
            who = info.get("holder", "another drill")
            state = ""
            try:
                if info.get("host") == socket.gethostname() and psutil.Process(int(info["pid"])).status() == \
                        psutil.STATUS_STOPPED:
                    state = "; its process is stopped (SIGSTOP or Ctrl-Z), not dead: resume it or end it"
            except (KeyError, ValueError, psutil.Error):
                pass
            raise LeaseError(
                f"cluster {self.cluster!r} is held by {who} (pid {info.get('pid', '?')} on "
                f"{info.get('host', '?')}, since {time.ctime(info['since']) if 'since' in info else '?'}){state}"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"holder": self.holder, "pid": os.getpid(), "host": socket.gethostname(),
                                  "since": time.time()}).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "Lease":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@dataclass(frozen=True)
class LeaseWait:
    """``--wait [DURATION]``: queue behind another drill's lease for at most ``limit``
    seconds (None: for as long as it takes)."""

    limit: float | None = None

    def describe(self) -> str:
        return "without a limit" if self.limit is None else f"up to {span(self.limit)}"


# what --wait asked of this command line; None: a busy cluster is refused at once
LEASE_WAIT: ContextVar[LeaseWait | None] = ContextVar("drillbit_lease_wait", default=None)

L = TypeVar("L")
BACKOFF_S = (0.2, 2.0)  # the first retry, and the longest pause between two


def take(acquire: Callable[[], L], wait: LeaseWait | None, say: Callable[[str], None]) -> L:
    """The lease, from ``acquire`` (an engine's atomic try: it takes the lease or raises
    LeaseError, naming the holder). Without ``wait`` a busy cluster is refused at once; with
    it the try is repeated, each pause twice the last up to 2 s, until it succeeds or
    ``wait.limit`` has passed (LeaseError, naming the holder then). ``say`` is told once that
    the command waits and for whom, and once that it goes on. Interruptible: a signal that
    raises (Ctrl-C) leaves from the pause, holding nothing."""
    try:
        return acquire()
    except LeaseError as exc:
        if wait is None:
            raise
        last = exc
    started = time.monotonic()
    say(f"{last.held}; waiting for it, {wait.describe()}: nothing starts until it is free (Ctrl-C gives up)")
    pause = BACKOFF_S[0]
    while True:
        left = None if wait.limit is None else wait.limit - (time.monotonic() - started)
        if left is not None and left <= 0:
            raise LeaseError(last.held, f"still held after waiting {span(wait.limit or 0.0)} (--wait); wait longer, "
                                        "or stop it")
        time.sleep(pause if left is None else min(pause, left))
        pause = min(pause * 2, BACKOFF_S[1])
        try:
            lease = acquire()
        except LeaseError as exc:
            last = exc
            continue
        say(f"the cluster is free: taken after waiting {span(time.monotonic() - started)}")
        return lease


def span(seconds: float) -> str:
    """A wait in words: 45 s, 2.5 min, 1.2 h."""
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
