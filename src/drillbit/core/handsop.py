"""What a file fault does to a job's files, done by the job's own hands (issue 57).

Every read, damage, copy-aside, put-back and removal of a job's checkpoint file runs here: in
a thread of the agent that has taken the job's own uid, gid and groups for its filesystem
access (:mod:`drillbit.core.jobhands`), or in the agent itself where the agent already is the
job's user. So whatever a folder swapped for a link reaches, the job's user could already
write it.

And here nothing is done by a name that can be re-bound between a look and the act. A
checkpoint folder is opened once (its configured path, resolved by the job's user), every
folder below it is opened from its parent's descriptor without following links, and the
file is read, damaged and put back through that last descriptor (``openat`` with
``O_NOFOLLOW``). Identities (device, inode) taken when the file is taken aside are checked
on every later call: a folder the job's user moved or replaced is reported, never written.

A heal is an atomic exchange (``renameat2(RENAME_EXCHANGE)``): the original is written under
a fresh name beside the damaged one and swapped in; what came out is looked at, and only
when it is the damage this fault made (its inode, and its digest) is it removed; anything
else is a save the job made in between, so it is swapped back and kept.

Standard library only, every module imported here at the top: a module imported lazily in the
thread that acts as the job's user would be read with its credentials (and a job's user may
not be able to read the agent's virtual environment). No operation changes the process's
working folder or umask (threads share them): every name is made from a folder's descriptor,
with its mode set on the descriptor.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import io
import os
import secrets
import stat
import tarfile
import time
from typing import Any

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
NOFOLLOW_DIR = DIR_FLAGS | os.O_NOFOLLOW


class Refused(Exception):
    """What is there now is not what the fault took aside (a folder moved, replaced by a link,
    removed): nothing was written. ``code``: moved, link, gone, hardlink, notfile, outside."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def ident(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino]


