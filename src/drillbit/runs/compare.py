"""``drill compare``: one suite against several job profiles, side by side.

Every (job, drill) pair is resolved first, so a typo in a job name stops the comparison
before anything runs. Then each drill runs on each job in turn — a fresh job each time —
and the results go into one table: detect, first step, lost steps, goodput, attribution,
verdict, and why. A suite entry's ``known_defects`` names the jobs a drill FAILs on today
(measured): such a FAIL is shown as known and does not count against the exit code; a
known defect that passes is pointed out (the stack may have fixed it). A drill that does
not apply to a job (corrupt-checkpoint on a job with no checkpoints) is ``n/a``.

Without ``jobs``, a suite of published defects (``drills/suites/known-defects.yaml``, each
drill with a ``defect:``) runs each drill on its own job, the affected one, and on the
defect's ``fixed`` profile. The affected run's FAIL is expected only when the verdict names
the defect from the job's own error lines (``judging/checks/defect.py``); a FAIL without its
signature counts, and so does a FAIL of the fix.

The exit code follows DESIGN.md: 1 when a drill FAILed that was not a known defect, 2 for
bad input, 5 for a harness error, else the worst other verdict's.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drillbit.judging.checks.verdict import interrupted
from drillbit.core.errors import ConfigError, SpecError
from drillbit.judging.exitcodes import suite_exit_code
from drillbit.faults import get as get_fault
from drillbit.loop import UI
from drillbit.loop.runner import job_params
from drillbit.judging.report import multirun
from drillbit.judging.report.multirun import Page, Table
from drillbit.core.runfolder import new_folder
from drillbit.runs.graded import execute_drill as execute
from drillbit.runs.session import Resolved, resolve
from drillbit.spec.models import Defect, SuiteSpec

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
    defect: Defect | None = None  # the published defect the drill reproduces
    role: str | None = None       # with a defect: "affected" or "fixed"

    @property
    def verdict(self) -> str:
        if self.na is not None:
            return "n/a"
        assert self.payload is not None
        return self.payload["verdict"]

    @property
    def recognised(self) -> bool:
        """An affected run whose verdict named its defect from the job's own lines."""
        reasons = (self.payload or {}).get("reasons") or [""]
        return self.defect is not None and reasons[0].startswith(f"known defect {self.defect.id}")

    @property
    def counted(self) -> tuple[str, str | None]:
        """(verdict, error kind) as the exit code sees it: a known defect's FAIL is expected."""
        if self.payload is None:
            return "pass", None
        kind = self.payload.get("error_kind") or ("harness" if self.payload.get("error") else None)
        expected = self.known and (self.role != "affected" or self.recognised)
        verdict = "pass" if expected and self.payload["verdict"] == "fail" and kind is None else self.payload["verdict"]
        return verdict, kind

    def note(self) -> str:
        if self.na is not None:
            return self.na
        assert self.payload is not None
        reasons = "; ".join(self.payload["reasons"]) or "all SLOs met"
        if self.known and self.payload["verdict"] == "fail":
            return reasons if self.recognised else f"known defect: {self.known}. {reasons}"
        if self.known and self.payload["verdict"] == "pass":
            if self.role == "affected":
                return f"passes now: not reproduced ({self.known}); the stack may have fixed it"
            return f"passes now: the known defect ({self.known}) may be fixed; drop it from known_defects"
        return reasons


@dataclass
class Comparison:
    suite: SuiteSpec
    jobs: list[str]
    cluster: str = ""
    cells: list[Cell] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    job_versions: dict[str, dict[str, str]] = field(default_factory=dict)  # per job, from its own interpreter
    presets: dict[str, list[str]] = field(default_factory=dict)  # per job: which stack it is

    @property
    def exit_code(self) -> int:
        return suite_exit_code(c.counted for c in self.cells)


def versions(presets: list[str], python: str | None = None) -> dict[str, str]:
    """The version of each stack behind the presets: in this environment, or in the job's own
    interpreter (``launch.python``: another virtual environment, another version)."""
    packages = list(dict.fromkeys(PRESET_PACKAGES[p] for p in presets if p in PRESET_PACKAGES))
    if python and "{" not in python:
        script = ("import importlib.metadata as m, json, sys\nout = {}\nfor p in sys.argv[1:]:\n"
                  "    try: out[p] = m.version(p)\n    except m.PackageNotFoundError: out[p] = None\n"
                  "print(json.dumps(out))")
        try:
            done = subprocess.run([python, "-c", script, *packages], capture_output=True, text=True, timeout=60)
            found = json.loads(done.stdout) if done.returncode == 0 else {}
        except (OSError, subprocess.TimeoutExpired, ValueError):
            found = {}
        return {p: found.get(p) or f"not found by {python}" for p in packages}
    out = {}
    for package in packages:
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            out[package] = "not installed here"
    return out


