"""Baselines the model must beat: a config-only network (no graph, no other configs) and random order."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ..constants import LAYOUT_SYMBOLS
from ..data.batch import Batch
from .rankers import Ranker


class ConfigOnlyRanker(Ranker):
    """An MLP on each config's own features: tile bounds, or the per-position histogram of layout values
    over the configurable nodes. It sees neither the graph nor the other configs."""

    def __init__(self, node_feat_dim: int, config_width: int, hidden: int = 64) -> None:
        super().__init__()
        del node_feat_dim  # the graph is what this baseline leaves out
        self.readout = nn.Sequential(nn.Linear(config_width, hidden), nn.GELU(), nn.Linear(hidden, hidden),
                                     nn.GELU(), nn.Linear(hidden, 1))

    def features(self, batch: Batch) -> torch.Tensor:
        config = batch.config_feat
        if config.dim() == 3:  # one vector per config (tile bounds)
            return config  # [G, C, 24]
        valid = (batch.config_node >= 0).float()[:, None, :, None, None]  # [G, 1, K, 1, 1]
        onehot = F.one_hot(config.long() + 1, LAYOUT_SYMBOLS).float() * valid  # [G, C, K, 18, 7]
        histogram = onehot.sum(2) / valid.sum(2).clamp_min(1)  # [G, C, 18, 7]
        return histogram.flatten(2)  # [G, C, 126]

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.readout(self.features(batch)).squeeze(-1)  # [G, C]


def random_scores(num_configs: int, rng: np.random.Generator) -> np.ndarray:
    """Scores of the random-order baseline."""
    return rng.random(num_configs)
