"""Reference pages generated from the code, so that they cannot drift from it.

``config_reference()`` walks the pydantic models that read ``drill.yaml``, drill specs,
suites and campaigns; ``fault_catalogue()`` joins the catalogue's data (``faults/*.yaml``)
with each fault plugin's own declarations and ``Params``; ``builtin_jobs()`` lists the
built-in job profiles. The documentation site's hook (``docs/hooks.py``) puts them where a
page says ``<!-- generated: NAME -->``; ``python -m drillbit.docgen NAME`` prints one.
"""
from __future__ import annotations

import enum
import re
import sys
import types
import typing
from typing import Any, Callable

from pydantic import BaseModel, SecretStr
from pydantic_core import PydanticUndefined

from drillbit.campaign import CampaignSpec
from drillbit.catalogue import CLASSES, load_catalogue
from drillbit.checks.recovery import FAMILIES
from drillbit.checks.slo import JUDGES
from drillbit.faults import registry
from drillbit.layers import drawn
from drillbit.spec.config import BUILTIN_CLUSTERS, BUILTIN_JOBS, DrillConfig
from drillbit.spec.models import DrillSpec, SuiteSpec


def _cell(text: str) -> str:
    text = " ".join(str(text).split()).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("|", "\\|")


def _is_duration(meta: Any) -> bool:
    return getattr(getattr(meta, "func", None), "__name__", "") == "parse_duration"


def _type_name(annotation: Any) -> str:
    """A person's name for a field's type: ``int``, ``duration``, ``list of str``, ``A | B``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        inner, *meta = args
        if any(_is_duration(m) for m in meta):
            return "duration"
        return _type_name(inner)
    if origin in (typing.Union, types.UnionType):
        names = [_type_name(a) for a in args if a is not type(None)]
        return " | ".join(dict.fromkeys(names)) + (" or null" if type(None) in args else "")
    if origin is typing.Literal:
        return " | ".join(f"`{a}`" for a in args)
    if origin in (list, tuple, set, frozenset):
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        return f"map of {_type_name(args[1])}" if len(args) == 2 else "map"
    if isinstance(annotation, type):
        if issubclass(annotation, SecretStr):
            return "secret"
        if issubclass(annotation, enum.Enum):
            return " | ".join(f"`{m.value}`" for m in annotation)
        if issubclass(annotation, BaseModel):
            return "object"
        return annotation.__name__
    return re.sub(r"\b(typing|pathlib)\.", "", str(annotation))


def _models_in(annotation: Any) -> list[tuple[str, type[BaseModel]]]:
    """The models a field holds, with the path step to them: ``''`` (the field itself),
    ``'[]'`` (items of a list) or ``'.NAME'`` (values of a map)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _models_in(args[0])
    if origin in (typing.Union, types.UnionType):
        return [m for a in args for m in _models_in(a)]
    if origin in (list, tuple, set, frozenset) and args:
        return [("[]" + step, m) for step, m in _models_in(args[0])]
    if origin is dict and len(args) == 2:
        return [(".NAME" + step, m) for step, m in _models_in(args[1])]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [("", annotation)]
    return []


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        try:
            value = field.default_factory()
        except TypeError:
            return ""
    else:
        value = field.default
    if value is None or value is PydanticUndefined or value in ({}, []):
        return ""
    if isinstance(value, BaseModel):
        return ""
    if isinstance(value, enum.Enum):
        value = value.value
    return f"`{value}`"


def model_rows(model: type[BaseModel], prefix: str = "", seen: tuple[type, ...] = ()) -> list[tuple[str, str, str, str]]:
    """(key, type, default, meaning) for every field of ``model`` and of the models inside it."""
    rows = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        path = f"{prefix}{key}"
        kind = "duration" if any(_is_duration(m) for m in field.metadata) else _type_name(field.annotation)
        rows.append((path, kind, _default(field), field.description or ""))
        for step, inner in _models_in(field.annotation):
            if inner in seen or inner is model:
                continue
            rows += model_rows(inner, f"{path}{step}.", seen + (model,))
    return rows


def table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        out.append("| " + " | ".join(_cell(c) if i else f"`{c}`" for i, c in enumerate(row)) + " |")
    return "\n".join(out)


