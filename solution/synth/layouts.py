"""Layout graphs: configurable nodes, searched configs (random or near the default), their features and noisy
runtimes from the layout law."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..constants import PAD
from ..format import LAYOUT_CONFIG_DIM, LAYOUT_GROUP
from ..layouts import PERMS, perm_index
from .graphs import (
    NLP_MODELS,
    XLA_MODELS,
    GraphBuilder,
    Node,
    convnet_graph,
    edge_index,
    node_features,
    transformer_graph,
)
from .law import CONFIG_NOISE, MEASURE_NOISE, LayoutCost, LayoutVar, default_layout
from .ops import Op

# ---------------------------------------------------------------- layout graphs and configs


@dataclass
class LayoutGraph:
    """A layout-collection graph with its configurable nodes and cost tables."""

    name: str
    nodes: list[Node]
    splits: list[int]
    config_ids: np.ndarray  # [nc]
    cost: LayoutCost
    hash_weights: np.ndarray = field(repr=False)  # [V] odd uint64, for the per-config noise

    @property
    def vars(self) -> list[LayoutVar]:
        return self.cost.vars

    def arrays(self) -> dict[str, np.ndarray]:
        """Every key of a layout file but the config block and runtimes."""
        return {
            "node_feat": node_features(self.nodes, self.cost.default_layouts()),
            "node_opcode": np.array([n.op for n in self.nodes], np.uint8),
            "edge_index": edge_index(self.nodes),
            "node_config_ids": self.config_ids.astype(np.int64),
            "node_splits": official_splits(self.splits, len(self.nodes)),
        }


def official_splits(starts: list[int], num_nodes: int) -> np.ndarray:
    """[1, k + 1] node_splits as the official encoder writes them: 0, the running node count at the end of each
    computation (= the next one's first node), and n last."""
    bounds = starts + ([num_nodes] if starts[-1] != num_nodes else [])
    return np.array(bounds, np.int64).reshape(1, -1)


def _runs(rng: np.random.Generator, total: int, count: int) -> np.ndarray:
    """`count` sorted indices below `total` in runs of 8+ consecutive ones (at most 8 runs): configurable blocks
    whose nodes feed each other, not isolated nodes."""
    runs = int(rng.integers(1, min(8, max(count // 8, 1)) + 1))
    lengths = np.diff(np.r_[0, np.sort(rng.choice(np.arange(1, count), min(runs, count) - 1, replace=False)), count])
    gaps = np.diff(np.r_[0, np.sort(rng.integers(0, total - count + 1, len(lengths)))])  # [runs] free space
    starts = np.cumsum(gaps) + np.r_[0, np.cumsum(lengths)[:-1]]
    return np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lengths)])


def layout_graph(builder: GraphBuilder, name: str, configurable: int) -> LayoutGraph:
    """Pick up to `configurable` conv/dot/reshape nodes as configurable and tabulate the cost law."""
    rng = builder.rng
    nodes = builder.nodes
    eligible = np.array([i for i, n in enumerate(nodes) if n.op in (Op.CONVOLUTION, Op.DOT, Op.RESHAPE)], np.int64)
    if len(eligible) > configurable:
        eligible = eligible[_runs(rng, len(eligible), configurable)]
    variables = []
    for column, u in enumerate(eligible.tolist()):
        node = nodes[u]
        tensors = (u, *node.inputs[:2 if node.op == Op.CONVOLUTION else 1])  # output, input[, kernel]
        for group, t in enumerate(tensors):
            rank = nodes[t].rank
            variables.append(LayoutVar(u, column, group, rank, perm_index(default_layout(node, group, rank))))
    return LayoutGraph(name, nodes, builder.splits, eligible, LayoutCost(nodes, variables),
                       hash_weights(rng, len(variables)))


def sample_choices(graph: LayoutGraph, rng: np.random.Generator, n: int, search: str) -> tuple[np.ndarray, np.ndarray]:
    """choices [n, V] (perm index per variable) and explicit [n, V] (False: written as all -1, the default).

    random: every variable uniform over its permutations. default: 1-3 nodes per config move away from the
    default (mostly keeping its minor dim, 10% anywhere), the rest stay -1. Then 1-3% of rows are copied over
    others (duplicate configs).
    """
    variables = graph.vars
    domain = np.array([math.factorial(v.rank) for v in variables])
    uniform = (rng.random((n, len(variables))) * domain).astype(np.int64)
    if search == "random":
        choices, explicit = uniform, np.ones((n, len(variables)), bool)
    else:
        nc = len(graph.config_ids)
        column = np.array([v.column for v in variables])
        group = np.array([v.group for v in variables])
        groups = np.bincount(column, minlength=nc)
        moved = np.clip(1 + rng.poisson(0.7, n), 1, nc)
        order = np.argsort(np.argsort(rng.random((n, nc)), axis=1), axis=1)
        chosen = order < moved[:, None]  # [n, nc]
        must = (rng.random((n, nc)) * groups).astype(np.int64)  # [n, nc] one group surely changed
        explicit = chosen[:, column] & ((must[:, column] == group) | (rng.random((n, len(variables))) < 0.35))
        near = np.stack([_near_default(v, u) for v, u in zip(variables, rng.random((len(variables), n)))], axis=1)
        moved_far = rng.random((n, len(variables))) < 0.1
        choices = np.where(explicit, np.where(moved_far, uniform, near), np.array([v.default for v in variables]))
    dup = rng.choice(n, int(round(n * rng.uniform(0.01, 0.03))), replace=False)
    src = rng.integers(0, n, len(dup))
    choices[dup], explicit[dup] = choices[src], explicit[src]
    return choices, explicit


def _near_default(var: LayoutVar, u: np.ndarray) -> np.ndarray:
    """Perm indices keeping the default's minor dim, one per uniform draw in u [n]."""
    perms = PERMS[var.rank]
    same = np.flatnonzero(perms[:, 0] == perms[var.default, 0]) if var.rank else np.zeros(1, np.int64)
    return same[(u * len(same)).astype(np.int64)]


def config_features(graph: LayoutGraph, choices: np.ndarray, explicit: np.ndarray) -> np.ndarray:
    """The node_config_feat block [n, nc, 18] of choices/explicit [n, V], -1 padded."""
    feat = np.full((len(choices), len(graph.config_ids), LAYOUT_CONFIG_DIM), PAD, np.float32)
    for v, var in enumerate(graph.vars):
        lo = var.group * LAYOUT_GROUP
        values = PERMS[var.rank][choices[:, v]]  # [n, r]
        feat[:, var.column, lo:lo + var.rank] = np.where(explicit[:, v, None], values, PAD)
    return feat


def hash_weights(rng: np.random.Generator, count: int) -> np.ndarray:
    """Odd uint64 multipliers [count] that hash a row of config ints."""
    return rng.integers(0, 2**62, size=count, dtype=np.int64).astype(np.uint64) * np.uint64(2) + np.uint64(1)


def _config_noise(rows: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """A deterministic value in [-sqrt(3), sqrt(3)) (unit variance) per distinct row of ints [n, V]."""
    h = ((rows.astype(np.uint64) + np.uint64(1)) * weights).sum(axis=1, dtype=np.uint64)
    for shift, mult in ((33, 0xFF51AFD7ED558CCD), (33, 0xC4CEB9FE1A85EC53)):
        h ^= h >> np.uint64(shift)
        h *= np.uint64(mult)
    h ^= h >> np.uint64(33)
    return ((h >> np.uint64(11)).astype(np.float64) / 2.0**53 - 0.5) * math.sqrt(12.0)


def noisy(clean: np.ndarray, rows: np.ndarray, weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """int64 runtimes: clean x (1 + 0.1% per-config noise) x (1 +- 0.05% measurement noise), at least 1."""
    value = clean * (1 + CONFIG_NOISE * _config_noise(rows, weights))
    value *= 1 + rng.uniform(-MEASURE_NOISE, MEASURE_NOISE, len(clean))
    return np.maximum(np.round(value), 1).astype(np.int64)


def build_layout_graph(rng: np.random.Generator, family: str, nodes: int, configurable: int) -> LayoutGraph:
    """A fresh xla (conv net) or nlp (transformer) graph of about `nodes` nodes."""
    models = XLA_MODELS if family == "xla" else NLP_MODELS
    kind = str(rng.choice(models))
    builder = (convnet_graph if family == "xla" else transformer_graph)(rng, nodes, kind)
    return layout_graph(builder, kind, configurable)