def statdict(st: os.stat_result) -> dict:
    kind = ("file" if stat.S_ISREG(st.st_mode) else "fifo" if stat.S_ISFIFO(st.st_mode) else
            "link" if stat.S_ISLNK(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "other")
    return {"kind": kind, "dev": st.st_dev, "ino": st.st_ino, "size": st.st_size, "nlink": st.st_nlink,
            "uid": st.st_uid, "gid": st.st_gid, "mode": stat.S_IMODE(st.st_mode),
            "atime_ns": st.st_atime_ns, "mtime_ns": st.st_mtime_ns}


def _renameat2(fd: int, old: str, new: str, flags: int, new_fd: int | None = None) -> None:
    """renameat2(2) from the folder ``fd`` (to ``new_fd``, default the same folder)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:
        raise OSError(errno.ENOSYS, "renameat2 is not in this C library")
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(fd, os.fsencode(old), fd if new_fd is None else new_fd, os.fsencode(new), flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), new)


def _lstat(fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _digest(fd: int) -> str:
    h = hashlib.sha256()
    os.lseek(fd, 0, os.SEEK_SET)
    while chunk := os.read(fd, 1 << 20):
        h.update(chunk)
    return h.hexdigest()


def _open_file(fd: int, name: str, flags: int) -> int:
    """``name`` in the folder ``fd``, never through a link, never blocking on a FIFO."""
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused("link", f"{name} is now a link") from None
        raise


def _digest_at(fd: int, name: str) -> tuple[str | None, os.stat_result | None]:
    """(sha256, stat) of the regular file ``name``; (None, its lstat) for anything else."""
    st = _lstat(fd, name)
    if st is None or not stat.S_ISREG(st.st_mode):
        return None, st
    f = _open_file(fd, name, os.O_RDONLY)
    try:
        st = os.fstat(f)
        return (_digest(f) if stat.S_ISREG(st.st_mode) else None), st
    finally:
        os.close(f)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def write_all(fd: int, data: bytes) -> None:
    """All of ``data`` to ``fd`` (a short write goes on), then fsync."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.fsync(fd)


def walk(root: str, parts: list[str], expect: dict | None = None) -> int:
    """A descriptor of the folder ``root/parts…``, every folder from ``/`` down opened from its
    parent's descriptor without following a link (``root`` is a real path: the job's user
    resolved it when the file was taken aside, so a link on it now is a folder swapped since:
    code ``swapped``). With ``expect`` (identities from :func:`op_read`), the root and the last
    folder must be those same folders (code ``moved``). Where ``expect`` holds the descriptor
    the agent kept of that folder (``held_fd``), that folder itself, wherever it is now; one that
    was removed (no names left) is ``gone``."""
    held = (expect or {}).get("held_fd")
    if held is not None:  # the folder's own descriptor, opened when the file was taken aside (this process)
        try:
            st = os.fstat(held)
        except OSError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode) and ident(st) == (expect or {}).get("parent"):
            if st.st_nlink == 0:
                raise Refused("gone", f"{os.path.join(root, *parts)} was removed (by the job: it pruned that "
                                      "checkpoint)")
            return os.dup(held)  # wherever it is now: moved, or a link put where it was, it is still that folder
    chain = [p for p in root.split("/") if p] + list(parts)
    fd = os.open("/", DIR_FLAGS)
    for i, part in enumerate(chain):
        try:
            nfd = os.open(part, NOFOLLOW_DIR, dir_fd=fd)
        except OSError as exc:
            os.close(fd)
            where = "/" + "/".join(chain[:i + 1])
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise Refused("swapped", f"{where} is now a link or not a folder (it was a folder when the file "
                                         "was taken aside)") from None
            if exc.errno == errno.ENOENT:
                raise Refused("gone", f"{where} is gone") from None
            raise
        os.close(fd)
        fd = nfd
        if i == len(chain) - len(parts) - 1 and expect and expect.get("root") and \
                ident(os.fstat(fd)) != expect["root"]:
            os.close(fd)
            raise Refused("moved", f"{root} is no longer the folder the fault took the file from (another folder "
                                   "stands there now)")
    if expect and expect.get("parent") and ident(os.fstat(fd)) != expect["parent"]:
        os.close(fd)
        raise Refused("moved", f"{os.path.join(root, *parts)} is no longer the folder the fault took the file "
                               "from (another folder stands there now)")
    return fd


def locate(root: str, path: str) -> dict:
    """Where ``path`` really is, as the job's user resolves it: its real checkpoint folder and the
    folders below it, refused (code ``outside``) when a link leads out of the folder."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if os.path.commonpath([real, real_root]) != real_root or real == real_root:
        raise Refused("outside", f"{path} leads to {real}, outside the job's checkpoint folder {root} (a symlink)")
    parts = os.path.relpath(real, real_root).split(os.sep)
    return {"real": real, "real_root": real_root, "dirs": parts[:-1], "name": parts[-1]}


# --- operations: each takes the request (JSON) and a payload, returns (JSON, payload) -------------------
def op_read(req: dict, data: bytes) -> tuple[dict, bytes]:
    """Take a file aside: where it really is, its identities and attributes, and its bytes."""
    where = locate(req["root"], req["path"])
    fd = walk(where["real_root"], where["dirs"])
    held = None
    try:
        parent = ident(os.fstat(fd))
        f = _open_file(fd, where["name"], os.O_RDONLY)
        try:
            st = os.fstat(f)
            if not stat.S_ISREG(st.st_mode):
                raise Refused("notfile", f"{where['real']} is not a regular file")
            if st.st_nlink > 1:
                raise Refused("hardlink", f"{where['real']} has {st.st_nlink} names (hard links)")
            body = _read_all(f)
        finally:
            os.close(f)
        # what the job's user may do here (a folder that is a link into someone else's: nothing)
        # (AT_EACCESS: checked with this thread's filesystem credentials, not the process's real uid)
        writable = {"file": os.access(where["name"], os.W_OK, dir_fd=fd, follow_symlinks=False, effective_ids=True),
                    "folder": os.access(".", os.W_OK | os.X_OK, dir_fd=fd, effective_ids=True)}
        root_fd = walk(where["real_root"], [])
        try:
            root_id = ident(os.fstat(root_fd))
        finally:
            os.close(root_fd)
        # kept by the agent for this fault's later calls in this process (an int: the same process)
        held = os.dup(fd) if req.get("hold") else None
    finally:
        os.close(fd)
    return {**where, "root": root_id, "parent": parent, "file": statdict(st), "writable": writable,
            "sha256": hashlib.sha256(body).hexdigest(), "held_fd": held}, body


def op_look(req: dict, data: bytes) -> tuple[dict, bytes]:
    """What stands at the file's name now (no link followed) and its sha256 if it is a file."""
    fd = walk(req["real_root"], req["dirs"], req.get("expect"))
    try:
        digest, st = _digest_at(fd, req["name"])
    finally:
        os.close(fd)
    return {"file": statdict(st) if st is not None else None, "sha256": digest}, b""


