"""pruning: the vectorised strategies agree with brute-force graph searches, and re-indexing is consistent."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from solution.data.pruning import csr, keep_nodes, output_node, prune, reachable

SEEDS = range(12)


def random_dag(seed: int) -> tuple[np.ndarray, int, np.ndarray, int]:
    """(edge_index [m, 2] rows [consumer, producer], n, config nodes, root) of a random DAG in topological order."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(30, 301))
    m = int(rng.integers(0, 3 * n))
    consumer = rng.integers(1, n, size=m)
    producer = (rng.random(m) * consumer).astype(np.int64)  # producer < consumer
    if seed % 3 == 0:  # local edges make long chains, so hops and paths matter
        consumer = rng.integers(1, n, size=m)
        producer = np.maximum(consumer - rng.integers(1, 4, size=m), 0)
    if seed % 2:  # every node is consumed by a later one: the last node (the root) reaches all of them
        producer = np.concatenate([producer, np.arange(n - 1)])
        consumer = np.concatenate([consumer, rng.integers(np.arange(1, n), n)])
    edge_index = np.stack([consumer, producer], axis=1).astype(np.int64).reshape(-1, 2)
    nc = int(rng.integers(1, max(2, n // 10)))
    config = np.sort(rng.choice(n, size=nc, replace=False)).astype(np.int64)
    root = n - 1 if seed % 2 else int(rng.integers(n // 2, n))
    return edge_index, n, config, root


def bfs_k_hop(edge_index: np.ndarray, n: int, seeds, k: int) -> set[int]:
    neighbours = [set() for _ in range(n)]
    for u, v in edge_index.tolist():
        neighbours[u].add(v)
        neighbours[v].add(u)
    dist = {int(s): 0 for s in seeds}
    queue = deque(dist)
    while queue:
        node = queue.popleft()
        if dist[node] == k:
            continue
        for other in neighbours[node]:
            if other not in dist:
                dist[other] = dist[node] + 1
                queue.append(other)
    return set(dist)


def descendants(adjacency: list[list[int]], start: int) -> set[int]:
    seen, stack = {start}, [start]
    while stack:
        for other in adjacency[stack.pop()]:
            if other not in seen:
                seen.add(other)
                stack.append(other)
    return seen


def brute_output_path(edge_index: np.ndarray, n: int, config, root: int) -> set[int]:
    """v is kept when v is reachable from the root and some config node is reachable from v (consumer -> producer)."""
    produces = [[] for _ in range(n)]  # consumer -> its producers
    for u, v in edge_index.tolist():
        produces[u].append(v)
    config = set(int(c) for c in config)
    below_root = descendants(produces, root)
    keep = {v for v in below_root if descendants(produces, v) & config}
    return keep | config | {root}


def as_set(mask: np.ndarray) -> set[int]:
    return set(np.flatnonzero(mask).tolist())


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("hops", [0, 1, 2, 3])
def test_k_hop_matches_bfs(seed, hops):
    edge_index, n, config, root = random_dag(seed)
    mask = keep_nodes(edge_index, n, config, root, "k_hop", hops=hops)
    assert mask.shape == (n,) and mask.dtype == bool
    assert as_set(mask) == bfs_k_hop(edge_index, n, config, hops)


@pytest.mark.parametrize("seed", SEEDS)
def test_output_path_matches_brute_force(seed):
    edge_index, n, config, root = random_dag(seed)
    mask = keep_nodes(edge_index, n, config, root, "output_path")
    assert as_set(mask) == brute_output_path(edge_index, n, config, root)


def test_output_path_on_a_hand_made_graph():
    # 0 -> 1 -> 3 (root), 2 -> 3, 4 -> 3, 5 -> 4; config node 0 and 5; node 2 leads to no config node;
    # node 6 is consumed by nobody (not below the root)
    edges = np.array([[1, 0], [3, 1], [3, 2], [3, 4], [4, 5], [6, 0]])
    mask = keep_nodes(edges, 7, np.array([0, 5]), 3, "output_path")
    assert as_set(mask) == {0, 1, 3, 4, 5}


def test_k_hop_on_a_hand_made_chain():
    edges = np.array([[i + 1, i] for i in range(9)])  # chain 0 - 1 - ... - 9
    assert as_set(keep_nodes(edges, 10, np.array([4]), 9, "k_hop", hops=0)) == {4}
    assert as_set(keep_nodes(edges, 10, np.array([4]), 9, "k_hop", hops=2)) == {2, 3, 4, 5, 6}
    assert as_set(keep_nodes(edges, 10, np.array([0, 9]), 9, "k_hop", hops=1)) == {0, 1, 8, 9}


@pytest.mark.parametrize("seed", SEEDS[:4])
def test_none_keeps_everything(seed):
    edge_index, n, config, root = random_dag(seed)
    assert keep_nodes(edge_index, n, config, root, "none").all()
    pruned = prune(edge_index, n, config, root, "none")
    assert np.array_equal(pruned.new_id, np.arange(n)) and pruned.edge_keep.all()
    assert pruned.node_retention == 1.0 and pruned.edge_retention == 1.0


@pytest.mark.parametrize("strategy", ["k_hop", "output_path"])
def test_no_config_nodes_keeps_everything(strategy):
    edge_index, n, _, root = random_dag(1)
    assert keep_nodes(edge_index, n, np.zeros(0, np.int64), root, strategy).all()


def test_unknown_strategy():
    edge_index, n, config, root = random_dag(0)
    with pytest.raises(ValueError):
        keep_nodes(edge_index, n, config, root, "k-hop")


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("strategy,hops", [("none", 1), ("k_hop", 0), ("k_hop", 1), ("k_hop", 2),
                                           ("output_path", 1)])
def test_prune_reindexes_consistently(seed, strategy, hops):
    edge_index, n, config, root = random_dag(seed)
    pruned = prune(edge_index, n, config, root, strategy, hops)
    keep = pruned.keep
    assert np.array_equal(keep, keep_nodes(edge_index, n, config, root, strategy, hops))
    kept = np.flatnonzero(keep)
    # new ids: 0..K-1 in the original order for kept nodes, -1 for dropped ones
    assert np.array_equal(pruned.new_id[kept], np.arange(len(kept)))
    assert (pruned.new_id[~keep] == -1).all()
    # config nodes always survive
    assert keep[config].all() and (pruned.new_id[config] >= 0).all()
    # an edge survives exactly when both its endpoints do
    both = keep[edge_index[:, 0]] & keep[edge_index[:, 1]]
    assert pruned.edge_keep.shape == (len(edge_index),) and np.array_equal(pruned.edge_keep, both)
    new_edges = pruned.new_id[edge_index[pruned.edge_keep]]
    assert new_edges.size == 0 or (new_edges.min() >= 0 and new_edges.max() < len(kept))
    assert np.array_equal(kept[new_edges], edge_index[pruned.edge_keep])  # maps back to the original edges
    for value, expected in [(pruned.node_retention, keep.mean()),
                            (pruned.edge_retention, both.mean() if both.size else 1.0)]:
        assert 0.0 <= value <= 1.0 and value == pytest.approx(expected)


def test_prune_without_edges():
    pruned = prune(np.zeros((0, 2), np.int64), 5, np.array([1, 3]), 4, "k_hop", 2)
    assert as_set(pruned.keep) == {1, 3} and pruned.edge_keep.shape == (0,) and pruned.edge_retention == 1.0
    pruned = prune(np.zeros((0, 2), np.int64), 5, np.array([1, 3]), 4, "output_path")
    assert as_set(pruned.keep) == {1, 3, 4}


def test_reachable_unbounded_and_bounded():
    edges = np.array([[1, 0], [2, 1], [3, 2], [5, 4]])  # consumer -> producer
    indptr, indices = csr(edges[:, 0], edges[:, 1], 6)
    assert as_set(reachable(indptr, indices, np.array([3]))) == {0, 1, 2, 3}
    assert as_set(reachable(indptr, indices, np.array([3]), max_hops=1)) == {2, 3}
    assert as_set(reachable(indptr, indices, np.array([5, 1]))) == {0, 1, 4, 5}


@pytest.mark.parametrize("roots,expected", [([], 9), ([4], 4), ([2, 7], 7)])
def test_output_node(roots, expected):
    node_feat = np.zeros((10, 140), np.float32)
    node_feat[roots, 0] = 1
    assert output_node(node_feat) == expected

