"""Ray token authentication, for the clusters that have it and the embedded one.

Ray 2.60 guards a cluster with a token where one exists (``ray start --head`` turns it on
when ``~/.ray/auth_token`` is there, or with ``RAY_AUTH_MODE=token``). A client must then
send the same token, or the GCS answers every call with ``InvalidAuthToken`` — which
``ray.init`` retries for 20 s and then reports as a lost connection. So the controller
settles the token before its first Ray call: the cluster entry's (``ray_auth_token`` or
``ray_auth_token_file``), else Ray's own sources (``RAY_AUTH_TOKEN``,
``RAY_AUTH_TOKEN_PATH``, ``~/.ray/auth_token``); and asks the GCS once, which answers a
missing or wrong token at once, so that is a config error (exit 2) naming the fix.

The embedded cluster always runs with token authentication: one token per controller
process (Ray's C++ side loads the token once per process and keeps it), given to the
keeper in its environment; every process of the cluster — the agents, and the jobs they
launch — inherits it from there. An explicit ``RAY_AUTH_MODE=disabled`` is respected.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

from drillbit.core.errors import ConfigError
from drillbit.transport.rayenv import import_ray

MODE, TOKEN, TOKEN_PATH = "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"
FIX = ("put the cluster's token in its drill.yaml entry (ray_auth_token: or ray_auth_token_file:), or in "
       "RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token as Ray reads it; `ray get-auth-token` on the head "
       "node prints it")
_USED: str | None = None  # the token this process has handed Ray (Ray keeps the first)


def disabled() -> bool:
    return os.environ.get(MODE, "").lower() == "disabled"


def find_token(token: str | None = None, token_file: str | None = None) -> tuple[str | None, str]:
    """(the token, where it came from): the cluster entry's, else Ray's own sources."""
    if token:
        return token.strip(), "the cluster entry's ray_auth_token"
    if token_file:
        return _read(Path(token_file).expanduser(), "the cluster entry's ray_auth_token_file"), \
            f"ray_auth_token_file {token_file}"
    if os.environ.get(TOKEN):
        return os.environ[TOKEN].strip(), "RAY_AUTH_TOKEN"
    if os.environ.get(TOKEN_PATH):
        return _read(Path(os.environ[TOKEN_PATH]).expanduser(), "RAY_AUTH_TOKEN_PATH"), \
            f"RAY_AUTH_TOKEN_PATH {os.environ[TOKEN_PATH]}"
    default = Path.home() / ".ray" / "auth_token"
    if default.is_file():
        return _read(default, str(default)), str(default)
    return None, "no token anywhere Ray looks"


def _read(path: Path, what: str) -> str:
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"Ray token: cannot read {what} ({path}): {exc}") from None
    if not text:
        raise ConfigError(f"Ray token: {what} ({path}) is empty")
    return text


def use(token: str) -> None:
    """This process (and every process it starts) sends ``token``. Once only: Ray keeps the
    first token a process loads, so a second, different one is refused here, by name."""
    global _USED
    if _USED is not None and token != _USED:
        raise ConfigError("this process already talks to a Ray cluster with another token; Ray keeps one token per "
                          "process: run the drills against each cluster from their own `drill` command")
    os.environ[MODE] = "token"
    os.environ[TOKEN] = token
    os.environ.pop(TOKEN_PATH, None)
    _USED = token
    try:
        import_ray()  # Ray's environment before Ray: this may be the first import of it
        from ray._raylet import Config  # type: ignore[attr-defined]  # Ray's compiled module

        Config.initialize("")  # Ray's RayConfig read again, so this process is in token mode too
    except (ImportError, AttributeError):  # an older Ray without token authentication
        pass


def embedded_token() -> str:
    """The embedded cluster's token: this process's, made once."""
    return _USED or secrets.token_hex(32)


def check(address: str, cluster: str, source: str, sent: bool) -> None:
    """Ask the GCS at ``address`` once; a refused token is a ConfigError in well under a second
    (``ray.init`` would retry for 20 s, then report a lost connection)."""
    try:
        import_ray()
        from ray._raylet import GcsClient  # type: ignore[attr-defined]
        from ray.exceptions import AuthenticationError
    except ImportError:
        return
    try:
        GcsClient(address=address)
    except AuthenticationError:
        if sent:
            raise ConfigError(f"cluster {cluster!r} at {address} refused the Ray token from {source}: it is not "
                              f"this cluster's token; {FIX}") from None
        raise ConfigError(f"cluster {cluster!r} at {address} requires Ray token authentication, and drillbit found "
                          f"{source}; {FIX}") from None
    except Exception:  # noqa: BLE001 — anything else is ray.init's to report (it says more)
        return
