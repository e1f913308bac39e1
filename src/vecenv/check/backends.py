"""The backend checks of ``vecenv check``: run the env through each vecenv backend, measure its
throughput, and compare its observations with the first backend's under the same seed and actions."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import vecenv
from vecenv.bench.contenders import action_pool, first_line
from vecenv.check.report import CheckReport
from vecenv.check.values import digest

#: seconds one backend may spend stepping in a check
BACKEND_SECONDS = 3.0


def check_backends(report: CheckReport, env_fn: Callable, names: Sequence[str], n: int, steps: int,
                   seed: int) -> None:
    """Run ``n`` copies through each backend in ``names``, filling ``report.backends``."""
    reference: list[bytes] | None = None
    reference_name = ""
    for backend in names:
        entry: dict[str, Any] = {"steps_per_s": None, "num_workers": None, "error": None}
        report.backends[backend] = entry
        try:
            done, digests = _run_backend(entry, env_fn, backend, n, steps, seed)
        except Exception as exc:
            entry["error"] = first_line(exc)
            report.add("problem", f"backend:{backend}", f"backend {backend!r} failed: {entry['error']}")
            continue
        workers = entry["num_workers"]
        report.add(
            "ok", f"backend:{backend}",
            f"backend {backend!r} ran {done} steps of {n} envs: {entry['steps_per_s']:,.0f} env steps/s"
            + (f" ({workers} workers)" if workers and workers > 1 else ""),
        )
        if reference is None:
            reference, reference_name = digests, backend
        else:
            _compare(report, backend, digests, reference_name, reference)


def _run_backend(entry: dict[str, Any], env_fn: Callable, backend: str, n: int, steps: int,
                 seed: int) -> tuple[int, list[bytes]]:
    """Reset and step ``n`` copies on ``backend`` (within :data:`BACKEND_SECONDS`).

    Fills ``num_workers`` and ``steps_per_s`` of ``entry``; returns the vector steps done and the
    digest of the observations after the reset and after each step.
    """
    digests: list[bytes] = []
    envs = None
    try:
        envs = vecenv.make(env_fn, n, backend=backend)
        entry["num_workers"] = getattr(envs, "num_workers", None)
        obs, _ = envs.reset(seed=seed)
        digests.append(digest(obs).digest())
        batched = action_pool(envs.single_action_space, n, seed, size=steps)
        done, t0 = 0, time.perf_counter()
        for t in range(steps):
            obs, *_ = envs.step(batched[t])
            digests.append(digest(obs).digest())
            done += 1
            if time.perf_counter() - t0 > BACKEND_SECONDS:
                break
        elapsed = time.perf_counter() - t0
        entry["steps_per_s"] = done * n / elapsed if elapsed > 0 else math.inf
        return done, digests
    finally:
        if envs is not None:
            try:
                envs.close()
            except Exception:
                pass


def _compare(report: CheckReport, backend: str, digests: list[bytes], reference_name: str,
             reference: list[bytes]) -> None:
    """Add a problem if ``backend``'s observations differ from the reference backend's."""
    k = min(len(reference), len(digests))
    mismatch = next((i for i in range(k) if reference[i] != digests[i]), None)
    if mismatch is not None:
        when = "after reset" if mismatch == 0 else f"at step {mismatch - 1}"
        report.add(
            "problem", f"backend:{backend}",
            f"backend {backend!r} gave different observations from {reference_name!r} {when} "
            "under the same seed and actions: the env's results depend on where it runs",
        )
