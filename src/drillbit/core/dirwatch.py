"""Watch a checkpoint folder's files as a save writes them: inotify where the kernel has it,
polling otherwise.

A save is a burst of file events under the job's checkpoint folder: a folder appears (a
temporary one, or the final one), files are created, written and closed, and often a rename
publishes the whole. A file rewritten in place (``ckpt.pt`` opened with truncate on every
save) is created anew when its first write after a close comes. :class:`DirWatch` turns those into :class:`FileEvent` records —
``create``, ``close`` (written and closed), ``publish`` (renamed into place), ``delete`` —
with the path relative to the watched root and, when known, the file's size.

inotify (Linux) reports each event as it happens, so a fault that must land *between* two
files of one save (kill-during-save) can: watches are added to every folder as it appears,
and a folder that appeared before its watch was set is scanned for what it already holds.
Polling compares two listings ``interval`` apart; it sees a file once it exists and calls it
closed once its size and mtime held still for one interval and no process on this machine
holds it open (a writer that only paused is not done); a rename shows as a new path.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import select
import struct
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from drillbit.core.proc import open_fds

Mode = Literal["auto", "inotify", "poll"]
Kind = Literal["create", "close", "publish", "delete"]

IN_MODIFY = 0x2
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ISDIR = 0x40000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
MASK = IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MODIFY
_HEADER = struct.Struct("iIII")


@dataclass(frozen=True)
class FileEvent:
    t: float
    kind: Kind
    path: str          # relative to the watched root, with "/" separators
    is_dir: bool = False
    size: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def top(self) -> str:
        """The entry directly under the root this event belongs to (a checkpoint's folder)."""
        return self.path.split("/", 1)[0]


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1  # noqa: B018 - present on Linux only
        return libc
    except (OSError, AttributeError):
        return None


def inotify_available() -> bool:
    libc = _libc()
    if libc is None:
        return False
    fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
    if fd < 0:
        return False
    os.close(fd)
    return True


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def _stat(path: str) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def _open_anywhere(paths: list[str]) -> set[str]:
    """Which of ``paths`` some process on this machine holds open (from /proc/*/fd): a file
    found already there when a watch is set is still being written only if so."""
    wanted = {os.path.realpath(p): p for p in paths}
    found: set[str] = set()
    try:
        pids = [d for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return set(paths)  # cannot tell: assume still open, so its close is awaited
    for pid in pids:
        for target, _ in open_fds(pid):
            if target in wanted:
                found.add(wanted[target])
    return found


class DirWatch:
    """Events under ``root`` from the moment it is constructed. ``root`` may not exist yet:
    it is watched from when it appears, and what it holds then counts as created."""

    def __init__(self, root: str | Path, mode: Mode = "auto", interval: float = 0.05) -> None:
        self.root = Path(root)
        self.interval = interval
        libc = _libc() if mode in ("auto", "inotify") else None
        if mode == "inotify" and (libc is None or not inotify_available()):
            raise OSError("inotify is not available on this machine")
        self.mode: Literal["inotify", "poll"] = "inotify" if libc is not None else "poll"
        self._libc = libc
        self._fd: int | None = None
        self._wds: dict[int, str] = {}  # watch descriptor -> folder relative to root ("" = root)
        self._known: dict[str, tuple[bool, int, int]] = {}  # poll: path -> (is_dir, size, mtime_ns)
        self._settled: set[str] = set()  # poll: files already reported closed at their current stat
        self._since: dict[str, float] = {}  # poll: path -> when (monotonic) a listing first showed its current stat
        self._pending: list[FileEvent] = []
        self._closed_by_scan: dict[str, int | None] = {}  # inotify: files a scan found closed
        self._moving: dict[int, str] = {}  # inotify: rename cookie -> the folder's old name
        self._writing: set[str] = set()  # inotify: files created (or rewritten) and not closed since
        self._started = False
        if self.mode == "inotify":
            assert libc is not None  # the mode is inotify only where libc has it
            self._fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
            if self._fd < 0:
                raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self._start()

    # --- common ---------------------------------------------------------------------------
    def _start(self, late: bool = False) -> None:
        """Watch from now; ``late``: the root appeared after construction, and what it
        holds counts as created."""
        if self._started or not self.root.is_dir():
            return
        self._started = True
        if self.mode == "inotify":
            self._add_tree("")
            if late:
                self._pending += self._scan_existing("")
        elif not late:
            self._known = self._listing()
            self._settled = {p for p, (d, _, _) in self._known.items() if not d}

    def events(self, timeout: float) -> list[FileEvent]:
        """The events that came, waiting up to ``timeout`` seconds for the first one."""
        deadline = time.monotonic() + timeout
        while True:
            if not self._started:
                self._start(late=True)
            out = self._read() if self._started else []
            if self._pending:
                out, self._pending = self._pending + out, []
            left = deadline - time.monotonic()
            if out or left <= 0:
                return out
            if self.mode == "inotify" and self._started and self._fd is not None:
                select.select([self._fd], [], [], min(left, 0.5))
            else:
                time.sleep(min(left, self.interval))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "DirWatch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self) -> list[FileEvent]:
        return self._read_inotify() if self.mode == "inotify" else self._poll()

    # --- inotify --------------------------------------------------------------------------
    def _add(self, rel: str) -> None:
        path = self.root / rel if rel else self.root
        assert self._libc is not None
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(path), MASK)
        if wd >= 0:
            self._wds[wd] = rel

    def _add_tree(self, rel: str) -> None:
        self._add(rel)
        base = self.root / rel if rel else self.root
        try:
            entries = list(os.scandir(base))
        except OSError:
            return
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                self._add_tree(f"{rel}/{entry.name}" if rel else entry.name)

    def _scan_existing(self, rel: str) -> list[FileEvent]:
        """What a folder already holds when its watch is set (written before we could see it)."""
        base = self.root / rel if rel else self.root
        out: list[FileEvent] = []
        try:
            entries = sorted(os.scandir(base), key=lambda e: e.name)
        except OSError:
            return out
        now = time.time()
        files = [e.path for e in entries if not e.is_dir(follow_symlinks=False)]
        open_now = _open_anywhere(files) if files else set()
        for entry in entries:
            child = f"{rel}/{entry.name}" if rel else entry.name
            is_dir = entry.is_dir(follow_symlinks=False)
            size = None if is_dir else _size(Path(entry.path))
            out.append(FileEvent(now, "create", child, is_dir, size))
            if is_dir:
                out += self._scan_existing(child)
            elif entry.path in open_now:
                self._writing.add(child)  # still being written: its close is to come
            elif self.mode == "inotify" and entry.path not in open_now:
                # written and closed before the folder's watch was set: its close came unseen
                # (or comes late, when the watch just caught it: that one is dropped)
                out.append(FileEvent(now, "close", child, False, size))
                self._closed_by_scan[child] = size
        return out

    def _read_inotify(self) -> list[FileEvent]:
        assert self._fd is not None  # inotify mode: opened in __init__
        try:
            data = os.read(self._fd, 65536)
        except BlockingIOError:
            return []
        except OSError as exc:
            if exc.errno == errno.EAGAIN:
                return []
            raise
        now = time.time()
        out: list[FileEvent] = []
        offset = 0
        while offset + _HEADER.size <= len(data):
            wd, mask, cookie, length = _HEADER.unpack_from(data, offset)
            raw = data[offset + _HEADER.size: offset + _HEADER.size + length]
            offset += _HEADER.size + length
            name = os.fsdecode(raw.rstrip(b"\0"))
            if mask & IN_Q_OVERFLOW:
                continue
            if mask & (IN_IGNORED | IN_DELETE_SELF):
                self._wds.pop(wd, None)
                continue
            folder = self._wds.get(wd)
            if folder is None or not name:
                continue
            rel = f"{folder}/{name}" if folder else name
            out += self._one_event(now, mask, cookie, rel)
        return out

    def _one_event(self, now: float, mask: int, cookie: int, rel: str) -> list[FileEvent]:
        """The file events one inotify record makes (none, when a scan already reported it)."""
        out: list[FileEvent] = []
        is_dir = bool(mask & IN_ISDIR)
        path = self.root / rel
        if mask & IN_CREATE:
            if not is_dir and (rel in self._closed_by_scan or rel in self._writing):
                return out  # the scan that found it already reported its create
            out.append(FileEvent(now, "create", rel, is_dir, None if is_dir else _size(path)))
            if is_dir:
                self._add_tree(rel)
                out += self._scan_existing(rel)
            else:
                self._writing.add(rel)
        elif mask & IN_MODIFY:
            # (a file a scan found already closed sends the rest of that same write late: not a rewrite)
            if not is_dir and rel not in self._writing and rel not in self._closed_by_scan:
                # a file written again in place (opened with truncate, or over its old bytes):
                # its rewrite begins here, as a create would begin a new one
                self._writing.add(rel)
                out.append(FileEvent(now, "create", rel, False, _size(path)))
        elif mask & IN_CLOSE_WRITE:
            self._writing.discard(rel)
            size = _size(path)
            if rel in self._closed_by_scan and self._closed_by_scan.pop(rel) == size:
                return out  # already reported closed by the scan that found it
            out.append(FileEvent(now, "close", rel, False, size))
        elif mask & IN_MOVED_TO:
            out.append(FileEvent(now, "publish", rel, is_dir, None if is_dir else _size(path)))
            if is_dir:
                out += self._moved(self._moving.pop(cookie, None), rel)
        elif mask & IN_MOVED_FROM:
            out.append(FileEvent(now, "delete", rel, is_dir))
            if is_dir:
                self._moving[cookie] = rel
        elif mask & IN_DELETE:
            self._writing.discard(rel)
            self._closed_by_scan.pop(rel, None)
            out.append(FileEvent(now, "delete", rel, is_dir))
        return out

    def _moved(self, old: str | None, new: str) -> list[FileEvent]:
        """A folder renamed into place keeps its watches (they follow the inode): the names
        recorded for it and its subfolders change to the published name. A folder moved in
        from outside the root was never watched: watch it now."""
        if old is None:
            self._add_tree(new)
            return self._scan_existing(new)
        for wd, folder in list(self._wds.items()):
            if folder == old or folder.startswith(old + "/"):
                self._wds[wd] = new + folder[len(old):]
        return []

    # --- polling --------------------------------------------------------------------------
    def _listing(self) -> dict[str, tuple[bool, int, int]]:
        out: dict[str, tuple[bool, int, int]] = {}
        for folder, dirs, files in os.walk(self.root):
            rel_folder = os.path.relpath(folder, self.root)
            for name in dirs + files:
                rel = name if rel_folder == "." else f"{rel_folder}/{name}".replace(os.sep, "/")
                try:
                    st = os.lstat(os.path.join(folder, name))
                except OSError:
                    continue
                out[rel] = (name in dirs, st.st_size, st.st_mtime_ns)
        return out

    def _poll(self) -> list[FileEvent]:
        now = time.time()
        current = self._listing()
        out: list[FileEvent] = []
        gone = set(self._known) - set(current)
        renamed = self._renames(current, gone)
        for new, old in renamed.items():
            out.append(FileEvent(now, "delete", old, True))
            out.append(FileEvent(now, "publish", new, True))
            for rel in list(gone):
                if rel.startswith(old + "/"):
                    gone.discard(rel)
            gone.discard(old)
            for rel in current:  # a renamed folder's files are the same files, not new ones
                if rel.startswith(new + "/"):
                    self._known[rel] = self._known.get(old + rel[len(new):], current[rel])
                    if old + rel[len(new):] in self._since:
                        self._since[rel] = self._since[old + rel[len(new):]]
                    if old + rel[len(new):] in self._settled:
                        self._settled.add(rel)
            self._known[new] = current[new]
        # Held still means for one interval of time, not between two listings: a caller that
        # reads again at once (it just got events) lists twice within a millisecond, and a file
        # truncated by open() shows its new size before the opener's descriptor exists
        # (O_TRUNC, then fd_install: a loaded machine preempts a writer in between)
        tick = time.monotonic()
        self._since = {rel: self._since[rel] if self._known.get(rel) == stat and rel in self._since else tick
                       for rel, stat in current.items()}
        still = [rel for rel, (is_dir, _, _) in current.items()
                 if not is_dir and self._known.get(rel) == current[rel] and rel not in self._settled
                 and tick - self._since[rel] >= self.interval]
        # Held still for one interval is not closed when the writer only paused (a loaded
        # machine, a slow filesystem): a file some process here still holds open waits
        held = _open_anywhere([os.path.join(self.root, r) for r in still]) if still else set()
        # ... and a file the scan found closed is closed only if it still is as listed: the
        # writer may have written and closed it between the listing and the scan (its close is
        # then the next interval's, at its real size, not this one's at the old)
        held |= {os.path.join(self.root, r) for r in still if os.path.join(self.root, r) not in held
                 and _stat(os.path.join(self.root, r)) != current[r][1:]}
        for rel in sorted(current, key=lambda p: (p.count("/"), p)):
            is_dir, size, _ = current[rel]
            before = self._known.get(rel)
            if before is None:
                out.append(FileEvent(now, "create", rel, is_dir, None if is_dir else size))
                self._settled.discard(rel)
            elif rel in still and os.path.join(self.root, rel) not in held:
                out.append(FileEvent(now, "close", rel, False, size))
                self._settled.add(rel)
            elif before != current[rel]:
                if rel in self._settled and not is_dir:  # a closed file written again in place
                    out.append(FileEvent(now, "create", rel, False, size))
                self._settled.discard(rel)
        for rel in sorted(gone):
            out.append(FileEvent(now, "delete", rel, self._known[rel][0]))
            self._settled.discard(rel)
        self._known = current
        return out

    def _renames(self, current: dict[str, tuple[bool, int, int]], gone: set[str]) -> dict[str, str]:
        """Folders that vanished and reappeared under another name in one interval, with the
        same files: a rename (new name -> old name)."""
        def files(listing: dict[str, tuple[bool, int, int]], top: str) -> dict[str, int]:
            return {rel[len(top):]: v[1] for rel, v in listing.items() if rel.startswith(top + "/") and not v[0]}
        old_dirs = [g for g in gone if self._known[g][0] and ("/" not in g or g.rsplit("/", 1)[0] not in gone)]
        new_dirs = [rel for rel, v in current.items() if v[0] and rel not in self._known]
        out: dict[str, str] = {}
        for new in new_dirs:
            content = files(current, new)
            for old in old_dirs:
                # the same file names (a file still being written may have grown in between)
                if old not in out.values() and old.count("/") == new.count("/") \
                        and files(self._known, old).keys() == content.keys():
                    out[new] = old
                    break
        return out
