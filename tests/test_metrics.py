"""Metrics against scipy, brute-force references and hand-worked examples."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from solution.constants import COLLECTIONS
from solution.data.tasks import LAYOUT, TILE
from solution.metrics import (
    final_score,
    kendall_tau,
    layout_collection_score,
    mean_over_graphs,
    ordered_pair_accuracy,
    pair_counts,
    rank_order,
    ranking_tau,
    submitted_positions,
    tile_collection_score,
    tile_score,
    tile_topk_error,
)
from solution.submission.files import score, write_collection


def _sample(kind: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(pred, target) with ties in neither, pred, target or both; correlated so tau is not ~0."""
    base = rng.normal(size=n)
    pred, target = base + rng.normal(size=n), base + rng.normal(size=n)
    if kind in ("ties_pred", "ties_both"):
        pred = np.digitize(pred, [-1.0, 0.0, 1.0])  # integers 0..3
    if kind in ("ties_target", "ties_both"):
        target = np.digitize(target, [-1.0, 0.0, 1.0]).astype(np.float64)
    return pred, target


def _brute_counts(pred: np.ndarray, target: np.ndarray) -> tuple[int, int, int, int, int]:
    pairs = list(itertools.combinations(range(len(pred)), 2))
    dx = np.array([pred[i] - pred[j] for i, j in pairs])
    dy = np.array([target[i] - target[j] for i, j in pairs])
    return (len(pairs), int((dx == 0).sum()), int((dy == 0).sum()), int(((dx == 0) & (dy == 0)).sum()),
            int((dx * dy < 0).sum()))


def _brute_opa(pred: np.ndarray, target: np.ndarray) -> float:
    n = len(pred)
    ordered = hits = 0
    for i in range(n):
        for j in range(n):
            if target[i] > target[j]:
                ordered += 1
                hits += pred[i] > pred[j]
    return hits / ordered


KINDS = ("distinct", "ties_pred", "ties_target", "ties_both")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [2, 3, 5, 8, 17, 64, 100, 513, 2000])
def test_kendall_tau_matches_scipy(kind: str, n: int) -> None:
    rng = np.random.default_rng(n)
    for _ in range(3):
        pred, target = _sample(kind, n, rng)
        expected = stats.kendalltau(pred, target).statistic
        got = kendall_tau(pred, target)
        if np.isnan(expected):
            assert np.isnan(got)
        else:
            assert got == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("kind", ["distinct", "ties_both"])
def test_kendall_tau_100k_matches_scipy(kind: str) -> None:
    pred, target = _sample(kind, 100_000, np.random.default_rng(7))
    assert kendall_tau(pred, target) == pytest.approx(stats.kendalltau(pred, target).statistic, abs=1e-9)


def test_kendall_tau_extremes_and_nan() -> None:
    x = np.arange(10.0)
    assert kendall_tau(x, x * 3 + 1) == 1.0
    assert kendall_tau(x, -x) == -1.0
    assert np.isnan(kendall_tau(np.ones(10), x))  # constant pred
    assert np.isnan(kendall_tau(x, np.ones(10)))  # constant target
    assert np.isnan(kendall_tau(x[:1], x[:1]))
    assert np.isnan(kendall_tau(np.r_[x, np.nan], np.r_[x, 1.0]))
    with pytest.raises(ValueError, match="differ in length"):
        kendall_tau(x, x[:-1])


@pytest.mark.parametrize("n", [1, 2, 3, 7, 16, 33, 100])
def test_pair_counts_match_brute_force(n: int) -> None:
    rng = np.random.default_rng(n)
    pred, target = rng.integers(0, 4, n), rng.integers(0, 3, n)
    assert tuple(pair_counts(pred, target)) == _brute_counts(pred, target)
    perm = rng.permutation(n)  # distinct values: discordant pairs are the permutation's inversions
    assert tuple(pair_counts(np.arange(n), perm)) == _brute_counts(np.arange(n), perm)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [2, 5, 31, 200])
def test_opa_matches_brute_force(kind: str, n: int) -> None:
    rng = np.random.default_rng(n + 1)
    pred, target = _sample(kind, n, rng)
    if len(np.unique(target)) < 2:
        assert np.isnan(ordered_pair_accuracy(pred, target))
    else:
        assert ordered_pair_accuracy(pred, target) == pytest.approx(_brute_opa(pred, target), abs=1e-12)


def test_opa_conventions() -> None:
    rng = np.random.default_rng(3)
    pred, target = rng.normal(size=50), rng.normal(size=50)
    # without ties OPA is tau on a 0..1 scale
    assert ordered_pair_accuracy(pred, target) == pytest.approx((1 + kendall_tau(pred, target)) / 2)
    assert ordered_pair_accuracy(target, target) == 1.0
    assert ordered_pair_accuracy(-target, target) == 0.0
    assert ordered_pair_accuracy(np.zeros(50), target) == 0.0  # pred ties count as wrong
    assert np.isnan(ordered_pair_accuracy(pred, np.ones(50)))


def test_rank_order_is_ascending_and_stable() -> None:
    np.testing.assert_array_equal(rank_order(np.array([0.3, 0.1, 0.3, 0.1, 0.2])), [1, 3, 4, 0, 2])


# 7 configs; ascending pred visits configs 1, 4, 2, 6, 0, 5, 3 with targets 2, 5, 4, 1.5, 3, 6, 1
TILE_PRED = np.array([0.5, 0.1, 0.3, 0.9, 0.2, 0.7, 0.4])
TILE_TARGET = np.array([3.0, 2.0, 4.0, 1.0, 5.0, 6.0, 1.5])


