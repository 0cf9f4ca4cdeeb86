"""The job's own hands: a file fault acts on a job's files with the job's credentials (issue 57).

The agent runs as root on the nodes it drills; the job usually runs as someone else, who owns
the checkpoint folder and may swap any folder in it for a link between the agent's look and
its act. So nothing the agent does to a job's files is done as root: each operation of
:mod:`drillbit.core.handsop` runs in a child process that has dropped to the job's user (its
uid, gid and supplementary groups, as the job's process holds them; the way logrotate's
``su`` directive and systemd-tmpfiles act for a folder's owner), from descriptors it opens
once, without following links. Whatever a swapped folder reaches, the job's user could
already write it.

The credentials are taken by a thread of the agent made for that one operation, with Linux's
per-thread filesystem credentials (setgroups, setfsgid, setfsuid by raw system call: only that
thread changes, and they end with it), not by a child process: the job's user may not be able
to run the agent's interpreter (a virtual environment under /root), and a fork of a threaded
agent is not safe. So :mod:`~drillbit.core.handsop` imports all it needs up front: a module
imported lazily in that thread would be read as the job's user.

Where the agent already is the job's user (an agent that is not root, or a job that runs as
root), the same operations run in the agent's own process, with the same descriptor
discipline. :class:`Hands` is recorded in the fault's state, so the guardian and ``drill
heal`` act with the same credentials after the controller is gone.
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import threading
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING
from pathlib import Path

from drillbit.core import handsop
from drillbit.core.errors import ConfigError, FaultError

if TYPE_CHECKING:
    from drillbit.core.proc import ProcRef

TIMEOUT_S = 600.0  # a look at a large checkpoint file on a slow mount
READ_ONLY = frozenset({"look"})


@dataclass(frozen=True)
class Hands:
    """Whose credentials a file operation runs with."""

    uid: int
    gid: int
    groups: tuple[int, ...] = ()

    @classmethod
    def of_pid(cls, pid: int) -> "Hands":
        """The filesystem credentials the process ``pid`` acts with (``/proc/PID/status``: the
        fsuid, fsgid and supplementary groups)."""
        fields: dict[str, list[str]] = {}
        try:
            with open(f"/proc/{pid}/status") as fh:
                for line in fh:
                    key, _, value = line.partition(":")
                    if key in ("Uid", "Gid", "Groups"):
                        fields[key] = value.split()
        except OSError as exc:
            raise FaultError(f"cannot read the credentials of pid {pid} ({exc.strerror}): the job's files are "
                             "touched only with the job's own") from None
        try:
            return cls(uid=int(fields["Uid"][3]), gid=int(fields["Gid"][3]),
                       groups=tuple(sorted({int(g) for g in fields.get("Groups", [])})))
        except (KeyError, IndexError, ValueError):
            raise FaultError(f"pid {pid}'s credentials are unreadable in /proc/{pid}/status") from None

    @classmethod
    def of_target(cls, target: "ProcRef") -> "Hands":
        """The credentials of the fault's target, read only while its pid is still that process
        (its start time, before and after the read): a pid the job let go and someone else's
        process took (root's, say) never lends its credentials."""
        if not target.alive():
            raise FaultError(f"rank {target.rank} (pid {target.pid}) is gone: its credentials are not read from "
                             "whatever process has its pid now; nothing was touched")
        hands = cls.of_pid(target.pid)
        if not target.alive():
            raise FaultError(f"rank {target.rank} (pid {target.pid}) ended while its credentials were read; "
                             "nothing was touched")
        return hands

    @classmethod
    def mine(cls) -> "Hands":
        return cls(uid=os.geteuid(), gid=os.getegid(), groups=tuple(sorted(set(os.getgroups()))))

    @property
    def in_process(self) -> bool:
        """Whether the agent acts itself: it is not root (it cannot become anyone else, and can
        write only what it may), or it is the job's user."""
        return os.geteuid() != 0 or self.uid == os.geteuid()

    def label(self) -> str:
        try:
            import pwd
            name = pwd.getpwuid(self.uid).pw_name
        except (KeyError, ImportError):
            name = None
        return f"uid {self.uid}" + (f" ({name})" if name else "")

    def call(self, op: str, req: dict, data: bytes = b"") -> tuple[dict, bytes]:
        """One operation with these credentials: ``(answer, payload)``. An answer with an
        ``error`` is the operation's refusal (its ``code`` says which). It runs in this
        process, whose reads a read watch already leaves out."""
        if self.in_process:
            return handsop.call(op, req, data)
        out: dict[str, tuple[dict, bytes]] = {}

        def run() -> None:  # a thread of its own: its credentials die with it
            try:
                become(self)
            except OSError as exc:
                out["answer"] = ({"error": f"cannot take the job's user's credentials ({self.label()}): {exc}",
                                  "code": "creds"}, b"")
                return
            out["answer"] = handsop.call(op, req, data)

        thread = threading.Thread(target=run, name=f"drillbit-as-uid-{self.uid}", daemon=True)
        thread.start()
        # an operation that changes the job's files is waited for however long its I/O takes: one
        # given up on would go on changing them after its caller had said it did not (a look may time out)
        thread.join(TIMEOUT_S if op in READ_ONLY else None)
        if "answer" not in out:
            raise FaultError(f"acting as the job's user ({self.label()}), {op} did not finish in {TIMEOUT_S:g} s")
        return out["answer"]

    def must(self, op: str, req: dict, data: bytes = b"", *, what: str = "") -> tuple[dict, bytes]:
        """:meth:`call`, its refusal raised: a link out of the checkpoint folder or a file with
        other names is the description's to fix (ConfigError, exit 2); anything else a FaultError
        that names the job's user."""
        answer, body = self.call(op, req, data)
        if "error" in answer:
            code = answer.get("code")
            if code == "outside":
                raise ConfigError(f"{what}: {answer['error']}; drillbit does not write through it. Pick another "
                                  "checkpoint (nth_newest) or mode")
            if code == "hardlink":
                raise ConfigError(f"{what}: {answer['error']}: damaging it would damage the file under its other "
                                  "names too, outside what the drill watches and heals. Pick another checkpoint "
                                  "(nth_newest) or mode, or give the job a copy")
            who = "" if self.in_process else f" as the job's user ({self.label()})"
            raise FaultError(f"{what}: {op}{who}: {answer['error']}")
        return answer, body


# Linux system call numbers: glibc's setgroups() changes every thread of the process (its setxid
# broadcast), the raw call only the caller's; setfsuid/setfsgid are per thread either way
SYSCALLS = {"x86_64": {"setgroups": 116, "setfsuid": 122, "setfsgid": 123, "capset": 126},
            "aarch64": {"setgroups": 159, "setfsuid": 151, "setfsgid": 152, "capset": 91},
            "ppc64le": {"setgroups": 81, "setfsuid": 138, "setfsgid": 139, "capset": 184}}
CAP_V3 = 0x20080522


@lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def become(hands: Hands) -> None:
    """This thread, and only it, takes ``hands``' filesystem credentials: its supplementary
    groups, fsgid and fsuid (the way the kernel's NFS server and Samba act for a user). The
    kernel then clears the thread's filesystem capabilities (CAP_DAC_OVERRIDE, CAP_FOWNER,
    CAP_CHOWN…), so every file it opens, makes, renames or removes is checked as the job's
    user's. Verified in /proc/thread-self/status; an OSError where it did not take."""
    numbers = SYSCALLS.get(platform.machine())
    if numbers is None:
        raise OSError(errno.ENOSYS, f"no per-thread credentials known for {platform.machine()}")
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    groups = (ctypes.c_uint32 * max(1, len(hands.groups)))(*hands.groups)
    if libc.syscall(ctypes.c_long(numbers["setgroups"]), ctypes.c_size_t(len(hands.groups)), groups) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setgroups: {os.strerror(err)}")
    libc.syscall(ctypes.c_long(numbers["setfsgid"]), ctypes.c_uint32(hands.gid))
    libc.syscall(ctypes.c_long(numbers["setfsuid"]), ctypes.c_uint32(hands.uid))
    # and every capability of this thread dropped (CAP_SYS_ADMIN, CAP_SYS_RESOURCE, CAP_SETUID…):
    # it needs none, and it ends with the operation
    header = (ctypes.c_uint32 * 2)(CAP_V3, 0)
    caps = (ctypes.c_uint32 * 6)()
    if libc.syscall(ctypes.c_long(numbers["capset"]), header, caps) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset: {os.strerror(err)}")
    status = Path("/proc/thread-self/status").read_text()
    fields = {k: v.split() for k, _, v in (line.partition(":") for line in status.splitlines())}
    if fields.get("Uid", [None] * 4)[3] != str(hands.uid) or fields.get("Gid", [None] * 4)[3] != str(hands.gid) or \
            sorted(int(g) for g in fields.get("Groups", [])) != sorted(hands.groups) or \
            int(fields.get("CapEff", ["1"])[0], 16) != 0:
        raise OSError(errno.EPERM, "the credentials did not take (a process without CAP_SETUID/CAP_SETGID?)")
