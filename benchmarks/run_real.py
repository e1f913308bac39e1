"""vecenv on real simulators, side by side with gymnasium's and SB3's vector envs, EnvPool's C++
builds of the same envs and PufferLib's vector envs: MuJoCo ``HalfCheetah-v5`` and ALE Pong
(``ALE/Pong-v5`` with gymnasium's AtariPreprocessing(frame_skip=4) and FrameStackObservation(4)),
N=8, random actions, on an idle machine.

    python benchmarks/run_real.py                    # ~5 min on 2 cores; results/real.json
    python benchmarks/run_real.py --envs HalfCheetah-v5 --rounds 5
    python benchmarks/run_real.py --scenario idle,busy --contenders gym-sync,vecenv-default,pufferlib-mp
    python benchmarks/run_real.py --quick            # a smoke test

These envs return infos every step (MuJoCo's x_position, x_velocity, ...; ALE's lives and frame
numbers), which vecenv's process backend carries in shared memory. Any option of
``run_shared.py`` works here (``--scenario busy`` measures beside a busy process); the defaults
differ: the idle scenario, these two envs, and the contenders below. Tables show medians of
interleaved rounds and the ratio to gymnasium's SyncVectorEnv.

PufferLib's contenders (``pip install --no-deps pufferlib-core psutil``; docs/bench.md says
what else, where torch is not installed) wrap each env in ``pufferlib.emulation.GymnasiumPufferEnv``:

- ``pufferlib-serial``: ``pufferlib.vector.Serial``;
- ``pufferlib-mp``: ``pufferlib.vector.Multiprocessing`` with as many workers as PufferLib accepts
  here (at most the physical cores, dividing N); ``pufferlib-mp-w1``: one worker;
- ``pufferlib-async``: the same with ``batch_size = N // 2`` (its async pool); ``pufferlib-mp-bK``:
  batches of K.

Each is built by :mod:`vecenv.bench.puffer`, whose watchdog turns a dead or stalled worker
(PufferLib's ``recv`` would spin forever) into an error, and which ends every worker on close.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run_shared  # noqa: E402
from shared_bench import contenders, report, scenarios  # noqa: E402
from shared_bench.targets import Target  # noqa: E402

#: PufferLib contender -> (peer of vecenv.bench.puffer, worker count or None for its default)
PUFFERLIB = {
    "pufferlib-serial": ("pufferlib-serial", None),
    "pufferlib-mp": ("pufferlib-mp", None),
    "pufferlib-mp-w1": ("pufferlib-mp", 1),
    "pufferlib-async": ("pufferlib-async", None),
}
CONTENDERS = ("gym-sync", "gym-async", "vecenv-default", "vecenv-thread", "vecenv-process", "sb3-dummy",
              "sb3-subproc", "vecenv-sb3-subproc", "envpool", "pufferlib-serial", "pufferlib-mp",
              "pufferlib-async")
DEFAULTS = {"--scenario": "idle", "--envs": "HalfCheetah-v5,Pong", "--contenders": ",".join(CONTENDERS),
            "--json": str(run_shared.RESULTS / "real.json")}


class PufferRunner(contenders.Runner):
    """A PufferLib vector env as a run_shared contender: ``send`` / ``recv``, ``rows`` env steps
    a step (``N``, or the batch of the async pool); observations are PufferLib's views."""

    def __init__(self, name: str, t: Target, num_envs: int, batch: int | None, seed: int) -> None:
        from vecenv.bench.puffer import build_puffer

        peer, workers = PUFFERLIB[name]
        if batch is not None:
            peer = "pufferlib-async"
        envs, rows, used, self.watch = build_puffer(peer, t, num_envs, seed, batch, workers)  # type: ignore[arg-type]
        self.seed = seed
        info = {"built": f"pufferlib.vector.{type(envs).__name__}(num_envs={num_envs}, "
                         f"num_workers={used}, batch_size={rows})"}
        super().__init__(envs, rows, envs.single_action_space, self._first, info)

    def _first(self) -> tuple[Any, dict]:
        self.envs.async_reset(self.seed)
        obs = self.envs.recv()[0]
        self._check()
        return obs, {}

    def step(self, actions: Any) -> Any:
        self.envs.send(actions)
        obs = self.envs.recv()[0]
        watch = self.watch
        if watch is not None:
            if watch.failed is not None:
                self._check()
            watch.beat += 1
        return obs

    def _check(self) -> None:
        from vecenv.bench.puffer import PufferLibFailure

        if self.watch is not None and self.watch.failed is not None:
            raise PufferLibFailure(self.watch.failed)

    def close(self) -> None:
        from vecenv.bench.puffer import puffer_close

        puffer_close(self.envs, self.watch)


def _puffer_unavailable(name: str, t: Target, num_envs: int) -> str | None:
    from vecenv.bench.puffer import import_pufferlib, puffer_layout

    base, batch = contenders.parse(name)
    peer, workers = PUFFERLIB[base]
    if batch is not None and base != "pufferlib-mp":
        return f"{base} takes no -bK (pufferlib-mp-bK is the async pool with batches of K)"
    try:
        import_pufferlib()
        puffer_layout("pufferlib-async" if batch else peer, num_envs, batch, workers)
    except (ImportError, ValueError) as exc:
        return str(exc)
    return None


def add_pufferlib() -> None:
    """Make run_shared's contenders know PufferLib's (here and in the children it starts, which
    run this script)."""
    if "pufferlib-mp" in contenders.BASES:
        return
    unavailable, build = contenders.unavailable, contenders.build

    def unavailable_with_pufferlib(name: str, t: Target, num_envs: int) -> str | None:
        if contenders.parse(name)[0] in PUFFERLIB:
            return _puffer_unavailable(name, t, num_envs)
        return unavailable(name, t, num_envs)

    def build_with_pufferlib(name: str, t: Target, num_envs: int, seed: int = 0) -> contenders.Runner:
        base, batch = contenders.parse(name)
        if base not in PUFFERLIB:
            return build(name, t, num_envs, seed)
        reason = _puffer_unavailable(name, t, num_envs)
        if reason:
            raise contenders.Skip(reason)
        return PufferRunner(base, t, num_envs, batch, seed)

    contenders.BASES = (*contenders.BASES, *PUFFERLIB)
    contenders.unavailable = unavailable_with_pufferlib
    contenders.build = build_with_pufferlib
    scenarios.SCRIPT = Path(__file__).resolve()  # two-runs and after-busy children run this script
    report.PACKAGES = (*report.PACKAGES, "pufferlib-core", "psutil")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    add_pufferlib()
    for option, value in DEFAULTS.items():
        if not any(a == option or a.startswith(option + "=") for a in argv):
            argv += [option, value]
    return run_shared.main(argv)


if __name__ == "__main__":
    sys.exit(main())
