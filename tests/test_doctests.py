"""The examples in vecenv's docstrings (the ones the API reference shows) run and say what they show.

Every module under ``src/vecenv`` whose source holds a ``>>>`` example is collected, imported and
run through :mod:`doctest`; the public classes and functions in ``DOCUMENTED`` must carry one.
"""

from __future__ import annotations

import doctest
import importlib
import io
import pathlib
import warnings

import pytest

import vecenv
from vecenv.transports.process import unavailable

PROCESSES_UNAVAILABLE = unavailable()
SRC = pathlib.Path(vecenv.__file__).resolve().parent

#: the public API's entry points that must carry a runnable example
DOCUMENTED = [
    "vecenv.make:make",
    "vecenv.collector:Collector",
    "vecenv.backends:SerialVectorEnv",
    "vecenv.backends:ProcessVectorEnv",
    "vecenv.policy:FailurePolicy",
    "vecenv.layout.rule:decide",
    "vecenv.sb3.vec_envs:DummyVecEnv",
    "vecenv.sb3.vec_envs:SubprocVecEnv",
    "vecenv.envpool.registration:make",
    "vecenv.envpool.pool:EnvPool",
]


def _modules_with_examples() -> list[str]:
    names = []
    for path in sorted(SRC.rglob("*.py")):
        if ">>> " not in path.read_text(encoding="utf-8"):
            continue
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join(parts))
    return names


MODULES = _modules_with_examples()


def test_public_api_carries_examples():
    missing = []
    for target in DOCUMENTED:
        module_name, _, attr = target.partition(":")
        obj = getattr(importlib.import_module(module_name), attr)
        if ">>>" not in (obj.__doc__ or ""):
            missing.append(target)
    assert not missing, f"no runnable example in the docstring of: {missing}"
    assert {t.partition(":")[0] for t in DOCUMENTED} <= set(MODULES)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples(module_name):
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    runner = doctest.DocTestRunner(optionflags=flags)
    out = io.StringIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for test in finder.find(module, module_name):
            runner.run(test, out=out.write)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0, f"{module_name}: no example found"
    if result.failed and PROCESSES_UNAVAILABLE is not None and PROCESSES_UNAVAILABLE in out.getvalue():
        pytest.skip(f"{module_name}'s examples start worker processes: {PROCESSES_UNAVAILABLE}")
    assert result.failed == 0, f"{module_name}: {result.failed} example(s) failed:\n{out.getvalue()}"
