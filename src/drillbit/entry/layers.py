"""The house's layers, drawn from its imports: each module sits in one layer and imports only
from its own layer or the ones below it (tests/unit/test_layers.py holds the code to that,
and the architecture page shows the layers, generated from here).

Every import counts — at the top of a file, inside a function, or under TYPE_CHECKING.
"""
from __future__ import annotations

import ast
import gc
from functools import lru_cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]

# Bottom to top: each layer is a folder of src/drillbit/, and a module's layer is the first
# segment of its path. The package's root holds only its face: __init__ and the public
# drillbit.job API (standard library only), counted with the core.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("core", ("__init__", "job", "core")),
    ("spec", ("spec",)),
    ("judging", ("judging",)),  # pure: checks, probes' matching, fleet, exit codes, report rendering
    ("faults", ("faults",)),
    ("agent", ("agent",)),
    ("transport", ("transport",)),
    ("loop", ("loop",)),
    ("runs", ("runs",)),  # sessions, suites, campaigns; publishing: the store, notifications
    ("entry", ("entry",)),  # the command line, the pytest plugin, the docs generator
    ("fixtures", ("fixtures",)),  # jobs that drillbit drills; nothing of the harness imports them
]
# Internal imports kept inside a function on purpose: the command lines (drill's and the
# agent's, and the guardian, which starts with every drill on every node and loads the fault
# machinery only when it trips) load only what a command needs — Ray,
# Fabric and torch take seconds to import — an engine is imported when a cluster uses it,
# and the fixture jobs import their parts where they run (a Ray Train worker, a stack's
# loop).
LAZY_OK = ("drillbit.entry.cli", "drillbit.transport.__init__", "drillbit.entry.pytest_plugin", "drillbit.agent.__main__",
           "drillbit.agent.guardian")


def layer_of(module: str) -> int:
    parts = module.split(".")[1:] or ["__init__"]
    for i, (_, names) in enumerate(LAYERS):
        if parts[0] in names:
            return i
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def parse(path: Path) -> ast.Module:
    """``ast.parse`` of one source file, safe from CPython 3.11's shared AST depth counter.

    CPython 3.11 keeps the AST constructor's recursion depth in one counter per interpreter
    (python/cpython#106905 and its threads): another ``ast.parse`` that runs while this one
    builds its tree, in another thread or in a finalizer the collector runs here (3.11's
    traceback printing parses the failing line to place its carets), leaves the counter
    off, and this parse raises ``SystemError: AST constructor recursion depth mismatch``.
    CI saw that once, after an SSH test's unclosed paramiko file was collected. The parse
    runs with the collector paused, and a mismatch from another thread is parsed again."""
    source = path.read_text()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for attempt in range(3):
            try:
                return ast.parse(source, filename=str(path))
            except SystemError as err:
                if "recursion depth mismatch" not in str(err) or attempt == 2:
                    raise
        raise AssertionError("unreachable")
    finally:
        if was_enabled:
            gc.enable()


def imports(name: str, path: Path, known: set[str]) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function) for every drillbit import of a module."""
    out = []
    is_package = path.name == "__init__.py"

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.ImportFrom):
                if child.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[:len(base) - child.level + 1]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                for alias in child.names:
                    full = f"{target}.{alias.name}"
                    hit = full if full in known else target if target in known else None
                    if hit and hit != name:
                        out.append((hit, child.lineno, in_function))
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name in known and alias.name != name:
                        out.append((alias.name, child.lineno, in_function))
            visit(child, inner)

    visit(parse(path), False)
    return out


@lru_cache(maxsize=1)
def graph() -> tuple[dict[str, Path], dict[str, list[tuple[str, int, bool]]]]:
    mods = modules()
    return mods, {name: imports(name, path, set(mods)) for name, path in mods.items()}


def lazy_ok(name: str, path: Path) -> bool:
    full = name + ".__init__" if path.name == "__init__.py" else name
    return full.startswith(LAZY_OK) or LAYERS[layer_of(name)][0] == "fixtures"


def drawn() -> list[tuple[str, list[str], list[str]]]:
    """Each layer bottom to top: its name, its modules, and the layers below it that it imports."""
    mods, edges = graph()
    out = []
    for i, (name, _) in enumerate(LAYERS):
        members = sorted(m for m in mods if layer_of(m) == i)
        below = sorted({layer_of(t) for m in members for t, _, _ in edges[m] if layer_of(t) < i})
        out.append((name, members, [LAYERS[j][0] for j in below]))
    return out
