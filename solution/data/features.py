"""Node and tile-config feature transforms: padding sentinels, extra columns, log scaling, standardization."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..constants import LANES, PAD
from ..format import LAYOUT_MINOR_TO_MAJOR, NODE_FEAT_DIM, SHAPE_DIMS


def signed_log(x: np.ndarray) -> np.ndarray:
    """sign(x) * log1p(|x|): keeps 0 at 0 and brings sums and products of 1e6+ into a small range."""
    return np.sign(x) * np.log1p(np.abs(x))


def rank(node_feat: np.ndarray) -> np.ndarray:
    """Number of output dimensions of each node: the non-zero shape columns."""
    return (node_feat[:, SHAPE_DIMS] != 0).sum(axis=1)


def layout_with_sentinel(node_feat: np.ndarray) -> np.ndarray:
    """[n, 6] minor_to_major with PAD in the positions beyond each tensor's rank (the files hold 0 there)."""
    layout = node_feat[:, LAYOUT_MINOR_TO_MAJOR].copy()
    absent = np.arange(layout.shape[1])[None, :] >= rank(node_feat)[:, None]  # [n, 6]
    layout[absent] = PAD
    return layout


def node_features(node_feat: np.ndarray, sentinel: bool = True, extra: bool = True) -> np.ndarray:
    """Stateless transform of the 140 raw columns: optional -1 sentinel, optional dim mod/div 128, signed log.

    Output width is 140 (+ 12 with `extra`). Standardization fitted on train comes later (`Standardizer`).
    """
    out = node_feat.astype(np.float32, copy=True)
    if sentinel:
        out[:, LAYOUT_MINOR_TO_MAJOR] = layout_with_sentinel(node_feat)
    columns = [signed_log(out)]
    if extra:
        dims = node_feat[:, SHAPE_DIMS]
        columns += [signed_log(dims % LANES), signed_log(dims // LANES)]  # [n, 6] each
    return np.concatenate(columns, axis=1).astype(np.float32)


def node_feature_width(sentinel: bool = True, extra: bool = True) -> int:
    """Columns of `node_features`' output, read off the function itself (a new column needs no edit here)."""
    return node_features(np.zeros((0, NODE_FEAT_DIM), np.float32), sentinel, extra).shape[1]


def tile_config_features(config_feat: np.ndarray) -> np.ndarray:
    """Signed log of the 24 tile bounds (products reach 1e6+)."""
    return signed_log(config_feat).astype(np.float32)


class Standardizer(nn.Module):
    """(x - mean) / std per column, with statistics fitted on train and saved in the checkpoint."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(width))
        self.register_buffer("std", torch.ones(width))

    def fit(self, total: np.ndarray, total_sq: np.ndarray, count: int) -> None:
        """Set the statistics from column sums and sums of squares over `count` rows."""
        mean = total / max(count, 1)
        var = np.maximum(total_sq / max(count, 1) - mean**2, 0.0)
        self.mean.copy_(torch.as_tensor(mean, dtype=torch.float32))
        std = torch.as_tensor(np.sqrt(var), dtype=torch.float32)
        # constant columns pass through: a std at the level of float64 cancellation noise in E[x^2] - E[x]^2
        tiny = torch.as_tensor(np.maximum(1e-6, 1e-7 * np.abs(mean)), dtype=torch.float32)
        self.std.copy_(torch.where(std < tiny, torch.ones_like(std), std))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std
