"""One place that makes run folders: a drill's, and those of runs of several drills (suite,
gate, repeat, sweep, compare, campaign, game day, probe).

A run folder is made 0700 (an agent keeps its registry in it, and obeys it), inside a reports
folder root may write in (:mod:`drillbit.core.trust`: reached by a checked walk, never through
a folder or link another user controls; else exit 2, nothing made). A folder is
``<stamp>-<name>`` for one drill and ``<kind>-<stamp>-<name>`` for the others;
a second one in the same second gets ``-2``, ``-3`` … A folder is never reused: ``mkdir``
without ``exist_ok`` is the test, so two processes starting in the same second get two.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from drillbit.core import trust
from drillbit.core.atomic import write_atomic


def new_folder(reports: str | Path, name: str, kind: str | None = None) -> Path:
    """The new folder, absolute and resolved (a relative or symlinked ``reports`` is taken
    against this process's working folder once, here: every path filled from it is then
    comparable with what the kernel reports). ``reports`` is made where it is missing, and
    checked (ConfigError where root must not write in it)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = f"{kind}-{stamp}-{name}" if kind else f"{stamp}-{name}"
    with trust.folder(reports, "reports folder", create=True) as folder:
        made, i = base, 1
        while True:
            try:
                os.mkdir(made, 0o700, dir_fd=folder.fd)  # private whatever the umask (002 on Ubuntu): its agents keep state here
                return folder.path / made
            except FileExistsError:
                i += 1
                made = f"{base}-{i}"


def write_files(folder: Path, files: dict[str, str]) -> Path:
    """Each of a run's outputs, written whole (a reader never sees half a report)."""
    for name, text in files.items():
        write_atomic(folder / name, text)
    return folder
