"""Ranking losses: values on hand-worked cases, masking, ties, permutation invariance, gradients."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from solution.models.losses import (
    MSE,
    ListMLE,
    PairwiseHinge,
    PairwiseLogistic,
    RankingLoss,
    listmle,
    mse,
    pairwise_hinge,
    pairwise_logistic,
)
from solution.models.spec import build

LOSSES = {"hinge": PairwiseHinge, "logistic": PairwiseLogistic, "listmle": ListMLE, "mse": MSE}
FUNCTIONS = {"hinge": pairwise_hinge, "logistic": pairwise_logistic, "listmle": listmle, "mse": mse}
NAMES = sorted(LOSSES)
RANKING = ("hinge", "logistic", "listmle")


def _batch(seed: int = 0, ties: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """scores, target [4, 9] (targets of both signs, like standardised runtimes) and a mask that pads
    graph 0's last 3 configs, all but one of graph 2's and all of graph 3's."""
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(4, 9, generator=gen, dtype=torch.float64)
    target = torch.randint(-2, 2, (4, 9), generator=gen) if ties else torch.randn(4, 9, generator=gen)
    mask = torch.ones(4, 9, dtype=torch.bool)
    mask[0, 6:] = False
    mask[2, 1:] = False
    mask[3] = False
    return scores, target.double(), mask


