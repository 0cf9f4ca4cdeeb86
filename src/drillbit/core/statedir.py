"""Per-user folders for what the harness keeps between processes: agent registries, the
last harness error; and the one place where the claims every drill must see are kept (the
cluster leases, the records of file claims: :func:`claims_home`).

An agent obeys what its registry says (heal puts files back, removes folders, runs a
node-crash heal's command), so the folder that holds it must be writable by its owner
only. A fixed, shared ``/tmp/drillbit`` could be created first by anyone, who then plants
registries; so the default is ``$XDG_RUNTIME_DIR/drillbit`` (systemd's per-user 0700
tmpfs) or ``/tmp/drillbit-<uid>``, and every folder is checked when it is opened: a real
folder (not a link), owned by this user, that group and others cannot write (the defaults
are created 0700). One that fails is refused with what to do — never repaired, never used.

Claims are another matter: two drills that must not run together have to look in one place,
whatever their environments say. ``XDG_RUNTIME_DIR`` and ``TMPDIR`` differ between a login
shell and cron, and two root drills on one cluster and one file once both ran (#57). So
root's claims live in ``/run/drillbit`` (made 0700, checked as above) and no variable moves
them — except :data:`NAMESPACE_VAR`, for test suites that run root drills side by side: it
is obeyed only where it names a folder of root's that holds the mark :func:`mark_namespace`
leaves: it takes root marking a folder, not a setting that differs by accident, to split two
drills. A user's claims stay in that user's state
folder (``$DRILLBIT_LEASE_DIR``, else the default above): root's folder is root's alone (a
user who could open a lease file there could hold it, and every root drill with it).
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from drillbit.core.errors import ConfigError


def default_state_dir() -> Path:
    """Where this user's agents keep their registries on this machine, by default."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        try:
            info = os.stat(runtime)
            if info.st_uid == os.geteuid() and not info.st_mode & 0o077:
                return Path(runtime) / "drillbit"
        except OSError:
            pass
    return Path(tempfile.gettempdir()) / f"drillbit-{os.geteuid()}"


def check_private(path: Path) -> None:
    """ConfigError unless ``path`` is a real folder, this user's, that no one else can write."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise ConfigError(f"state folder {path}: {exc.strerror}") from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"state folder {path} is {'a symlink' if stat.S_ISLNK(info.st_mode) else 'not a folder'}; "
                          "drillbit keeps its registries only in a real folder of its own; remove it or name "
                          "another state_dir")
    if info.st_uid != os.geteuid():
        raise ConfigError(f"state folder {path} belongs to uid {info.st_uid}, not to this user (uid {os.geteuid()}): "
                          "anyone who can write it could plant a registry the agent would obey; remove it or "
                          "name another state_dir")
    if info.st_mode & 0o022:
        raise ConfigError(f"state folder {path} is mode {stat.S_IMODE(info.st_mode):o}: group or others can write "
                          f"it; `chmod 700 {path}` or name another state_dir")


def private_dir(path: Path | str | None = None) -> Path:
    """``path`` (default :func:`default_state_dir`), created 0700 if missing, then checked."""
    path = Path(path) if path is not None else default_state_dir()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ConfigError(f"state folder {path}: cannot create it ({exc.strerror})") from None
    check_private(path)
    return path


ROOT_CLAIMS = Path("/run/drillbit")
NAMESPACE_VAR = "DRILLBIT_CLAIMS_NAMESPACE"
NAMESPACE_MARK = "claims-namespace"


def claims_home() -> Path:
    """Where this process keeps and looks for the claims every drill must see: the cluster
    leases and the records of file claims. Root: ``/run/drillbit`` whatever the environment
    (or a marked namespace, :data:`NAMESPACE_VAR`); anyone else: their own state folder
    (``$DRILLBIT_LEASE_DIR``, else :func:`default_state_dir`)."""
    if os.geteuid() != 0:
        return private_dir(os.environ.get("DRILLBIT_LEASE_DIR") or None)
    named = os.environ.get(NAMESPACE_VAR)
    if not named:
        return private_dir(ROOT_CLAIMS)
    path = Path(named)
    check_private(path)
    mark = path / NAMESPACE_MARK
    try:
        info = os.lstat(mark)
    except OSError:
        info = None
    if info is None or not stat.S_ISREG(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o022:
        raise ConfigError(f"{NAMESPACE_VAR}={named} names no claims namespace (no root-owned {NAMESPACE_MARK} file "
                          f"in it): root's leases and file claims are in {ROOT_CLAIMS} for every drill; unset it")
    return path


def mark_namespace(path: Path) -> None:
    """Make ``path`` (root's, private) a claims namespace of its own: root drills that name it
    in :data:`NAMESPACE_VAR` see only one another's claims. For test suites."""
    check_private(path)
    fd = os.open(path / NAMESPACE_MARK, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, b"drillbit: root drills that name this folder in DRILLBIT_CLAIMS_NAMESPACE keep their "
                     b"leases and file claims here, apart from /run/drillbit\n")
    finally:
        os.close(fd)
