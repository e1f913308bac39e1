"""Layers import only downward (spaces < infos < worker < engine < transports < the layers above),
the API layers reach no worker or transport internals, info rows, schemas and record views stay in
``vecenv.infos`` and the process transport's placement of them, and no runtime import (at module
level or in a function; ``TYPE_CHECKING`` blocks aside) closes a cycle."""

from __future__ import annotations

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "vecenv"
#: the layers above the engine: what picks a layout (``layout``), checks one (``check``), and the
#: API adapters
_ABOVE = ("vecenv.backends", "vecenv.sb3", "vecenv.layout", "vecenv.check", "vecenv.make", "vecenv.pettingzoo",
          "vecenv.envpool", "vecenv.bench", "vecenv.cli", "vecenv.rl_zoo3", "vecenv.testing")
#: the modules every layer may use, which use none: the errors, the failure policy, the machine
#: (cores, the GIL), the run registry and the version
BASE = ("errors", "policy", "system", "runs", "_version")
FORBIDDEN = {
    "spaces": ("vecenv.transports", "vecenv.engine", "vecenv.worker", "vecenv.infos", *_ABOVE),
    "infos": ("vecenv.transports", "vecenv.engine", "vecenv.worker", *_ABOVE),
    "worker": ("vecenv.transports", "vecenv.engine", *_ABOVE),
    "engine": ("vecenv.transports", *_ABOVE),
    "transports": _ABOVE,
}
#: API layers: they may use the transports' packages (``vecenv.transports.process``), never a
#: module inside one, and nothing of the worker layer
API_LAYERS = ("sb3", "check", "layout", "pettingzoo")
#: what only vecenv.infos and the process transport's placement code name: the rows, the codec's
#: schemas and the record views of the columns
INFO_INTERNALS = {"InfoRows", "Schema", "signature", "ROW_BYTES", "MAX_SCHEMAS"}
INFO_VIEWS = {"records", "all_records"}
INFO_PLACES = ("infos/", "transports/process/infos.py")


def _imports(path: pathlib.Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return names


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_only_downward(layer):
    bad = [
        f"{path.relative_to(SRC)} imports {name}"
        for path in (SRC / layer).rglob("*.py")
        for name in _imports(path)
        if name.startswith(FORBIDDEN[layer])
    ]
    assert not bad, bad


@pytest.mark.parametrize("name", BASE)
def test_base_modules_import_only_each_other(name):
    mine = {f"vecenv.{other}" for other in BASE}
    bad = [imported for imported in _imports(SRC / f"{name}.py") if imported.startswith("vecenv") and imported not in mine]
    assert not bad, bad


def _internal(name: str) -> bool:
    if name.startswith("vecenv.worker"):
        return True
    parts = name.split(".")
    return parts[:2] == ["vecenv", "transports"] and len(parts) > (3 if parts[2:3] == ["process"] else 2)


@pytest.mark.parametrize("layer", API_LAYERS)
def test_api_layers_import_no_worker_or_transport_internals(layer):
    bad = [
        f"{path.relative_to(SRC)} imports {name}"
        for path in (SRC / layer).rglob("*.py")
        for name in _imports(path)
        if _internal(name)
    ]
    assert not bad, bad


def _mentions(path: pathlib.Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in INFO_VIEWS:
            found.add(f".{node.attr}")
        elif isinstance(node, ast.Name) and node.id in INFO_INTERNALS:
            found.add(node.id)
        elif isinstance(node, ast.alias) and node.name in INFO_INTERNALS:
            found.add(node.name)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vecenv.infos."):
            found.add(f"import from {node.module}")
    return found


def test_info_rows_schemas_and_record_views_stay_in_their_rooms():
    bad = {
        path.relative_to(SRC).as_posix(): sorted(found)  # INFO_PLACES are written with "/"
        for path in SRC.rglob("*.py")
        if not path.relative_to(SRC).as_posix().startswith(INFO_PLACES) and (found := _mentions(path))
    }
    assert not bad, bad


def test_the_room_checks_can_fail(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("from vecenv.infos.codec import Schema\nx = chunk.records\n")
    assert _mentions(sample) == {"Schema", ".records", "import from vecenv.infos.codec"}
    assert _internal("vecenv.transports.process.mainguard") and _internal("vecenv.worker.commands")
    assert not _internal("vecenv.transports.process") and not _internal("vecenv.transports")


# ---------------------------------------------------------------------------- import cycles
def _module(path: pathlib.Path, src: pathlib.Path) -> str:
    parts = path.relative_to(src.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import that runs: at module level, in a function or class, anywhere but the body of
    an ``if TYPE_CHECKING:`` (its ``else`` runs)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for branch in child.orelse:
                    visit_one(branch)
            else:
                visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        visit(node)

    visit(tree)
    return found


def import_graph(src: pathlib.Path = SRC) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports at run time. ``from a import b`` counts as
    importing ``a.b`` when that is a module, else ``a``; a package's ``__init__`` that Python
    runs on the way to a submodule is not counted (it is the submodule that is named)."""
    paths = {_module(path, src): path for path in src.rglob("*.py")}

    def owner(name: str) -> str | None:  # the longest prefix of name that is a module here
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets |= {owner(alias.name) for alias in node.names}
                continue
            base = node.module or ""
            if node.level:  # a relative import
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            targets |= {f"{base}.{a.name}" if f"{base}.{a.name}" in paths else owner(base) for a in node.names}
        graph[name] = targets - {None, name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None (a depth-first search)."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(node: str) -> list[str] | None:
        path.append(node)
        on_path.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt in on_path:
                return [*path[path.index(nxt):], nxt]
            if nxt not in done and (cycle := visit(nxt)):
                return cycle
        on_path.discard(path.pop())
        done.add(node)
        return None

    for start in sorted(graph):
        if start not in done and (cycle := visit(start)):
            return cycle
    return None


def test_no_runtime_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "runtime import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_check_can_fail(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from pkg.a import x\n")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import sub\nx = 1\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "b.py").write_text("def f():\n    from ..sub import c\n")
    (package / "sub" / "c.py").write_text("import pkg.sub.b\n")
    graph = import_graph(package)
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": set(), "pkg.sub": set(), "pkg.sub.b": {"pkg.sub.c"},
                     "pkg.sub.c": {"pkg.sub.b"}}
    assert find_cycle(graph) == ["pkg.sub.b", "pkg.sub.c", "pkg.sub.b"]
