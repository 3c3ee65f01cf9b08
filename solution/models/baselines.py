"""Baselines the model is measured against: a config-only network (no graph, no other configs), random order, and
the public top solutions' early fusion (benchmarks/speed.py, fusion.py and ablations.py compare it)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ..constants import NUM_OPCODES, PAD
from ..data.batch import Batch
from ..format import LAYOUT_SYMBOLS
from .layers import CrossConfigAttention, Readout, SAGEBlock, layout_symbols, mlp, pool, valid_configs
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
        onehot = F.one_hot(layout_symbols(config), LAYOUT_SYMBOLS).float() * valid  # [G, C, K, 18, 7]
        histogram = onehot.sum(2) / valid.sum(2).clamp_min(1)  # [G, C, 18, 7]
        return histogram.flatten(2)  # [G, C, 126]

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.readout(self.features(batch)).squeeze(-1)  # [G, C]


def random_scores(num_configs: int, rng: np.random.Generator) -> np.ndarray:
    """Scores of the random-order baseline."""
    return rng.random(num_configs)


class EarlyFusionRanker(Ranker):
    """The public top solutions' design, for comparison: each config's layouts are joined to its configurable
    nodes' input features (one-hot, zeros on the other nodes) before the first layer, and the whole
    [N, C, d] stack runs through every layer: nothing is computed once for all configs. Same pruned graph,
    blocks, cross-config attention and readout as LayoutRanker; `layers` counts every message-passing layer
    (LayoutRanker's graph_layers + config_layers)."""

    def __init__(
        self,
        node_feat_dim: int,
        config_width: int,
        hidden: int = 128,
        opcode_dim: int = 32,
        layers: int = 4,
        cross_attention: bool = True,
        readout_attention: bool = True,
        heads: int = 4,
        temperature: float = 0.5,
        edge_direction: str = "both",
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.opcode = nn.Embedding(NUM_OPCODES, opcode_dim)
        self.input = mlp(opcode_dim + node_feat_dim + config_width, hidden, dropout)
        self.blocks = nn.ModuleList(SAGEBlock(hidden, edge_direction, dropout) for _ in range(layers))
        self.cross = nn.ModuleList(CrossConfigAttention(hidden, temperature, dropout) for _ in range(layers)) \
            if cross_attention else None
        self.readout = Readout(2 * hidden, hidden, readout_attention, heads, dropout)

    def fused_input(self, batch: Batch) -> torch.Tensor:
        """[N, C, opcode_dim + F + config_width]: every node's features with its config's one-hot layouts."""
        configs = batch.config_feat.size(1)
        graph, slot = (batch.config_node != PAD).nonzero(as_tuple=True)  # [M] each
        nodes = batch.config_node[graph, slot]  # [M]
        values = layout_symbols(batch.config_feat[graph, :, slot])  # [M, C, 18] in 0..6
        node = torch.cat([self.opcode(batch.node_opcode), batch.node_feat], -1)  # [N, opcode_dim + F]
        config = node.new_zeros(node.size(0), configs, values.size(-1) * LAYOUT_SYMBOLS)  # [N, C, 126]
        config = config.index_copy(0, nodes, F.one_hot(values, LAYOUT_SYMBOLS).flatten(2).to(node.dtype))
        return torch.cat([node[:, None].expand(-1, configs, -1), config], -1)

    def forward(self, batch: Batch) -> torch.Tensor:
        mask = valid_configs(batch)  # [G, C]
        z = self.input(self.fused_input(batch))  # [N, C, d]
        node_mask = mask[batch.node_graph]  # [N, C]
        for i, block in enumerate(self.blocks):
            z = block(z, batch.edge_index)
            if self.cross is not None:
                z = self.cross[i](z, node_mask)
        return self.readout(pool(z, batch.node_graph, mask.size(0)), mask)  # [G, C]
