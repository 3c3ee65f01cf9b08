"""Node and tile-config feature transforms: padding sentinels, extra columns, log scaling, standardization."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..constants import (
    CONV_DIMENSION_NUMBERS,
    CONVOLUTION,
    DOT,
    LANES,
    LAYOUT_GROUP,
    LAYOUT_GROUPS,
    LAYOUT_MINOR_TO_MAJOR,
    NODE_FEAT_DIM,
    PAD,
    SHAPE_DIMS,
)


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


def block_dims(node_feat: np.ndarray, node_opcode: np.ndarray, edge_index: np.ndarray, config_ids: np.ndarray,
               config_feat: np.ndarray) -> np.ndarray:
    """[nc, 3, 6] the dims of the tensor that each layout block of a configurable node lays out: its output, its
    input (operand 0) and its kernel (operand 1 of a convolution); 0 where unknown. The files keep no operand order
    (edges are de-duplicated and sorted), so an operand block's tensor is the one producer whose rank is the
    block's (the number of its positions that some config sets); two of them, at a convolution or a dot, are
    told apart by `ordered_operands`; any other tie stays unknown. node_feat is raw [n, 140], edge_index [m, 2] as
    on disk ([consumer, producer]), config_feat the layout configs [c, nc, 18]."""
    dims = node_feat[:, SHAPE_DIMS].astype(np.float32)  # [n, 6]
    ranks = rank(node_feat)  # [n]
    out = np.zeros((len(config_ids), LAYOUT_GROUPS, LAYOUT_GROUP), np.float32)
    if not len(config_ids):
        return out
    out[:, 0] = dims[config_ids]
    block_rank = (config_feat.max(0) >= 0).reshape(len(config_ids), LAYOUT_GROUPS, LAYOUT_GROUP).sum(-1)  # [nc, 3]
    order = np.argsort(edge_index[:, 0], kind="stable")
    consumers, producers = edge_index[order, 0], edge_index[order, 1]
    starts, ends = np.searchsorted(consumers, config_ids), np.searchsorted(consumers, config_ids, side="right")
    for k, node in enumerate(config_ids):
        sources = np.unique(producers[starts[k]:ends[k]])
        candidates = [sources[ranks[sources] == r] for r in block_rank[k, 1:]]  # input, kernel
        if len(candidates[0]) == 2 and node_opcode[node] in (CONVOLUTION, DOT):
            candidates = ordered_operands(node_feat[node], node_opcode[node], dims, candidates[0])
        for b, found in enumerate(candidates, start=1):
            if block_rank[k, b] and len(found) == 1:
                out[k, b] = dims[found[0]]
    return out


def ordered_operands(node: np.ndarray, opcode: int, dims: np.ndarray, pair: np.ndarray) -> list[np.ndarray]:
    """[operand 0], [operand 1] of a convolution or dot (raw node_feat row `node`) among two producers of the same
    rank, by rules of their shapes that XLA fixes; both empty when the rules cannot tell. A convolution's input
    has the output's batch size and its kernel the output's feature size (its dimension numbers say where). A
    dot's output is its batch dims, then operand 0's free dims, then operand 1's: the producer alone in holding
    the output's last size is operand 1, else the one alone in holding its first size is operand 0. Two
    producers of the same dims need no rule."""
    if (dims[pair[0]] == dims[pair[1]]).all():
        return [pair[:1], pair[1:]]
    output = node[SHAPE_DIMS]
    if opcode == CONVOLUTION:
        input_batch, kernel_out, output_batch, output_feature = node[CONV_DIMENSION_NUMBERS].astype(int)

        def fits(a: int, b: int) -> bool:
            return dims[a, input_batch] == output[output_batch] and dims[b, kernel_out] == output[output_feature]
    else:
        last, first = output[rank(node[None])[0] - 1], output[0]

        def fits(a: int, b: int) -> bool:
            if (last in dims[a]) != (last in dims[b]):
                return last in dims[b]
            return first in dims[a] and first not in dims[b]
    orders = [(a, b) for a, b in (pair, pair[::-1]) if fits(a, b)]
    empty = np.zeros(0, np.int64)
    return [np.array([orders[0][0]]), np.array([orders[0][1]])] if len(orders) == 1 else [empty, empty]


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