def _expect_ino(st: os.stat_result | None, req: dict, what: str) -> None:
    want = req.get("ino")
    if st is None:
        raise Refused("gone", f"{what} is gone")
    if want is not None and st.st_ino != want:
        raise Refused("moved", f"{what} is no longer the file the fault took aside (inode {st.st_ino}, was {want})")


class Partial(Exception):
    """An operation that failed after it had changed something: never a clean refusal."""


def op_damage(req: dict, data: bytes) -> tuple[dict, bytes]:
    """The damage, to the file the fault took aside (its inode) and nothing else: ``write``
    (the payload over its bytes), ``truncate`` (to ``size``), ``unlink``, ``fifo`` (a FIFO in
    its place, made under a fresh name and renamed over it). What it left is taken from the act
    itself (the written descriptor, the FIFO it made), never by looking at the name again: the
    job may have saved there the moment after. A failure before anything was changed is a
    refusal (its code); after, ``partial``."""
    name, how = req["name"], req["how"]
    fd = walk(req["real_root"], req["dirs"], req.get("expect"))
    acted = False
    left: dict[str, Any] = {}
    try:
        if how in ("write", "truncate"):
            f = _open_file(fd, name, os.O_RDWR)
            try:
                st = os.fstat(f)
                _expect_ino(st, req, name)
                if not stat.S_ISREG(st.st_mode):
                    raise Refused("notfile", f"{name} is not a regular file")
                if st.st_nlink > 1:  # a name made outside since the take-aside would keep the damage
                    raise Refused("hardlink", f"{name} has {st.st_nlink} names (hard links) now")
                acted = True
                if how == "write":
                    os.ftruncate(f, 0)
                    write_all(f, data)
                else:
                    os.ftruncate(f, int(req["size"]))
                    os.fsync(f)
                left = {"file": statdict(os.fstat(f)), "sha256": _digest(f)}
            finally:
                os.close(f)
        elif how == "unlink":
            _expect_ino(_lstat(fd, name), req, name)
            acted = True
            os.unlink(name, dir_fd=fd)
            left = {"file": None, "sha256": None}
        elif how == "fifo":
            tmp = f".{name}.drillbit-fifo-{secrets.token_hex(6)}"
            os.mkfifo(tmp, 0o600, dir_fd=fd)
            try:
                # its mode set through a descriptor of the FIFO this call made (a read open of a FIFO
                # does not wait for a writer with O_NONBLOCK), never by a name someone may re-bind
                ff = os.open(tmp, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                try:
                    made = os.fstat(ff)
                    if not stat.S_ISFIFO(made.st_mode):
                        raise Refused("moved", f"{tmp} is not the FIFO this fault made")
                    os.fchmod(ff, int(req.get("mode", 0o600)))
                finally:
                    os.close(ff)
                _expect_ino(_lstat(fd, name), req, name)
                acted = True
                os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
            except BaseException:
                if not acted:
                    _unlink_quiet(fd, tmp)
                raise
            left = {"file": {**statdict(made), "kind": "fifo"}, "sha256": None}
        else:
            raise ValueError(f"no damage {how!r}")
        with contextlib.suppress(OSError):
            os.fsync(fd)
    except (Refused, OSError) as exc:
        if acted:
            raise Partial(f"{how} of {name} failed part-way: {exc}") from None
        raise
    finally:
        os.close(fd)
    return left, b""


def _unlink_quiet(fd: int, name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=fd)


def _wake(fd: int, name: str, ino: int | None) -> int:
    """Open the FIFO ``name`` (inode ``ino``) for writing until no reader waits in open():
    each open releases the readers blocked there (they read EOF)."""
    woken = 0
    for _ in range(64):
        st = _lstat(fd, name)
        if st is None or not stat.S_ISFIFO(st.st_mode) or (ino is not None and st.st_ino != ino):
            break
        try:
            f = os.open(name, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ENXIO, errno.ENOENT, errno.ELOOP):
                break
            raise
        os.close(f)
        woken += 1
        time.sleep(0.01)
    return woken


def op_wake(req: dict, data: bytes) -> tuple[dict, bytes]:
    fd = walk(req["real_root"], req["dirs"], req.get("expect"))
    try:
        return {"woken": _wake(fd, req["name"], req.get("ino"))}, b""
    finally:
        os.close(fd)


def _is_damage(st: os.stat_result | None, digest: str | None, damage: dict) -> bool:
    """Whether what stands there is the damage this fault left (``damage``: kind absent, file
    with its inode and sha256, fifo with its inode; cut-short: an act that may not have ended)."""
    left = damage.get("kind")  # (not an event's kind: what the act left at the name)
    if left == "cut-short":  # the act may have done any part of its work: the original's inode, or none, or a FIFO
        return st is None or st.st_ino == damage.get("ino") or stat.S_ISFIFO(st.st_mode)
    if left == "absent":
        return st is None
    if st is None:
        return False
    if left == "fifo":
        return stat.S_ISFIFO(st.st_mode) and st.st_ino == damage.get("ino")
    if left == "file":
        return stat.S_ISREG(st.st_mode) and st.st_ino == damage.get("ino") and digest == damage.get("sha256")
    return False


def _fresh_copy(fd: int, name: str, data: bytes, orig: dict) -> tuple[str, list[str]]:
    """The original's bytes under a name only this heal can have made, with the original's
    owner (where the job's user may give it), mode and times."""
    notes = []
    tmp = f".{name}.drillbit-heal-{secrets.token_hex(8)}"
    f = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
    try:
        write_all(f, data)
        uid, gid = orig.get("uid"), orig.get("gid")
        if uid is not None and gid is not None:
            try:
                os.fchown(f, uid, gid)
            except PermissionError:
                st = os.fstat(f)
                if (st.st_uid, st.st_gid) != (uid, gid):
                    notes.append(f"owner uid {st.st_uid} gid {st.st_gid} (the original's was uid {uid} gid {gid}, "
                                 "which the job's user cannot give)")
        if orig.get("mode") is not None:
            os.fchmod(f, orig["mode"])
        if orig.get("atime_ns") is not None and orig.get("mtime_ns") is not None:
            os.utime(f, ns=(orig["atime_ns"], orig["mtime_ns"]))
        os.fsync(f)
    except BaseException:
        os.close(f)
        _unlink_quiet(fd, tmp)
        raise
    os.close(f)
    return tmp, notes


def _swap_in(fd: int, tmp: str, name: str, absent: bool, damage: dict) -> tuple[str | None, int]:  # noqa: C901
    """``tmp`` (the original) into ``name``: never over a file (where nothing stood), or by an
    atomic exchange that is undone when what came out is not the damage. (how it went, or None
    where the job's save stands; readers of a FIFO woken)."""
    woken = 0
    fresh_ino = os.stat(tmp, dir_fd=fd, follow_symlinks=False).st_ino
    if absent:
        try:
            _renameat2(fd, tmp, name, RENAME_NOREPLACE)
            return "put in place, never over a file", 0
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.ENOSYS):
                _unlink_quiet(fd, tmp)  # EEXIST: the job saved it meanwhile
                if exc.errno == errno.EEXIST:
                    return None, 0
                raise
        try:  # a filesystem without renameat2's flags: link() never replaces either
            os.link(tmp, name, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
        except FileExistsError:
            return None, 0
        finally:
            _unlink_quiet(fd, tmp)
        return "linked into place (this filesystem has no renameat2)", 0
    try:
        _renameat2(fd, tmp, name, RENAME_EXCHANGE)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOSYS):
            _unlink_quiet(fd, tmp)  # nothing was swapped: tmp is still the heal's own copy
            raise
        # no exchange here: the last look decided, and the window is the job's user's own
        os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        return "renamed over the damage (this filesystem has no atomic exchange)", 0
    out_digest, out = _digest_at(fd, tmp)  # what came out of the name
    if not _is_damage(out, out_digest, damage):
        there = _lstat(fd, name)
        if there is None or there.st_ino != fresh_ino:
            # the job saved again over the heal's copy meanwhile: its newest is at the name; the one that
            # came out (its earlier save) stays beside it, hidden, named in the answer
            return None, 0
        _renameat2(fd, tmp, name, RENAME_EXCHANGE)  # the job's save goes back where it was
        back = _lstat(fd, tmp)
        if back is not None and back.st_ino == fresh_ino:  # the heal's own copy: nothing of the job's
            _unlink_quiet(fd, tmp)
        return None, 0
    if out is not None and stat.S_ISFIFO(out.st_mode):
        woken = _wake(fd, tmp, out.st_ino)
    _unlink_quiet(fd, tmp)
    return "exchanged atomically for the damage", woken


