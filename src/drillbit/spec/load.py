"""YAML -> typed models. Every problem is reported at once, each with file:line and field.

YAML is composed node by node so every value keeps the line it came from; pydantic's
errors (all of them) are mapped back to those lines. This is the bottom of the house:
it knows the models and nothing that uses them. What needs the faults, presets or
scenarios to check (a fault's params, a job's presets) is ``drillbit.faults.loading``.

drill run as root reads a file (a drill.yaml, a drill spec, a suite) or a project folder
(./drills, --drills, ./runbooks, ...) only where no one but root or the invoking user could
have written it (:mod:`drillbit.core.trust`; else exit 2, naming the owner and the setting
that trusts it). What drillbit ships (the package, and its source tree's data folders) is
exempt: whoever can write it can change the code root runs.
"""
from __future__ import annotations

import re

import difflib
from contextvars import ContextVar
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from drillbit.core import trust
from drillbit.core.errors import Problem, SpecError
from drillbit.spec.config import DrillConfig
from drillbit.spec.models import SuiteSpec

Loc = tuple[Any, ...]


MAX_NODES = 20_000  # a spec is a page of YAML; more is an alias bomb or a mistake
MAX_BYTES = 1 << 20  # the catalogue's largest file is a few KB; a megabyte takes ~4 s to compose
PACKAGE = Path(__file__).resolve().parents[1]  # src/drillbit (the built-in presets are in it)
SOURCE_TREE = Path(__file__).resolve().parents[3]  # a checkout's root: its drills/, faults/, runbooks/
SHIPPED = ("drills", "faults", "runbooks")  # the source tree's data folders (project_dirs' subdirs)


def shipped(path: Path) -> bool:
    """Whether ``path`` is drillbit's own: in the package, or in its source tree's data folders."""
    try:
        real = Path(os.path.realpath(path))
    except (OSError, ValueError):
        return False
    return any(real == top or top in real.parents for top in [PACKAGE] + [SOURCE_TREE / d for d in SHIPPED])


def check_trusted(path: Path, what: str) -> None:
    """ConfigError (exit 2) where root must not trust ``path`` (:mod:`drillbit.core.trust`);
    drillbit's own files pass."""
    if trust.owners() is not None and not shipped(path):
        trust.check(path, what)