@pytest.mark.parametrize(("k", "expected"), [(1, 1.0), (3, 1.0), (4, 0.5), (5, 0.5), (7, 0.0), (10, 0.0)])
def test_tile_topk_error_hand_worked(k: int, expected: float) -> None:
    assert tile_topk_error(TILE_PRED, TILE_TARGET, k) == pytest.approx(expected)


def test_tile_score_hand_worked() -> None:
    assert tile_score(TILE_PRED, TILE_TARGET) == pytest.approx(2 - 1.5 / 1.0)
    assert tile_score(TILE_TARGET, TILE_TARGET) == 1.0  # true best among the five
    assert tile_score(-TILE_TARGET, TILE_TARGET) == pytest.approx(2 - 2.0 / 1.0)  # five slowest: 6 5 4 3 2
    # tied preds keep index order: the first five configs, best of them 1.0 (config 3)
    assert tile_score(np.zeros(7), TILE_TARGET) == 1.0
    assert tile_topk_error(np.zeros(7), TILE_TARGET, 1) == pytest.approx(2.0)


def test_tile_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        tile_topk_error(TILE_PRED, TILE_TARGET, 0)
    with pytest.raises(ValueError):
        tile_score(TILE_PRED, TILE_TARGET - 2.0)


def test_collection_scores_are_means() -> None:
    reversed_kernel = (-TILE_TARGET, TILE_TARGET)
    tile = tile_collection_score([(TILE_PRED, TILE_TARGET), reversed_kernel])
    assert tile["score"] == pytest.approx((0.5 + 0.0) / 2)
    assert tile["top1_error"] == pytest.approx((1.0 + 5.0) / 2)
    assert tile["top5_error"] == pytest.approx((0.5 + 1.0) / 2)
    assert tile["top10_error"] == pytest.approx(0.0)
    x = np.arange(6.0)
    assert layout_collection_score([(x, x), (-x, x), (TILE_PRED, TILE_TARGET)]) == pytest.approx(
        (1 - 1 + stats.kendalltau(TILE_PRED, TILE_TARGET).statistic) / 3)
    with pytest.raises(ValueError):
        layout_collection_score([])


def test_ranking_tau_scores_the_submitted_ranking() -> None:
    target = np.array([3.0, 1.0, 2.0, 5.0, 4.0])
    scores = np.array([0.2, 0.1, 0.2, 0.9, 0.2])  # ties rank by config index, as in the CSV
    positions = submitted_positions(scores)
    assert positions.tolist() == [1, 0, 2, 4, 3]
    assert ranking_tau(scores, target) == pytest.approx(stats.kendalltau(positions, target).statistic)
    assert ranking_tau(TILE_PRED, TILE_TARGET) == pytest.approx(kendall_tau(TILE_PRED, TILE_TARGET))  # no ties
    constant = np.zeros(5)  # a degenerate model: the index order, a finite tau, as `solution score` gives it
    assert ranking_tau(constant, target) == pytest.approx(stats.kendalltau(np.arange(5), target).statistic)
    assert np.isnan(ranking_tau(scores, np.ones(5)))  # nothing to rank


def test_tile_validation_scores_its_kernels_top_five_and_their_whole_ranking() -> None:
    metrics = TILE.graph_metrics(TILE_PRED, TILE_TARGET)
    assert metrics["score"] == tile_score(TILE_PRED, TILE_TARGET)
    assert metrics["kendall_tau"] == pytest.approx(stats.kendalltau(TILE_PRED, TILE_TARGET).statistic)
    assert metrics["top1_error"] == tile_topk_error(TILE_PRED, TILE_TARGET, 1)


def test_one_nan_policy_means_over_defined_graphs() -> None:
    assert mean_over_graphs([0.5, float("nan"), 0.1]) == pytest.approx(0.3)
    assert np.isnan(mean_over_graphs([float("nan")]))
    x = np.arange(6.0)
    assert layout_collection_score([(x, x), (x, np.ones(6))]) == pytest.approx(1.0)


def test_final_score_is_plain_mean_of_all_five() -> None:
    scores = dict(zip(COLLECTIONS, [0.9, 0.7, 0.4, 0.95, 0.55]))
    assert final_score(scores) == pytest.approx(3.5 / 5)
    with pytest.raises(ValueError, match="layout:nlp:default"):
        final_score({c: s for c, s in scores.items() if c != "layout:nlp:default"})
    with pytest.raises(ValueError, match="layout:nlp:extra"):
        final_score({**scores, "layout:nlp:extra": 1.0})


def test_validation_and_scoring_agree_on_a_degenerate_model(tmp_path) -> None:
    rng = np.random.default_rng(0)
    targets = {"g0": rng.random(40), "g1": rng.random(30), "flat": np.ones(20)}  # flat: nothing to rank
    scores = {stem: np.zeros(len(t)) for stem, t in targets.items()}  # a constant model
    csv = write_collection(tmp_path / "layout.csv", "layout:xla:random", scores)
    scored = score(csv, {f"layout:xla:random:{stem}": t for stem, t in targets.items()})["layout:xla:random"]
    validated = mean_over_graphs(LAYOUT.graph_metrics(scores[s], targets[s])["score"] for s in targets)
    assert np.isfinite(validated) and scored["score"] == pytest.approx(validated)
