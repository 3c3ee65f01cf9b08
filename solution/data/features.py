"""Node and tile-config feature transforms: padding sentinels, extra columns, log scaling, standardization."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..constants import LANES, PAD, SUBLANES
from ..format import IS_ROOT, LAYOUT_MINOR_TO_MAJOR, NODE_FEAT_DIM, SHAPE_DIMS, TILE_OUTPUT_BOUNDS
from ..layouts import perm_index, row_major, shape_tables


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


def tile_config_features(config_feat: np.ndarray, node_feat: np.ndarray, physical: bool = False) -> np.ndarray:
    """Signed log of the 24 tile bounds (products reach 1e6+); with `physical`, + the tiles' `physical_tiles`."""
    columns = [signed_log(config_feat)]
    if physical:
        columns.append(physical_tiles(config_feat, node_feat))
    return np.concatenate(columns, axis=1).astype(np.float32)


PHYSICAL_TILE_FEATURES = 10


def physical_tiles(config_feat: np.ndarray, node_feat: np.ndarray) -> np.ndarray:
    """[c, 10] what each config's output tile means for the kernel's output (its root's shape and layout): log2 of
    the tiles the output splits into, of a tile's elements and of the ragged edges' extra work (tiles x tile over the
    output); log2 of the tile's minor and second-minor sizes, whether they fill the 128 lanes and 8 sublanes of a
    TPU tile, the log2 of its elements stored in 8 x 128 tiles over the real ones and of all the stored elements
    over the output's; and whether the config sets output bounds (all zeros where it does not). The minor dims are
    the output's two most-minor dims larger than 1, as in physical_layout_features."""
    root = node_feat[output_node(node_feat)]  # the root's raw feature row
    bounds = config_feat[:, TILE_OUTPUT_BOUNDS].astype(np.float64)  # [c, 6]
    dims = root[SHAPE_DIMS].astype(np.float64)  # [6]
    used = (dims > 0) & (bounds > 0)  # [c, 6]
    tile = np.where(used, np.minimum(bounds, np.maximum(dims, 1)), 1.0)  # [c, 6]
    count = np.where(used, np.ceil(np.maximum(dims, 1) / tile), 1.0)  # [c, 6] tiles along each dim
    log_tiles, log_tile = np.log2(count).sum(1), np.log2(tile).sum(1)  # [c] each
    log_ragged = np.log2(np.where(used, count * tile / np.maximum(dims, 1), 1.0)).sum(1)
    minor, second = minor_dims(root)
    lanes = tile[:, minor] if minor >= 0 else np.ones(len(tile))
    sublanes = tile[:, second] if second >= 0 else np.ones(len(tile))
    stored = np.ceil(lanes / LANES) * LANES * np.ceil(sublanes / SUBLANES) * SUBLANES
    padding = np.log2(stored / (lanes * sublanes))
    is_set = used.any(1)
    features = np.stack([log_tiles, log_tile, log_ragged, np.log2(lanes), np.log2(sublanes),
                         lanes % LANES == 0, sublanes % SUBLANES == 0, padding, padding + log_ragged, is_set], 1)
    return features * is_set[:, None]  # [c, 10]


def output_node(node_feat: np.ndarray) -> int:
    """The graph's root: the last node flagged is_root, else the last node (nodes are topological)."""
    roots = np.flatnonzero(node_feat[:, IS_ROOT] > 0)
    return int(roots[-1]) if roots.size else len(node_feat) - 1


def minor_dims(row: np.ndarray) -> tuple[int, int]:
    """The dims of a node's output that its layout puts most-minor and second-most-minor among those larger than 1
    (-1 where it has fewer such dims), as layouts.shape_tables reads them; an order that is no permutation of the
    dims counts as row-major."""
    dims = tuple(int(d) for d in row[SHAPE_DIMS] if d > 0)
    order = tuple(int(d) for d in row[LAYOUT_MINOR_TO_MAJOR][:len(dims)])  # the file's 0 padding dropped
    if sorted(order) != list(range(len(dims))):
        order = row_major(len(dims))
    tables, index = shape_tables(dims, 1), perm_index(order)
    return int(tables.minor[index]), int(tables.second[index])


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
