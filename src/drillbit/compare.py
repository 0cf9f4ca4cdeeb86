"""``drill compare``: one suite against several job profiles, side by side.

Every (job, drill) pair is resolved first, so a typo in a job name stops the comparison
before anything runs. Then each drill runs on each job in turn — a fresh job each time —
and the results go into one table: detect, first step, lost steps, goodput, attribution,
verdict, and why. A suite entry's ``known_defects`` names the jobs a drill FAILs on today
(measured): such a FAIL is shown as known and does not count against the exit code; a
known defect that passes is pointed out (the stack may have fixed it). A drill that does
not apply to a job (corrupt-checkpoint on a job with no checkpoints) is ``n/a``.

The exit code follows DESIGN.md: 1 when a drill FAILed that was not a known defect, 2 for
bad input, 5 for a harness error, else the worst other verdict's.
"""
from __future__ import annotations

import importlib.metadata
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drillbit.checks.verdict import interrupted
from drillbit.errors import ConfigError, SpecError
from drillbit.exitcodes import suite_exit_code
from drillbit.faults import get as get_fault
from drillbit.loop import UI
from drillbit.loop.runner import job_params
from drillbit.report import multirun
from drillbit.report.multirun import Page, Table
from drillbit.runfolder import new_folder
from drillbit.session import Resolved, execute, resolve
from drillbit.spec.models import SuiteSpec

# the distribution behind each signal preset, for the versions line
PRESET_PACKAGES = {"torchrun": "torch", "torchft": "torchft", "nvrx": "nvidia-resiliency-ext",
                   "dlrover": "dlrover", "ray-train": "ray", "hf-trainer": "transformers",
                   "lightning": "lightning", "reference": "drillbit", "orbax": "orbax-checkpoint"}


@dataclass
class Cell:
    job: str
    drill: str
    payload: dict[str, Any] | None = None
    known: str | None = None     # the known defect this drill FAILs on for this job
    na: str | None = None        # why the drill does not apply to the job

    @property
    def verdict(self) -> str:
        if self.na is not None:
            return "n/a"
        assert self.payload is not None
        return self.payload["verdict"]

    @property
    def counted(self) -> tuple[str, str | None]:
        """(verdict, error kind) as the exit code sees it: a known defect's FAIL is expected."""
        if self.payload is None:
            return "pass", None
        kind = self.payload.get("error_kind") or ("harness" if self.payload.get("error") else None)
        verdict = "pass" if self.known and self.payload["verdict"] == "fail" and kind is None else self.payload["verdict"]
        return verdict, kind

    def note(self) -> str:
        if self.na is not None:
            return self.na
        assert self.payload is not None
        reasons = "; ".join(self.payload["reasons"]) or "all SLOs met"
        if self.known and self.payload["verdict"] == "fail":
            return f"known defect: {self.known}. {reasons}"
        if self.known and self.payload["verdict"] == "pass":
            return f"passes now: the known defect ({self.known}) may be fixed; drop it from known_defects"
        return reasons


@dataclass
class Comparison:
    suite: SuiteSpec
    jobs: list[str]
    cluster: str = ""
    cells: list[Cell] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return suite_exit_code(c.counted for c in self.cells)


def versions(presets: list[str]) -> dict[str, str]:
    out = {}
    for preset in presets:
        package = PRESET_PACKAGES.get(preset)
        if package and package not in out:
            try:
                out[package] = importlib.metadata.version(package)
            except importlib.metadata.PackageNotFoundError:
                out[package] = "not installed here"
    return out


