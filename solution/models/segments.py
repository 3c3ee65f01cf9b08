"""Graph segment training: a large layout graph cut into segments, so that training memory is one segment's.

After Cao et al., "Learning Large Graph Property Prediction via Graph Segment Training" (GST), combined with
pruning and config broadcasting. The readout pools the configurable nodes' config-aware states and every node's
encoding, by mean and max, and both decompose exactly over a partition of the nodes: a graph's pool is
assembled from per-segment sums, maxima and counts. Every segment is computed in turn; when gradients are taken
each one is checkpointed (its forward keeps no activations and the backward recomputes it), which gives the
gradient of the segmented graph for one segment's memory at the price of a second forward. Evaluation computes
every segment once, without gradients.

GST itself trains a sample of the segments and takes the others from a table of stale embeddings; on this
model that lost 0.076 [0.043, 0.109] of validation score at equal epochs (docs/results.md), so the package
trains every segment.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

import torch
from torch.utils.checkpoint import checkpoint

from ..constants import PAD
from ..data.batch import Batch


@dataclass
class Segment:
    """One segment of one graph of a batch, as index tensors into the batch."""

    graph: int  # the graph's row in the batch
    nodes: torch.Tensor  # [n] batch node ids: the segment and its halo, in node order
    owned: torch.Tensor  # [n] bool: pooled (False for halo nodes)
    edge_index: torch.Tensor  # [2, e] edges among `nodes`, re-indexed to 0..n-1
    slots: torch.Tensor  # [k] the graph's configurable-node slots whose node is in `nodes`
    config_node: torch.Tensor  # [k] those nodes, re-indexed

    def batch(self, batch: Batch) -> Batch:
        """The segment as a one-graph batch."""
        g = self.graph
        return Batch(
            node_feat=batch.node_feat[self.nodes], node_opcode=batch.node_opcode[self.nodes],
            edge_index=self.edge_index, node_graph=torch.zeros_like(self.nodes),
            config_node=self.config_node[None],  # [1, k]
            config_dims=None if batch.config_dims is None else batch.config_dims[g:g + 1][:, self.slots],  # [1, k, 6]
            config_operands=None if batch.config_operands is None else batch.config_operands[g:g + 1][:, self.slots],
            config_feat=batch.config_feat[g:g + 1][:, :, self.slots],  # [1, C, k, 18]
            config_mask=batch.config_mask[g:g + 1],  # [1, C]
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
    all its nodes (the encoder's), and the log of its op costs' sum where the ranker has `runtime_sum`. A
    config-free segment pools no z: sum 0, max -inf, count 0, log cost -inf."""

    z_sum: torch.Tensor  # [C, d], or [1, d] for a config-free segment
    z_max: torch.Tensor
    h_sum: torch.Tensor  # [d]
    h_max: torch.Tensor
    count: int  # nodes pooled into h
    z_count: int  # configurable nodes pooled into z
    cost: torch.Tensor | None = None  # [C] log of the summed op costs (-inf for a config-free segment)

    @classmethod
    def of(cls, model: torch.nn.Module, batch: Batch, segment: Segment, grad: bool = False) -> Pool:
        """A segment's pool under `model`; with `grad`, checkpointed: its activations are recomputed in the
        backward pass instead of kept."""
        owned_configurable = segment.owned[segment.config_node]  # [k] in slot order, as the ranker's links

        def pooled() -> tuple[torch.Tensor, ...]:
            h, z, _ = model.embed(segment.batch(batch))  # [n, d], [k, C, w]
            h, z = h[segment.owned], z[owned_configurable]
            costs = () if model.cost is None else (model.op_costs(z).logsumexp(0),)  # [C], -inf without nodes
            if z.size(0) == 0:  # no configurable node of its own: nothing pooled into z
                empty = z.new_zeros(1, z.size(-1))  # [1, w]
                return empty, empty - float("inf"), h.sum(0), h.amax(0), *costs
            return z.sum(0), z.amax(0), h.sum(0), h.amax(0), *costs

        count, z_count = int(segment.owned.sum()), int(owned_configurable.sum())
        if grad and torch.is_grad_enabled():
            # re-entrant: one autograd node per segment (its forward runs without a graph); the anchor input makes
            # the outputs require gradients, which then reach the parameters when the backward recomputes
            anchor = torch.zeros((), requires_grad=True)
            parts = checkpoint(lambda _: pooled(), anchor, use_reentrant=True)
        else:
            with torch.no_grad():
                parts = pooled()
        return cls(*parts[:4], count, z_count, *parts[4:])  # the four pooled states, then any log cost

    @staticmethod
    def costs(pools: list[Pool]) -> torch.Tensor | None:
        """[C] the log of the graph's summed op costs, from its segments' (None without `runtime_sum`)."""
        if pools[0].cost is None:
            return None
        return torch.stack([p.cost for p in pools]).logsumexp(0)

    @staticmethod
    def features(pools: list[Pool], configs: int) -> torch.Tensor:
        """[C, 4d] mean and max of z, then of h, over the union of the segments: what the whole-graph readout
        pools, assembled from parts."""
        z_count = max(sum(p.z_count for p in pools), 1)
        count = sum(p.count for p in pools)
        parts = [sum(p.z_sum for p in pools) / z_count, reduce(torch.maximum, [p.z_max for p in pools]),
                 sum(p.h_sum for p in pools) / count, reduce(torch.maximum, [p.h_max for p in pools])]
        return torch.cat([x.expand(configs, -1) for x in parts], -1)  # [d] or [1, d] or [C, d] -> [C, d]


def segmented_scores(model: torch.nn.Module, batch: Batch, halo: int = 0) -> torch.Tensor:
    """[G, C] scores of a batch of segmented graphs under a LayoutRanker `model`, one segment at a time. A `halo` of
    k hops gives each segment the nodes within k edges of it as context (not pooled): with k at least the hops the
    model's messages span (graph_layers + 2 x config_layers: a link block goes out to the touched nodes and back),
    the scores and gradients are the whole graph's."""
    graphs, configs = batch.config_mask.shape
    pools: list[list[Pool]] = [[] for _ in range(graphs)]
    for segment in split(batch, halo):
        pools[segment.graph].append(Pool.of(model, batch, segment, grad=True))
    features = torch.stack([Pool.features(p, configs) for p in pools])  # [G, C, 4d]
    costs = [Pool.costs(p) for p in pools]  # G x [C] or G x None
    return model.read(features, batch, None if costs[0] is None else torch.stack(costs))  # [G, C]
