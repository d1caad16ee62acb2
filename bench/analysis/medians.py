"""np.nanmedian along one axis, bit for bit, at a fraction of its cost: numpy takes short slices
through masked arrays and long ones through a Python loop over the slices, and a fleet's judgment
takes thousands of medians (each family over each node's sizes, each point over the nodes).
"""
from __future__ import annotations

import numpy as np


def nanmedian(a: np.ndarray, axis: int) -> np.ndarray:
    """Each slice's median of its figures, NaN where it has none: the middle of the sorted
    figures, as numpy takes it (the two middle ones' sum halved; for one, itself)."""
    if not a.shape[axis]:
        return np.full(a.shape[:axis] + a.shape[axis + 1:], np.nan)
    ordered = np.sort(a, axis=axis)   # NaN last
    count = np.expand_dims(np.count_nonzero(~np.isnan(a), axis=axis), axis)
    low = np.take_along_axis(ordered, np.maximum((count - 1) // 2, 0), axis=axis)
    high = np.take_along_axis(ordered, count // 2, axis=axis)
    return np.squeeze((low + high) / 2, axis=axis)
