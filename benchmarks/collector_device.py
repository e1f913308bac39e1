"""``Collector(device=DEVICE)`` (pinned host buffers, one copy per rollout) against moving its
numpy rollouts to the GPU with ``.to(DEVICE)`` (pageable): 64 busy envs in async batches of 32.

    python benchmarks/collector_device.py            # needs torch with CUDA
    python benchmarks/collector_device.py --device cpu --rounds 1 --rollouts 1 --steps 16   # a smoke run
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

import vecenv
from vecenv.bench.envs import BusyEnv

#: where the rollouts go (``--device``), and how to wait for it
DEVICE, sync = "cuda", torch.cuda.synchronize


def gpu_policy(obs: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """What a policy on the GPU does with each batch: its observations to the device first."""
    on_device = torch.as_tensor(obs).to(DEVICE)
    return ((torch.as_tensor(ids).to(DEVICE) + on_device[:, 0, 0, 0]) % 4).cpu().numpy()


def run(envs: vecenv.VectorEnv, steps: int, rollouts: int, pinned: bool) -> float:
    """Env steps/s of ``rollouts`` rollouts ending on the GPU: the collector's pinned buffers
    copied without blocking (``pinned``), or its numpy rollout moved with ``.to(DEVICE)``."""
    collector = vecenv.Collector(envs, gpu_policy, steps=steps, seed=0, device=DEVICE if pinned else None)
    collector.collect()  # warm-up (the reset, pinned buffers)
    sync()
    start = time.perf_counter()
    for _ in range(rollouts):
        rollout = collector.collect()
        if not pinned:
            for a in (rollout.observations, rollout.actions, rollout.rewards, rollout.terminations,
                      rollout.truncations, rollout.next_observations):
                torch.as_tensor(a).to(DEVICE)
        sync()
    return rollouts * steps * envs.num_envs / (time.perf_counter() - start)


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _common import interleave, parser, spread

    p = parser(__doc__, rounds=5)
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=128)
    p.add_argument("--rollouts", type=int, default=3)
    p.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke run")
    args = p.parse_args()
    global DEVICE, sync
    DEVICE, sync = args.device, torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name() if DEVICE.startswith('cuda') else DEVICE}")

    def measure(name: str) -> float:
        with vecenv.ProcessVectorEnv([BusyEnv] * args.num_envs, batch_size=args.batch_size) as envs:
            return run(envs, args.steps, args.rollouts, name == "pinned")

    rates = interleave(["pinned", "pageable"], args.rounds, measure,
                       lambda r, name, rate: print(f"round {r + 1}: {name} {rate:,.0f} env steps/s", flush=True))
    for name, values in rates.items():
        print(f"{name:<9} {spread(values)}")
    print(f"pinned / pageable: {statistics.median(rates['pinned']) / statistics.median(rates['pageable']):.2f}")


if __name__ == "__main__":
    main()
