"""The house's layers, drawn from its imports: each module sits in one layer, and imports
only from its own layer or the ones below it; no module reaches one that reaches back.

Every import counts — at the top of a file, inside a function, or under TYPE_CHECKING: a
function-level import that runs up a layer is still a dependency up a layer.
"""
from __future__ import annotations

import ast
import gc

import pytest

from drillbit.entry import layers
from drillbit.entry.layers import LAYERS, PACKAGE, graph, imports, lazy_ok, layer_of


def test_no_import_runs_up_a_layer():
    mods, edges = graph()
    up = []
    for name, found in edges.items():
        for target, line, _ in found:
            if layer_of(target) > layer_of(name):
                up.append(f"{mods[name].relative_to(PACKAGE.parent)}:{line}: {name} ({LAYERS[layer_of(name)][0]}) "
                          f"imports {target} ({LAYERS[layer_of(target)][0]})")
    assert not up, "imports up a layer:\n" + "\n".join(sorted(up))


def test_no_import_cycle():
    _, edges = graph()
    graph_ = {name: {t for t, _, _ in found} for name, found in edges.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph_[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph_:
        if v not in index:
            strong(v)
    assert not cycles, f"import cycles: {cycles}"


def test_function_level_imports_only_where_the_command_line_or_an_engine_needs_them():
    mods, edges = graph()
    lazy = [f"{mods[name].relative_to(PACKAGE.parent)}:{line}: {target}" for name, found in edges.items()
            for target, line, in_function in found if in_function and not lazy_ok(name, mods[name])]
    assert not lazy, "imports inside functions (move them to the top; no cycle needs them now):\n" + "\n".join(lazy)


def test_the_layer_map_catches_an_import_up_a_layer(tmp_path):
    """The checker itself: an import from the base layer up to the loop is found."""
    sample = tmp_path / "errors.py"
    sample.write_text("from drillbit.loop.runner import DrillRunner\n")
    found = imports("drillbit.core.errors", sample, {"drillbit.loop.runner", "drillbit.core.errors"})
    assert found == [("drillbit.loop.runner", 1, False)]
    assert layer_of("drillbit.loop.runner") > layer_of("drillbit.core.errors")


def test_every_module_is_in_a_layer():
    mods, _ = graph()
    for name in mods:
        layer_of(name)


def test_the_folders_are_the_layers_and_the_root_holds_only_the_package_face():
    """#46: a maintainer sees the layers in the tree: each is a folder, in LAYERS' order, and
    src/drillbit/ itself holds only __init__.py and the public drillbit.job API."""
    root = sorted(p.name for p in PACKAGE.iterdir() if p.suffix == ".py")
    assert root == ["__init__.py", "job.py"], root
    folders = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert folders == sorted(name for name, _ in LAYERS), folders
    for name, members in LAYERS:
        assert name in members, f"layer {name} is not its own folder"


def test_a_parse_that_meets_cpythons_shared_depth_counter_is_parsed_again(monkeypatch, tmp_path):
    """CPython 3.11 raised ``SystemError: AST constructor recursion depth mismatch`` on CI when
    another parse ran during this one (python/cpython#106905); layers.parse parses again."""
    source = tmp_path / "m.py"
    source.write_text("import os\n")
    real, calls = ast.parse, []

    def flaky(*args, **kwargs):
        calls.append(gc.isenabled())
        if len(calls) == 1:
            raise SystemError("AST constructor recursion depth mismatch (before=150, after=170)")
        return real(*args, **kwargs)

    monkeypatch.setattr(layers.ast, "parse", flaky)
    assert isinstance(layers.parse(source), ast.Module)
    assert calls == [False, False] and gc.isenabled()


def test_another_system_error_in_a_parse_is_not_swallowed(monkeypatch, tmp_path):
    source = tmp_path / "m.py"
    source.write_text("x = 1\n")

    def broken(*args, **kwargs):
        raise SystemError("something else")

    monkeypatch.setattr(layers.ast, "parse", broken)
    with pytest.raises(SystemError, match="something else"):
        layers.parse(source)
    assert gc.isenabled()
