"""The job's cgroup: what holds every process of a launched job, however it forks.

A job's process can leave every other boundary drillbit draws around it: its session
(``setsid``), the mark in its environment (``env -i``), and its init's descendants, where it
forks a child and exits faster than a scan of /proc reads it (the adopted orphan has a new
pid by the time it is signalled; #57 saw one outlive teardown in 1 of 3 drills). It cannot
leave a cgroup: moving a process between cgroups takes write access to their files, which
are root's, or the agent user's where a cgroup is delegated to it. So the job's init
(:mod:`drillbit.agent.jobinit`) joins a cgroup made for it before it starts the launcher,
every process of the job is born inside, and teardown ends them all at once, as Slurm's
proctrack/cgroup and systemd's scopes do:

- cgroup v2: ``cgroup.kill`` (Linux 5.14), SIGKILL to every process in it with no window
  for a fork to slip through;
- cgroup v1's freezer: freeze (a frozen process cannot fork), SIGKILL every process listed,
  thaw.

Then the cgroup is removed: by the job's init as it ends, when nothing is left in it, else
at teardown (or by the guardian, or ``drill heal``). It is a child of the agent's own cgroup
in that hierarchy (from ``/proc/self/cgroup``), named ``drillbit-job-<mark>``. Where
neither can be made (an agent that is not root and has no delegated cgroup, no cgroup
filesystem) the job runs under its init's subreaper alone, and :func:`make` says why: the
launch records which one holds the job. A path read back from a registry (the guardian,
``drill heal``) is obeyed only if it is such a folder under a cgroup mount
(:func:`from_record`).
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Version = Literal["v2", "v1-freezer"]
PREFIX = "drillbit-job-"
JOIN_VAR = "DRILLBIT_JOB_CGROUP"  # tells the job's init where to go; it removes it from the job's environment
MARK = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class Mount:
    point: Path  # where the hierarchy is mounted here
    root: str  # the hierarchy's path that is mounted there ("/" unless a subtree is bind-mounted)
    version: Version


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts() -> list[Mount]:
    """The cgroup hierarchies this process can use: the v2 one, and v1's freezer."""
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        head, _, tail = line.partition(" - ")
        fields, after = head.split(), tail.split()
        if len(fields) < 5 or len(after) < 3:
            continue
        if after[0] == "cgroup2":
            version: Version = "v2"
        elif after[0] == "cgroup" and "freezer" in after[2].split(","):
            version = "v1-freezer"
        else:
            continue
        found.append(Mount(Path(_unescape(fields[4])), _unescape(fields[3]), version))
    return found


def own_path(version: Version, pid: int | str = "self") -> str | None:
    """This process's cgroup in that hierarchy, as ``/proc/<pid>/cgroup`` says it."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if (version == "v2" and controllers == "") or (version == "v1-freezer" and "freezer" in controllers.split(",")):
            return path
    return None


def _folder(mount: Mount, path: str) -> Path | None:
    """Where cgroup ``path`` of the mount's hierarchy is, through that mount."""
    if path != mount.root and not path.startswith(mount.root.rstrip("/") + "/"):
        return None  # outside the subtree mounted here
    return mount.point / path[len(mount.root.rstrip("/")):].lstrip("/")


@dataclass(frozen=True)
class JobCgroup:
    path: Path
    version: Version

    def describe(self) -> str:
        how = "cgroup.kill" if self.version == "v2" else "freeze, SIGKILL, thaw"
        return f"cgroup {self.version} {self.path} ({how})"

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(f"{pid}\n")

    def pids(self) -> list[int]:
        """Every process in the cgroup and in any it holds (a root job may make its own)."""
        found: list[int] = []
        for folder, _, _ in os.walk(self.path):
            try:
                found += [int(p) for p in Path(folder, "cgroup.procs").read_text().split()]
            except (OSError, ValueError):
                continue
        return found

    def kill(self, timeout: float = 5.0) -> bool:
        """SIGKILL every process in it, all at once; True once it is empty (within
        ``timeout``), False when it is not or its files could not be written."""
        if not self.path.is_dir():
            return True
        try:
            if self.version == "v2":
                (self.path / "cgroup.kill").write_text("1\n")
            else:
                self._freeze_kill_thaw(timeout)
        except OSError:
            return False
        deadline = time.monotonic() + timeout
        while self.pids():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def _freeze_kill_thaw(self, timeout: float) -> None:
        state = self.path / "freezer.state"
        state.write_text("FROZEN\n")
        try:
            deadline = time.monotonic() + timeout
            while state.read_text().strip() != "FROZEN" and time.monotonic() < deadline:
                time.sleep(0.01)  # FREEZING: a task in the kernel has not stopped yet
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):  # gone since it was listed
                    os.kill(pid, signal.SIGKILL)
        finally:
            state.write_text("THAWED\n")  # a frozen task acts on its SIGKILL once thawed

    def remove(self, timeout: float = 5.0) -> str | None:
        """Remove the cgroup (what it holds first, deepest first), killing whatever is still in
        it; None, or why not."""
        if not self.path.exists():
            return None
        if self.pids():
            self.kill(timeout)
        deadline = time.monotonic() + timeout
        while True:
            try:
                for folder, _, _ in sorted(os.walk(self.path), key=lambda w: -len(w[0])):
                    os.rmdir(folder)
                return None
            except FileNotFoundError:
                return None
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    return f"cannot remove {self.path}: {exc.strerror} (processes {self.pids() or 'none'} left in it)"
                time.sleep(0.05)  # the last ones are still exiting


def make(mark: str, prefer: tuple[Version, ...] = ("v2", "v1-freezer")) -> tuple[JobCgroup | None, str]:
    """A new cgroup for the job marked ``mark``, below this process's own, in the first
    hierarchy of ``prefer`` where one can be made and can do its work; else None. The second
    value says which (or, with None, why none could be)."""
    if not MARK.fullmatch(mark):
        raise ValueError(f"a job's mark is 32 hex digits, not {mark!r}")
    tried: list[str] = []
    for version in prefer:
        mount = next((m for m in mounts() if m.version == version), None)
        own = own_path(version)
        parent = _folder(mount, own) if mount is not None and own is not None else None
        if parent is None:
            tried.append(f"{version}: not mounted here")
            continue
        path = parent / f"{PREFIX}{mark}"
        try:
            os.mkdir(path, 0o755)
        except OSError as exc:
            tried.append(f"{version}: cannot make a cgroup in {parent} ({exc.strerror})")
            continue
        group = JobCgroup(path, version)
        needs = "cgroup.kill" if version == "v2" else "freezer.state"
        if not (path / needs).exists():  # v2 before Linux 5.14
            group.remove()
            tried.append(f"{version}: {parent} has no {needs}")
            continue
        return group, group.describe()
    return None, "; ".join(tried) or "no cgroup hierarchy asked for"


def from_record(path: str | None, mark: str | None) -> JobCgroup | None:
    """The job's cgroup as a registry names it, if it is one drillbit made for that job: a
    real folder named after the job's mark, under a cgroup mount. Anything else is ignored:
    a registry is written by the agent, but a path read back never names a cgroup to kill
    (the node's own, another service's) unless it is that job's."""
    if not path or not mark or not MARK.fullmatch(mark):
        return None
    where = Path(path)
    if not where.is_absolute() or where.name != f"{PREFIX}{mark}" or ".." in where.parts:
        return None
    try:
        if not stat.S_ISDIR(os.lstat(where).st_mode):
            return None
    except OSError:
        return None
    for mount in mounts():
        if where.is_relative_to(mount.point) and where != mount.point:
            return JobCgroup(where, mount.version)
    return None
