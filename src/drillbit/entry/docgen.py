"""Reference pages generated from the code, so that they cannot drift from it.

``config_reference()`` walks the pydantic models that read ``drill.yaml``, drill specs,
suites and campaigns; ``fault_catalogue()`` joins the catalogue's data (``faults/*.yaml``)
with each fault plugin's own declarations and ``Params``; ``builtin_jobs()`` lists the
built-in job profiles; ``privileges()`` what each fault needs and touches; ``cli_reference()``
and ``cli_mistakes()`` the command line and what it answers to mistakes. Each sits in its page
between ``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->``, committed, so the
pages read the same on the repository's web view as on the site: ``python -m drillbit.entry.docgen
--write`` refills them, ``--check`` (CI) fails where they drifted from the code, and
``python -m drillbit.entry.docgen NAME`` prints one.
"""
from __future__ import annotations

import contextlib
import enum
import io
import os
import re
import shlex
import sys
import tempfile
import types
import typing
from pathlib import Path
from typing import Literal, Any, Callable, Sequence

import click
from pydantic import BaseModel, SecretStr
from pydantic_core import PydanticUndefined

from drillbit.runs.campaign import CampaignSpec
from drillbit.faults.catalogue import CLASSES, load_catalogue
from drillbit.judging.checks.recovery import FAMILIES
from drillbit.judging.checks.slo import JUDGES
from drillbit.entry.cli import cli, run_cli
from drillbit.faults import registry
from drillbit.entry.layers import drawn
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
        inside = [(step, inner) for step, inner in _models_in(field.annotation)
                  if inner not in seen and inner is not model and not inner.__name__.startswith("_")]
        if len({step for step, _ in inside}) < len(inside) and _tag(inside):  # a union by a tag: a cluster per engine
            rows += _union_rows(inside, path, seen + (model,))
            continue
        for step, inner in inside:
            rows += model_rows(inner, f"{path}{step}.", seen + (model,))
    return rows


def _tag(members: list[tuple[str, type[BaseModel]]]) -> str | None:
    """The field that tells a union's models apart: every one has it, as a Literal."""
    for name in members[0][1].model_fields:
        if all(name in m.model_fields and typing.get_origin(m.model_fields[name].annotation) is Literal
               for _, m in members):
            values = [typing.get_args(m.model_fields[name].annotation) for _, m in members]
            if all(len(v) == 1 for v in values) and len({v[0] for v in values}) == len(values):
                return name
    return None


def _union_rows(members: list[tuple[str, type[BaseModel]]], path: str,
                seen: tuple[type, ...]) -> list[tuple[str, str, str, str]]:
    """The fields of a union of models told apart by one Literal field (a cluster entry by its
    engine), each once: the tag's row names every member, a field only some members have says
    which."""
    tag = _tag(members) or ""
    value = {m: typing.get_args(m.model_fields[tag].annotation)[0] for _, m in members}
    default = next((v for m, v in value.items() if not m.model_fields[tag].is_required()), None)
    rows: dict[str, list[str]] = {}
    owners: dict[str, list[str]] = {}
    for step, model in members:
        for key, kind, dflt, meaning in model_rows(model, f"{path}{step}.", seen):
            rows.setdefault(key, [key, kind, dflt, meaning])
            owners.setdefault(key, []).append(str(value[model]))
    everyone = [str(v) for v in value.values()]
    prefix = f"{path}{members[0][0]}."  # clusters.NAME.
    tag_key = prefix + tag
    rows = {tag_key: rows[tag_key], **rows}  # the tag first: it says which of the rest apply
    out = []
    for key, (_, kind, dflt, meaning) in rows.items():
        if key.endswith(f".{tag}"):
            kind = " | ".join(f"`{v}`" for v in everyone)
            dflt = f"`{default}`" if default is not None else "required"
            meaning = "; ".join(f"{v}: {' '.join((m.__doc__ or '').split()).split(': ', 1)[-1].rstrip('.')}"
                                for m, v in value.items())
        elif owners[key] != everyone and "." not in key[len(prefix):]:  # a member's own field, not one inside it
            meaning = f"engine {' or '.join(owners[key])} only. {meaning}"
        out.append((key, kind, dflt, meaning))
    return out


