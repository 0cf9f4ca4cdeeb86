"""The cluster lease: one drill at a time per cluster.

For the embedded local cluster the lease is an exclusive ``flock`` on a file named after
the cluster: the kernel drops it when the holder dies, so a dead holder's lease expires
by itself. The file says who holds it, for the refusal message.
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

import psutil

from drillbit.core.errors import LeaseError
from drillbit.core.statedir import private_dir


def lease_path(cluster: str) -> Path:
    """In this user's state folder (a shared /tmp file could be created, and flocked, by
    anyone first: every drill would be refused)."""
    base = private_dir(os.environ.get("DRILLBIT_LEASE_DIR") or None)
    return base / f"drillbit-lease-{cluster}.lock"


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
            raise LeaseError(f"cluster {self.cluster!r}: cannot open its lease file {self.path} ({exc.strerror})") from None
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
                f"{info.get('host', '?')}, since {time.ctime(info['since']) if 'since' in info else '?'}){state}; "
                "wait for it to finish, or stop it") from None
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