def op_heal(req: dict, data: bytes) -> tuple[dict, bytes]:
    """Put the original back by an atomic exchange, unless the job saved over the damage.

    outcome: ``intact`` (the original is there), ``restored``, ``job`` (the job replaced or
    removed the damage, before the heal or while it ran: its save is kept), ``link`` (the
    job put a link at the name: left), ``moved`` / ``gone`` (the folder is no longer the one
    the file was taken from, or is gone: nothing written), ``failed`` (restored, but what is
    there does not read back as the original)."""
    name, orig, damage = req["name"], req["original"], req["damage"]
    try:
        fd = walk(req["real_root"], req["dirs"], req.get("expect"))
    except Refused as exc:
        return {"outcome": exc.code, "detail": str(exc)}, b""
    try:
        digest, st = _digest_at(fd, name)
        if st is not None and stat.S_ISLNK(st.st_mode):
            return {"outcome": "link", "detail": f"{name} is now a link the job made"}, b""
        if digest is not None and digest == orig["sha256"]:
            return {"outcome": "intact", "detail": f"{name} already intact"}, b""
        if not _is_damage(st, digest, damage):
            return {"outcome": "job", "detail": f"{name} was since replaced or removed by the job"}, b""
        woken = _wake(fd, name, damage.get("ino")) if damage.get("kind") == "fifo" else 0
        tmp, notes = _fresh_copy(fd, name, data, orig)
        how, more = _swap_in(fd, tmp, name, st is None, damage)
        if how is None:
            return {"outcome": "job", "detail": f"{name} was saved by the job while the heal ran; its save is kept"}, b""
        woken += more
        os.fsync(fd)
        back, now = _digest_at(fd, name)
    finally:
        os.close(fd)
    ok = back == orig["sha256"]
    return {"outcome": "restored" if ok else "failed", "how": how, "woken": woken, "notes": notes,
            "file": statdict(now) if now is not None else None,
            "detail": f"{name} {how}" if ok else f"restored {name} but it does not read back as the original"}, b""


