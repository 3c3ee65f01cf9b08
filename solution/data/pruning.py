"""Prune a layout graph to the part that matters for its configurable nodes, and re-index it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .features import output_node
from .reader import RawGraph

STRATEGIES = ("none", "k_hop", "output_path")


@dataclass
class Pruned:
    """Which nodes and edges survive pruning, with old -> new node ids."""

    keep: np.ndarray  # [n] bool over the original nodes
    new_id: np.ndarray  # [n] int64, -1 for dropped nodes
    edge_keep: np.ndarray  # [m] bool over the original edges

    @property
    def node_retention(self) -> float:
        return float(self.keep.mean()) if self.keep.size else 1.0

    @property
    def edge_retention(self) -> float:
        return float(self.edge_keep.mean()) if self.edge_keep.size else 1.0


def csr(sources: np.ndarray, targets: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Compressed adjacency: the neighbours of node i are indices[indptr[i]:indptr[i + 1]]."""
    order = np.argsort(sources, kind="stable")
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(sources, minlength=num_nodes), out=indptr[1:])
    return indptr, targets[order]


def reachable(indptr: np.ndarray, indices: np.ndarray, seeds: np.ndarray, max_hops: int | None = None) -> np.ndarray:
    """Nodes within `max_hops` steps of any seed (unbounded when None), found level by level."""
    seen = np.zeros(len(indptr) - 1, dtype=bool)
    seen[seeds] = True
    frontier = np.unique(seeds)
    hops = 0
    while frontier.size and (max_hops is None or hops < max_hops):
        starts, ends = indptr[frontier], indptr[frontier + 1]
        counts = ends - starts
        # positions of every neighbour of every frontier node, without a Python loop
        offsets = np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
        neighbours = indices[offsets]
        frontier = np.unique(neighbours[~seen[neighbours]])
        seen[frontier] = True
        hops += 1
    return seen


def keep_nodes(
    edge_index: np.ndarray, num_nodes: int, config_nodes: np.ndarray, root: int, strategy: str, hops: int = 1
) -> np.ndarray:
    """Boolean mask of the nodes a strategy keeps. `edge_index` rows are [consumer, producer] as on disk.

    - none: every node.
    - k_hop: configurable nodes and every node within `hops` edges of one, ignoring direction.
    - output_path: nodes on a path from the output node down to a configurable node (the output
      consumes ... consumes the configurable node), plus the configurable nodes and the output.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown pruning strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    if strategy == "none" or config_nodes.size == 0:
        return np.ones(num_nodes, dtype=bool)
    consumer, producer = edge_index[:, 0], edge_index[:, 1]
    if strategy == "k_hop":
        both = csr(np.concatenate([consumer, producer]), np.concatenate([producer, consumer]), num_nodes)
        return reachable(*both, config_nodes, max_hops=hops)
    below_root = reachable(*csr(consumer, producer, num_nodes), np.array([root]))
    above_configs = reachable(*csr(producer, consumer, num_nodes), config_nodes)
    keep = below_root & above_configs
    keep[config_nodes] = True
    keep[root] = True
    return keep


def prune(
    edge_index: np.ndarray, num_nodes: int, config_nodes: np.ndarray, root: int, strategy: str, hops: int = 1
) -> Pruned:
    """Apply a strategy and compute the re-indexing of nodes and the surviving edges."""
    keep = keep_nodes(edge_index, num_nodes, config_nodes, root, strategy, hops)
    new_id = np.full(num_nodes, -1, dtype=np.int64)
    new_id[keep] = np.arange(int(keep.sum()))
    edge_keep = keep[edge_index[:, 0]] & keep[edge_index[:, 1]] if edge_index.size else np.zeros(0, bool)
    return Pruned(keep, new_id, edge_keep)


def configurable_nodes(raw: RawGraph) -> np.ndarray:
    """[nc] a file's configurable node ids (none in a tile file)."""
    return raw.config_node_ids if raw.config_node_ids is not None else np.zeros(0, np.int64)


def prune_graph(raw: RawGraph, strategy: str, hops: int) -> Pruned:
    """A file's graph pruned around its configurable nodes by `strategy`; a task that does not prune keeps it
    whole."""
    n = len(raw.node_feat)
    if not raw.task.has_config_nodes:
        return prune(raw.edge_index, n, configurable_nodes(raw), n - 1, "none")
    return prune(raw.edge_index, n, configurable_nodes(raw), output_node(raw.node_feat), strategy, hops)
