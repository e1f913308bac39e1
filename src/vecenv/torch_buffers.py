"""Torch buffers for :class:`~vecenv.collector.Collector` ``(device=...)``: the rollout's host
arrays live in memory torch tensors own (pinned for CUDA), and each rollout is copied to the device
once, without blocking, while the next one is collected."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["TorchBuffers"]

_TORCH_MISSING = ("Collector(device=...) returns torch tensors and needs torch: "
                  "pip install torch (or vecenv[sb3], which brings it)")


class TorchBuffers:
    """Torch buffers for ``device``: host arrays (pinned for CUDA) and their device copies."""

    def __init__(self, device: Any) -> None:
        try:
            import torch
        except ImportError as exc:
            raise ImportError(_TORCH_MISSING) from exc
        self.torch = torch
        try:
            self.device = torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f"Collector(device=...): expected a torch device such as 'cpu' or 'cuda', got "
                             f"{device!r} ({exc})") from None
        self.cuda = self.device.type == "cuda"
        if self.cuda and not torch.cuda.is_available():
            raise ValueError(f"Collector(device={device!r}): torch sees no CUDA device here; use device='cpu' "
                             "or device=None (numpy arrays)")
        self.tensors: dict[int, Any] = {}  # id(host array) -> (that array, its host tensor, its device tensor)
        self.event: Any = None

    def host(self, shape: tuple, dtype: Any) -> np.ndarray:
        """A zeroed host array whose memory a torch tensor owns (pinned for CUDA)."""
        torch = self.torch
        like = torch.from_numpy(np.zeros(0, dtype=dtype))
        tensor = torch.zeros(shape, dtype=like.dtype, pin_memory=self.cuda)
        array = tensor.numpy()
        device = tensor if self.device.type == "cpu" else torch.empty(shape, dtype=like.dtype, device=self.device)
        self.tensors[id(array)] = (array, tensor, device)
        return array

    def publish(self, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
        """Each host array's device tensor, its copy started (non-blocking from pinned memory)."""
        out = {}
        for name, array in arrays.items():
            _, host, device = self.tensors[id(array)]
            if device is not host:
                device.copy_(host, non_blocking=self.cuda)
            out[name] = device
        if self.cuda:
            self.event = self.torch.cuda.Event()
            self.event.record()
        return out

    def wait_copies(self) -> None:
        if self.event is not None:
            self.event.synchronize()
            self.event = None
