"""What a layout chosen at a node reaches downstream: the nodes that inherit it, summarised before pruning drops them.

A compiler passes a node's output layout on to the element-wise chain that consumes it (each op of the chain is
stored in that layout and pays its padding), until the chain changes shape or meets an operand stored in another
layout (a copy). Pruning keeps one hop around each configurable node, so the model would not see how long that
chain is. The files lose which operand is which, so a node's region is approximated from shapes alone: the nodes
reached within `hops` consumer edges that keep the producer's output dims, not passing through a configurable node
(which sets its own layout).
"""

from __future__ import annotations

import numpy as np

from ..constants import SHAPE_DIMS, SHAPE_PRODUCT
from .pruning import csr, neighbours, reachable

REGION_FEATURES = 3


def same_shape_edges(node_feat: np.ndarray, edge_index: np.ndarray) -> np.ndarray:
    """[m] bool: the edges (rows [consumer, producer] as on disk) whose consumer has its producer's output dims."""
    dims = node_feat[:, SHAPE_DIMS]
    return (dims[edge_index[:, 0]] == dims[edge_index[:, 1]]).all(axis=1)


def layout_regions(node_feat: np.ndarray, edge_index: np.ndarray, config_nodes: np.ndarray, seeds: np.ndarray,
                   hops: int) -> np.ndarray:
    """[len(seeds), 3] per seed node, of its downstream region (see the module's docstring; the seed itself not
    counted): its nodes, their output elements, and the region nodes that also read a same-shape operand from
    outside it (where another layout may meet this one: a copy)."""
    n = len(node_feat)
    consumer, producer = edge_index[:, 0], edge_index[:, 1]
    same = same_shape_edges(node_feat, edge_index)
    configurable = np.zeros(n, dtype=bool)
    configurable[config_nodes] = True
    follows = same & ~configurable[consumer]  # [m] edges a layout passes along
    downstream = csr(producer[follows], consumer[follows], n)
    upstream = csr(consumer[same], producer[same], n)
    elements = node_feat[:, SHAPE_PRODUCT]
    out = np.zeros((len(seeds), REGION_FEATURES), dtype=np.float32)
    for row, seed in enumerate(seeds):
        member = reachable(*downstream, np.array([seed]), max_hops=hops)  # [n], the seed included
        region = np.flatnonzero(member)
        region = region[region != seed]
        owner, operand = neighbours(*upstream, region)  # same-shape operands of the region's nodes
        meets = np.unique(owner[~member[operand]]).size
        out[row] = (region.size, elements[region].sum(), meets)
    return out
