"""Layout config packing (18 values in -1..5 -> one int64 per node) and duplicate-config removal."""

from __future__ import annotations

import numpy as np

from ..format import LAYOUT_CONFIG_DIM, LAYOUT_SYMBOLS

DEDUP_MODES = ("none", "first", "min", "mean")
_POWERS = LAYOUT_SYMBOLS ** np.arange(LAYOUT_CONFIG_DIM, dtype=np.int64)  # 7**17 < 2**63


def pack(config_feat: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """[c, nc, 18] values in -1..5 -> [c, nc] int64, base 7; 9x smaller than float32. Works in chunks of configs."""
    packed = np.empty(config_feat.shape[:2], dtype=np.int64)
    for start in range(0, len(config_feat), chunk):
        block = config_feat[start:start + chunk].astype(np.int64) + 1  # [b, nc, 18] in 0..6
        packed[start:start + chunk] = block @ _POWERS
    return packed


def unpack(packed: np.ndarray) -> np.ndarray:
    """[..., nc] int64 -> [..., nc, 18] float32 values in -1..5; inverse of `pack`. Digit by digit over the whole
    array (4x faster than dividing a broadcast [..., nc, 18] by the powers)."""
    values = np.empty((*packed.shape, LAYOUT_CONFIG_DIM), np.float32)
    rest = packed.copy()
    for digit in range(LAYOUT_CONFIG_DIM):
        values[..., digit] = rest % LAYOUT_SYMBOLS
        rest //= LAYOUT_SYMBOLS
    values -= 1
    return values


def dedup(keys: np.ndarray, runtime: np.ndarray, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """Collapse identical config rows. Returns (kept row indices, their runtimes).

    `keys` is [c, ...] (packed layout configs or tile config features). Modes: first (runtime of the first
    copy), min, mean (over the copies); none keeps every row.
    """
    if mode not in DEDUP_MODES:
        raise ValueError(f"unknown dedup mode {mode!r}; expected one of {', '.join(DEDUP_MODES)}")
    if mode == "none":
        return np.arange(len(keys)), runtime
    rows = np.ascontiguousarray(keys.reshape(len(keys), -1))  # [c, width]
    _, first, group = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    group = group.reshape(-1)
    if mode == "first":
        merged = runtime[first]
    elif mode == "min":
        merged = np.full(len(first), np.inf)
        np.minimum.at(merged, group, runtime)
    else:
        merged = np.bincount(group, weights=runtime) / np.bincount(group)
    order = np.argsort(first)  # keep the original order of first occurrences
    return first[order], merged[order]
