"""Follow growing text files (the job's logs) line by line, like ``tail -F``.

Handles files that appear late, are truncated or are replaced; a partial last line is
held back until its newline arrives. A carriage return ends a line too: progress bars
(tqdm, as Hugging Face Trainer and Lightning draw them) redraw one line with ``\r`` and
write no newline until they close, and each redraw is a step. A :class:`FileSet` follows what
a profile's log entries name, globs included, as files appear.
"""
from __future__ import annotations

import fnmatch
import glob
import os
import re
import time
from pathlib import Path

_BREAK = re.compile(rb"\r\n|\r|\n")


class FileFollower:
    def __init__(self, path: str | Path, *, from_start: bool = True) -> None:
        self.path = Path(path)
        self._pos = 0
        self._inode: int | None = None
        self._partial = b""
        self._from_start = from_start
        self._size = 0  # the file's size when last seen
        self.lost = 0  # bytes never read: the file was replaced or truncated before we got to them

    def observe(self) -> None:
        """Look at the file without reading it: note its size, and count what a replacement
        or truncation took with it (a reader that waits still knows what it missed)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return
        if self._inode is None:
            return
        if st.st_ino != self._inode or st.st_size < self._pos:
            self.lost += max(0, self._size - self._pos)
            self._pos, self._partial, self._inode = 0, b"", st.st_ino
            self._size = st.st_size
        else:
            self._size = st.st_size

    def read_lines(self, max_bytes: int | None = None) -> list[str]:
        """The complete lines added since the last call (at most ``max_bytes`` of the file
        read this time: a reader that is behind catches up over several calls)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return []
        if self._inode is None and not self._from_start:
            self._pos = st.st_size
        if self._inode is not None and (st.st_ino != self._inode or st.st_size < self._pos):
            self.lost += max(0, self._size - self._pos)  # what the old file still held for us
            self._pos, self._partial = 0, b""  # replaced or truncated
        self._inode = st.st_ino
        self._size = st.st_size
        if st.st_size == self._pos:
            return []
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._pos)
                data = fh.read(max_bytes if max_bytes is not None else -1)
        except FileNotFoundError:  # renamed away since the stat (logrotate): the next read finds its successor
            return []
        self._pos += len(data)
        data = self._partial + data
        *lines, self._partial = _BREAK.split(data)
        # empty pieces (blank lines, or the \n of a \r\n split across two reads) carry nothing
        return [line.decode("utf-8", "replace") for line in lines if line]


def is_pattern(entry: str) -> bool:
    """A log entry that is a glob (``*``, ``?``, ``[..]``): it names the files that match it,
    now or later, not one file that must be there."""
    return glob.has_magic(entry)


class FileSet:
    """The files a profile's log entries name, followed together: a plain path from its first
    byte whether or not it exists yet; a glob, each file it matches, looked for again every
    ``rescan`` seconds, so a file that appears later (a rank's log made at launch) is followed
    from its first byte too. A file two entries name is followed once."""

    def __init__(self, entries: list[str] | list[Path], *, rescan: float = 0.5) -> None:
        self.entries = [str(e) for e in entries]
        self._patterns = [e for e in self.entries if is_pattern(e)]
        self._followers: dict[str, FileFollower] = {}
        for entry in self.entries:
            if not is_pattern(entry):
                self._followers.setdefault(os.path.normpath(entry), FileFollower(entry))
        self._rescan = rescan
        self._next_scan = 0.0

    def followers(self) -> list[FileFollower]:
        """Every file followed, the glob's new matches included."""
        if self._patterns and time.monotonic() >= self._next_scan:
            self._next_scan = time.monotonic() + self._rescan
            for pattern in self._patterns:
                for path in sorted(glob.glob(pattern)):
                    key = os.path.normpath(path)
                    if key not in self._followers and os.path.isfile(path):
                        self._followers[key] = FileFollower(path)
        return list(self._followers.values())

    def missing(self) -> list[str]:
        """The plain paths with no file, and the globs that match none (yet)."""
        gone = [e for e in self.entries if not is_pattern(e) and not os.path.exists(e)]
        return gone + [p for p in self._patterns if not any(os.path.isfile(m) for m in glob.glob(p))]

    @property
    def lost(self) -> int:
        return sum(f.lost for f in self._followers.values())


def folder_listing(folder: str | Path, limit: int = 12, ignore: tuple[str, ...] | list[str] = ()) -> str:
    """What a folder holds, in a few words: its files with their sizes and its folders with how
    many files are under them (``job-node-0.out (2.1 kB), ckpt/ (8 files)``), at most ``limit``
    entries, less those whose names match ``ignore`` (globs); what is not there says so."""
    root = Path(folder)
    try:
        entries = sorted((p for p in root.iterdir() if not any(fnmatch.fnmatch(p.name, i) for i in ignore)),
                         key=lambda p: p.name)
    except FileNotFoundError:
        return "no such folder"
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    shown = []
    for entry in entries[:limit]:
        try:
            if entry.is_dir() and not entry.is_symlink():
                count = sum(len(files) for _, _, files in os.walk(entry))
                shown.append(f"{entry.name}/ ({count} file{'s' if count != 1 else ''})")
            else:
                shown.append(f"{entry.name} ({_size(entry.stat().st_size)})")
        except OSError:
            shown.append(entry.name)
    more = f", and {len(entries) - limit} more" if len(entries) > limit else ""
    return (", ".join(shown) + more) if shown else "empty"


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
