"""Write a run's reports: result.json, report.md, report.html (self-contained) and junit.xml."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from drillbit.history import History
from drillbit.report import junit
from drillbit.report.result import write as write_result
from drillbit.report.timeline import timeline_svg

_env = Environment(loader=PackageLoader("drillbit.report", "templates"),
                   autoescape=select_autoescape(["html", "html.j2"]), trim_blocks=True, lstrip_blocks=True)


def markdown(payload: dict[str, Any]) -> str:
    return _env.get_template("report.md.j2").render(r=payload)


def html(payload: dict[str, Any], history: History) -> str:
    return _env.get_template("report.html.j2").render(r=payload, timeline=timeline_svg(history))


def write_all(run_dir: Path, payload: dict[str, Any], history: History) -> None:
    write_result(run_dir, payload)
    (run_dir / "report.md").write_text(markdown(payload))
    (run_dir / "report.html").write_text(html(payload, history))
    (run_dir / "junit.xml").write_text(junit.to_xml(f"drill.{payload['drill']}", [payload]))

