"""Whether an env factory can reach a worker process: it pickles, and it builds and resets the
env in a freshly spawned interpreter."""

from __future__ import annotations

import multiprocessing
import pickle
from collections.abc import Callable
from typing import Any

import cloudpickle
import gymnasium as gym

from vecenv.bench.contenders import first_line
from vecenv.check.report import CheckReport

#: seconds the spawned-process probe may take
SPAWN_TIMEOUT = 60.0


def _spawn_probe(payload: bytes, conn: Any) -> None:
    """Run in a spawned process: rebuild the factory, make the env, reset it, report back."""
    try:
        env = cloudpickle.loads(payload)()
        try:
            env.reset(seed=0)
            conn.send(("ok", str(env.observation_space)))
        finally:
            env.close()
    except BaseException as exc:  # report anything, including SystemExit from the env
        conn.send(("error", first_line(exc)))
    finally:
        conn.close()


def spawn_probe(env_fn: Callable[[], gym.Env], timeout: float = SPAWN_TIMEOUT) -> str | None:
    """Build and reset the env in a freshly spawned process; the error in words, or None."""
    payload = cloudpickle.dumps(env_fn)
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_spawn_probe, args=(payload, child), daemon=True, name="vecenv-check-spawn")
    try:
        proc.start()
        child.close()
        if not parent.poll(timeout):
            return f"the spawned process gave no answer within {timeout:g} s"
        try:
            status, detail = parent.recv()
        except EOFError:
            proc.join(5)
            return f"the spawned process died (exit code {proc.exitcode})"
        return None if status == "ok" else detail
    finally:
        parent.close()
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join(5)


def check_pickle(report: CheckReport, env_fn: Callable, spawn: bool) -> None:
    """Add the ``pickle`` findings: the factory pickles, and (with ``spawn``) works when spawned."""
    plain_error = cloud_error = None
    try:
        pickle.dumps(env_fn)
    except Exception as exc:
        plain_error = first_line(exc)
    try:
        cloudpickle.dumps(env_fn)
    except Exception as exc:
        cloud_error = first_line(exc)
    if cloud_error is not None:
        report.add(
            "problem", "pickle",
            f"the env factory cannot be pickled, so it cannot reach spawned or forkserver worker "
            "processes (the default start method on macOS and Windows, and on Linux from Python 3.14) "
            f"(pickle: {plain_error}; cloudpickle: {cloud_error}). Make it a module-level function "
            "or class that holds no locks, open files, sockets or live envs.",
        )
        return
    if plain_error is not None:
        report.add(
            "warning", "pickle",
            f"the env factory pickles only with cloudpickle (pickle: {plain_error}); vecenv and "
            "gymnasium use cloudpickle, but code passing it to multiprocessing directly will fail",
        )
    if not spawn:
        report.add("ok", "pickle", "the env factory pickles" + (" with cloudpickle" if plain_error else ""))
        return
    error = spawn_probe(env_fn)
    if error is not None:
        report.add(
            "problem", "pickle",
            f"the env factory pickles but fails in a freshly spawned process: {error}. Spawned "
            "workers (the default on macOS and Windows) start from a clean interpreter: register "
            "the env and import what it needs at module level of an importable module.",
        )
    else:
        report.add("ok", "pickle", "the env factory pickles and builds the env in a spawned process")
