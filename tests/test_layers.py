"""Layers import only downward (spaces < infos < worker < engine < transports), the API layers
reach no worker or transport internals, and info rows, schemas and record views stay in
``vecenv.infos`` and the process transport's placement of them."""

from __future__ import annotations

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "vecenv"
#: the layers above the engine: what picks a layout (``layout``), checks one (``check``), and the
#: API adapters
_ABOVE = ("vecenv.backends", "vecenv.sb3", "vecenv.layout", "vecenv.check", "vecenv.make", "vecenv.pettingzoo")
FORBIDDEN = {
    "spaces": ("vecenv.transports", "vecenv.engine", "vecenv.worker", "vecenv.infos", *_ABOVE),
    "infos": ("vecenv.transports", "vecenv.engine", "vecenv.worker", *_ABOVE),
    "worker": ("vecenv.transports", "vecenv.engine", *_ABOVE),
    "engine": ("vecenv.transports", *_ABOVE),
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
