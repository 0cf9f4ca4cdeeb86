"""Suites: run an ordered list of drills on one cluster, and the pre-deploy gate over them.

The gate runs the suite, judges each drill against its baseline (the last passing runs of
the same drill on the same cluster and job, from the results store), and writes
junit.xml and a Markdown summary for a CI job summary or a PR comment. Its exit code is
the worst verdict's (DESIGN.md).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from drillbit.judging.checks.verdict import interrupted, worst
from drillbit.judging.exitcodes import suite_exit_code
from drillbit.loop import UI
from drillbit.runs.repeat import run_repeated
from drillbit.judging.report import junit
from drillbit.judging.report import multirun
from drillbit.judging.report.multirun import Page, Table
from drillbit.core.runfolder import new_folder
from drillbit.runs.graded import curve_svg, together
from drillbit.runs.graded import execute_drill as execute
from drillbit.runs.session import Resolved, resolve
from drillbit.spec.models import SLO, SuiteSpec

GATED = ("time_to_detect", "time_to_first_step")


@dataclass
class SuiteRun:
    suite: SuiteSpec
    cluster: str
    results: list[dict[str, Any]] = field(default_factory=list)
    run_dirs: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return worst(*[r["verdict"] for r in self.results]) if self.results else "inconclusive"

    @property
    def exit_code(self) -> int:
        return suite_exit_code((r["verdict"], r.get("error_kind") or ("harness" if r.get("error") else None))
                               for r in self.results)

    @property
    def complete(self) -> bool:
        """Every drill of the suite ran (none declined at a game-day prompt, none left out
        by stop_on_failure)."""
        return not self.skipped and len(self.results) == len(self.suite.entries())


def with_regression(resolved: Resolved, allowed: float | None) -> Resolved:
    """Add the gate's default regression limits where the drill sets none of its own."""
    if allowed is None:
        return resolved
    regression = {**{k: allowed for k in GATED}, **resolved.spec.slo.regression}
    slo = SLO.model_validate({**resolved.spec.slo.model_dump(), "regression": regression})
    return replace(resolved, spec=resolved.spec.model_copy(update={"slo": slo}))


def run_suite(suite: SuiteSpec, *, cluster: str | None = None, job: str | None = None, config_path: str | None = None,
              reports_dir: str | None = None, db: str | None = None, ui: UI | None = None,
              max_regression: float | None = None, confirm: int | None = None,
              before: Callable[[Resolved], bool] | None = None,
              after: Callable[[Resolved, dict[str, Any]], None] | None = None) -> SuiteRun:
    """Run each drill in order. ``before`` may veto a drill (a game-day confirmation)."""
    allowed = max_regression if max_regression is not None else suite.max_regression
    run: SuiteRun | None = None
    entries = suite.entries()
    explicit = cluster or os.environ.get("DRILLBIT_CLUSTER")
    resolved_all = [resolve(e.drill, cluster=explicit or e.cluster or suite.cluster, job=job or e.job or suite.job,
                            config_path=config_path)
                    for e in entries]  # every input error before anything runs
    for entry, resolved in zip(entries, resolved_all, strict=False):
        if run is None:
            run = SuiteRun(suite=suite, cluster=resolved.cluster)
        if before is not None and not before(resolved):
            run.skipped.append(resolved.spec.name)
            continue
        if entry.repeat > 1 or entry.min_pass_rate is not None:
            agg, folder = run_repeated(with_regression(resolved, allowed), entry.repeat,
                                       min_pass_rate=entry.min_pass_rate, reports_dir=reports_dir, db=db, ui=ui)
            payload = repeated_payload(agg)
            run.results.append(payload)
            run.run_dirs.append(folder)
        else:
            payload, outcome = execute(with_regression(resolved, allowed), reports_dir=reports_dir, db=db, ui=ui)
            tries = confirm if confirm is not None else suite.confirm
            if tries and suspected(payload):
                def rerun(resolved: Resolved = resolved) -> dict[str, Any]:
                    return execute(with_regression(resolved, allowed), reports_dir=reports_dir, db=db, ui=ui)[0]

                payload = confirm_regression(payload, tries, rerun)
            run.results.append(payload)
            run.run_dirs.append(outcome.run_dir)
        if after is not None:
            after(resolved, payload)
        if (suite.stop_on_failure and payload["verdict"] != "pass") or interrupted(payload) \
                or (payload.get("repeat") or {}).get("interrupted"):
            break
    assert run is not None
    return run


def suspected(payload: dict[str, Any]) -> bool:
    """Failed on regression SLOs and nothing else: a suspicion a re-run can confirm or clear."""
    failed = [s for s in payload.get("slos", []) if s["status"] == "fail"]
    return (payload["verdict"] == "fail" and not payload.get("error") and bool(failed)
            and all(s["name"].startswith("regression.") for s in failed)
            and all(r.startswith(tuple(s["measurement"] + " regressed" for s in failed)) for r in payload["reasons"]))


