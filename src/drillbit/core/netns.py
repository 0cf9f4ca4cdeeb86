"""Run a command in a private network namespace with only loopback up:

    python -m drillbit.core.netns drill compare --suite stacks --jobs torchft,nvrx,dlrover

Some stacks' servers bind every interface (torchft's manager and checkpoint server,
DLRover's master); drilling them on a machine that is on a network exposes those ports.
Inside the namespace the drill, its embedded cluster and the job reach each other over
127.0.0.1 and nothing else. Needs root (or CAP_SYS_ADMIN): ``unshare(CLONE_NEWNET)``, then
``lo`` brought up with an ioctl, then exec — no ``ip`` or ``unshare`` binaries needed.
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import sys
import threading
from typing import Callable, TypeVar

T = TypeVar("T")

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def enter() -> None:
    """Move this process into a new network namespace and bring lo up (OSError if refused)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWNET): {os.strerror(err)} (needs root or CAP_SYS_ADMIN)")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH14s", b"lo", 0, b"\0" * 14)
        flags = struct.unpack("16sH14s", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, req))[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b"\0" * 14))


def call_in(path: str, fn: Callable[[], T]) -> T:
    """``fn()`` on a thread of its own that has joined the network namespace at ``path``
    (``/run/netns/NAME``); what ``fn`` creates there stays there: its sockets, and the threads
    it starts (a thread's network namespace is its own, and a new thread inherits its
    creator's). The calling thread, and the rest of this process, stay where they are. Used
    to reach a private network from the controller: a Ray driver whose client threads are
    made in the namespace cluster's switch."""
    out: list = []

    def run() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(path, os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns({path}): {os.strerror(err)} (needs root or CAP_SYS_ADMIN)")
            finally:
                os.close(fd)
            out.append((True, fn()))
        except BaseException as exc:  # noqa: BLE001 - carried to the caller's thread
            out.append((False, exc))

    thread = threading.Thread(target=run, name=f"netns:{os.path.basename(path)}", daemon=True)
    thread.start()
    thread.join()
    ok, value = out[0]
    if not ok:
        raise value
    return value


def inode_of(pid: int) -> int | None:
    """The network namespace a process is in, as the inode of /proc/PID/ns/net (None: gone,
    or not readable here)."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def available() -> bool:
    """Whether a private network namespace can be made here (tried in a child process)."""
    pid = os.fork()
    if pid == 0:
        try:
            enter()
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    try:
        enter()
    except OSError as exc:
        print(f"drillbit.core.netns: {exc}", file=sys.stderr)
        return 2
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())
