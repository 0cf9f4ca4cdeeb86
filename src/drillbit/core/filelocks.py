"""One claim per checkpoint folder a file fault damages, seen by every drill of every user.

Two drills aimed at one checkpoint file — two cluster names of engine ``process``, a gate and
a game day — once both damaged it and both "verified" their heals: the first kept the
second's damage as the job's newer data, the second "restored" the first's damage (#43).
Claims kept as files in each drill's state folder did not end it: two root drills whose
environments chose two state folders (a login shell's ``XDG_RUNTIME_DIR``, cron's ``TMPDIR``)
both ran and left the file damaged (#57).

So the claim is on the target itself: an exclusive ``flock`` on the folder that holds the
damaged file, opened without following a link and checked to hold that file (by device and
inode), taken before the fault touches anything and held until its heal is verified. Every
drill of every user, whatever its environment, contends for it; a second claim is refused
(exit 2) naming the holder.

The folder, not the file:
- HDF5 flocks its own ``.h5`` files when it opens them to write, without waiting: a lock on
  the file would fail the job's next save. Nothing known to lock a checkpoint folder does
  (``torch.save`` and ``torch.distributed.checkpoint``, Lightning, the HF Trainer,
  accelerate and safetensors, Orbax take no lock; huggingface_hub and torch's inductor lock
  ``.lock`` files of their caches only). ``flock`` is advisory: the job's own writes never
  wait on it.
- the file does not keep its inode: restore-hang swaps it for a FIFO, delete-shard unlinks
  it, a heal renames a new file in. A lock on the old inode would cover nothing then; the
  folder's stays.
The cost: two faults on two files of one folder are one claim, one at a time.

Besides the lock, a record (the fault, its agent registry, the holder's pid) in the claims
home (:func:`drillbit.core.statedir.claims_home`: root's ``/run/drillbit`` whatever the
environment, a user's own state folder). It names the holder in a refusal, and it outlives
the holder's process: an agent that dies drops its lock while its guardian (or ``drill
heal``) has still to heal, and until its registry no longer lists the fault a drill with the
same claims home is still refused. A drill of another user sees the lock alone, and so not
in that gap. A record whose registry no longer lists its fault (healed or abandoned in a
process that died before dropping it) is stale and taken over. Where the folder's filesystem
has no ``flock`` (some NFS mounts; Lustre mounted ``noflock``) the record alone claims it,
as before #57: seen only by drills that share the claims home.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import threading
import time
from pathlib import Path

import psutil

from drillbit.core.errors import ConfigError, FaultError
from drillbit.core.statedir import claims_home, private_dir

# (registry, fault key, the file's device and inode) -> the locked folder's descriptor, in this process: one
# target's fault re-injected on another file (a heal whose registry write failed still holding the first) claims
# the new file for itself instead of finding the key "ours already" (helper-21)
_HELD: dict[tuple[str, str, int, int], int] = {}
_HELD_LOCK = threading.Lock()


def records_dir() -> Path:
    return private_dir(claims_home() / "file-claims")


def _listed(registry: str, key: str) -> bool:
    """Whether the registry still lists the fault (an unreadable one counts as listing it)."""
    try:
        payload = json.loads(Path(registry).read_text())
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return True
    for h in payload.get("faults", []):
        target = h.get("target") or {}
        if f"{h.get('fault')}:{target.get('pid')}:{target.get('start_time')}" == key:
            return True
    return False


def _read(path: Path) -> dict:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def lockers(info: os.stat_result) -> list[int]:
    """The processes that hold a ``flock`` on the file ``info`` describes (``/proc/locks``)."""
    want = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    found = []
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        parts = line.split()  # "3: FLOCK  ADVISORY  WRITE 1234 00:2f:5678 0 EOF"; a waiter's has "->"
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == want and parts[4].isdigit():
            found.append(int(parts[4]))
    return found


def _who(pid: int) -> str:
    try:
        proc = psutil.Process(pid)
        return f"pid {pid} (uid {proc.uids().real}: {' '.join(proc.cmdline())[:160] or proc.name()})"
    except psutil.Error:
        return f"pid {pid}"


def _refusal(fault: str, file: str, holder: dict, registry: str) -> str:
    if holder.get("registry") == registry:
        return (f"{fault}: {file} is in the folder this drill's {holder.get('fault')} fault already holds (on "
                f"{holder.get('file')}); one fault at a time per checkpoint folder")
    return (f"{fault}: {file} is already damaged by another drill's {holder.get('fault')} fault (its agent registry "
            f"{holder.get('registry')}, pid {holder.get('pid', '?')}); two faults never hold one file. Let that drill "
            f"heal it (or `drill heal` its run folder) and run this one again")


def claim(dev: int, ino: int, file: str, registry: str, key: str, fault: str) -> None:
    """Claim the file (device ``dev``, inode ``ino``, at ``file``) for the fault ``key`` of
    ``registry``: lock its folder, then record the claim. ConfigError if another drill holds
    it; FaultError if the file is no longer the one named (nothing is claimed then)."""
    with _HELD_LOCK:
        if (registry, key, dev, ino) in _HELD:
            return  # ours already (a retried inject)
    folder = os.path.dirname(file)
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise FaultError(f"{fault}: cannot open {folder} to claim {file} ({exc.strerror}); nothing was "
                         "touched") from None
    try:
        try:
            there = os.stat(os.path.basename(file), dir_fd=fd, follow_symlinks=False)
        except OSError:
            there = None
        if there is None or (there.st_dev, there.st_ino) != (dev, ino):
            raise FaultError(f"{fault}: {file} is no longer the file that was copied aside (replaced, or its folder "
                             "swapped, since); nothing was touched")
        info = os.fstat(fd)
        record_path = records_dir() / f"{info.st_dev}-{info.st_ino}.json"
        locked = True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(record_path)
            if holder and holder.get("registry") and _listed(str(holder["registry"]), str(holder.get("key"))):
                raise ConfigError(_refusal(fault, file, holder, registry)) from None
            who = ", ".join(_who(p) for p in lockers(info)) or "a process this one cannot see"
            raise ConfigError(f"{fault}: {file} is already claimed by another drill: its folder {folder} is locked by "
                              f"{who} (a drill of another user, or one that keeps its claims elsewhere); two faults "
                              "never hold one file. Let that drill heal it and run this one again") from None
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EBADF, errno.EINVAL):
                raise
            locked = False  # no flock on this filesystem: the record alone claims it
        _record(record_path, {"file": file, "folder": folder, "dev": dev, "ino": ino, "registry": registry,
                              "key": key, "fault": fault, "pid": os.getpid(), "host": socket.gethostname(),
                              "uid": os.geteuid(), "locked": locked, "since": time.time()}, fault, file)
    except BaseException:
        os.close(fd)  # and with it the lock
        raise
    with _HELD_LOCK:
        _HELD[(registry, key, dev, ino)] = fd


def _record(path: Path, record: dict, fault: str, file: str) -> None:
    """Write the claim's record, unless a live one of another fault is there (ConfigError)."""
    data = json.dumps(record).encode()
    for _ in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            holder = _read(path)
            if holder.get("registry") == record["registry"] and holder.get("key") == record["key"]:
                path.unlink(missing_ok=True)  # ours, from a process of this drill that died: written anew
                continue
            if holder and _listed(str(holder.get("registry")), str(holder.get("key"))):
                raise ConfigError(_refusal(fault, file, holder, str(record["registry"]))) from None
            path.unlink(missing_ok=True)  # stale: its fault was healed or abandoned elsewhere
            continue
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        return
    raise ConfigError(f"{fault}: could not claim {file} ({path} keeps reappearing)")


def release(dev: int, ino: int, registry: str, key: str) -> None:
    """Drop the claim if it is this fault's: its record, then its lock (held here if the claim
    was taken in this process; an agent that died dropped it with its life)."""
    with _HELD_LOCK:
        fd = _HELD.pop((registry, key, dev, ino), None)
    try:
        for path in records_dir().glob("*.json"):
            holder = _read(path)
            if holder.get("registry") == registry and holder.get("key") == key and \
                    (holder.get("dev"), holder.get("ino")) == (dev, ino):
                path.unlink(missing_ok=True)
    finally:
        if fd is not None:
            os.close(fd)
