"""Placeholders in job profiles: ``{run_dir}``, ``{python}``, ``{node}``, ``{node_rank}``,
``{nnodes}``, ``{head}``, ``{port}``, ``{ray_address}``. One way to fill them, used for
launch commands, log paths, checkpoint folders, pid files and heartbeat files alike."""
from __future__ import annotations

import re

PLACEHOLDERS = ("run_dir", "python", "node", "node_rank", "nnodes", "head", "port", "ray_address", "service_host")


def expand(text: str, values: dict[str, str]) -> str:
    """Fill the placeholders ``values`` knows; leave any other ``{name}`` as it is."""
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), text)


def unknown(text: str) -> list[str]:
    """Placeholders in ``text`` that drillbit does not fill (a typo in a profile)."""
    return [name for name in re.findall(r"\{(\w+)\}", text) if name not in PLACEHOLDERS]