def _defect_plan(suite: SuiteSpec, where: Any, config_path: str | None
                 ) -> tuple[list[tuple[str, Any, Resolved, str]], list[Any]]:
    """Each defect drill on its own (affected) job, then on the defect's fixed profile; and the
    input problems found on the way."""
    plan: list[tuple[str, Any, Resolved, str]] = []
    problems: list[Any] = []
    for entry in suite.entries():
        try:
            affected = resolve(entry.drill, cluster=where(entry), job=entry.job, config_path=config_path)
        except SpecError as exc:
            problems += exc.problems
            continue
        defect = affected.spec.defect
        if defect is None:
            raise ConfigError(f"--jobs: give the job profiles to compare; {affected.spec.name} in suite "
                              f"{suite.name} is not a known defect (no defect: block)")
        plan.append((affected.job, entry, affected, "affected"))
        if defect.fixed:
            try:
                plan.append((defect.fixed, entry, resolve(entry.drill, cluster=where(entry), job=defect.fixed,
                                                          config_path=config_path), "fixed"))
            except SpecError as exc:
                problems += exc.problems
    return plan, problems


def run_compare(suite: SuiteSpec, jobs: list[str], *, cluster: str | None = None, config_path: str | None = None,
                reports_dir: str | None = None, db: str | None = None, ui: UI | None = None) -> Comparison:
    """Every drill of ``suite`` on every job of ``jobs``; with no jobs, each known-defect drill
    on its affected job and its fixed one."""
    explicit = cluster or os.environ.get("DRILLBIT_CLUSTER")

    def where(entry: Any) -> str | None:
        return explicit or entry.cluster or suite.cluster

    plan: list[tuple[str, Any, Resolved, str | None]] = []
    problems: list[Any] = []
    if not jobs:
        found, problems = _defect_plan(suite, where, config_path)
        plan += found
    for job in jobs:
        for entry in suite.entries():
            try:
                plan.append((job, entry, resolve(entry.drill, cluster=where(entry), job=job, config_path=config_path),
                             None))
            except SpecError as exc:
                problems += exc.problems
    if problems:
        unique = list({(p.file, p.line, p.path, p.message): p for p in problems}.values())
        raise SpecError(unique)  # every input error before anything runs
    comp = Comparison(suite=suite, jobs=jobs or list(dict.fromkeys(job for job, *_ in plan)))
    for job, entry, resolved, role in plan:
        if resolved.cluster not in comp.cluster.split(", "):
            comp.cluster = ", ".join(c for c in (comp.cluster, resolved.cluster) if c)
        profile = resolved.config.jobs[job]
        comp.presets[job] = list(profile.presets)
        if job not in comp.job_versions:
            comp.job_versions[job] = versions(profile.presets, profile.launch.python if profile.launch else None)
            comp.versions.update(comp.job_versions[job])
        defect = resolved.spec.defect if role else None
        known = f"{defect.id}: {defect.title}" if defect is not None and role == "affected" else None
        cell = Cell(job=job, drill=resolved.spec.name, known=known or entry.known_defects.get(job), defect=defect,
                    role=role)
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


def versions_line(comp: Comparison) -> str:
    def line(found: dict[str, str]) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(found.items()))

    seen: dict[str, set[str]] = {}
    for found in comp.job_versions.values():
        for package, version in found.items():
            seen.setdefault(package, set()).add(version)
    if any(len(v) > 1 for v in seen.values()):  # one stack at two versions: say which job runs which
        return "; ".join(f"{job}: {line(found) or 'none'}" for job, found in comp.job_versions.items())
    return line(comp.versions)


def _delta(a: Any, b: Any, unit: str = "") -> str:
    if a is None and b is None:
        return "—"
    if a is None or b is None:
        return f"{_fmt(a)} → {_fmt(b)}{unit}"
    if a == b:
        return f"{_fmt(a)}{unit}, same"
    diff = b - a
    return f"{_fmt(a)} → {_fmt(b)}{unit} ({'+' if diff > 0 else ''}{_fmt(diff)})"


