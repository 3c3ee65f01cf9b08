"""Cut a graph into segments of consecutive nodes along its computations, for segment training."""

from __future__ import annotations

import numpy as np

from .reader import computation_bounds


def partition(num_nodes: int, node_splits: np.ndarray, budget: int) -> np.ndarray:
    """[n] segment of each node: the graph's computations (`node_splits`: their bounds in the official form,
    0, ..., n; the trailing n may be missing) cut into balanced runs of at most `budget` consecutive nodes, then
    consecutive runs merged while they fit the budget. Node order is topological in the files, so a run of
    consecutive nodes is mostly connected."""
    if budget < 1:
        raise ValueError(f"segment budget {budget}; expected a positive number of nodes")
    bounds = computation_bounds(node_splits, num_nodes)
    runs = []  # (first node, size) of each balanced run
    for low, high in zip(bounds[:-1], bounds[1:]):
        pieces = -(-(high - low) // budget)
        cuts = low + (high - low) * np.arange(pieces + 1) // pieces
        runs += [(a, b - a) for a, b in zip(cuts[:-1], cuts[1:])]
    firsts, filled = [0], 0
    for first, size in runs:
        if filled + size > budget and filled:
            firsts.append(first)
            filled = 0
        filled += size
    return np.searchsorted(np.array(firsts), np.arange(num_nodes), side="right") - 1
