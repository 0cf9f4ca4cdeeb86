"""Operator runbooks: runbooks/<name>.md.j2 rendered with the drill's parameters and its
last result from the results store."""
from __future__ import annotations

import json
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from drillbit.core.errors import DrillError
from drillbit.spec.load import project_dirs
from drillbit.spec.models import DrillSpec


def render_runbook(spec: DrillSpec, last: dict[str, Any] | None) -> str:
    name = spec.runbook or spec.name
    dirs = project_dirs("runbooks")
    for d in dirs:
        if (d / f"{name}.md.j2").exists():
            env = Environment(loader=FileSystemLoader(str(d)), undefined=StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, autoescape=False)
            slo = {k: v for k, v in spec.slo.model_dump().items() if not isinstance(v, (dict, list))}
            return env.get_template(f"{name}.md.j2").render(
                spec=spec, params=json.dumps(spec.fault.params), slo=slo, last=last)
    raise DrillError(f"no runbook {name!r} in {', '.join(str(d) for d in dirs) or 'runbooks/'}")