def _value(name: str, scores: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return LOSSES[name]()(scores, target, mask)


@pytest.mark.parametrize("name", NAMES)
def test_loss_modules_compute_their_functions(name: str) -> None:
    s, t, m = _batch(8, ties=True)
    loss = LOSSES[name]()
    assert isinstance(loss, RankingLoss)
    assert loss(s, t, m).item() == FUNCTIONS[name](s, t, m).item()
    if name != "mse":
        tuned = LOSSES[name](tie_tol=0.3)
        assert tuned(s, t, m).item() == FUNCTIONS[name](s, t, m, tie_tol=0.3).item()


def test_hinge_margin_is_an_argument() -> None:
    s, t, m = _batch()
    assert PairwiseHinge(margin=2.0)(s, t, m).item() == pairwise_hinge(s, t, m, margin=2.0).item()
    assert PairwiseHinge(margin=2.0)(s, t, m) > PairwiseHinge()(s, t, m)
    with pytest.raises(TypeError, match="margin"):
        ListMLE(margin=1.0)


@pytest.mark.parametrize("name", NAMES)
def test_loss_spec_round_trips_through_build(name: str) -> None:
    options = {"hinge": {"margin": 0.5, "tie_tol": 0.01}, "logistic": {"tie_tol": 0.02},
               "listmle": {"tie_tol": 0.03}, "mse": {}}[name]
    loss = LOSSES[name](**options)
    assert loss.spec == {"class_path": f"solution.models.losses.{LOSSES[name].__name__}", "init_args": options}
    rebuilt = build(loss.spec)
    assert type(rebuilt) is LOSSES[name] and rebuilt.spec == loss.spec
    assert build(loss) is loss  # a module passes through
    s, t, m = _batch(9, ties=True)
    assert rebuilt(s, t, m).item() == loss(s, t, m).item()


def test_hinge_and_logistic_hand_worked() -> None:
    target, mask = torch.tensor([[1.0, 2.0]]), torch.ones(1, 2, dtype=torch.bool)
    assert pairwise_hinge(torch.tensor([[0.0, 0.5]]), target, mask).item() == pytest.approx(0.5)
    assert pairwise_hinge(torch.tensor([[0.5, 0.0]]), target, mask).item() == pytest.approx(1.5)
    assert pairwise_hinge(torch.tensor([[0.0, 0.5]]), target, mask, margin=0.25).item() == 0.0
    assert pairwise_logistic(torch.tensor([[0.0, 0.5]]), target, mask).item() == pytest.approx(
        math.log1p(math.exp(-0.5)))


def test_hinge_is_zero_exactly_when_ordered_with_margin() -> None:
    target = torch.tensor([[3.0, 1.0, 4.0, 1.5, 9.0, 2.6]])
    mask = torch.ones_like(target, dtype=torch.bool)
    rank = target.argsort(1).argsort(1).double()  # 0 = fastest
    assert pairwise_hinge(rank, target, mask).item() == 0.0
    assert pairwise_hinge(2.0 * rank, target, mask, margin=2.0).item() == 0.0
    assert pairwise_hinge(0.5 * rank, target, mask).item() > 0  # right order, gaps below the margin
    swapped = rank.clone()
    swapped[0, [0, 1]] = swapped[0, [1, 0]]  # one misordered pair
    assert pairwise_hinge(10.0 * swapped, target, mask).item() > 0


@pytest.mark.parametrize("name", RANKING)
def test_correct_order_beats_reversed(name: str) -> None:
    _, target, mask = _batch(1)
    rank = target.argsort(1).argsort(1).double()  # [4, 9]
    good, bad = _value(name, 3.0 * rank, target, mask), _value(name, -3.0 * rank, target, mask)
    assert 0 <= good.item() < bad.item()


def test_listmle_matches_brute_force_plackett_luce() -> None:
    gen = torch.Generator().manual_seed(2)
    scores = torch.randn(1, 5, generator=gen, dtype=torch.float64)
    target = torch.tensor([[0.3, 0.1, 0.9, 0.5, 0.2]], dtype=torch.float64)
    utility = (-scores[0]).tolist()
    order = target[0].argsort().tolist()  # fastest first
    expected = sum(math.log(sum(math.exp(utility[m]) for m in order[k:])) - utility[order[k]]
                   for k in range(5))
    assert listmle(scores, target, torch.ones(1, 5, dtype=torch.bool)).item() == pytest.approx(expected)


def test_listmle_is_a_likelihood_over_orders() -> None:
    scores = torch.tensor([[0.4, -1.0, 2.0, 0.1]], dtype=torch.float64)
    mask = torch.ones(1, 4, dtype=torch.bool)
    total = sum(math.exp(-listmle(scores, torch.tensor([perm], dtype=torch.float64), mask).item())
                for perm in itertools.permutations(range(4)))
    assert total == pytest.approx(1.0)


def test_listmle_ties_share_denominators() -> None:
    scores = torch.tensor([[0.2, -0.7, 1.1]], dtype=torch.float64)
    target = torch.tensor([[1.0, 1.0, 2.0]], dtype=torch.float64)
    u = (-scores[0]).tolist()
    everything = math.log(sum(math.exp(v) for v in u))
    expected = (everything - u[0]) + (everything - u[1]) + 0.0
    assert listmle(scores, target, torch.ones(1, 3, dtype=torch.bool)).item() == pytest.approx(expected)


def test_mse_against_standardised_targets() -> None:
    target = torch.tensor([[1.0, 2.0, 3.0, 6.0]], dtype=torch.float64)
    mask = torch.ones(1, 4, dtype=torch.bool)
    z = (target - target.mean()) / target.std(unbiased=False)
    assert mse(z, target, mask).item() == pytest.approx(0.0, abs=1e-12)
    assert mse(z + 0.5, target, mask).item() == pytest.approx(0.25)
    assert mse(3.0 * z + 7.0, 3.0 * target + 7.0, mask).item() > 0  # scores, not targets, must move


@pytest.mark.parametrize("name", NAMES)
def test_masked_configs_have_no_effect(name: str) -> None:
    scores, target, mask = _batch(3, ties=True)
    scores.requires_grad_(True)
    loss = _value(name, scores, target, mask)
    loss.backward()
    assert torch.isfinite(scores.grad).all()
    assert (scores.grad[~mask] == 0).all()
    garbage = scores.detach().clone()
    garbage[0, 6:] = torch.tensor([float("nan"), float("inf"), -1e30])
    garbage[2, 1:] = 1e6 * torch.randn(8, dtype=torch.float64)
    garbage[3] = float("nan")
    garbage.requires_grad_(True)
    noisy_target = target.clone()
    noisy_target[~mask] = torch.tensor(float("nan"))
    again = _value(name, garbage, noisy_target, mask)
    again.backward()
    assert again.item() == pytest.approx(loss.item(), rel=1e-12)
    torch.testing.assert_close(garbage.grad, scores.grad)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_padding_equals_dropping_the_configs(name: str, ties: bool) -> None:
    scores, target, mask = _batch(7, ties=ties)
    padded = _value(name, scores[:1], target[:1], mask[:1])
    dropped = _value(name, scores[:1, :6], target[:1, :6], torch.ones(1, 6, dtype=torch.bool))
    assert padded.item() == pytest.approx(dropped.item())


@pytest.mark.parametrize("name", NAMES)
def test_graphs_weigh_equally_and_short_graphs_drop_out(name: str) -> None:
    scores, target, mask = _batch(4)
    per_graph = [_value(name, scores[g:g + 1], target[g:g + 1], mask[g:g + 1]) for g in range(2)]
    assert _value(name, scores, target, mask).item() == pytest.approx((per_graph[0] + per_graph[1]).item() / 2)


@pytest.mark.parametrize("name", NAMES)
def test_nothing_to_rank_gives_zero_with_grad(name: str) -> None:
    scores = torch.randn(2, 4, requires_grad=True)
    target = torch.rand(2, 4)
    mask = torch.zeros(2, 4, dtype=torch.bool)
    mask[:, 0] = True  # one valid config per graph
    loss = _value(name, scores, target, mask)
    assert loss.item() == 0.0 and loss.requires_grad
    loss.backward()
    assert (scores.grad == 0).all()


@pytest.mark.parametrize("name", RANKING)
def test_tied_pairs_are_excluded(name: str) -> None:
    mask = torch.ones(1, 3, dtype=torch.bool)
    target = torch.tensor([[1.0, 1.0, 2.0]])
    scores = torch.tensor([[0.0, 0.3, 0.1]])
    swapped = torch.tensor([[0.3, 0.0, 0.1]])  # swaps the tied pair only
    assert _value(name, scores, target, mask).item() == pytest.approx(_value(name, swapped, target, mask).item())
    only_ties = _value(name, scores.requires_grad_(True), torch.ones(1, 3), mask)
    assert only_ties.item() == 0.0
    near = torch.tensor([[1.0, 1.005, 2.0]])
    loss = LOSSES[name](tie_tol=0.01)
    assert loss(scores, near, mask).item() == pytest.approx(loss(scores, target, mask).item())
    assert _value(name, scores, near, mask).item() != pytest.approx(_value(name, scores, target, mask).item())


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_permutation_invariance(name: str, ties: bool) -> None:
    scores, target, mask = _batch(5, ties=ties)
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(5))
    loss = _value(name, scores, target, mask)
    assert _value(name, scores[:, perm], target[:, perm], mask[:, perm]).item() == pytest.approx(loss.item())


@pytest.mark.parametrize("name", NAMES)
def test_gradients_finite_for_large_scores(name: str) -> None:
    scores, target, mask = _batch(6)
    scores = (1e4 * scores).float().requires_grad_(True)
    loss = _value(name, scores, target.float(), mask)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(scores.grad).all()
    assert scores.grad[mask].abs().sum() > 0