def table(rows: Sequence[Sequence[Any]], header: tuple[str, ...]) -> str:
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
    """The layers, bottom to top, as the imports draw them (drillbit.entry.layers)."""
    def inside(module: str, layer: str) -> str:
        rest = module.removeprefix("drillbit").removeprefix(".")
        return rest.removeprefix(layer + ".") if rest.startswith(layer + ".") else f"`drillbit.{rest}`" if rest \
            else "`drillbit`"

    rows = [(f"{name}/", ", ".join(inside(m, name) for m in members if m != f"drillbit.{name}"),
             ", ".join(below) or "—") for name, members, below in reversed(drawn())]
    return table(rows, ("folder (layer)", "modules", "imports from")) + "\n"


def measurements() -> str:
    """result.json's measurements, family by family, and the SLO judges that read each."""
    rows = []
    for family in FAMILIES:
        judges = [judge.__name__.removeprefix("_judge_") for judge, reads in JUDGES if family in reads]
        doc = " ".join((family.__doc__ or "").split())
        rows.append((family.__name__.removesuffix("Figures").lower(), doc,
                     ", ".join(f"`{n}`" for n in family.model_fields), ", ".join(judges) or "—"))
    return table(rows, ("family", "what it measures", "fields", "judged by")) + "\n"


def privileges() -> str:
    """What each fault needs the agent to be allowed to do, and what it touches."""
    rows = [(name, cls.needs, cls.blast_radius,
             "only where each node is a network namespace of its own" if cls.needs_node_netns else
             f"engine `{cls.needs_engine}` only" if cls.needs_engine else "every engine")
            for name, cls in sorted(registry().items())]
    return table(rows, ("fault", "needs", "blast radius (what it touches)", "where")) + "\n"


def _commands(group: Any, path: str) -> list[tuple[str, Any]]:
    found = []
    for name in sorted(group.commands):
        command = group.commands[name]
        if command.hidden:
            continue
        found.append((f"{path} {name}", command))
        if isinstance(command, click.Group):
            found += _commands(command, f"{path} {name}")
    return found


def cli_reference() -> str:
    """Every ``drill`` command with its usage, what it does and its options (from click)."""
    parts = []
    root = click.Context(cli, info_name="drill", **cli.context_settings)  # its -h/--help is every command's
    for path, command in _commands(cli, "drill"):
        ctx = click.Context(command, info_name=path.removeprefix("drill "), parent=root)
        usage = command.get_usage(ctx).removeprefix("Usage: ")
        doc = " ".join((command.help or "").split())
        rows = []
        for param in command.get_params(ctx):
            record = None if isinstance(param, click.Argument) else param.get_help_record(ctx)
            if record is None:
                continue
            names, help_text = record
            rows.append((names, help_text))
        body = [f"### {path}", "", f"`{usage}`", "", _cell(doc)]
        if rows:
            body += ["", table(rows, ("option", "meaning"))]
        parts.append("\n".join(body))
    return "\n\n".join(parts) + "\n"


# Mistakes people make on the command line, and what drill answers: the CLI page's table
# (docs/cli.md) and its test (tests/unit/test_cli_mistakes.py), which checks each exit code.
MISTAKES: list[tuple[str, int]] = [
    ("drill run kill-rnk", 2),
    ("drill run kill-rank --cluster locl", 2),
    ("drill run kill-rank --job refrence", 2),
    ("drill run kill-rank --job my-job", 2),
    ("drill run kill-rank --bogus", 2),
    ("drill run kill-rank --repeat 0", 2),
    ("drill run kill-rank --drills /nonexistent", 2),
    ("drill run kill-rank --config empty.yaml", 2),
    ("drill run --wait kill-rank", 2),
    ("drill run kill-rank --cluster locl --json", 2),
    ("drill suite run nightly", 2),
    ("drill results kill-rnk", 2),
    ("drill validate nope.yaml", 2),
    ("drill heal --cluster locl", 2),
    ("drill probe", 2),
    ("drill simulate --scenario llama3-405b --trials 0", 2),
    ("drill simulate --scenario llama3-405b --days -1", 2),
    ("drill simulate --scenario llama3-405b --gpus 0", 2),
    ("drill simulate --scenario llama4", 2),
    ("drill cadence --save-seconds 0 --mtbf 6h", 2),
]


