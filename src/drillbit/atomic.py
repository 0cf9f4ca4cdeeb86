"""Files written whole or not at all: a temporary file beside the target, fsynced, then
renamed over it. A reader (``drill report``, the guardian, ``drill heal``) never sees half
a result.json, report or registry, even when the writer is killed mid-write."""
from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path | str, text: str) -> Path:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path
