"""Game days: walk operators through a suite, then write the post-drill review.

Before each drill the console announces what will break, where, and what is expected
(the SLOs and the runbook), and asks for a go (``--yes`` runs unattended). Afterwards
``review.md`` holds, per drill, the expected vs actual timeline, what broke and the
follow-ups, for the review meeting.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.prompt import Confirm

from drillbit.runs.session import Resolved, plan_text
from drillbit.judging.report.multirun import Bullets, Heading, Page, Table
from drillbit.runs.suite import SuiteRun, summary_page

EXPECTED = (  # (SLO field, measurement, words)
    ("detect_within", "time_to_detect", "detected"),
    ("restart_within", "time_to_restart", "restarted"),
    ("restore_within", "time_to_restore", "restored"),
    ("first_step_within", "time_to_first_step", "first step after recovery"),
)


class Host:
    """The game-day host: announcements and confirmations on the console."""

    def __init__(self, console: Console, assume_yes: bool) -> None:
        self.console = console
        self.assume_yes = assume_yes
        self.specs: dict[str, Resolved] = {}

    def before(self, resolved: Resolved) -> bool:
        self.specs[resolved.spec.name] = resolved
        spec = resolved.spec
        runbook = f"runbook: drill runbook {spec.runbook}" if spec.runbook else "no runbook"
        self.console.print(Panel(plan_text(resolved) + f"\n{runbook}", title=f"next drill: {spec.name}",
                                 subtitle=f"{spec.class_}", expand=False))
        if self.assume_yes:
            self.console.print("[dim]--yes: starting without confirmation[/]")
            return True
        return Confirm.ask(f"Announce and start [bold]{spec.name}[/] on [bold]{resolved.cluster}[/]?",
                           console=self.console, default=False)

    def after(self, resolved: Resolved, payload: dict[str, Any]) -> None:
        self.console.print(f"[bold]{payload['drill']}[/]: {payload['verdict'].upper()} — "
                           + ("; ".join(payload["reasons"]) or "all SLOs met"))


def review_page(run: SuiteRun, specs: dict[str, Resolved], run_dirs: list[Path]) -> Page:
    blocks: list = [f"Held {time.strftime('%Y-%m-%d %H:%M')}. {run.suite.description}"]
    planned = [e.drill for e in run.suite.entries()]
    if not run.complete:
        ran = [r["drill"] for r in run.results]
        not_run = [d for d in planned if Path(d).stem not in ran and d not in ran]
        blocks.append(f"**Incomplete game day:** {len(run.results)} of {len(planned)} drills ran; not run: "
                      f"{', '.join(not_run)} ({len(run.skipped)} declined at the prompt"
                      + (", the rest left out after a failure (stop_on_failure)" if len(not_run) > len(run.skipped)
                         else "") + ").")
    outcome = summary_page(run, "Outcome" if run.complete else "Outcome of the drills that ran")
    blocks += [Heading(outcome.title), *outcome.blocks]
    follow_ups: list[str] = []
    for payload, run_dir in zip(run.results, run_dirs, strict=False):
        spec = specs[payload["drill"]].spec
        m = payload["measurements"]
        rows = []
        for field, key, words in EXPECTED:
            limit = getattr(spec.slo, field)
            actual = m.get(key)
            rows.append([words, "≤ %gs" % limit if limit is not None else "—",
                         "+%.1fs" % actual if actual is not None else "never"])
        if spec.slo.max_lost_steps is not None:
            rows.append(["lost steps", f"≤ {spec.slo.max_lost_steps}", str(m.get("lost_steps", "—"))])
        blocks += [Heading(f"{payload['drill']} ({spec.class_}) — {payload['verdict']}"), spec.summary,
                   Table(("milestone", "expected", "actual"), rows, right=frozenset({"expected", "actual"})),
                   "**What broke:** " + ("; ".join(payload["reasons"]) or "nothing; every SLO held."),
                   f"Report: `{run_dir}/report.html`"]
        for slo in payload["slos"]:
            if slo["status"] != "pass":
                book = f" (runbook: `drill runbook {spec.runbook}`)" if spec.runbook else ""
                follow_ups.append(f"[ ] {payload['drill']}: {slo['name']} {slo['status']} "
                                  f"(limit {slo['limit']}, measured {slo['measured']}){book}")
    for name in run.skipped:
        follow_ups.append(f"[ ] {name}: skipped at the prompt; reschedule it")
    blocks += [Heading("Follow-ups"), Bullets(follow_ups or ["none: every drill met its SLOs"])]
    return Page(f"Game day review: {run.suite.name} on {run.cluster}", blocks, level=1)


def review_markdown(run: SuiteRun, specs: dict[str, Resolved], run_dirs: list[Path]) -> str:
    return review_page(run, specs, run_dirs).markdown()
