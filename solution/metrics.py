"""Competition metrics in numpy: Kendall tau and pair accuracy in O(c log c), tile top-k scores, the final mean.

Convention of the whole package: a model outputs one score per config, LOWER = predicted FASTER, and the
ranking it submits is the stable ascending argsort of the scores (`rank_order`). Targets are measured
runtimes, lower = faster, so a perfect model has scores ordered like its targets (tau = +1).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

import numpy as np

from .constants import COLLECTIONS

TILE_TOPK = (1, 5, 10)
TILE_SUBMITTED = 5  # configs submitted per tile kernel


class PairCounts(NamedTuple):
    """Pair statistics of two equally long arrays x (pred), y (target) over all n(n-1)/2 pairs."""

    total: int  # n(n-1)/2
    x_ties: int  # pairs with x_i == x_j
    y_ties: int  # pairs with y_i == y_j
    joint_ties: int  # pairs tied in both
    discordant: int  # pairs with (x_i - x_j)(y_i - y_j) < 0


def rank_order(scores: np.ndarray) -> np.ndarray:
    """Config indices fastest first: ascending score, ties broken by index (stable argsort)."""
    return np.argsort(np.asarray(scores).ravel(), kind="stable")


def _as_pair(pred: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pred, target = np.asarray(pred).ravel(), np.asarray(target).ravel()
    if pred.shape != target.shape:
        raise ValueError(f"pred and target differ in length: {pred.shape[0]} != {target.shape[0]}")
    return pred, target


def _dense_rank(values: np.ndarray) -> np.ndarray:
    """0-based dense ranks (equal values share a rank), int64."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    new = np.empty(len(values), dtype=bool)
    new[:1] = True
    new[1:] = ordered[1:] != ordered[:-1]
    ranks = np.empty(len(values), dtype=np.int64)
    ranks[order] = np.cumsum(new) - 1
    return ranks


def _tied_pairs(counts: np.ndarray) -> int:
    """Pairs inside groups of the given sizes: sum c(c-1)/2."""
    return int((counts * (counts - 1) // 2).sum())


def _count_inversions(values: np.ndarray) -> int:
    """#{i < j : values_i > values_j} for non-negative ints, by a bottom-up merge sort vectorised per level.

    At the level of width w every block of 2w holds two sorted halves; each right-half element counts the
    left-half elements of its block that exceed it with one global searchsorted (keys = block * span + value
    keep blocks apart), then the blocks are merged by one stable sort. log2(n) levels of O(n log n) time.
    """
    n = len(values)
    span = int(values.max()) + 1 if n else 1
    current = values.astype(np.int64)
    position = np.arange(n, dtype=np.int64)
    inversions = 0
    width = 1
    while width < n:
        block = position // (2 * width)  # [n]
        keys = block * span + current  # [n]
        right = (position // width) % 2 == 1  # [n]
        left_keys = keys[~right]  # sorted: blocks ascend, each left half is sorted
        right_keys, right_block = keys[right], block[right]
        block_end = np.searchsorted(left_keys, (right_block + 1) * span, side="left")
        not_greater = np.searchsorted(left_keys, right_keys, side="right")
        inversions += int((block_end - not_greater).sum())
        current = np.sort(keys, kind="stable") - block * span  # merged: each block of 2w now sorted
        width *= 2
    return inversions


def pair_counts(pred: np.ndarray, target: np.ndarray) -> PairCounts:
    """Tie and discordance counts of all pairs in O(n log n) (Knight's algorithm)."""
    pred, target = _as_pair(pred, target)
    n = len(pred)
    rank_x, rank_y = _dense_rank(pred), _dense_rank(target)
    joint = rank_x * (int(rank_y.max(initial=0)) + 1) + rank_y  # [n], orders by x then y
    order = np.argsort(joint, kind="stable")
    ordered = joint[order]
    bounds = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1], True])
    return PairCounts(
        total=n * (n - 1) // 2,
        x_ties=_tied_pairs(np.bincount(rank_x)),
        y_ties=_tied_pairs(np.bincount(rank_y)),
        joint_ties=_tied_pairs(np.diff(bounds)),
        # sorted by x then y, pairs tied in x have y ascending, so every y inversion is a strict discordance
        discordant=_count_inversions(rank_y[order]),
    )


def kendall_tau(pred: np.ndarray, target: np.ndarray) -> float:
    """Kendall tau-b, as scipy.stats.kendalltau, in O(n log n).

    tau_b = (P - Q) / sqrt((N - T_x)(N - T_y)), N = n(n-1)/2 pairs, P / Q concordant / discordant pairs,
    T_x / T_y pairs tied in pred / target; P - Q = N - T_x - T_y + T_xy - 2Q with T_xy pairs tied in both.
    nan when either input is constant, shorter than 2 or holds a nan (scipy's default nan policy).
    """
    pred, target = _as_pair(pred, target)
    if np.isnan(pred).any() or np.isnan(target).any():
        return float("nan")
    c = pair_counts(pred, target)
    if c.x_ties == c.total or c.y_ties == c.total:
        return float("nan")
    concordant_minus_discordant = c.total - c.x_ties - c.y_ties + c.joint_ties - 2 * c.discordant
    tau = concordant_minus_discordant / np.sqrt(float((c.total - c.x_ties) * (c.total - c.y_ties)))
    return float(min(1.0, max(-1.0, tau)))


