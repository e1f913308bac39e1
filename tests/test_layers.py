"""Layers import only downward: spaces and worker and engine never import a transport."""

from __future__ import annotations

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "vecenv"
FORBIDDEN = {
    "spaces": ("vecenv.transports", "vecenv.engine", "vecenv.worker", "vecenv.backends", "vecenv.sb3"),
    "worker": ("vecenv.transports", "vecenv.engine", "vecenv.backends", "vecenv.sb3"),
    "engine": ("vecenv.transports", "vecenv.backends", "vecenv.sb3"),
}


def _imports(path: pathlib.Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
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
