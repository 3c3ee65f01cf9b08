"""The typed batch every ranker reads, and the one collate function that builds it from preprocessed graphs."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..constants import PAD
from .partition import partition
from .preprocess import Graph
from .tasks import Task


@dataclass
class Batch:
    """G graphs with their nodes concatenated and C configs each, padded with -1 (0 is a valid feature value)."""

    node_feat: Tensor  # [N, F] float
    node_opcode: Tensor  # [N] int64
    edge_index: Tensor  # [2, E] producer -> consumer, batch node ids
    node_graph: Tensor  # [N] the graph of each node, 0..G-1
    config_feat: Tensor  # [G, C, K, 18] layout values per configurable node, or [G, C, 24] tile bounds
    config_mask: Tensor  # [G, C] bool, False for padded configs
    config_node: Tensor | None = None  # [G, K] batch node id of each configurable node (layout), -1 padded
    config_dims: Tensor | None = None  # [G, K, 6] each configurable node's output dims (raw sizes), 0 padded
    node_segment: Tensor | None = None  # [N] segment of each node, when a graph is over the segment budget
    target: Tensor | None = None  # [G, C] runtimes (tile: over the normalizer; 0 for test files), -1 padded
    config_index: Tensor | None = None  # [G, C] each config's row in its file, -1 padded
    config_work: Tensor | None = None  # [G, C, K] what each config makes the program do (data.config_work), -1 padded
    config_operands: Tensor | None = None  # [G, K, 30] operands' dims and key dims (data.operand_layouts), 0 padded
    graph_id: Tensor | None = None  # [G] each graph's index in its split

    @property
    def num_graphs(self) -> int:
        return self.config_mask.size(0)

    def replace(self, **changes: Tensor | None) -> Batch:
        return dataclasses.replace(self, **changes)


@dataclass
class Item:
    """One graph with the rows of the configs chosen for it (a training sample or an evaluation chunk)."""

    graph_id: int
    rows: np.ndarray  # [C] rows of graph.configs


def pad(arrays: list[np.ndarray], value: float) -> np.ndarray:
    """Stack arrays of uneven leading sizes into [B, max, ...], filling with `value`."""
    size = [len(arrays)] + [max(a.shape[d] for a in arrays) for d in range(arrays[0].ndim)]
    out = np.full(size, value, dtype=arrays[0].dtype)
    for i, a in enumerate(arrays):
        out[(i,) + tuple(slice(0, s) for s in a.shape)] = a
    return out


class Collate:
    """Batches (graph, item) samples: nodes concatenated, configs padded with -1; with a
    `segment_nodes` budget, a batch holding a graph over it also carries each node's segment (segment training)."""

    def __init__(self, task: Task, fill_default_layout: bool = True, segment_nodes: int = 0) -> None:
        self.task, self.fill_default, self.segment_nodes = task, fill_default_layout, segment_nodes

    def __call__(self, samples: list[tuple[Graph, Item]]) -> Batch:
        graphs, items = zip(*samples)
        rows = [item.rows for item in items]
        sizes = np.array([len(g.node_opcode) for g in graphs])
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        configs = [self.task.batch_configs(np.asarray(g.configs[r]), g.default_layout, self.fill_default)
                   for g, r in zip(graphs, rows)]
        batch = {
            "node_feat": np.concatenate([g.node_feat for g in graphs]),  # [N, F]
            "node_opcode": np.concatenate([g.node_opcode for g in graphs]).astype(np.int64),  # [N]
            "edge_index": np.concatenate([g.edge_index + o for g, o in zip(graphs, offsets)], axis=1),  # [2, E]
            "node_graph": np.repeat(np.arange(len(graphs)), sizes),  # [N]
            "config_feat": pad(configs, PAD),  # [G, C, ...]
            "config_mask": pad([np.ones(len(r), bool) for r in rows], False),  # [G, C]
            "config_node": pad([g.config_node + o for g, o in zip(graphs, offsets)], PAD),  # [G, K]
            "config_dims": pad([g.config_dims for g in graphs], 0),  # [G, K, 6]
            "target": pad([np.asarray(g.target)[r].astype(np.float32) for g, r in zip(graphs, rows)], PAD),  # [G, C]
            "config_index": pad([np.asarray(g.config_index)[r] for g, r in zip(graphs, rows)], PAD),  # [G, C]
            "graph_id": np.array([item.graph_id for item in items], dtype=np.int64),  # [G]
            "config_work": pad([np.asarray(g.config_work)[r] for g, r in zip(graphs, rows)], PAD),  # [G, C, K]
            "config_operands": pad([np.asarray(g.config_operands) for g in graphs], 0),  # [G, K, 30 or 0]
        }
        if self.segment_nodes and sizes.max() > self.segment_nodes:  # graphs within the budget train whole
            batch["node_segment"] = self._segments(graphs)  # [N]
        return Batch(**{key: torch.from_numpy(np.ascontiguousarray(value)) for key, value in batch.items()})

    def _segments(self, graphs: tuple[Graph, ...]) -> np.ndarray:
        """[N] segment of each node, numbered across the batch (consecutive within a graph)."""
        parts, first = [], 0
        for graph in graphs:
            parts.append(partition(len(graph.node_opcode), np.asarray(graph.node_split), self.segment_nodes) + first)
            first = int(parts[-1].max()) + 1
        return np.concatenate(parts)