def changes(comp: Comparison) -> list[dict[str, str]]:
    """With two jobs of one stack (two versions, or before and after a change): each drill's
    verdict and figures on the first and on the second, and what changed."""
    if len(comp.jobs) != 2 or any(c.role for c in comp.cells):
        return []
    first, second = comp.jobs
    if first not in comp.presets or sorted(comp.presets[first]) != sorted(comp.presets.get(second, [])):
        return []  # two different stacks side by side: the table above is the comparison
    by = {(c.job, c.drill): c for c in comp.cells}
    out = []
    for drill in dict.fromkeys(c.drill for c in comp.cells):
        a, b = by.get((first, drill)), by.get((second, drill))
        if a is None or b is None:
            continue
        ma = (a.payload or {}).get("measurements", {})
        mb = (b.payload or {}).get("measurements", {})
        verdict = a.verdict if a.verdict == b.verdict else f"{a.verdict} → **{b.verdict}**"
        out.append({"drill": drill, "verdict": verdict,
                    "detect s": _delta(ma.get("time_to_detect"), mb.get("time_to_detect")),
                    "first step s": _delta(ma.get("time_to_first_step"), mb.get("time_to_first_step")),
                    "lost steps": _delta(ma.get("lost_steps"), mb.get("lost_steps")),
                    "goodput": _delta(ma.get("goodput"), mb.get("goodput"))})
    return out


CHANGE_COLUMNS = ("drill", "verdict", "detect s", "first step s", "lost steps", "goodput")


def _figures(c: Cell | None) -> str:
    if c is None:
        return "—"
    if c.payload is None:
        return c.verdict
    m = c.payload.get("measurements", {})
    said = [c.verdict.upper()]
    if m.get("time_to_first_step") is not None:
        said.append(f"first step {m['time_to_first_step']:.1f} s")
    else:
        said.append("no step after the fault")
    if m.get("restarts") is not None:
        said.append(f"{m['restarts']} restart{'s' if m['restarts'] != 1 else ''}")
    if m.get("lost_steps") is not None:
        said.append(f"{m['lost_steps']} steps lost")
    return ", ".join(said)


def defect_rows(comp: Comparison) -> list[dict[str, str]]:
    """One row per published defect: its link, stack and version, how it was reproduced, the
    verdict and figures on the affected setup and with the fix, and the affected run's reason."""
    out = []
    for c in comp.cells:
        if c.role != "affected" or c.defect is None:
            continue
        d = c.defect
        fixed = next((f for f in comp.cells if f.role == "fixed" and f.drill == c.drill), None)
        out.append({"defect": f"[{d.id}]({d.url}): {d.title}", "stack": f"{d.stack} ({d.version})",
                    "reproduced": d.reproduced, "drill": c.drill, "affected": f"`{c.job}`: {_figures(c)}",
                    "fixed": f"`{fixed.job}`: {_figures(fixed)}" if fixed else "no fix published",
                    "why": ((c.payload or {}).get("reasons") or [c.note()])[0]})
    return out


DEFECT_COLUMNS = ("defect", "stack", "reproduced", "drill", "affected", "fixed", "why")


def page(comp: Comparison) -> Page:
    table_rows = rows(comp)
    blocks: list[Any] = []
    defects = defect_rows(comp)
    if defects:
        blocks += ["Published defects: each drill on the affected setup and with the fix.",
                   Table(DEFECT_COLUMNS, [[r[c] for c in DEFECT_COLUMNS] for r in defects])]
    changed = changes(comp)
    if changed:
        blocks += [f"What changed from `{comp.jobs[0]}` to `{comp.jobs[1]}`:",
                   Table(CHANGE_COLUMNS, [[r[c] for c in CHANGE_COLUMNS] for r in changed])]
    return Page(f"Compare: suite `{comp.suite.name}` on `{comp.cluster}`", [
        f"Jobs: {', '.join(comp.jobs)}. Versions: {versions_line(comp)}.", *blocks,
        Table(COLUMNS, [[r[c] for c in COLUMNS] for r in table_rows], right=frozenset(NUMERIC),
              tones=[r["verdict"].split()[0] if r["verdict"] else None for r in table_rows])])


def markdown(comp: Comparison) -> str:
    return page(comp).markdown()


def html(comp: Comparison) -> str:
    return page(comp).html()


def to_json(comp: Comparison) -> dict[str, Any]:
    return {"suite": comp.suite.name, "cluster": comp.cluster, "jobs": comp.jobs, "versions": comp.versions,
            "job_versions": comp.job_versions, "changes": changes(comp),
            "exit_code": comp.exit_code,
            "cells": [{"job": c.job, "drill": c.drill, "verdict": c.verdict, "known_defect": c.known, "na": c.na,
                       "role": c.role, "defect": c.defect.id if c.defect else None, "note": c.note(),
                       "result": c.payload} for c in comp.cells],
            "defects": defect_rows(comp)}


def write_outputs(comp: Comparison, reports_dir: str | Path) -> Path:
    folder = new_folder(reports_dir, comp.suite.name, kind="compare")
    multirun.write(folder, page(comp), md="compare.md", html="compare.html", data=to_json(comp),
                   json_name="compare.json")
    return folder