def config_reference() -> str:

    header = ("key", "type", "default", "meaning")
    parts = []
    for title, model, where in (
        ("`drill.yaml`: clusters, jobs and defaults", DrillConfig, "`--config`, `$DRILLBIT_CONFIG` or `./drill.yaml`"),
        ("A drill spec", DrillSpec, "`drills/*.yaml`, or a path given to `drill run`"),
        ("A suite", SuiteSpec, "`drills/suites/*.yaml` (`drill suite run`, `drill gate`, `drill compare`)"),
        ("A campaign", CampaignSpec, "`campaigns/*.yaml` (`drill campaign`)"),
    ):
        parts.append(f"### {title}\n\nRead from {where}; every field below is checked when the file "
                     f"is loaded (unknown keys are errors, with file:line).\n\n" + table(model_rows(model), header))
    return "\n\n".join(parts) + "\n"


def fault_catalogue() -> str:

    entries = load_catalogue()
    plugins = registry()
    parts = []
    for cls in CLASSES:
        parts.append(f"### {cls}")
        for entry in (e for e in entries.values() if e.class_ == cls):
            fault = plugins[entry.injector]
            facts = [f"acts through the {fault.acts_through}", f"expects a {fault.expects}"]
            if fault.needs_checkpoint:
                facts.append("needs the job's checkpoints")
            if fault.max_targets:
                facts.append(f"at most {fault.max_targets} target(s)")
            if fault.needs_engine:
                facts.append(f"engine `{fault.needs_engine}` only")
            if fault.binds:
                facts.append("takes from the job profile: " + ", ".join(f"`{b}`" for b in fault.binds))
            rates = "\n".join(f"- {r.what}: {r.value} ({r.source})" for r in entry.rates)
            params = model_rows(fault.Params) if hasattr(fault, "Params") else []
            body = [f"#### `{entry.name}`", "", _cell(entry.models), "",
                    f"- **fault plugin**: `{entry.injector}` ({'; '.join(facts)})",
                    f"- **confirmed when**: {_cell(entry.confirm)}",
                    f"- **healed by**: {_cell(entry.heal)}",
                    f"- **drill**: `drill run {entry.drill}`; **runbook**: `runbooks/{entry.runbook}.md`",
                    "", "Real-world rates:", "", rates]
            if params:
                body += ["", "Params (`fault.params`):", "", table(params, ("param", "type", "default", "meaning"))]
            parts.append("\n".join(body))
    return "\n\n".join(parts) + "\n"


def builtin_jobs() -> str:

    jobs = table([(name, job.description or "") for name, job in BUILTIN_JOBS.items()], ("job profile", "what it is"))
    clusters = table([(name, f"engine {c.engine}: {c.description or ''}") for name, c in BUILTIN_CLUSTERS.items()],
                     ("cluster", "what it is"))
    return f"Built-in clusters:\n\n{clusters}\n\nBuilt-in job profiles:\n\n{jobs}\n"


def layers() -> str:
    """The layers, bottom to top, as the imports draw them (drillbit.layers)."""
    rows = [(name, ", ".join(m.removeprefix("drillbit.") or "drillbit" for m in members),
             ", ".join(below) or "—") for name, members, below in reversed(drawn())]
    return table(rows, ("layer", "modules", "imports from")) + "\n"


def measurements() -> str:
    """result.json's measurements, family by family, and the SLO judges that read each."""
    rows = []
    for family in FAMILIES:
        judges = [judge.__name__.removeprefix("_judge_") for judge, reads in JUDGES if family in reads]
        doc = " ".join((family.__doc__ or "").split())
        rows.append((family.__name__.removesuffix("Figures").lower(), doc,
                     ", ".join(f"`{n}`" for n in family.model_fields), ", ".join(judges) or "—"))
    return table(rows, ("family", "what it measures", "fields", "judged by")) + "\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "config": config_reference, "catalogue": fault_catalogue, "builtins": builtin_jobs, "layers": layers,
    "measurements": measurements,
}
MARK = re.compile(r"<!-- generated: ([a-z-]+) -->")


def fill(markdown: str) -> str:
    """Put each generated part where the page asks for it; an unknown name is an error."""
    def one(m: re.Match) -> str:
        name = m.group(1)
        if name not in GENERATORS:
            raise KeyError(f"no generated part named {name!r} (known: {', '.join(GENERATORS)})")
        return GENERATORS[name]()
    return MARK.sub(one, markdown)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in GENERATORS:
        print(f"usage: python -m drillbit.docgen {{{','.join(GENERATORS)}}}", file=sys.stderr)
        return 2
    sys.stdout.write(GENERATORS[args[0]]())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
