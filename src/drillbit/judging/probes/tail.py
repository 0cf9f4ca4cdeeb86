"""Follow growing text files (the job's logs) line by line, like ``tail -F``.

Handles files that appear late, are truncated or are replaced; a partial last line is
held back until its newline arrives. A carriage return ends a line too: progress bars
(tqdm, as Hugging Face Trainer and Lightning draw them) redraw one line with ``\r`` and
write no newline until they close, and each redraw is a step.
"""
from __future__ import annotations

import os
import re
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
        with open(self.path, "rb") as fh:
            fh.seek(self._pos)
            data = fh.read(max_bytes if max_bytes is not None else -1)
        self._pos += len(data)
        data = self._partial + data
        *lines, self._partial = _BREAK.split(data)
        # empty pieces (blank lines, or the \n of a \r\n split across two reads) carry nothing
        return [line.decode("utf-8", "replace") for line in lines if line]
