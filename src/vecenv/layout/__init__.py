"""``backend="auto"``: the layout that steps a given env fastest on this machine, by measuring.

:func:`choose` probes one copy of the env (:func:`probe_env`), reads vecenv's own costs here
(:func:`machine_costs`, cached per machine) and the load of other programs and vecenv runs, then
:func:`decide` predicts each layout's µs per batched step and takes the least (docs/auto.md gives
the rule). ``VECENV_BACKEND`` (``serial``, ``thread``, ``process``, ``inline``, ``ray``) forces
auto's choice. Probing never changes results: the probe copy is closed and the run builds its
envs as every fixed backend does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import gymnasium as gym

from vecenv.layout.machine import (
    cached_probe,
    describe_costs,
    keep_probe,
    machine_costs,
    most,
    others_busy,
    probe_env,
)
from vecenv.layout.rule import (
    FORCE_VAR,
    EnvProbe,
    Layout,
    MachineCosts,
    allowed_layouts,
    contended,
    decide,
    fixed,
    forced,
)
from vecenv.runs import other_runs
from vecenv.system import usable_cores
from vecenv.transports.process import script_rerun_line

__all__ = [
    "FORCE_VAR",
    "EnvProbe",
    "Layout",
    "MachineCosts",
    "allowed_layouts",
    "choose",
    "contended",
    "decide",
    "describe_costs",
    "forced",
    "machine_costs",
    "others_busy",
    "probe_env",
]


def choose(env_fns: Sequence[Callable[[], gym.Env]], backend_kwargs: Mapping[str, Any]) -> Layout:
    """The layout ``backend="auto"`` builds for ``env_fns`` with these backend arguments."""
    n = len(env_fns)
    layout = forced(n, backend_kwargs)
    if layout is not None:
        return layout
    cores = usable_cores()
    allowed, narrowed = allowed_layouts(backend_kwargs, n, cores)
    workers, batch_size = backend_kwargs.get("num_workers"), backend_kwargs.get("batch_size")
    if len(allowed) == 1 and allowed[0] != "serial":
        return fixed(allowed[0], n, workers, cores, narrowed, batch_size=batch_size)
    if "serial" in allowed and script_rerun_line(backend_kwargs.get("context")) is not None:
        allowed, narrowed = ["serial"], (
            "worker processes would run this script again: it creates the vector env outside "
            '`if __name__ == "__main__":` (put it there to let auto use processes)'
        )
    if allowed == ["serial"] or (n == 1 and "serial" in allowed):
        return fixed("serial", n, workers, cores, narrowed or "one env")
    before = others_busy()  # read again after the probe and calibration: the larger counts
    try:
        probe = cached_probe(env_fns[0])
    except Exception as exc:  # the backend builds the envs again and reports the failure as the env's
        kind = "process" if "process" in allowed else allowed[0]
        return fixed(kind, n, workers, cores, f"the env could not be probed here ({type(exc).__name__}: {exc})",
                     batch_size=batch_size)
    costs = machine_costs()
    others, runs = most(before, others_busy()), other_runs()
    if not contended(cores, others):
        keep_probe(env_fns[0], probe)
    if runs:  # another run may be between steps right now: it counts as a busy core at least
        others = max(others or 0.0, float(runs))
    layout = decide(probe, costs, n, cores, allowed=allowed, num_workers=workers, others=others, batch_size=batch_size)
    reason = f"{layout.reason}; {runs} other vecenv run(s) on this machine" if runs else layout.reason
    return replace(layout, reason=reason, calibration=describe_costs(costs))
