"""Which processes read a job's checkpoint files: the evidence a file fault is judged by.

From the moment corrupt-checkpoint or restore-hang damages a checkpoint until the fault is
healed, the agent on the node that holds it watches the job's checkpoint folder (every
checkpoint of the layout, each folder as it appears) and records one :class:`Read` per
process and file: the process opened the file and closed it without writing (a reader, not
the job's next save).

fanotify (Linux, root or CAP_SYS_ADMIN) names the reading process; a reader's rank is the
``RANK`` (or a launcher's equivalent) in its environment or its nearest ancestor's. Where
fanotify is refused, inotify sees the read but not the reader (``pid`` None): the watch says
which it is in :attr:`ReadWatch.mode`. A folder on a network filesystem can be read from
other hosts, which no watch here sees: :attr:`ReadWatch.local` is False there, and a check
must not take "never read" as proof.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import struct
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

Mode = Literal["fanotify", "inotify", "none"]

FAN_CLASS_NOTIF = 0x0
FAN_CLOEXEC = 0x1
FAN_NONBLOCK = 0x2
FAN_OPEN = 0x20
FAN_CLOSE_WRITE = 0x08
FAN_CLOSE_NOWRITE = 0x10
FAN_EVENT_ON_CHILD = 0x08000000
FAN_MARK_ADD = 0x1
FAN_Q_OVERFLOW = 0x4000
_FAN_HEADER = struct.Struct("IBBHQii")

IN_OPEN = 0x20
IN_CLOSE_WRITE = 0x08
IN_CLOSE_NOWRITE = 0x10
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
_IN_HEADER = struct.Struct("iIII")
AT_FDCWD = -100

# the environment variables launchers give a rank (torchrun, Slurm, Open MPI, MPICH, JAX)
RANK_ENV = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "JAX_PROCESS_ID")
# filesystems another host can read the same files through
NETWORK_FS = {0x6969: "nfs", 0xFF534D42: "cifs", 0xFE534D42: "smb2", 0x65735546: "fuse", 0x5346414F: "afs",
              0x47504653: "gpfs", 0x0BD00BD0: "lustre", 0x00C36400: "ceph", 0x013111A8: "ibrix",
              0x564C: "ncp", 0x6B414653: "kafs"}


@dataclass(frozen=True)
class Read:
    t: float                 # when the file was opened (the agent's clock)
    path: str                # the file, absolute
    pid: int | None          # None: inotify, which does not name the reader
    rank: int | None
    cmdline: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


def rank_of(pid: int, depth: int = 6) -> int | None:
    """The rank in the process's environment, or in its nearest ancestor's (a DataLoader
    worker's, a verifier subprocess's)."""
    for _ in range(depth):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            for name in RANK_ENV:
                key = name.encode() + b"="
                value = next((e[len(key):] for e in env if e.startswith(key)), None)
                if value is not None and value.isdigit():
                    return int(value)
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
        if pid <= 1:
            return None
    return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return ""


def filesystem(path: str | Path) -> str | None:
    """The network filesystem ``path`` is on (nfs, fuse, lustre…), or None for a local one."""
    libc = _libc()
    if libc is None:
        return None
    buf = ctypes.create_string_buffer(256)  # struct statfs; f_type is its first field
    if libc.statfs(os.fsencode(str(path)), buf) != 0:
        return None
    kind = struct.unpack_from("l", buf.raw)[0] & 0xFFFFFFFF
    return NETWORK_FS.get(kind)


class ReadWatch:
    """Reads of the files under ``root`` by processes other than ``ignore`` (this agent),
    collected on a thread of its own until :meth:`stop`. ``drain`` hands over what was seen
    since the last call, each (process, file) once."""

    def __init__(self, root: str | Path, *, ignore: set[int] | None = None, rescan_s: float = 0.25) -> None:
        self.root = Path(os.path.realpath(root))  # as fanotify names what it sees
        self.ignore = set(ignore or ()) | {os.getpid()}
        self.rescan_s = rescan_s
        self.mode: Mode = "none"
        self.why = ""
        self.network_fs = filesystem(self.root) if self.root.exists() else None
        self._fd: int | None = None
        self._marked: dict[str, int] = {}  # folder -> inotify watch descriptor (fanotify: 0)
        self._by_wd: dict[int, str] = {}
        self._open: dict[tuple[int | None, str], float] = {}
        self._seen: set[tuple[int | None, str]] = set()
        self._reads: list[Read] = []
        self._lock = threading.Lock()
        self._collecting = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def local(self) -> bool:
        return self.network_fs is None

    def start(self) -> "ReadWatch":
        libc = _libc()
        if libc is None:
            self.why = "no libc"
            return self
        fd = libc.fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK, os.O_RDONLY | os.O_LARGEFILE) \
            if hasattr(libc, "fanotify_init") else -1
        if fd >= 0:
            self._fd, self.mode = fd, "fanotify"
            libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]
        else:
            err = ctypes.get_errno()
            fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
            if fd < 0:
                self.why = f"neither fanotify ({os.strerror(err)}) nor inotify is available"
                return self
            self._fd, self.mode = fd, "inotify"
            self.why = f"fanotify refused ({os.strerror(err)}; it needs root or CAP_SYS_ADMIN): reads are seen " \
                       "but not who read"
        self._libc = libc
        self._mark_tree()
        self._thread = threading.Thread(target=self._run, name="drillbit-readwatch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._fd is not None:
            self._collect()
            os.close(self._fd)
            self._fd = None

    @contextmanager
    def own(self):
        """This agent's own reads inside the block (a hash, the heal's put-back) are not the
        job's: fanotify leaves them out by pid; inotify cannot tell, so what it queued inside
        the block is dropped."""
        if self.mode != "inotify" or self._fd is None:
            yield
            return
        with self._collecting:
            self._collect_locked()  # what others did before: kept
            try:
                yield
            finally:
                try:
                    while os.read(self._fd, 65536):
                        pass
                except OSError:
                    pass
                self._open.clear()

    def drain(self) -> list[Read]:
        with self._lock:
            out, self._reads = self._reads, []
        return out

    # --- marks ---------------------------------------------------------------------------
    MAX_DEPTH = 32  # a checkpoint is a few folders deep; a job's user may make it 1,100 (no recursion here)

    def _mark_tree(self) -> None:
        if not self.root.is_dir():
            return
        stack = [(str(self.root), 0)]
        while stack:
            folder, depth = stack.pop()
            if folder not in self._marked:
                self._mark(folder)
            if depth >= self.MAX_DEPTH:
                continue
            try:
                with os.scandir(folder) as entries:
                    stack += [(e.path, depth + 1) for e in entries if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue

    def _mark(self, folder: str) -> None:
        assert self._fd is not None
        if self.mode == "fanotify":
            ok = self._libc.fanotify_mark(self._fd, FAN_MARK_ADD, FAN_OPEN | FAN_CLOSE_NOWRITE | FAN_CLOSE_WRITE
                                          | FAN_EVENT_ON_CHILD, AT_FDCWD, os.fsencode(folder)) == 0
            if ok:
                self._marked[folder] = 0
        else:
            wd = self._libc.inotify_add_watch(self._fd, os.fsencode(folder), IN_OPEN | IN_CLOSE_NOWRITE | IN_CLOSE_WRITE)
            if wd >= 0:
                self._marked[folder] = wd
                self._by_wd[wd] = folder

    # --- events --------------------------------------------------------------------------
    def _run(self) -> None:
        last_scan = time.monotonic()
        while not self._stop.is_set():
            assert self._fd is not None
            try:
                ready, _, _ = select.select([self._fd], [], [], 0.05)
            except (OSError, ValueError):
                return
            if ready:
                self._collect()
            if time.monotonic() - last_scan >= self.rescan_s:  # checkpoints saved since: watch them too
                self._mark_tree()
                last_scan = time.monotonic()

    def _collect(self) -> None:
        with self._collecting:
            self._collect_locked()

    def _collect_locked(self) -> None:
        if self._fd is None:
            return
        while True:
            try:
                buf = os.read(self._fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                return
            if not buf:
                return
            if self.mode == "fanotify":
                self._fanotify(buf)
            else:
                self._inotify(buf)

    def _fanotify(self, buf: bytes) -> None:
        offset = 0
        while offset + _FAN_HEADER.size <= len(buf):
            length, _, _, _, mask, efd, pid = _FAN_HEADER.unpack_from(buf, offset)
            offset += length or _FAN_HEADER.size
            if efd < 0:
                continue
            try:
                path = os.readlink(f"/proc/self/fd/{efd}")
            except OSError:
                path = ""
            finally:
                os.close(efd)
            if path and pid not in self.ignore:
                self._event(pid, path, mask & FAN_OPEN, mask & FAN_CLOSE_NOWRITE, mask & FAN_CLOSE_WRITE)

    def _inotify(self, buf: bytes) -> None:
        offset = 0
        while offset + _IN_HEADER.size <= len(buf):
            wd, mask, _, size = _IN_HEADER.unpack_from(buf, offset)
            name = buf[offset + _IN_HEADER.size: offset + _IN_HEADER.size + size].rstrip(b"\0").decode(errors="replace")
            offset += _IN_HEADER.size + size
            folder = self._by_wd.get(wd)
            if folder is None or not name or mask & 0x40000000:  # IN_ISDIR: a folder listed
                continue
            self._event(None, os.path.join(folder, name), mask & IN_OPEN, mask & IN_CLOSE_NOWRITE,
                        mask & IN_CLOSE_WRITE)

    def _event(self, pid: int | None, path: str, opened: int, read: int, wrote: int) -> None:
        key = (pid, path)
        now = time.time()
        if opened:
            self._open.setdefault(key, now)
        if wrote:
            self._open.pop(key, None)  # a writer (the job's own save), not a reader
            return
        if not read:
            return
        t = self._open.pop(key, now)
        if key in self._seen or (pid is None and os.path.isdir(path)):
            return
        self._seen.add(key)
        rank = rank_of(pid) if pid is not None else None
        with self._lock:
            self._reads.append(Read(t=t, path=path, pid=pid, rank=rank, cmdline=_cmdline(pid) if pid else ""))
