"""What root may act through: the configuration it reads and the folders it writes a run's
outputs in, trusted as git trusts a repository (``safe.directory``, CVE-2022-24765) and as
sshd's StrictModes trusts a path.

drillbit run as root obeys what it reads: a drill.yaml names commands root runs (a launch,
an ssh cluster's ``proxy_command``), a drills folder names faults and their params, a runbook
is a template rendered as root; and it writes where a reports folder says. So root reads a
drill.yaml, a drills folder or a reports folder, and writes a run folder, its history.jsonl
or drills.db, only where no one else could have put or changed what is there:

- every object the kernel passes through to reach the path, from ``/`` to the target (each
  folder, each symlink, the target itself), belongs to root or to the *invoking user*: the
  user sudo ran drill for (``SUDO_UID``); under su, a root login, cron or systemd there is
  none, and root alone is trusted;
- none of them can be written by anyone else: not by others, and not by a group that has a
  member other than those owners (a user's private group, as umask 002 leaves files, is
  theirs alone; a POSIX ACL on a group-writable object is not trusted). A folder that others
  can write is passed through only when it is sticky (``/tmp``): only an entry's owner can
  rename or remove it there, and that entry is checked in turn; it is never the target;
- links are followed only once they are checked, one component at a time from ``/``: each
  folder is opened (``O_PATH|O_NOFOLLOW``) and checked through its descriptor, so what was
  checked is what is used.

Anything else is refused (:class:`ConfigError`, exit 2) naming the object, its owner and the
setting that trusts it: ``DRILLBIT_SAFE_DIRECTORY``, folders separated by ``:`` (``*`` for
every folder), inside which root trusts whatever it finds, whoever owns it. It is an
environment variable, so only whoever starts drill as root sets it: root, or a sudoers rule.

Not root, nothing is checked for owners or modes (a user's drill runs with that user's
rights); the walk and its ``O_NOFOLLOW`` openings are the same.
"""
from __future__ import annotations

import contextlib
import errno
import grp
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from drillbit.core.errors import ConfigError

SETTING = "DRILLBIT_SAFE_DIRECTORY"
MAX_LINKS = 40  # the kernel's own limit on links followed in one lookup
_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def invoking_user() -> int | None:
    """The user who ran drill as root through sudo (``SUDO_UID``), or None."""
    value = os.environ.get("SUDO_UID", "")
    return int(value) if value.isdigit() and int(value) != 0 else None


def owners() -> frozenset[int] | None:
    """Whose files root trusts: root's and the invoking user's; None when drill does not run as
    root (then nothing is checked)."""
    if os.geteuid() != 0:
        return None
    invoker = invoking_user()
    return frozenset({0} if invoker is None else {0, invoker})


def safe_folders() -> list[str]:
    """The folders ``DRILLBIT_SAFE_DIRECTORY`` trusts, resolved (``["*"]``: every folder)."""
    out = []
    for entry in os.environ.get(SETTING, "").split(os.pathsep):
        if not entry:
            continue
        if entry == "*":
            return ["*"]
        if not os.path.isabs(entry):
            raise ConfigError(f"{SETTING}: {entry!r} is not an absolute path; list folders as /one:/two, or * for "
                              "every folder")
        out.append(os.path.realpath(entry))
    return out


def _allowed_by_setting(real: str) -> bool:
    return any(f == "*" or real == f or real.startswith(f.rstrip("/") + "/") for f in safe_folders())


def _who(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid} (no account)"


def _group(gid: int) -> str:
    try:
        return f"group {grp.getgrgid(gid).gr_name} ({gid})"
    except KeyError:
        return f"group {gid} (no such group)"


