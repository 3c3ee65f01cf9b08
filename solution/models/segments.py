"""Graph segment training: a large layout graph cut into segments, so that training memory is one segment's.

After Cao et al., "Learning Large Graph Property Prediction via Graph Segment Training" (GST), combined with
pruning and config broadcasting. The readout pools the configurable nodes' config-aware states and every node's
encoding, by mean and max, and both decompose exactly over a partition of the nodes: a graph's pool is
assembled from per-segment sums, maxima and counts.
A training step computes one segment at a time:

Segment training wraps the layout ranker: `LayoutRanker` hands a segmented batch to its `SegmentTraining`,
which draws the step's segments from its own generator, seeded by (seed, epoch, graph), and keeps its
historical table in the ranker's state (saved in and restored from checkpoints), so a resumed run is the run
it continues.

- segments with gradients are checkpointed: their forward keeps no activations, and the backward recomputes
  them one segment at a time. With `sampled` = 0 every segment gets gradients: the whole graph's gradient
  (on the segmented graph) for one segment's memory, at the price of a second forward;
- with `sampled` = k > 0 (GST), k segments per graph get gradients and the others contribute without: a
  segment with a configurable node (or one within its halo) is computed afresh under no_grad, its states
  depend on the step's configs; a config-free segment pools its encoding alone, the same for every config,
  which comes from a historical table, computed when first needed and again once `refresh_every` epochs old,
  each table entry dropped from the pool with probability 1 - `keep_stale` (stale-embedding dropout);
- a head phase (the last epochs, set in the module) computes every segment afresh and trains the readout only;
- evaluation computes every segment afresh, one at a time, so inference memory is one segment's as well.

A `halo` of k hops gives each segment the nodes within k edges of it as context (not pooled); with k at least
the hops the model's messages span (graph_layers + 2 x config_layers: a link block goes out to the touched
nodes and back) the segments reproduce the whole-graph scores exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

from ..constants import PAD
from ..data.batch import Batch
from ..errors import SettingsError
from .layers import valid_configs


@dataclass
class Segment:
    """One segment of one graph of a batch, as index tensors into the batch."""

    graph: int  # the graph's row in the batch
    nodes: torch.Tensor  # [n] batch node ids: the segment and its halo, in node order
    owned: torch.Tensor  # [n] bool: pooled (False for halo nodes)
    edge_index: torch.Tensor  # [2, e] edges among `nodes`, re-indexed to 0..n-1
    slots: torch.Tensor  # [k] the graph's configurable-node slots whose node is in `nodes`
    config_node: torch.Tensor  # [k] those nodes, re-indexed

    @property
    def config_free(self) -> bool:
        return self.slots.numel() == 0

    def batch(self, batch: Batch, configs: int | None = None) -> Batch:
        """The segment as a one-graph batch (its first `configs` configs only, when given)."""
        g, keep = self.graph, slice(None, configs)
        return Batch(
            node_feat=batch.node_feat[self.nodes], node_opcode=batch.node_opcode[self.nodes],
            edge_index=self.edge_index, node_graph=torch.zeros_like(self.nodes),
            config_node=self.config_node[None],  # [1, k]
            config_feat=batch.config_feat[g:g + 1, keep][:, :, self.slots],  # [1, C, k, 18]
            config_mask=batch.config_mask[g:g + 1, keep],  # [1, C]
        )


def split(batch: Batch, halo: int = 0) -> list[Segment]:
    """The segments of a batch from its `node_segment` ids (consecutive within a graph), each grown by `halo`
    hops of context in both edge directions."""
    node_segment, edge_index = batch.node_segment, batch.edge_index
    segments = []
    for s in range(int(node_segment.max()) + 1):
        owned = node_segment == s  # [N]
        if not owned.any():
            continue
        member = owned.clone()
        for _ in range(halo):
            touched = member[edge_index[0]] | member[edge_index[1]]  # [E]
            member[edge_index[:, touched].flatten()] = True
        nodes = member.nonzero().flatten()  # [n]
        local = torch.full_like(node_segment, PAD)
        local[nodes] = torch.arange(nodes.numel(), device=nodes.device)
        edges = edge_index[:, member[edge_index[0]] & member[edge_index[1]]]  # [2, e]
        graph = int(batch.node_graph[nodes[0]])
        config_node = batch.config_node[graph]  # [K]
        slots = ((config_node != PAD) & member[config_node.clamp(min=0)]).nonzero().flatten()  # [k]
        segments.append(Segment(graph, nodes, owned[nodes], local[edges],
                                slots, local[config_node[slots]]))
    return segments


@dataclass
class Pool:
    """Sums, maxima and counts of one segment's pooled states: z of its configurable nodes (per config) and h of
    all its nodes (the encoder's). A config-free segment pools no z: sum 0, max -inf, count 0."""

    z_sum: torch.Tensor  # [C, d], or [1, d] for a config-free segment
    z_max: torch.Tensor
    h_sum: torch.Tensor  # [d]
    h_max: torch.Tensor
    count: int  # nodes pooled into h
    z_count: int  # configurable nodes pooled into z

    @classmethod
    def of(cls, model: torch.nn.Module, batch: Batch, segment: Segment, configs: int | None = None,
           grad: bool = False) -> Pool:
        """A segment's pool under `model`; with `grad`, checkpointed: its activations are recomputed in the
        backward pass instead of kept."""
        owned_configurable = segment.owned[segment.config_node]  # [k] in slot order, as the ranker's links

        def pooled() -> tuple[torch.Tensor, ...]:
            h, z, _ = model.embed(segment.batch(batch, configs))  # [n, d], [k, C, w]
            h, z = h[segment.owned], z[owned_configurable]
            if z.size(0) == 0:  # no configurable node of its own: nothing pooled into z
                empty = z.new_zeros(1, z.size(-1))  # [1, w]
                return empty, empty - float("inf"), h.sum(0), h.amax(0)
            return z.sum(0), z.amax(0), h.sum(0), h.amax(0)

        count, z_count = int(segment.owned.sum()), int(owned_configurable.sum())
        if grad and torch.is_grad_enabled():
            # re-entrant: one autograd node per segment (its forward runs without a graph); the anchor input makes
            # the outputs require gradients, which then reach the parameters when the backward recomputes
            anchor = torch.zeros((), requires_grad=True)
            return cls(*checkpoint(lambda _: pooled(), anchor, use_reentrant=True), count, z_count)
        with torch.no_grad():
            return cls(*pooled(), count, z_count)

    @staticmethod
    def features(pools: list[Pool], configs: int) -> torch.Tensor:
        """[C, 4d] mean and max of z, then of h, over the union of the segments: what the whole-graph readout
        pools, assembled from parts."""
        z_count = max(sum(p.z_count for p in pools), 1)
        count = sum(p.count for p in pools)
        parts = [sum(p.z_sum for p in pools) / z_count, reduce(torch.maximum, [p.z_max for p in pools]),
                 sum(p.h_sum for p in pools) / count, reduce(torch.maximum, [p.h_max for p in pools])]
        return torch.cat([x.expand(configs, -1) for x in parts], -1)  # [d] or [1, d] or [C, d] -> [C, d]


class SegmentTraining(torch.nn.Module):
    """Scores a batch of segmented layout graphs with a LayoutRanker, keeping the historical table of
    config-free segments between steps (in the module's state: checkpoints hold it)."""

    MODES = ("train", "head", "eval")

    def __init__(self, sampled: int = 0, keep_stale: float = 0.5, refresh_every: int = 1, halo: int = 0) -> None:
        if sampled < 0:
            raise SettingsError(f"segment_sampled={sampled}; expected a number of segments per graph, or 0 for all")
        if not 0.0 < keep_stale <= 1.0:
            raise SettingsError(f"segment_keep_stale={keep_stale}; expected a probability in (0, 1]")
        if refresh_every < 1 or halo < 0:
            raise SettingsError(f"segment_refresh_every={refresh_every}, segment_halo={halo}; expected >= 1 and >= 0")
        super().__init__()
        self.sampled, self.keep_stale, self.refresh_every, self.halo = sampled, keep_stale, refresh_every, halo
        self.table: dict[tuple[int, int], tuple[int, Pool]] = {}  # (graph id, segment) -> (epoch, pool)

    def get_extra_state(self) -> dict:
        """The historical table as plain tensors and numbers (checkpoints load it without pickled code)."""
        return {"keys": [list(key) for key in self.table],
                "entries": [(epoch, pool.z_sum, pool.z_max, pool.h_sum, pool.h_max, pool.count, pool.z_count)
                            for epoch, pool in self.table.values()]}

    def set_extra_state(self, state: dict) -> None:
        self.table = {tuple(key): (entry[0], Pool(*entry[1:])) for key, entry in zip(state["keys"], state["entries"])}

    def forward(self, model: torch.nn.Module, batch: Batch, mode: str, epoch: int = 0) -> torch.Tensor:
        """[G, C] scores; `mode` train (sampled segments with gradients, the table for the other config-free ones),
        head (every segment fresh without gradients: only the readout learns) or eval (every segment fresh)."""
        if mode not in self.MODES:
            raise ValueError(f"mode={mode!r}; expected one of {', '.join(self.MODES)}")
        mask = batch.config_mask
        graphs, configs = mask.shape
        segments = split(batch, self.halo)
        pools: list[list[Pool]] = [[] for _ in range(graphs)]
        for g in range(graphs):
            mine = [s for s in segments if s.graph == g]
            count = len(mine) if self.sampled == 0 else min(self.sampled, len(mine))
            graph_id = int(batch.graph_id[g])
            rng = np.random.default_rng((torch.initial_seed(), epoch, graph_id))  # the same draws on resuming
            chosen = set(rng.choice(len(mine), count, replace=False).tolist()) if mode == "train" else ()
            for i, segment in enumerate(mine):  # the table's key: (graph id, i)
                if i in chosen:
                    pools[g].append(Pool.of(model, batch, segment, grad=True))
                    if segment.config_free and self.sampled:
                        self._store((graph_id, i), epoch, pools[g][-1])
                elif mode == "train" and segment.config_free:
                    pool = self._historical(model, batch, segment, (graph_id, i), epoch)
                    if rng.random() < self.keep_stale:
                        pools[g].append(pool)
                else:
                    pools[g].append(Pool.of(model, batch, segment))
        features = torch.stack([Pool.features(p, configs) for p in pools])  # [G, C, 4d]
        return model.readout(features, valid_configs(batch))  # [G, C]

    def _historical(self, model: torch.nn.Module, batch: Batch, segment: Segment,
                    key: tuple[int, int], epoch: int) -> Pool:
        stored = self.table.get(key)
        if stored is None or epoch - stored[0] >= self.refresh_every:  # one config: the states are the same for all
            stored = self._store(key, epoch, Pool.of(model, batch, segment, configs=1))
        return stored[1]

    def _store(self, key: tuple[int, int], epoch: int, pool: Pool) -> tuple[int, Pool]:
        first = slice(None, 1)  # the rows are the same for every config: keep one
        self.table[key] = (epoch, Pool(pool.z_sum[first].detach(), pool.z_max[first].detach(),
                                       pool.h_sum.detach(), pool.h_max.detach(), pool.count, pool.z_count))
        return self.table[key]
