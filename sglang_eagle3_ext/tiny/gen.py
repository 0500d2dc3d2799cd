"""Seeded weight generation on the build device.

On a GPU every tensor is created there in bf16 from a CUDA generator (an 8B target in seconds, no
host-side random init). On the CPU, values are drawn in float32 (the built-in tiny shape draws
exactly as earlier releases did, so the same seed still gives byte-identical files).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def pick_device(device: str | None = None) -> str:
    if device:
        return device
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except Exception:  # noqa: BLE001 - no usable torch.cuda means CPU
        return "cpu"


@dataclass
class Gen:
    g: Any  # torch.Generator on ``device``
    device: Any
    dtype: Any  # storage dtype of random tensors: float32 on CPU, bf16 on GPU

    @classmethod
    def create(cls, seed: int, device: str) -> Gen:
        """``device`` "cpu:bf16" runs the GPU code path (bf16 tensors) on the CPU, for tests."""
        import torch

        bf16 = device == "cpu:bf16"
        dev = torch.device("cpu" if bf16 else device)
        g = torch.Generator(device=dev).manual_seed(seed)
        return cls(g, dev, torch.float32 if dev.type == "cpu" and not bf16 else torch.bfloat16)

    def rand(self, *shape: int, std: float) -> Any:
        import torch

        if self.dtype == torch.float32:
            return torch.randn(*shape, generator=self.g) * std
        return torch.empty(*shape, device=self.device, dtype=self.dtype).normal_(0.0, std, generator=self.g)

    def signs(self, rows: int, cols: int) -> Any:
        """Random +-1 matrix (float32 on CPU, bf16 on GPU)."""
        import torch

        r = torch.randint(0, 2, (rows, cols), generator=self.g, device=self.device)
        return r.to(self.dtype) * 2 - 1

    def zeros(self, *shape: int) -> Any:
        import torch

        return torch.zeros(*shape, device=self.device, dtype=self.dtype)

    def ones(self, *shape: int) -> Any:
        import torch

        return torch.ones(*shape, device=self.device, dtype=self.dtype)

    def full(self, shape: tuple[int, ...], value: float) -> Any:
        import torch

        return torch.full(shape, value, device=self.device, dtype=self.dtype)

    def state(self) -> Any:
        return self.g.get_state()

    def restore(self, state: Any) -> None:
        self.g.set_state(state)