def _private_group(gid: int, allowed: frozenset[int], where: str) -> bool:
    """Whether only trusted users are in group ``gid`` (as Debian's sshd StrictModes asks of a
    group-writable path): none other has it as primary group or is listed as a member, and no
    ACL on ``where`` names anyone else."""
    try:
        members = grp.getgrgid(gid).gr_mem
    except KeyError:
        return False
    for name in members:
        try:
            if pwd.getpwnam(name).pw_uid not in allowed:
                return False
        except KeyError:
            return False
    if any(p.pw_gid == gid and p.pw_uid not in allowed for p in pwd.getpwall()):
        return False
    try:
        os.getxattr(where, "system.posix_acl_access", follow_symlinks=False)
    except OSError:
        return True  # no ACL: the mode bits are the whole story
    return False


def _why(info: os.stat_result, where: str, allowed: frozenset[int], target: bool) -> str | None:
    """What makes one object on the way untrusted, or None."""
    if info.st_uid not in allowed:
        return f"{where} belongs to {_who(info.st_uid)}"
    mode = info.st_mode
    if stat.S_ISLNK(mode):
        return None  # a link cannot be changed, only replaced: by whoever can write its folder
    if stat.S_ISDIR(mode) and mode & stat.S_ISVTX and not target:
        return None  # sticky (/tmp): only an entry's owner renames it, and the entry is checked next
    if mode & 0o002:
        return f"{where} is mode {stat.S_IMODE(mode):o}: anyone can write it"
    if mode & 0o020 and not _private_group(info.st_gid, allowed, where):
        return f"{where} is mode {stat.S_IMODE(mode):o}: {_group(info.st_gid)} can write it"
    return None


def refusal(what: str, path: str, why: str, folder: str) -> ConfigError:
    """The error a path root must not trust gets: what, why, and how to trust it."""
    invoker = invoking_user()
    trusted = "root" + (f" or the user who ran sudo, {_who(invoker)}" if invoker is not None else "")
    return ConfigError(
        f"{what} {path} is not trusted: {why}. As root, drill reads configuration and writes run folders only "
        f"where no one but {trusted} can change them: a drill.yaml names commands that root runs. Once you have "
        f"checked it, trust it with {SETTING}={folder} (folders separated by ':', or '*' for all; as git's "
        "safe.directory), or run drill as its owner")


@dataclass(frozen=True)
class Folder:
    """A folder reached by :func:`folder`: open (``O_PATH``, for ``dir_fd=`` calls) and its
    real path."""

    fd: int
    path: Path


class _Walk:
    """One lookup of a path, done by hand: component by component from ``/``, each folder
    opened ``O_PATH|O_NOFOLLOW`` and checked through its descriptor, each link checked before
    it is followed, missing folders made when asked."""

    def __init__(self, what: str, shown: str, allowed: frozenset[int] | None, create: bool) -> None:
        self.what, self.shown, self.allowed, self.create = what, shown, allowed, create
        self.fd = os.open("/", _DIR)
        self.real = "/"
        self.links = 0
        self.pending: list[str] = []

    def close(self) -> None:
        os.close(self.fd)

    def check(self, info: os.stat_result, where: str, target: bool) -> None:
        if self.allowed is None:
            return
        why = _why(info, where, self.allowed, target)
        if why is not None:
            real = os.path.realpath(self.shown)
            raise refusal(self.what, self.shown, why,
                          real if self.create or os.path.isdir(real) else os.path.dirname(real))

    def _move(self, fd: int, real: str) -> None:
        os.close(self.fd)
        self.fd, self.real = fd, real

    def _queue(self, path: str) -> None:
        """Put ``path``'s components first; an absolute one starts again from ``/``."""
        if path.startswith("/"):
            self._move(os.open("/", _DIR), "/")
        self.pending[:0] = [p for p in path.split("/") if p not in ("", ".")]

    def enter(self, name: str) -> os.stat_result | None:
        """Go one component on: into a folder (checked), through a link (checked; its target's
        components go first), or onto the last object (checked). Its lstat; None: not there."""
        last = not self.pending
        where = os.path.join(self.real, name)
        if name == "..":
            self._move(os.open("..", _DIR, dir_fd=self.fd), os.path.dirname(self.real))
            info = os.fstat(self.fd)  # on the way already: checked as a folder passed through
            if last:
                self.check(info, self.real, target=True)
            return info
        try:
            fd = os.open(name, _DIR, dir_fd=self.fd)
        except FileNotFoundError:
            if not self.create:
                return None
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o777, dir_fd=self.fd)  # the umask applies, as mkdir -p
            return self.enter(name)
        except NotADirectoryError:  # a link or a file: looked at without following it
            info = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            if not stat.S_ISLNK(info.st_mode):
                self.check(info, where, target=last)
                if not last:
                    raise OSError(errno.ENOTDIR, "not a folder", where) from None
                return info
            self.check(info, where, target=False)
            self.links += 1
            if self.links > MAX_LINKS:
                raise OSError(errno.ELOOP, "too many levels of symbolic links", self.shown) from None
            self._queue(os.readlink(name, dir_fd=self.fd))
            if self.pending:
                return info
            info = os.fstat(self.fd)  # a link to / or to its own folder
            self.check(info, self.real, target=True)
            return info
        try:
            info = os.fstat(fd)
            self.check(info, where, target=last)
        except BaseException:
            os.close(fd)
            raise
        self._move(fd, where)
        return info

    def run(self) -> os.stat_result | None:
        """Walk the path; the last object's lstat, or None when it is not there."""
        info: os.stat_result | None = os.fstat(self.fd)
        assert info is not None
        self._queue(self.shown)
        self.check(info, "/", target=not self.pending)
        while self.pending:
            info = self.enter(self.pending.pop(0))
            if info is None:
                return None
        return info