class _Builder:
    """Builds plain data from a composed YAML node graph, keeping every key's line and
    collecting every problem: duplicate keys, keys that are not plain values, tags that are
    not plain data, and alias expansion past ``MAX_NODES``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: dict[Loc, int] = {}
        self.problems: list[Problem] = []
        self.nodes = 0
        self._scalars = yaml.SafeLoader("")

    def problem(self, node: yaml.Node, loc: Loc, message: str) -> None:
        self.problems.append(Problem(str(self.path), node.start_mark.line + 1, loc_text(loc), message))

    def build(self, node: yaml.Node, loc: Loc = ()) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise SpecError([Problem(str(self.path), node.start_mark.line + 1, loc_text(loc),
                                     f"more than {MAX_NODES} values once aliases are expanded; refused")])
        self.lines.setdefault(loc, node.start_mark.line + 1)  # a key's own line wins over its value's
        if isinstance(node, yaml.MappingNode):
            out: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    self.problem(key_node, loc, "a key must be a plain value, not a list or a mapping")
                    continue
                key = self.scalar(key_node, loc)
                if key == "<<" and key_node.tag.endswith(":merge"):
                    self.problem(key_node, loc, "merge keys (<<) are not supported; write the fields out")
                    continue
                if key in out:
                    self.problem(key_node, loc + (key,), f"duplicate key {key!r} (first on line "
                                 f"{self.lines.get(loc + (key,), '?')}); the second would silently replace the first")
                    continue
                self.lines[loc + (key,)] = key_node.start_mark.line + 1
                out[key] = self.build(value_node, loc + (key,))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.build(child, loc + (i,)) for i, child in enumerate(node.value)]
        return self.scalar(node, loc)

    def scalar(self, node: yaml.Node, loc: Loc) -> Any:
        try:
            value = self._scalars.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            self.problem(node, loc, f"not plain data ({getattr(exc, 'problem', None) or exc})")
            return None
        except (ValueError, KeyError, TypeError, OverflowError, AttributeError, IndexError) as exc:
            # !!int x, !!bool maybe, !!timestamp 2026-13-45, !!float '' (IndexError), !!timestamp x (AttributeError)
            self.problem(node, loc, f"{node.value!r} is not a valid {node.tag.rsplit(':', 1)[-1]} "
                         f"({exc.__class__.__name__}: {exc}); drop the tag or fix the value")
            return None
        try:
            hash(value)
        except TypeError:
            return str(value)
        return value


def read_yaml(path: Path) -> tuple[Any, dict[Loc, int]]:
    """Parse a YAML file, keeping the line of every key; every problem raises SpecError (and
    one root must not trust, ConfigError)."""
    path = Path(path)
    check_trusted(path, "drill.yaml" if path.name in ("drill.yaml", "drill.yml") else "file")
    try:
        size = path.stat().st_size
        if size > MAX_BYTES and path.is_file():
            raise SpecError([Problem(str(path), None, "", f"{size} bytes; a drillbit file is at most "
                                     f"{MAX_BYTES} bytes (1 MiB), refused")])
        text = path.read_text()
    except IsADirectoryError:
        raise SpecError([Problem(str(path), None, "", "a directory, not a YAML file")]) from None
    except UnicodeDecodeError:
        raise SpecError([Problem(str(path), None, "", "not a text file (it is not UTF-8)")]) from None
    except OSError as exc:
        raise SpecError([Problem(str(path), None, "", f"cannot read it: {exc.strerror}")]) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise SpecError([Problem(str(path), mark.line + 1 if mark else None, "",
                                 f"YAML syntax: {getattr(exc, 'problem', exc)}")]) from None
    except (ValueError, RecursionError) as exc:  # e.g. NUL characters, absurd nesting
        raise SpecError([Problem(str(path), None, "", f"not YAML drillbit can read: {exc.__class__.__name__}")]) from None
    if node is None:
        return {}, {}
    builder = _Builder(path)
    try:
        data = builder.build(node)
    except RecursionError:
        raise SpecError([Problem(str(path), None, "", "nested too deeply (a recursive alias?)")]) from None
    if builder.problems:
        raise SpecError(builder.problems)
    return data, builder.lines


def line_of(lines: dict[Loc, int], loc: Loc) -> int | None:
    for cut in range(len(loc), -1, -1):
        if loc[:cut] in lines:
            return lines[loc[:cut]]
    return None


def loc_text(loc: Loc) -> str:
    return ".".join(str(part) for part in loc)


# fields of earlier releases, and what replaced them
RENAMED = {"node_pool": "; the job's replacement provider is now replacement: {command, failed_arg, "
                        "declare_dead}",
           "checkpoint_dir": "; it is now checkpoint: {dir: ..., layout: reference|dcp|hf|lightning|megatron|"
                             "deepspeed|orbax|glob|custom}"}


def problems_from(exc: ValidationError, path: Path, lines: dict[Loc, int], prefix: Loc = ()) -> list[Problem]:
    problems = []
    for err in exc.errors():
        loc = prefix + tuple(p for p in err["loc"] if not (isinstance(p, str) and (
            p.startswith("function-") or (p.startswith("<") and p.endswith(">")))))  # validators, union tags
        message = err["msg"].removeprefix("Value error, ")
        named = re.match(r"^([a-z_]+(?:\.[a-z_]+)+) ", message)  # a whole-spec rule that names its field
        if not err["loc"] and named and tuple(named.group(1).split(".")) in lines:
            loc = prefix + tuple(named.group(1).split("."))
        if err["type"] == "extra_forbidden":
            message = "unknown field" + RENAMED.get(str(loc[-1]) if loc else "", "")
        elif err["type"] == "missing":
            message = "required field is missing"
        problems.append(Problem(str(path), line_of(lines, loc), loc_text(loc), message))
    return problems


def validate(model: type[BaseModel], data: Any, path: Path, lines: dict[Loc, int],
             prefix: Loc = ()) -> tuple[Any, list[Problem]]:
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        return None, problems_from(exc, path, lines, prefix)


def suggest(word: str, choices: list[str], listing: str | None = None) -> str:
    """" (did you mean 'x'?)" for a near miss; else the names, or where to list them when
    there are too many for one line."""
    close = difflib.get_close_matches(word, choices, n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    if len(choices) > 8 and listing:
        return f" ({len(choices)} known; `{listing}` lists them)"
    return f" (known: {', '.join(sorted(choices))})"


def unknown(option: str, what: str, word: str, choices: list[str], listing: str | None = None) -> Problem:
    """The problem an option naming something that does not exist gets (``--cluster locl``)."""
    return Problem(option, None, "", f"unknown {what} {word!r}" + suggest(word, choices, listing))


def choose(config: DrillConfig, cluster: str | None, job: str, *, refuse_protected: bool = True) -> str:
    """The cluster a command drills (``--cluster``, else $DRILLBIT_CLUSTER, else the config's
    default), with ``job`` checked beside it; every problem at once (exit 2). A protected
    cluster is refused: drillbit launches nothing there."""
    cluster_name = cluster or os.environ.get("DRILLBIT_CLUSTER") or config.default_cluster
    problems = []
    if cluster_name not in config.clusters:
        problems.append(unknown("--cluster", "cluster", cluster_name, list(config.clusters), "drill list --clusters"))
    if job not in config.jobs:
        problems.append(unknown("--job", "job profile", job, list(config.jobs), "drill list --jobs"))
    if refuse_protected and cluster_name in config.clusters and config.clusters[cluster_name].protected:
        problems.append(Problem("--cluster", None, "", f"cluster {cluster_name!r} is protected in the config; "
                                "drills are refused there"))
    if problems:
        raise SpecError(problems)
    return cluster_name


def find_config(explicit: str | None) -> Path | None:
    if explicit:
        return Path(explicit)
    env = os.environ.get("DRILLBIT_CONFIG")
    if env:
        return Path(env)
    here = Path("drill.yaml")
    return here if here.exists() else None


def project_dirs(subdir: str, extra: str | None = None) -> list[Path]:
    """Where project data (drills, scenarios, runbooks) is looked up, in order: an
    explicit directory, ./<subdir>, then the source tree this package came from. As root, a
    folder no one else could have written, or none (ConfigError, exit 2)."""
    dirs = []
    if extra:
        dirs.append(Path(extra))
    dirs.append(Path.cwd() / subdir)
    source_tree = SOURCE_TREE / subdir
    if source_tree.is_dir():
        dirs.append(source_tree)
    seen, out = set(), []
    for d in dirs:
        key = d.resolve()
        if key not in seen and d.is_dir():
            check_trusted(d, f"{subdir} folder")
            seen.add(key)
            out.append(d)
    return out


# the folder `--drills` named, for this command: looked up before ./drills and the catalogue
EXTRA_DRILLS: ContextVar[str | None] = ContextVar("drillbit_extra_drills", default=None)


def drill_dirs(extra: str | None = None) -> list[Path]:
    return project_dirs("drills", extra or EXTRA_DRILLS.get())


KNOWN_DEFECTS = "known-defects"  # drills/known-defects/: the published defects, each a drill


def catalogue(extra: str | None = None) -> dict[str, Path]:
    """Drill name -> spec file, first directory wins; the published defects' drills
    (``drills/known-defects/``) come after the catalogue's own."""
    found: dict[str, Path] = {}
    for d in drill_dirs(extra):
        for f in sorted(d.glob("*.yaml")):
            found.setdefault(f.stem, f)
    for d in drill_dirs(extra):
        for f in sorted((d / KNOWN_DEFECTS).glob("*.yaml")):
            found.setdefault(f.stem, f)
    return found


