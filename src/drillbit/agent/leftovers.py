"""What a drill left behind, and healing it by hand (``drill heal``).

Every agent keeps its registry (``agent-<node>.json``: active faults with the state their
heal needs, the job it launched, and what its guardian watches). Normally the drill heals
and the registry ends empty; after a controller *and* an agent were killed (so neither
the drill nor the guardian could heal), the registry still says what is in place. This
reads each registry, heals every fault in it (each with a deadline), stops a launched job
that is still running, and says what it did — as Records appended to the agent's
dead-man log, so ``drill report`` merges them into the run's history.
"""
from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path

import psutil
from pydantic import BaseModel

from drillbit.agent.deadman import DeadmanLog, heal_with_deadline
from drillbit.agent.jobcgroup import from_record
from drillbit.agent.jobproc import job_processes, stop_job
from drillbit.agent.node import NodeAgent
from drillbit.faults.base import Handle
from drillbit.core.proc import ProcRef


class Leftover(BaseModel):
    registry: str
    node: str
    healed: list[str] = []
    failed: list[str] = []
    job_stopped: bool = False
    abandoned: list[str] = []
    skipped: str | None = None


def registries(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).glob("agent-*.json") if not p.name.startswith("."))


UNTRUSTED = "not trusted"


def distrust(path: Path) -> str | None:
    """Why a registry must not be obeyed, or None: a heal does what a registry says (writes
    files back, removes folders, runs a node's revive), so it and the folder holding it must be
    real (no link), this user's, and writable by no one else. A run folder planted in a shared
    reports folder by another user would otherwise make root's heal a write-anywhere."""
    me = os.geteuid()
    for what, p, kind in (("run folder", path.parent, stat.S_ISDIR), ("registry", path, stat.S_ISREG)):
        try:
            info = os.lstat(p)
        except OSError as exc:
            return f"{UNTRUSTED}: its {what} {p}: {exc.strerror}"
        if stat.S_ISLNK(info.st_mode) or not kind(info.st_mode):
            return f"{UNTRUSTED}: its {what} {p} is {'a symlink' if stat.S_ISLNK(info.st_mode) else 'of another kind'}"
        if info.st_uid != me:
            return (f"{UNTRUSTED}: its {what} {p} belongs to uid {info.st_uid}, not to this user (uid {me}); "
                    "nothing it names was touched")
        if info.st_mode & 0o022:
            return (f"{UNTRUSTED}: its {what} {p} is mode {stat.S_IMODE(info.st_mode):o}: others could have "
                    f"written it; nothing it names was touched (`chmod go-w {p}` once you have checked it)")
    return None


def heal_registry(path: Path, force: bool = False, abandon: str | None = None) -> Leftover:
    """Heal what one registry still holds — on the host that wrote it only (a process named
    there is not one here: judged here, a stopped rank on node-1 would be "gone"), and only a
    registry this user made (:func:`distrust`). With ``abandon``, give its faults up instead:
    recorded with the reason, and no guardian retries them. A controller that is stopped
    (state T) heals nothing: it counts as gone."""
    why = distrust(path)
    if why is not None:
        return Leftover(registry=str(path), node="?", skipped=why)
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return Leftover(registry=str(path), node="?", skipped=f"unreadable: {exc}")
    node = payload.get("node", "?")
    out = Leftover(registry=str(path), node=node)
    host = payload.get("host")
    if host is not None and host != socket.gethostname():
        out.skipped = (f"written on host {host}, and this is {socket.gethostname()}: its faults and job are there. "
                       f"Run `python -m drillbit.agent heal --state-dir {path.parent}` on {host} (or `drill heal` "
                       "with that run folder there); nothing was judged or changed here")
        return out
    armed = payload.get("armed") or {}
    watch = armed.get("watch")
    status = ProcRef.model_validate(watch).status() if watch else None
    if watch and status is not None and status != psutil.STATUS_STOPPED and not force:
        out.skipped = (f"its drill is still running (pid {watch['pid']}); it heals for itself "
                       "(--force to heal now anyway)")
        return out
    handles = [Handle.model_validate(h) for h in payload.get("faults", [])]
    job = payload.get("job")
    if not handles and not job:
        return out
    agent = NodeAgent(node, path)
    agent.restore(handles, job, None)
    log = DeadmanLog(agent.log_path, node, float(armed.get("offset_s", 0.0)))
    if abandon is not None:
        for handle in agent.abandon(abandon):
            what = f"{handle.fault} on rank {handle.target.rank} (pid {handle.target.pid})"
            out.abandoned.append(what)
            log.note("fault.abandoned", rank=handle.target.rank, fault=handle.fault, pid=handle.target.pid,
                     reason=abandon, by="drill heal --abandon")
        handles = []
    for handle in handles:
        report = heal_with_deadline(agent.heal, handle)
        what = f"{handle.fault} on rank {handle.target.rank} (pid {handle.target.pid}): {report.detail}"
        (out.healed if report.healed else out.failed).append(what)
        log.note("fault.heal" if report.healed else "heal.failed", rank=handle.target.rank, fault=handle.fault,
                 pid=handle.target.pid, healed=report.healed, verified=report.verified, detail=report.detail,
                 by="drill heal")
    if job:
        root = ProcRef.model_validate(job["proc"])
        mark = job.get("mark")  # a registry of an older drillbit has a pgid only: not trusted to name the job
        cgroup = from_record(job.get("cgroup"), mark)  # only a cgroup drillbit made for this job
        if job_processes(root, mark, cgroup):
            stop_job(root, mark, timeout=20.0, cgroup=cgroup)
            log.note("job.stop", pid=root.pid, by="drill heal")
            out.job_stopped = True
        if cgroup is not None:
            cgroup.remove()
    agent.release_job()
    return out


def heal_folder(folder: Path, force: bool = False, abandon: str | None = None) -> list[Leftover]:
    return [heal_registry(p, force, abandon) for p in registries(folder)]


def heal_folders_here(folders: list[str], force: bool = False, abandon: str | None = None) -> list[dict]:
    """On one node of a cluster (a Ray task pinned there): heal the registries this node's
    agents left in those run folders, as JSON-ready Leftovers."""
    return [d.model_dump() for f in folders if Path(f).is_dir() for d in heal_folder(Path(f), force, abandon)]