def op_truncate_half(req: dict, data: bytes) -> tuple[dict, bytes]:
    """Cut a file the save just wrote to half its size (kill-during-save's ``torn``)."""
    fd = walk(req["real_root"], req["dirs"], req.get("expect"))
    try:
        f = _open_file(fd, req["name"], os.O_WRONLY)
        try:
            st = os.fstat(f)
            if not stat.S_ISREG(st.st_mode):
                raise Refused("notfile", f"{req['name']} is not a regular file")
            os.ftruncate(f, st.st_size // 2)
            os.fsync(f)
        finally:
            os.close(f)
    finally:
        os.close(fd)
    return {"size": st.st_size, "cut_to": st.st_size // 2}, b""


def _members(fd: int, prefix: str = ""):
    """(relative path, stat) of everything below the folder ``fd``, no link followed."""
    for entry in sorted(os.listdir(fd)):
        st = _lstat(fd, entry)
        if st is None:
            continue
        rel = prefix + entry
        yield rel, st, fd, entry
        if stat.S_ISDIR(st.st_mode):
            try:
                sub = os.open(entry, NOFOLLOW_DIR, dir_fd=fd)
            except OSError:
                continue
            try:
                yield from _members(sub, rel + "/")
            finally:
                os.close(sub)


def op_pack(req: dict, data: bytes) -> tuple[dict, bytes]:
    """A tar of a folder (``dirs`` + ``name`` below the real root), or of the ``only`` entries of
    it, read without following a link (a link is stored as a link); with its manifest."""
    fd = walk(req["real_root"], req["dirs"] + [req["name"]], req.get("expect"))
    buf = io.BytesIO()
    manifest: dict[str, str | None] = {}
    only = set(req["only"]) if req.get("only") is not None else None
    try:
        folder_id = ident(os.fstat(fd))
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for rel, st, parent, entry in _members(fd):
                if only is not None and rel.split("/", 1)[0] not in only:
                    continue
                info = tarfile.TarInfo(rel)
                info.mode, info.mtime = stat.S_IMODE(st.st_mode), st.st_mtime
                if stat.S_ISDIR(st.st_mode):
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                elif stat.S_ISLNK(st.st_mode):
                    info.type, info.linkname = tarfile.SYMTYPE, os.readlink(entry, dir_fd=parent)
                    tar.addfile(info)
                    manifest[rel] = None
                elif stat.S_ISREG(st.st_mode):
                    f = _open_file(parent, entry, os.O_RDONLY)
                    try:
                        body = _read_all(f)
                    finally:
                        os.close(f)
                    info.size = len(body)
                    tar.addfile(info, io.BytesIO(body))
                    manifest[rel] = hashlib.sha256(body).hexdigest()
    finally:
        os.close(fd)
    return {"manifest": manifest, "folder": folder_id}, buf.getvalue()


def _manifest(fd: int) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for rel, st, parent, entry in _members(fd):
        if stat.S_ISREG(st.st_mode):
            f = _open_file(parent, entry, os.O_RDONLY)
            try:
                out[rel] = _digest(f)
            finally:
                os.close(f)
        elif stat.S_ISLNK(st.st_mode):
            out[rel] = None
    return out


def _unpack(top: int, tar: tarfile.TarFile) -> None:
    """``tar``'s folders, files and links made below the folder ``top``, each from its parent's
    descriptor (no name outside it, no link followed, nothing made over anything): a member
    with an absolute name, a ``..``, or another type (a device, a hard link) is skipped."""
    for member in tar.getmembers():
        parts = [p for p in member.name.split("/") if p not in ("", ".")]
        if not parts or member.name.startswith("/") or ".." in parts:
            continue
        fd = top
        try:
            for part in parts[:-1]:
                nfd = os.open(part, NOFOLLOW_DIR, dir_fd=fd)
                if fd != top:
                    os.close(fd)
                fd = nfd
            name = parts[-1]
            if member.isdir():
                os.mkdir(name, 0o700, dir_fd=fd)
                sub = os.open(name, NOFOLLOW_DIR, dir_fd=fd)
                try:
                    os.fchmod(sub, member.mode & 0o777)
                finally:
                    os.close(sub)
            elif member.issym():
                os.symlink(member.linkname, name, dir_fd=fd)
            elif member.isfile():
                src = tar.extractfile(member)
                f = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
                try:
                    write_all(f, src.read() if src is not None else b"")
                    os.fchmod(f, member.mode & 0o777)
                    os.utime(f, (member.mtime, member.mtime))
                finally:
                    os.close(f)
        finally:
            if fd != top:
                os.close(fd)


def op_restore_folder(req: dict, data: bytes) -> tuple[dict, bytes]:
    """Put a folder back as the tar in the payload holds it: unpacked into a fresh folder beside
    it, exchanged with the folder there now (which stays beside it, hidden, with the job's later
    files: nothing is deleted), verified against the manifest."""
    name = req["name"]
    try:
        fd = walk(req["real_root"], req["dirs"], req.get("expect"))
    except Refused as exc:
        return {"outcome": exc.code, "detail": str(exc)}, b""
    stamp = secrets.token_hex(6)
    fresh = f".{name}.drillbit-restore-{stamp}"
    aside = f".{name}.drillbit-replaced-{stamp}"
    try:
        there = _lstat(fd, name)
        if there is not None and not stat.S_ISDIR(there.st_mode):  # asked before a copy is unpacked beside it
            return {"outcome": "link" if stat.S_ISLNK(there.st_mode) else "moved",
                    "detail": f"{name} is now {'a link' if stat.S_ISLNK(there.st_mode) else 'not a folder'}; "
                              "nothing written"}, b""
        os.mkdir(fresh, 0o700, dir_fd=fd)
        sub = os.open(fresh, NOFOLLOW_DIR, dir_fd=fd)
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
                _unpack(sub, tar)
            os.fchmod(sub, int(req.get("mode", 0o755)))
        finally:
            os.close(sub)
        now = _lstat(fd, name)
        if now is not None and stat.S_ISDIR(now.st_mode):
            _renameat2(fd, fresh, name, RENAME_EXCHANGE)
            os.rename(fresh, aside, src_dir_fd=fd, dst_dir_fd=fd)
            kept = aside
        elif now is None:
            _renameat2(fd, fresh, name, RENAME_NOREPLACE)
            kept = None
        else:
            return {"outcome": "link" if stat.S_ISLNK(now.st_mode) else "moved",
                    "detail": f"{name} is now {'a link' if stat.S_ISLNK(now.st_mode) else 'not a folder'}; "
                              "nothing written"}, b""
        os.fsync(fd)
        back = os.open(name, NOFOLLOW_DIR, dir_fd=fd)
        try:
            got = _manifest(back)
        finally:
            os.close(back)
    finally:
        os.close(fd)
    want = req.get("manifest") or {}
    differ = sorted(k for k in set(want) | set(got) if want.get(k, "missing") != got.get(k, "missing"))
    return {"outcome": "failed" if differ else "restored", "aside": kept, "differ": differ[:5],
            "detail": f"{name} put back as it was when armed" if not differ else
            f"{name} put back but {', '.join(differ[:3])} differ"}, b""


def op_move_aside(req: dict, data: bytes) -> tuple[dict, bytes]:
    """lose-local-tier: the folder ``name`` renamed to ``aside`` beside it (never over anything),
    an empty folder made in its place (or the one the job made there meanwhile kept); returns
    what it held. With ``dry``, only whether the job's user may do it (nothing changed)."""
    fd = walk(req["real_root"], req["dirs"], req.get("expect"))
    try:
        st = _lstat(fd, req["name"])
        if st is None or not stat.S_ISDIR(st.st_mode):
            raise Refused("notfile", f"{req['name']} is not a folder")
        if not os.access(".", os.W_OK | os.X_OK, dir_fd=fd, effective_ids=True):
            raise Refused("EACCES", f"the folder that holds {req['name']} is not writable by the job's user")
        if req.get("dry"):
            return {"parent": ident(os.fstat(fd))}, b""
        _renameat2(fd, req["name"], req["aside"], RENAME_NOREPLACE)
        try:
            with contextlib.suppress(FileExistsError):  # a restarted rank made its tier again already
                os.mkdir(req["name"], stat.S_IMODE(st.st_mode), dir_fd=fd)
            sub = os.open(req["aside"], NOFOLLOW_DIR, dir_fd=fd)
            try:
                entries = sorted(os.listdir(sub))
            finally:
                os.close(sub)
            os.fsync(fd)
        except OSError as exc:
            raise Partial(f"moved {req['name']} aside, then: {exc}") from None
        parent = ident(os.fstat(fd))
    finally:
        os.close(fd)
    return {"entries": entries, "parent": parent}, b""


def op_move_back(req: dict, data: bytes) -> tuple[dict, bytes]:
    """lose-local-tier's heal: every entry of ``aside`` the job has not written again goes back
    into ``name`` (never over the job's); ``aside`` is removed once empty."""
    try:
        fd = walk(req["real_root"], req["dirs"], req.get("expect"))
    except Refused as exc:
        return {"outcome": exc.code, "detail": str(exc)}, b""
    try:
        try:
            src = os.open(req["aside"], NOFOLLOW_DIR, dir_fd=fd)
        except FileNotFoundError:
            return {"outcome": "none"}, b""
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(req["name"], 0o755, dir_fd=fd)
            dst = os.open(req["name"], NOFOLLOW_DIR, dir_fd=fd)
            kept, moved = [], []
            try:
                for entry in sorted(os.listdir(src)):
                    try:
                        _renameat2_between(src, entry, dst, entry, RENAME_NOREPLACE)
                        moved.append(entry)
                    except FileExistsError:
                        kept.append(entry)
                present = set(os.listdir(dst))
            finally:
                os.close(dst)
            left = os.listdir(src)
        finally:
            os.close(src)
        if not left:
            os.rmdir(req["aside"], dir_fd=fd)
        os.fsync(fd)
    finally:
        os.close(fd)
    return {"outcome": "restored", "moved": moved, "kept": kept,
            "missing": [e for e in req.get("entries", []) if e not in present]}, b""


def _renameat2_between(src_fd: int, old: str, dst_fd: int, new: str, flags: int) -> None:
    """``old`` in ``src_fd`` to ``new`` in ``dst_fd``, never over anything (FileExistsError)."""
    try:
        _renameat2(src_fd, old, new, flags, dst_fd)
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            raise FileExistsError(exc.errno, exc.strerror, new) from None
        if exc.errno not in (errno.EINVAL, errno.ENOSYS):
            raise
        if _lstat(dst_fd, new) is not None:  # no flags on this filesystem: look, then rename
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), new) from None
        os.rename(old, new, src_dir_fd=src_fd, dst_dir_fd=dst_fd)


OPS = {"read": op_read, "look": op_look, "damage": op_damage, "wake": op_wake, "heal": op_heal,
       "truncate_half": op_truncate_half, "pack": op_pack, "restore_folder": op_restore_folder,
       "move_aside": op_move_aside, "move_back": op_move_back}


def call(op: str, req: dict, data: bytes = b"") -> tuple[dict, bytes]:
    """One operation, here; a :class:`Refused` or OSError comes back as ``{"error": …}``."""
    try:
        return OPS[op](req, data)
    except Refused as exc:
        return {"error": str(exc), "code": exc.code}, b""
    except Partial as exc:
        return {"error": str(exc), "code": "partial"}, b""
    except OSError as exc:
        return {"error": f"{exc.strerror or exc} ({os.path.basename(str(exc.filename or '')) or op})",
                "code": errno.errorcode.get(exc.errno or 0, "OSError"), "errno": exc.errno}, b""