def _walk(path: Path | str, what: str, create: bool) -> tuple[_Walk, os.stat_result | None]:
    shown = os.path.join(os.getcwd(), os.fspath(path))
    allowed = owners()
    if allowed is not None and _allowed_by_setting(os.path.realpath(shown)):
        allowed = None
    walk = _Walk(what, shown, allowed, create)
    try:
        return walk, walk.run()
    except OSError as exc:
        walk.close()
        raise ConfigError(f"{what} {shown}: {exc.strerror or exc}") from None
    except BaseException:
        walk.close()
        raise


def check(path: Path | str, what: str) -> None:
    """ConfigError unless root may read ``path`` (a file or a folder) and trust what it says:
    every object on the way to it, and it, root's or the invoking user's and writable by no
    one else (see the module). A path that is not there passes: reading it says so."""
    walk, _ = _walk(path, what, create=False)
    walk.close()


@contextlib.contextmanager
def folder(path: Path | str, what: str, *, create: bool = False) -> Iterator[Folder]:
    """The folder ``path`` names, checked as :func:`check` does (each missing folder made
    first where ``create``), open for ``dir_fd=`` calls while the block runs: a name made or
    opened through it is in the folder that was checked, whatever is renamed meanwhile."""
    walk, info = _walk(path, what, create)
    try:
        if info is None or not stat.S_ISDIR(info.st_mode):
            raise ConfigError(f"{what} {walk.shown}: {'not there' if info is None else 'not a folder'}")
        yield Folder(fd=walk.fd, path=Path(walk.real))
    finally:
        walk.close()


def open_file(path: Path | str, flags: int = os.O_RDONLY, mode: int = 0o666, *, dir_fd: int | None = None) -> int:
    """The regular file at ``path`` (a name in ``dir_fd`` where given), opened without
    following a link at its name; a link, a FIFO, a device or a folder there is refused
    (OSError), before anything is read or written."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode, dir_fd=dir_fd)
    except OSError:
        try:  # ELOOP; or EACCES where fs.protected_symlinks guards a sticky folder
            link = stat.S_ISLNK(os.stat(path, dir_fd=dir_fd, follow_symlinks=False).st_mode)
        except OSError:
            link = False
        if link:
            raise OSError(errno.ELOOP, "a symbolic link: drillbit opens a run's files only as real files",
                          os.fspath(path)) from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
    os.set_blocking(fd, True)
    return fd


__all__ = ["SETTING", "Folder", "check", "folder", "open_file", "owners", "refusal", "safe_folders"]