def ordered_pair_accuracy(pred: np.ndarray, target: np.ndarray) -> float:
    """Ordered-pair accuracy as in the official TpuGraphs code, in O(n log n).

    OPA = #{(i, j) : target_i > target_j and pred_i > pred_j} / #{(i, j) : target_i > target_j}.
    Pairs tied in target are left out; a pair tied in pred counts as wrong (0, not 1/2), so a constant
    prediction scores 0. The numerator is N - Q - T_x - T_y + T_xy (notation of `kendall_tau`), the
    denominator N - T_y. nan when target is constant or either input holds a nan.
    """
    pred, target = _as_pair(pred, target)
    if np.isnan(pred).any() or np.isnan(target).any():
        return float("nan")
    c = pair_counts(pred, target)
    ordered_pairs = c.total - c.y_ties
    if ordered_pairs == 0:
        return float("nan")
    concordant = c.total - c.discordant - c.x_ties - c.y_ties + c.joint_ties
    return concordant / ordered_pairs


def tile_topk_error(pred: np.ndarray, target: np.ndarray, k: int) -> float:
    """Best target among the k configs of lowest pred, over the best target overall, minus 1.

    error_k = min(target[rank_order(pred)[:k]]) / min(target) - 1; 0 when the true best is in the top k.
    Targets must be positive (normalised runtimes).
    """
    pred, target = _as_pair(pred, target)
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if len(target) == 0 or target.min() <= 0:
        raise ValueError("tile targets must be a non-empty array of positive runtimes")
    return float(target[rank_order(pred)[:k]].min() / target.min() - 1.0)


def tile_score(pred: np.ndarray, target: np.ndarray) -> float:
    """The competition's tile score of one kernel: 2 - min(target over the 5 lowest preds) / min(target)."""
    return 1.0 - tile_topk_error(pred, target, TILE_SUBMITTED)


def submitted_positions(scores: np.ndarray) -> np.ndarray:
    """[c] each config's position in the ranking a submission of `scores` holds (rank_order: ties by index)."""
    order = rank_order(scores)
    positions = np.empty(len(order), dtype=np.float64)
    positions[order] = np.arange(len(order))
    return positions


def ranking_tau(scores: np.ndarray, target: np.ndarray) -> float:
    """Kendall tau of the ranking a submission of `scores` holds against the targets: what the competition
    scores, so tied scores rank by config index (a constant model gets the tau of index order). nan only when
    the targets are constant (or fewer than 2): such a graph has nothing to rank."""
    return kendall_tau(submitted_positions(scores), target)


def mean_over_graphs(values: Iterable[float]) -> float:
    """The package's one NaN policy, in validation and in scoring alike: a collection's score is the mean over
    the graphs whose metric is defined (a graph whose runtimes are all equal has no Kendall tau); nan when no
    graph has one, which checkpoint selection treats as the worst score."""
    values = np.asarray(list(values), dtype=np.float64)
    defined = values[~np.isnan(values)]
    return float(defined.mean()) if defined.size else float("nan")


def layout_collection_score(graphs: Iterable[tuple[np.ndarray, np.ndarray]]) -> float:
    """Mean ranking tau over a layout collection's (pred, target) graphs, by the NaN policy of mean_over_graphs."""
    taus = [ranking_tau(pred, target) for pred, target in graphs]
    if not taus:
        raise ValueError("a collection score needs at least one graph")
    return mean_over_graphs(taus)


def tile_collection_score(graphs: Iterable[tuple[np.ndarray, np.ndarray]]) -> dict[str, float]:
    """Means over a tile collection's (pred, target) kernels: `score` (tile_score) and `top{k}_error`."""
    rows = [(tile_score(pred, target), *(tile_topk_error(pred, target, k) for k in TILE_TOPK))
            for pred, target in graphs]
    if not rows:
        raise ValueError("a collection score needs at least one graph")
    means = np.mean(np.asarray(rows, dtype=np.float64), axis=0)
    return {"score": float(means[0]), **{f"top{k}_error": float(m) for k, m in zip(TILE_TOPK, means[1:])}}


def final_score(scores: Mapping[str, float]) -> float:
    """The leaderboard score: the plain mean of the five collection scores (tile weighs 1/5)."""
    missing = [c for c in COLLECTIONS if c not in scores]
    unknown = [c for c in scores if c not in COLLECTIONS]
    if missing or unknown:
        raise ValueError(f"final_score needs exactly the collections {list(COLLECTIONS)}; "
                         f"missing {missing}, unknown {unknown}")
    return float(np.mean([scores[c] for c in COLLECTIONS]))