def run_compare(suite: SuiteSpec, jobs: list[str], *, cluster: str | None = None, config_path: str | None = None,
                reports_dir: str | None = None, db: str | None = None, ui: UI | None = None) -> Comparison:
    explicit = cluster or os.environ.get("DRILLBIT_CLUSTER")
    plan: list[tuple[str, Any, Resolved]] = []
    problems = []
    for job in jobs:
        for entry in suite.entries():
            try:
                plan.append((job, entry, resolve(entry.drill, cluster=explicit or entry.cluster or suite.cluster,
                                                 job=job, config_path=config_path)))
            except SpecError as exc:
                problems += exc.problems
    if problems:
        unique = list({(p.file, p.line, p.path, p.message): p for p in problems}.values())
        raise SpecError(unique)  # every input error before anything runs
    comp = Comparison(suite=suite, jobs=jobs)
    for job, entry, resolved in plan:
        if resolved.cluster not in comp.cluster.split(", "):
            comp.cluster = ", ".join(c for c in (comp.cluster, resolved.cluster) if c)
        comp.versions.update(versions(resolved.config.jobs[job].presets))
        cell = Cell(job=job, drill=resolved.spec.name, known=entry.known_defects.get(job))
        comp.cells.append(cell)
        cell.na = not_applicable(resolved, job)
        if cell.na is not None:
            continue
        cell.payload, _ = execute(resolved, reports_dir=reports_dir, db=db, ui=ui)
        if interrupted(cell.payload):
            break
    return comp


def not_applicable(resolved: Resolved, job: str) -> str | None:
    """Why a drill does not apply to a job, or None: a fault that needs checkpoints on a job
    that keeps none; a fault that takes a node down on a job launched on one node only."""
    profile = resolved.config.jobs[job]
    try:
        params = job_params(resolved.spec, profile, Path("."))
    except ConfigError as exc:
        return f"does not apply: {exc}"
    if get_fault(resolved.spec.fault.type).hurts(params) == "node" and not (profile.launch and profile.launch.per_node):
        return "does not apply: the job runs on one node (launch.per_node is false); losing it ends the job"
    return None


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def rows(comp: Comparison) -> list[dict[str, str]]:
    out = []
    for c in comp.cells:
        m = (c.payload or {}).get("measurements", {})
        a = m.get("attribution")
        if c.payload is None:
            blame = "—"
        elif a:
            blame = ("✓ " if a["correct"] else "✗ ") + (", ".join(map(str, a["blamed"])) or "none") + \
                f" (hurt {', '.join(map(str, a['hurt']))})"
        else:
            blame = "nobody named"
        verdict = c.verdict + (" (known)" if c.known and c.verdict == "fail" else "")
        restored = "—" if m.get("restored_step") is None or m.get("time_to_first_step") is None else \
            str(m["restored_step"]) + (f" ({m['restored_from']})" if m.get("restored_from") else "")
        out.append({"job": c.job, "drill": c.drill, "detect s": _fmt(m.get("time_to_detect")),
                    "first step s": _fmt(m.get("time_to_first_step")), "restored": restored,
                    "lost steps": _fmt(m.get("lost_steps")),
                    "goodput": _fmt(m.get("goodput")), "blamed": blame, "verdict": verdict, "why": c.note()})
    return out


COLUMNS = ("job", "drill", "detect s", "first step s", "restored", "lost steps", "goodput", "blamed", "verdict",
           "why")
NUMERIC = ("detect s", "first step s", "lost steps", "goodput")


def _versions_line(comp: Comparison) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(comp.versions.items()))


def page(comp: Comparison) -> Page:
    table_rows = rows(comp)
    return Page(f"Compare: suite `{comp.suite.name}` on `{comp.cluster}`", [
        f"Jobs: {', '.join(comp.jobs)}. Versions: {_versions_line(comp)}.",
        Table(COLUMNS, [[r[c] for c in COLUMNS] for r in table_rows], right=frozenset(NUMERIC),
              tones=[r["verdict"].split()[0] if r["verdict"] else None for r in table_rows])])


def markdown(comp: Comparison) -> str:
    return page(comp).markdown()


def html(comp: Comparison) -> str:
    return page(comp).html()


def to_json(comp: Comparison) -> dict[str, Any]:
    return {"suite": comp.suite.name, "cluster": comp.cluster, "jobs": comp.jobs, "versions": comp.versions,
            "exit_code": comp.exit_code,
            "cells": [{"job": c.job, "drill": c.drill, "verdict": c.verdict, "known_defect": c.known, "na": c.na,
                       "note": c.note(), "result": c.payload} for c in comp.cells]}


def write_outputs(comp: Comparison, reports_dir: str | Path) -> Path:
    folder = new_folder(reports_dir, comp.suite.name, kind="compare")
    multirun.write(folder, page(comp), md="compare.md", html="compare.html", data=to_json(comp),
                   json_name="compare.json")
    return folder
