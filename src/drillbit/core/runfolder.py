"""One place that makes run folders: a drill's, and those of runs of several drills (suite,
gate, repeat, sweep, compare, campaign, game day, probe).

A run folder is made 0700 (an agent keeps its registry in it, and obeys it). A folder is
``<stamp>-<name>`` for one drill and ``<kind>-<stamp>-<name>`` for the others;
a second one in the same second gets ``-2``, ``-3`` … A folder is never reused: ``mkdir``
without ``exist_ok`` is the test, so two processes starting in the same second get two.
"""
from __future__ import annotations

import time
from pathlib import Path

from drillbit.core.atomic import write_atomic
from drillbit.core.paths import entered_path


def new_folder(reports: str | Path, name: str, kind: str | None = None) -> Path:
    """The new folder, absolute and resolved (a relative or symlinked ``reports`` is taken
    against this process's working folder once, here: every path filled from it is then
    comparable with what the kernel reports)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = entered_path(reports) / (f"{kind}-{stamp}-{name}" if kind else f"{stamp}-{name}")
    base.parent.mkdir(parents=True, exist_ok=True)
    path, i = base, 1
    while True:
        try:
            path.mkdir(mode=0o700)  # private whatever the umask (002 on Ubuntu): its agents keep state here
            return path
        except FileExistsError:
            i += 1
            path = base.with_name(f"{base.name}-{i}")


def write_files(folder: Path, files: dict[str, str]) -> Path:
    """Each of a run's outputs, written whole (a reader never sees half a report)."""
    for name, text in files.items():
        write_atomic(folder / name, text)
    return folder
