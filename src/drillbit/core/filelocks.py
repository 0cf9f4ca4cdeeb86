"""One claim per damaged file on a host, across drills and cluster names.

Two drills aimed at one checkpoint file — two cluster names of engine ``process``, a gate and
a game day — once both damaged it and both "verified" their heals: the first kept the
second's damage as the job's newer data, the second "restored" the first's damage. The lease
is per cluster name; this is per file. A file fault claims the file it damages, named by
device and inode (a path can name it twice through a link), before it touches anything, and
the claim is dropped once its heal is verified. A second claim is refused, naming the drill
that holds the file. A claim whose holder's registry no longer lists the fault (healed or
abandoned in a process that died before dropping it) is stale and taken over.

Claims live in this user's state folder (``$DRILLBIT_LEASE_DIR`` or the default; 0700,
checked), beside the lease files, shared by every cluster name on the host.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from drillbit.core.errors import ConfigError
from drillbit.core.statedir import private_dir


def claims_dir() -> Path:
    base = private_dir(os.environ.get("DRILLBIT_LEASE_DIR") or None)
    return private_dir(base / "file-claims")


def _path(dev: int, ino: int) -> Path:
    return claims_dir() / f"{dev}-{ino}.json"


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


def claim(dev: int, ino: int, file: str, registry: str, key: str, fault: str) -> None:
    """Claim the file for the fault ``key`` of ``registry``; ConfigError if another holds it."""
    path = _path(dev, ino)
    record = json.dumps({"file": file, "registry": registry, "key": key, "fault": fault}).encode()
    for _ in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            try:
                holder = json.loads(path.read_text())
            except (OSError, ValueError):
                holder = {}
            if holder.get("registry") == registry and holder.get("key") == key:
                return  # ours already (a retried inject)
            if holder and _listed(str(holder.get("registry")), str(holder.get("key"))):
                raise ConfigError(
                    f"{fault}: {file} is already damaged by another drill's {holder.get('fault')} fault (its agent "
                    f"registry {holder.get('registry')}); two faults never hold one file. Let that drill heal it "
                    f"(or `drill heal` its run folder) and run this one again") from None
            path.unlink(missing_ok=True)  # stale: its fault was healed or abandoned elsewhere
            continue
        try:
            os.write(fd, record)
        finally:
            os.close(fd)
        return
    raise ConfigError(f"{fault}: could not claim {file} ({path} keeps reappearing)")


def release(dev: int, ino: int, registry: str, key: str) -> None:
    """Drop the claim if it is this fault's."""
    path = _path(dev, ino)
    try:
        holder = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if holder.get("registry") == registry and holder.get("key") == key:
        path.unlink(missing_ok=True)