def confirm_regression(payload: dict[str, Any], tries: int, rerun: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Re-run a suspected regression up to ``tries`` times: confirmed when every re-run
    regresses too; cleared by a re-run that passes; a re-run that fails otherwise speaks for
    itself. Every run stays in the results store."""
    for i in range(1, tries + 1):
        again = rerun()
        if again["verdict"] == "pass":
            note = (f"suspected regression, not confirmed after {i} re-run(s) (run {i} of the re-runs passed): "
                    + "; ".join(payload["reasons"]))
            return {**again, "regression_check": note, "reasons": [note]}
        if not suspected(again):
            return {**again, "regression_check": f"re-run {i} failed otherwise"}
    note = f"confirmed: regressed in the first run and in all {tries} re-run(s)"
    return {**payload, "regression_check": note, "reasons": [f"{note}: " + "; ".join(payload["reasons"])]}


def repeated_payload(agg: dict[str, Any]) -> dict[str, Any]:
    """A repeated drill as one row of a suite: the median of each measurement, the verdict
    and reasons of the whole."""
    return {"drill": f"{agg['drill']} x{agg['repeat']}", "cluster": agg["cluster"], "job": agg["job"],
            "verdict": agg["verdict"], "exit_code": agg["exit_code"], "reasons": agg["reasons"],
            "error": None, "error_kind": None,
            "measurements": {k: s["median"] for k, s in agg["stats"].items()}, "slos": [], "repeat": agg}


ICON = {"pass": "✅", "fail": "❌", "inconclusive": "❔", "aborted": "⛔"}


def summary_blocks(run: SuiteRun) -> list:
    """The suite's outcome: where it ran, then a row per drill (a game day's review holds it too)."""
    fmt = lambda v: "—" if v is None else (f"{v:.2f}" if isinstance(v, float) else str(v))  # noqa: E731
    head = ("drill", "job", "verdict", "detect s", "first step s", "lost steps", "vs baseline", "why")
    rows, tones = [], []
    for r in run.results:
        m = r["measurements"]
        regress = [s for s in r["slos"] if s["name"].startswith("regression.")]
        vs = ", ".join(f"{s['measurement']} {s['measured']:+.0%}" if s["measured"] is not None else
                       f"{s['measurement']}: {s['detail']}" for s in regress) or "—"
        rows.append([r["drill"], r["job"], f"{ICON.get(r['verdict'], '')} {r['verdict']}",
                     fmt(m.get("time_to_detect")), fmt(m.get("time_to_first_step")), fmt(m.get("lost_steps")), vs,
                     "<br>".join(r["reasons"]) or "all SLOs met"])
        tones.append(r["verdict"])
    for name in run.skipped:
        rows.append([name, "", "skipped", "", "", "", "", "declined at the prompt"])
        tones.append("skipped")
    where = (f"Suite `{run.suite.name}` on cluster `{run.cluster}`"
             + ("." if run.complete else f": incomplete, {len(run.results)} of {len(run.suite.entries())} drills ran."))
    return [where, Table(head, rows, right=frozenset({"detect s", "first step s", "lost steps"}), tones=tones)]


def summary_page(run: SuiteRun, title: str) -> Page:
    return Page(f"{title}: {ICON.get(run.verdict, '')} {run.verdict.upper()}", summary_blocks(run) + graded_blocks(run))


def graded_blocks(run: SuiteRun) -> list:
    """A graded drill's curve beside its last passing one: what a change did to the detector's
    reach (issue 58)."""
    blocks: list = []
    for r in run.results:
        now = r.get("graded")
        if not isinstance(now, dict):
            continue
        shown = [now]
        if isinstance(r.get("before"), dict):
            shown = [{**r["before"], "detector": "before: the last passing run"}, {**now, "detector": "after: this run"}]
        blocks += [f"`{r['drill']}` on `{r['job']}`: detection rate by {now['param']}"
                   + (", before and after" if len(shown) > 1 else " (no passing run before it to compare with)"),
                   multirun.Figure(curve_svg(together(shown)))]
    return blocks


def summary_markdown(run: SuiteRun, title: str) -> str:
    return summary_page(run, title).markdown()


def write_gate_outputs(run: SuiteRun, reports_dir: str | Path) -> Path:
    out = new_folder(reports_dir, run.suite.name, kind="gate")
    return multirun.write(out, summary_page(run, "Recovery gate"), md="summary.md", html="summary.html",
                          extra={"junit.xml": junit.to_xml(f"drillbit.{run.suite.name}", run.results)})
