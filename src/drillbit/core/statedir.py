"""Per-user folders for what the harness keeps between processes: agent registries, the
lease files, the last harness error.

An agent obeys what its registry says (heal puts files back, removes folders, runs a
node-crash heal's command), so the folder that holds it must be writable by its owner
only. A fixed, shared ``/tmp/drillbit`` could be created first by anyone, who then plants
registries; so the default is ``$XDG_RUNTIME_DIR/drillbit`` (systemd's per-user 0700
tmpfs) or ``/tmp/drillbit-<uid>``, and every folder is checked when it is opened: a real
folder (not a link), owned by this user, that group and others cannot write (the defaults
are created 0700). One that fails is refused with what to do — never repaired, never used.
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
