"""The logs a job profile names, checked while the drill waits for its steady state.

A log no file answers (a path not there, a glob that matches none) while no step has come is
a description that does not fit the job: the drill ends with a config error (exit 2) once the
profile's ``logs_grace`` has passed since the job's ranks were first found, not after the
steady-state timeout, naming the log and listing what the launch did write — the run folder,
and the folder the log was said to be in, on this machine or, where the logs are read on the
nodes, on each node. A log the job makes after its start is still followed: the grace counts
from its ranks (found by the profile's ``ranks``; a job whose ranks are never found waits out the
steady-state timeout, which says what the logs held), and a glob follows files as they appear.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from drillbit.core.errors import ConfigError, DrillError
from drillbit.core.proc import ProcRef
from drillbit.judging.probes.tail import folder_listing, is_pattern
from drillbit.spec.config import JobProfile
from drillbit.transport.nodes import Nodes

CHECK_EVERY_S = 1.0
# what drillbit itself keeps in a run folder while a drill runs: not what the launch wrote
OWN_FILES = ["history.jsonl", "spec.json", "baseline.json", "agent-*", "ray-*", "sbatch.sh", "services", "*.lock"]


class NamedLogs:
    def __init__(self, job: JobProfile, nodes: Nodes, probes: list[Any], run_dir: Path,
                 attached: ProcRef | None = None) -> None:
        self.job = job
        self.nodes = nodes
        self.probes = probes
        self.run_dir = run_dir
        self.attached = attached
        self.ranks_at: float | None = None  # when the job's ranks were first found (monotonic)
        self._next = 0.0

    def check(self, stepped: bool) -> None:
        """Raise the config error once a named log is still missing ``logs_grace`` after the
        job's ranks were found and no step has come; cheap to call on every tick."""
        now = time.monotonic()
        if stepped or now < self._next:
            return
        self._next = now + CHECK_EVERY_S
        missing = self.missing()
        if not missing:
            return
        if self.ranks_at is None:
            try:
                found = self.nodes.find_ranks(self.job.ranks, self.attached)
            except DrillError:
                return  # the ranks cannot be looked for now: the steady-state timeout still says what it saw
            if found:
                self.ranks_at = now
            return
        if now - self.ranks_at >= self.job.logs_grace:
            raise ConfigError(self.message(missing))

    def missing(self) -> dict[str | None, list[str]]:
        """The logs of ``logs`` no file answers yet, by the node that reads them (None: this
        machine). The launcher's output is drillbit's to make, not the profile's to name."""
        ours = {os.path.normpath(p) for p in self.nodes.launch_outputs(self.job).values()}
        out: dict[str | None, list[str]] = {}
        for probe in self.probes:
            for node, paths in getattr(probe, "missing", dict)().items():
                out.setdefault(node, [])
                out[node] += [p for p in paths if p not in out[node] and os.path.normpath(p) not in ours]
        return {node: paths for node, paths in out.items() if paths}

    def message(self, missing: dict[str | None, list[str]]) -> str:
        logs = sorted({p for paths in missing.values() for p in paths})
        wrote = []
        for node, paths in missing.items():
            folders = [str(self.run_dir)] + [f for f in dict.fromkeys(_folder(p) for p in paths)
                                             if f is not None and f != str(self.run_dir)]
            listed = self._listing(node, folders)
            where = f"on {node}: " if node is not None else ""
            wrote.append(where + "; ".join(f"{folder}: {listed.get(folder, '?')}" for folder in folders))
        why = "; ".join(said for said in (p.explain() for p in self.probes if hasattr(p, "explain")) if said)
        return (f"the job's log{'s' if len(logs) > 1 else ''} {', '.join(logs)} {'were' if len(logs) > 1 else 'was'} "
                f"never written: no step came in the {self.job.logs_grace:g} s (logs_grace) since its ranks started. "
                f"What the launch wrote — {' | '.join(wrote)}. Each node's launcher output is read without being "
                "named (the run folder's job.out; job-<node>.out with launch.per_node on several nodes; on Slurm the "
                "batch output): name the job's own log as it writes it in logs ({node} and {node_rank} are filled per "
                "node; a glob follows every file it matches), or raise logs_grace for a log the job writes later"
                + (f" ({why})" if why else ""))

    def _listing(self, node: str | None, folders: list[str]) -> dict[str, str]:
        if node is None or node not in self.nodes.clients:
            return {f: folder_listing(f, ignore=OWN_FILES) for f in folders}
        try:
            return self.nodes.clients[node].list_folders(folders, OWN_FILES)
        except DrillError as exc:
            return {f: f"not listed ({exc})" for f in folders}


def _folder(entry: str) -> str | None:
    """The folder a log entry names its file in (a glob's, where the folder itself is no glob)."""
    folder = os.path.dirname(entry)
    return folder if folder and not is_pattern(folder) else None
