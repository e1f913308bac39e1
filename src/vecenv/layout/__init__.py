"""``backend="auto"``: the layout that steps a given env fastest on this machine, by measuring.

::

    make(env, n)                          backend="auto"
      │
      ├── probe.probe_env(env_fns[0])     one copy stepped for at most PROBE_S ──► EnvProbe
      │                                   (step µs, CPU share, observation size)
      ├── machine.machine_costs()         vecenv's own cost per batched step on a no-op env
      │                                   ──► MachineCosts (cached per machine, checked cheaply,
      │                                   never saved when measured beside other work)
      ├── load.others_busy()              the cores' worth of CPU other programs use now, and
      │   runs.other_runs()                 other processes with a live vector env (each ≥ 1 core)
      └── rule.decide(probe, costs, n, cores, others)  ──► Layout(backend, num_workers, inline, reason,
                                                   calibration: machine.describe_costs(costs))

:func:`decide` predicts the microseconds of one batched step of ``n`` envs for each candidate and
takes the least (``c`` an env's step, ``e`` vecenv's work per env, ``W`` groups)::

    serial             F + n·(c + e)
    thread,  T threads X_thread(T)  + n·(c + e) / T      free-threaded Python, GIL off only
    process, W groups  X_process(W) + ⌈n/W⌉·(c + e)      W ≤ usable cores
    inline,  W groups  X_inline(W)  + ⌈n/W⌉·(c + e)      W-1 workers + the caller's process

``F`` and the crossings ``X`` come from :class:`MachineCosts`. An env whose step mostly waits
(CPU share below :data:`WAITING_SHARE`) may have more workers than cores. Within :data:`TIE` of
the best, the simpler layout wins: serial, thread, process, then inline. On a contended machine
(other programs busy on half a core or more) the run's processes are predicted at their share of
the cores left, with a blocking wake-up each way, and serial stands unless a layout with workers
beats it by :data:`~vecenv.layout.rule.CONTENDED_MARGIN`.

``VECENV_BACKEND`` (``serial``, ``thread``, ``process``, ``inline``, ``ray``) forces auto's choice;
``backend=`` forces it for one call. Probing never changes results: the probe copy is closed and
the run builds its envs as every fixed backend does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import gymnasium as gym

from vecenv.layout.load import contended, most, others_busy
from vecenv.layout.machine import describe_costs, machine_costs
from vecenv.layout.probe import cached_probe, keep_probe, probe_env
from vecenv.layout.rule import (
    FORCE_VAR,
    EnvProbe,
    Layout,
    MachineCosts,
    allowed_layouts,
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
    workers = backend_kwargs.get("num_workers")
    if len(allowed) == 1 and allowed[0] != "serial":
        return fixed(allowed[0], n, workers, cores, narrowed)
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
        return fixed(kind, n, workers, cores, f"the env could not be probed here ({type(exc).__name__}: {exc})")
    costs = machine_costs()
    others, runs = most(before, others_busy()), other_runs()
    if not contended(cores, others):
        keep_probe(env_fns[0], probe)
    if runs:  # another run may be between steps right now: it counts as a busy core at least
        others = max(others or 0.0, float(runs))
    layout = decide(probe, costs, n, cores, allowed=allowed, num_workers=workers, others=others)
    reason = f"{layout.reason}; {runs} other vecenv run(s) on this machine" if runs else layout.reason
    return replace(layout, reason=reason, calibration=describe_costs(costs))
