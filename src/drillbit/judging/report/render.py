"""Write a run's reports: result.json, report.md, report.html (self-contained) and junit.xml."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from drillbit.core.atomic import write_atomic
from drillbit.core.history import History
from drillbit.judging.report import junit
from drillbit.judging.report.result import write as write_result
from drillbit.judging.report.timeline import timeline_svg

_env = Environment(loader=PackageLoader("drillbit.judging.report", "templates"),
                   autoescape=select_autoescape(["html", "html.j2"]), trim_blocks=True, lstrip_blocks=True)

FRACTIONS = ("goodput", "fleet_tax", "slowdown", "slowdown_achieved", "target_slowdown", "projected_goodput",
             "effect_shift", "effect_target_shift",
             "save_interval_ratio")


def unit_of(name: str) -> str:
    """The unit of a measurement by its name: s, %, steps, or none."""
    if name.startswith("time_to_") or name.endswith("_s") or name.endswith("_within"):
        return "s"
    if name in FRACTIONS or name.endswith("goodput_min"):
        return "%"
    if name.endswith("_steps") or name.endswith("_step"):
        return "steps"
    return ""


def measured(value: Any, name: str) -> str:
    """A measurement for people: with its unit, to a sensible precision; — when missing."""
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    unit = unit_of(name)
    if unit == "s":
        return f"{value:.2f} s" if value < 100 else f"{value:.0f} s"
    if unit == "%":
        return f"{100 * value:.2f} %"
    if unit == "steps" or isinstance(value, int):
        return f"{value:g}" + (" steps" if unit == "steps" and name != "restored_step" and name != "step_at_fault"
                               and name != "first_step" else "")
    return f"{value:.3g}"


_env.filters["measured"] = measured


def stuck(history: History | None) -> dict[str, Any] | None:
    """The live ranks' stacks dumped when the window closed without recovery (a ``stacks``
    event), for the reports: where, and each rank's innermost frames."""
    event = history.last("stacks") if history is not None else None
    return None if event is None else dict(event.data)


def contained(history: History | None) -> str | None:
    """What held every process of the job the drill launched, node by node (its cgroup, or
    its init's subreaper alone), from ``job.launch``; None where it does not say."""
    event = history.first("job.launch") if history is not None else None
    by_node = event.data.get("contained") if event is not None else None
    if not by_node:
        return None
    return "; ".join(how if len(by_node) == 1 else f"{node}: {how}" for node, how in by_node.items())


def markdown(payload: dict[str, Any], history: History | None = None) -> str:
    return _env.get_template("report.md.j2").render(r=payload, stuck=stuck(history), contained=contained(history))


def html(payload: dict[str, Any], history: History) -> str:
    return _env.get_template("report.html.j2").render(r=payload, timeline=timeline_svg(history), stuck=stuck(history),
                                                      contained=contained(history))


def write_all(run_dir: Path, payload: dict[str, Any], history: History) -> None:
    write_result(run_dir, payload)
    write_atomic(run_dir / "report.md", markdown(payload, history))
    write_atomic(run_dir / "report.html", html(payload, history))
    write_atomic(run_dir / "junit.xml", junit.to_xml(f"drill.{payload['drill']}", [payload]))

