"""The rich console: phases live while a drill runs, then the verdict and the SLO table."""
from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

COLORS = {"pass": "green", "fail": "red", "inconclusive": "yellow", "aborted": "magenta"}


class ConsoleUI:
    """Prints each phase as it starts and keeps one live status line while waiting."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self._status: Any = None
        self._t0 = time.time()

    def phase(self, name: str, detail: str = "") -> None:
        self._stop_status()
        self.console.print(f"[dim]{time.time() - self._t0:6.1f}s[/] [bold cyan]{name:<9}[/] {escape(detail)}")
        self._status = self.console.status(f"{escape(name)} …")
        self._status.start()

    def status(self, text: str) -> None:
        if self._status is not None:
            self._status.update(escape(text))

    def _stop_status(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def close(self) -> None:
        self._stop_status()

    def __enter__(self) -> "ConsoleUI":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()  # no live status may outlive the command, however it ends


def _fmt(value: Any, unit: str = "s") -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.2f} {unit}".strip()
    return str(value)


def _recovery_rows(payload: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The figures the summary shows, by what kind of drill it was."""
    if payload["measurements"].get("expects") == "slow":
        return (("target_slowdown", ""), ("slowdown_achieved", ""), ("effect_target_shift", ""),
                ("time_to_straggler", "s"), ("straggler_rank", ""), ("straggler_node", ""), ("target_ranks", ""),
                ("effect_rank", ""), ("time_to_effect", "s"), ("fleet_tax", ""), ("baseline_step_s", "s"),
                ("goodput", ""))
    if payload.get("graded"):  # a graded drill: its figures are the sweep's table
        return ()
    return (("time_to_detect", "s"), ("time_to_restart", "s"), ("time_to_restore", "s"),
            ("time_to_first_step", "s"), ("step_at_fault", ""), ("restored_step", ""),
            ("lost_steps", ""), ("restarts", ""), ("baseline_step_s", "s"), ("goodput", ""))


def summary(console: Console, payload: dict[str, Any], run_dir: str) -> None:
    verdict = payload["verdict"]
    color = COLORS.get(verdict, "white")
    console.print()
    console.print(f"[bold]{escape(payload['drill'])}[/] on [bold]{escape(payload['cluster'])}[/] / {escape(payload['job'])}: "
                  f"[bold {color}]{verdict.upper()}[/]")
    for reason in payload["reasons"]:
        console.print(f"  • {escape(reason)}")  # the job's own words: gloo's start "[/__w/pytorch/…]"
    m = payload["measurements"]
    table = Table(title="Recovery", show_edge=False)
    table.add_column("measurement")
    table.add_column("value", justify="right")
    rows = _recovery_rows(payload)
    for key, unit in rows:
        table.add_row(key, _fmt(m.get(key), unit))
    if rows:
        console.print(table)
    else:
        console.print(f"  the sweep, level by level: {escape(str(run_dir))}/graded.md")
    if m.get("predicted_by"):
        detect = m.get("time_to_detect")
        console.print(f"  detection predicted from the job's timeouts: within {m['predicted_detect_s']:g} s by its "
                      f"{m['predicted_by'].replace('_', ' ')}; measured "
                      + ("never" if detect is None else f"{detect:.2f} s"))
    if m.get("attribution"):
        console.print(f"  attribution: {escape(m['attribution']['text'])}")
    if m.get("link"):
        tax = f"; the job ran {m['fleet_tax']:.1%} slower meanwhile" if m.get("fleet_tax") is not None else ""
        console.print(f"  link: the fault was on {escape(m['link'])}{tax}"
                      + ("" if m.get("attribution") else "; the stack blamed no rank"))
    if payload["slos"]:
        slos = Table(title="SLOs", show_edge=False)
        for col in ("slo", "limit", "measured", "status"):
            slos.add_column(col, justify="right" if col in ("limit", "measured") else "left")
        for s in payload["slos"]:
            limit = f"{s['limit']:g}" if isinstance(s["limit"], (int, float)) else str(s["limit"])  # reach: "5%"
            slos.add_row(escape(s["name"]), escape(limit), _fmt(s["measured"], ""),
                         f"[{COLORS.get(s['status'], 'yellow')}]{s['status']}[/]")
        console.print(slos)
    ledger = payload.get("ledger")
    if ledger:
        led = Table(title=f"Goodput ledger ({ledger['wall_s']:.1f} s window, goodput {ledger['goodput']:.2f})",
                    show_edge=False)
        led.add_column("category")
        led.add_column("seconds", justify="right")
        led.add_column("share", justify="right")
        for name, seconds in ledger["categories"].items():
            if abs(seconds) >= 0.0005:
                led.add_row(name.replace("_", " "), f"{seconds:.2f}", f"{seconds / ledger['wall_s']:.1%}")
        console.print(led)
    proj = payload.get("projection")
    if proj:
        console.print(f"Projection to [bold]{proj['scenario']}[/]: goodput p50 {proj['goodput']:.2%} "
                      f"(p5 {proj['goodput_p5']:.2%}) with detection {proj['detect_s']:.1f} s and recovery "
                      f"{proj['restart_s']:.1f} s; floor {proj['goodput_min']:.2%}")
    cad = payload.get("cadence")
    if cad:
        console.print(f"Checkpoint cadence: every {cad['actual_interval_s']:.1f} s (save {cad['save_s']:.3f} s); "
                      f"Daly's optimum {cad['daly_s']:.1f} s, Young's {cad['young_s']:.1f} s")
    console.print(f"[dim]run folder: {escape(str(run_dir))}[/]")
