"""CleanRL's Atari CNN (``ppo_atari.py``) on one torch thread, imported only when used.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def make_policy(n_actions: int, seed: int = 0) -> Callable[[np.ndarray], np.ndarray]:
    """A function from a batch of stacked frames to a batch of sampled actions (int64)."""
    import torch
    from torch import nn

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set, or torch already ran parallel work
        pass
    torch.manual_seed(seed)
    net = nn.Sequential(
        nn.Conv2d(4, 32, 8, stride=4), nn.ReLU(),
        nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, 512), nn.ReLU(),
        nn.Linear(512, n_actions),
    ).eval()
    gen = torch.Generator().manual_seed(seed)

    @torch.inference_mode()
    def act(obs: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(np.asarray(obs)).float().div_(255.0)
        probs = torch.softmax(net(x), dim=-1)
        return torch.multinomial(probs, 1, generator=gen).squeeze(1).numpy()

    return act


def torch_missing() -> str | None:
    """Why the policy scenario cannot run here (None when it can)."""
    from shared_bench.targets import installed

    return None if installed("torch") else "torch is not installed (pip install torch)"