def answer(command: str) -> tuple[int, str, str]:
    """Run one ``drill`` command line in this process, in an empty folder holding only an
    empty ``empty.yaml``: its exit code, stdout and stderr."""
    stdout, stderr = io.StringIO(), io.StringIO()
    here = os.getcwd()
    saved = {k: os.environ.pop(k, None) for k in ("DRILLBIT_CONFIG", "DRILLBIT_CLUSTER", "COLUMNS")}
    with tempfile.TemporaryDirectory() as folder:
        open(os.path.join(folder, "empty.yaml"), "w").close()
        try:
            os.chdir(folder)
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                code = run_cli(shlex.split(command)[1:])
        finally:
            os.chdir(here)
            os.environ.update({k: v for k, v in saved.items() if v is not None})
    return code, stdout.getvalue(), stderr.getvalue()


def cli_mistakes() -> str:
    rows = []
    for command, _ in MISTAKES:
        code, stdout, stderr = answer(command)
        said = " ".join(line.strip() for line in stderr.splitlines() if line.strip())
        if stdout.strip().startswith("{"):
            said += " — and on stdout: `" + " ".join(stdout.split()) + "`"
        rows.append((command, str(code), said))
    return table(rows, ("command", "exit", "what drill says (stderr)")) + "\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "config": config_reference, "catalogue": fault_catalogue, "builtins": builtin_jobs, "layers": layers,
    "measurements": measurements, "privileges": privileges, "cli": cli_reference, "cli-mistakes": cli_mistakes,
}
# A generated part sits between its two marks; what is between them is replaced, never edited
BEGIN = re.compile(r"<!-- generated: ([a-z-]+)(?: [^>]*)? -->\n?")
END = "<!-- end generated: {name} -->"
HOW = "python -m drillbit.entry.docgen --write"


def fill(markdown: str) -> str:
    """Each generated part made afresh between its marks (a begin mark without its end mark
    gets one); an unknown name is an error."""
    out, pos = [], 0
    while (m := BEGIN.search(markdown, pos)) is not None:
        name = m.group(1)
        if name not in GENERATORS:
            raise KeyError(f"no generated part named {name!r} (known: {', '.join(GENERATORS)})")
        end = END.format(name=name)
        stop = markdown.find(end, m.end())
        rest = m.end() if stop < 0 else stop + len(end)
        out += [markdown[pos:m.start()], f"<!-- generated: {name} (made by {HOW}: edit the code, not this) -->\n",
                GENERATORS[name](), end]
        pos = rest
        if stop < 0:
            out.append("\n")
    out.append(markdown[pos:])
    return "".join(out)


def pages(root: Path) -> list[Path]:
    """The pages that hold a generated part: the docs and the README."""
    return [p for p in sorted(root.glob("docs/**/*.md")) + [root / "README.md"]
            if p.is_file() and BEGIN.search(p.read_text())]


def main(argv: list[str] | None = None) -> int:
    """``--write``: fill every page of the source tree; ``--check``: exit 1 naming each page
    whose generated parts differ from the code's (CI runs it); NAME: print one part."""
    args = sys.argv[1:] if argv is None else argv
    root = Path(__file__).resolve().parents[3]
    if args in (["--write"], ["--check"]):
        stale = []
        for page in pages(root):
            text = page.read_text()
            fresh = fill(text)
            if fresh != text:
                stale.append(page)
                if args == ["--write"]:
                    page.write_text(fresh)
        for page in stale:
            print(f"{'rewrote' if args == ['--write'] else 'stale'}: {page.relative_to(root)}", file=sys.stderr)
        if stale and args == ["--check"]:
            print(f"the generated parts differ from the code: run {HOW}", file=sys.stderr)
            return 1
        return 0
    if len(args) != 1 or args[0] not in GENERATORS:
        print(f"usage: python -m drillbit.entry.docgen --write | --check | {{{','.join(GENERATORS)}}}", file=sys.stderr)
        return 2
    sys.stdout.write(GENERATORS[args[0]]())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
