"""Data checks every suite shares: a copy's destination against its source."""
from __future__ import annotations

from bench import lazy

torch = lazy.module("torch")


def same_data(a, b) -> bool:
    """Equal contents of two tensors, compared on the GPU when either lives there."""
    device = a.device if a.device.type == "cuda" else b.device
    return torch.equal(a.to(device), b.to(device))
