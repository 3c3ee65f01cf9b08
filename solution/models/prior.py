"""An untrained layout ranking from memory physics: the elements each config's output layouts store in 8 x 128 tiles."""

from __future__ import annotations

import numpy as np
import torch

from ..constants import LAYOUT_GROUP
from ..data.packing import unpack
from ..data.preprocess import Graph
from .rankers import physical_layout_features

LOG_PADDING = 4  # physical_layout_features' column: log of the elements stored in 8 x 128 tiles over the real ones
CONFIG_CHUNK = 256  # configs a pass: bounded memory on graphs with hundreds of configurable nodes


def tiled_elements(configs: np.ndarray, dims: np.ndarray) -> np.ndarray:
    """[c] per config, the elements all configurable outputs store in 8 x 128 tiles (over their two most-minor dims
    larger than 1) under its output layouts, the memory traffic its layouts cause with each tensor weighted by its
    size: configs [c, nc, >= 6] (minor-to-major values -1..5, as node_config_feat), dims [nc, 6] the outputs' sizes
    (0 beyond the rank). An output whose layout is left to the compiler (all -1) counts its real elements; no
    constant of a runtime law enters."""
    sizes = torch.from_numpy(np.asarray(dims, dtype=np.float64))  # [nc, 6]
    elements = sizes.clamp(min=1).prod(-1)  # [nc]
    totals = []
    for start in range(0, len(configs), CONFIG_CHUNK):
        order = torch.from_numpy(np.asarray(configs[start:start + CONFIG_CHUNK, :, :LAYOUT_GROUP], dtype=np.int64))
        padding = physical_layout_features(order.transpose(0, 1), sizes)[..., LOG_PADDING].exp()  # [nc, b]
        totals.append((elements[:, None] * padding).sum(0))  # [b]
    return torch.cat(totals).numpy() if totals else np.zeros(0)


def graph_prior(graph: Graph) -> np.ndarray:
    """[c] `tiled_elements` of a preprocessed layout graph's configs, in its row order (lower = predicted faster)."""
    return tiled_elements(unpack(graph.configs), graph.config_dims)
