"""How this process imports Ray: the environment Ray reads once, when it is imported, set
first. ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` keeps Ray's idea of this node's address on
127.0.0.1: without it, on a machine with a routed interface, Ray rewrites a loopback
cluster address ("127.0.0.1:6379") to that interface's address, where nothing listens,
and ``ray.init`` waits on a GCS it never reaches. Every import of Ray in the controller
goes through ``import_ray``.
"""
from __future__ import annotations

import os
from typing import Any


def loopback_env() -> None:
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # keeps every node on 127.0.0.1
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def import_ray() -> Any:
    """``ray``, imported after its environment is set (ImportError if it is not installed)."""
    loopback_env()
    import ray

    return ray