def exists(name: str) -> bool:
    """Whether a user's path names something: False, not an error, for a name no filesystem
    takes (a NUL byte, a name past NAME_MAX)."""
    try:
        return Path(name).exists()
    except (OSError, ValueError):
        return False


def resolve_drill(name_or_path: str, extra: str | None = None) -> Path:
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or exists(name_or_path):
        if not exists(name_or_path):
            raise SpecError([Problem(name_or_path, None, "", "no such file")])
        return candidate
    known = catalogue(extra)
    if name_or_path not in known:
        raise SpecError([Problem(name_or_path, None, "", "no such drill" + suggest(name_or_path, list(known),
                                                                                       "drill list"))])
    return known[name_or_path]


def suite_catalogue(extra: str | None = None) -> dict[str, Path]:
    found: dict[str, Path] = {}
    extra = extra or EXTRA_DRILLS.get()
    for d in project_dirs("drills/suites", str(Path(extra) / "suites") if extra else None):
        for f in sorted(d.glob("*.yaml")):
            found.setdefault(f.stem, f)
    return found


def load_suite(name_or_path: str, config: DrillConfig | None = None) -> SuiteSpec:
    """Load a suite and check that every drill (and job) it names exists, with lines."""
    candidate = Path(name_or_path)
    if candidate.suffix not in (".yaml", ".yml"):
        known = suite_catalogue()
        if name_or_path not in known:
            raise SpecError([Problem(name_or_path, None, "", "no such suite" + suggest(name_or_path, list(known),
                                                                                       "drill list --suites"))])
        candidate = known[name_or_path]
    data, lines = read_yaml(candidate)
    suite, problems = validate(SuiteSpec, data, candidate, lines)
    if suite is not None:
        drills = catalogue()
        entries = []
        for entry in suite.entries():  # a drill given as a path is relative to the suite file
            if entry.drill.endswith((".yaml", ".yml")) and not Path(entry.drill).is_absolute():
                entry = entry.model_copy(update={"drill": str((candidate.parent / entry.drill).resolve())})
            entries.append(entry)
        suite = suite.model_copy(update={"drills": entries})
        for i, entry in enumerate(entries):
            if entry.drill not in drills and not exists(entry.drill):
                problems.append(Problem(str(candidate), line_of(lines, ("drills", i)), f"drills.{i}",
                                        f"unknown drill {entry.drill!r}" + suggest(entry.drill, list(drills))))
            for known in entry.known_defects:
                if config is not None and known not in config.jobs:
                    problems.append(Problem(str(candidate), line_of(lines, ("drills", i, "known_defects", known)),
                                            f"drills.{i}.known_defects",
                                            f"unknown job profile {known!r}" + suggest(known, list(config.jobs),
                                                "drill list --jobs")))
            job = entry.job or suite.job
            if config is not None and job is not None and job not in config.jobs:
                problems.append(Problem(str(candidate), line_of(lines, ("drills", i)), f"drills.{i}",
                                        f"unknown job profile {job!r}" + suggest(job, list(config.jobs), "drill list --jobs")))
    if problems:
        raise SpecError(problems)
    return suite
