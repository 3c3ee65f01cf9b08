"""Differentiable ranking losses over padded batches of configs: pairwise hinge and logistic, ListMLE, MSE.

Every loss takes scores [G, C] (model output, lower = predicted faster), target [G, C] (runtimes, lower =
faster) and mask [G, C] (False = padded config), and returns a scalar: the loss of each graph (mean over its
valid pairs, or its list likelihood) averaged over the graphs that have something to rank. Padded configs
never reach the value or the gradient, whatever their scores or targets hold (nan and inf included).
Graphs with fewer than 2 valid configs (or only tied ones) contribute nothing; a batch with nothing to rank
gives a zero that still has a grad_fn.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.nn import functional as F

from .spec import Remembered


def _clean(scores: Tensor, target: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Scores and targets with padded entries zeroed (so no nan/inf can leak into a gradient), bool mask."""
    mask = mask.bool()
    return scores.masked_fill(~mask, 0.0), target.masked_fill(~mask, 0.0), mask


def _faster_pairs(target: Tensor, mask: Tensor, tie_tol: float) -> Tensor:
    """faster[g, i, j]: configs i and j both valid and i clearly faster, target_j - target_i > tol * max|t|."""
    t_i, t_j = target[:, :, None], target[:, None, :]  # [G, C, 1], [G, 1, C]
    gap = t_j - t_i  # [G, C, C]
    faster = gap > tie_tol * torch.maximum(t_i.abs(), t_j.abs())  # [G, C, C]
    return faster & mask[:, :, None] & mask[:, None, :]


def _mean_over_graphs(total: Tensor, count: Tensor, scores: Tensor) -> Tensor:
    """Mean of total / count over graphs with count > 0; a grad-carrying zero if there is none."""
    used = count > 0  # [G]
    if not bool(used.any()):
        return scores.sum() * 0.0
    return (total[used] / count[used]).mean()


def _pairwise(scores: Tensor, target: Tensor, mask: Tensor, tie_tol: float,
              pair_loss: Callable[[Tensor], Tensor]) -> Tensor:
    """Mean of pair_loss(s_j - s_i) over the pairs with i faster than j, per graph, then over graphs."""
    scores, target, mask = _clean(scores, target, mask)
    faster = _faster_pairs(target, mask, tie_tol)  # [G, C, C]
    gap = scores[:, None, :] - scores[:, :, None]  # [G, C, C], s_j - s_i: positive when ordered right
    losses = torch.where(faster, pair_loss(gap), torch.zeros_like(gap))  # [G, C, C]
    return _mean_over_graphs(losses.sum((1, 2)), faster.sum((1, 2)), scores)


def pairwise_hinge(scores: Tensor, target: Tensor, mask: Tensor, margin: float = 1.0,
                   tie_tol: float = 0.0) -> Tensor:
    """For every valid pair with target_i < target_j: max(0, margin - (s_j - s_i)).

    Exactly 0 when every faster config scores at least `margin` below every slower one.
    """
    return _pairwise(scores, target, mask, tie_tol, lambda gap: F.relu(margin - gap))


def pairwise_logistic(scores: Tensor, target: Tensor, mask: Tensor, tie_tol: float = 0.0) -> Tensor:
    """For every valid pair with target_i < target_j: softplus(-(s_j - s_i)) = log(1 + exp(s_i - s_j))."""
    return _pairwise(scores, target, mask, tie_tol, lambda gap: F.softplus(-gap))


def listmle(scores: Tensor, target: Tensor, mask: Tensor, tie_tol: float = 0.0) -> Tensor:
    """ListMLE: negative log Plackett-Luce likelihood of the true order, fastest first, on utilities u = -s.

    loss = sum_k [ logsumexp_{m : target_m >= target_k} u_m - u_k ] over the valid configs k, i.e. each
    config must beat every config not clearly faster than it. Without ties this is the usual ListMLE
    (sum_k logsumexp over positions k.. of the sorted list); tied configs (within tie_tol) share each
    other's denominators (Breslow's handling of ties), which keeps the loss independent of config order.
    Summed over each list, averaged over the lists with at least one non-tied pair. Stable: one masked
    logsumexp per config, no exp of raw scores.
    """
    scores, target, mask = _clean(scores, target, mask)
    utility = -scores  # [G, C]
    faster = _faster_pairs(target, mask, tie_tol)  # [G, C, C], faster[g, m, k]: m clearly faster than k
    itself = torch.eye(scores.shape[1], dtype=torch.bool, device=scores.device)  # [C, C]
    # [G, C(k), C(m)]: m valid and not faster than k; k itself always, so no row is all -inf (a fully padded
    # graph's rows would be, and older torch releases backpropagate exp(-inf - -inf) = nan through those)
    rivals = (mask[:, None, :] & ~faster.transpose(1, 2)) | itself
    competing = utility[:, None, :].masked_fill(~rivals, float("-inf"))  # [G, C, C]
    terms = torch.logsumexp(competing, dim=2) - utility  # [G, C], >= 0 (k is its own rival)
    terms = torch.where(mask, terms, torch.zeros_like(terms))  # [G, C], padded rows dropped
    has_pairs = faster.flatten(1).any(1)  # [G]
    return _mean_over_graphs(terms.sum(1), has_pairs.to(terms.dtype), scores)


def mse(scores: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """Pointwise baseline: mean over valid configs of (s - z)^2, z the target standardised per graph.

    z = (target - mean) / std over the graph's valid configs (population std; z = 0 for a constant graph).
    """
    scores, target, mask = _clean(scores, target, mask)
    weight = mask.to(scores.dtype)  # [G, C]
    count = weight.sum(1)  # [G]
    mean = (target * weight).sum(1) / count.clamp_min(1)  # [G]
    centred = (target - mean[:, None]) * weight  # [G, C]
    std = (centred.square().sum(1) / count.clamp_min(1)).sqrt()  # [G]
    z = centred / torch.where(std > 0, std, torch.ones_like(std))[:, None]  # [G, C]
    squared = (scores - z).square() * weight  # [G, C]
    return _mean_over_graphs(squared.sum(1), torch.where(count >= 2, count, torch.zeros_like(count)), scores)


class RankingLoss(Remembered):
    """(scores [G, C], target [G, C], mask [G, C]) -> a scalar; chosen in the YAML as `model.loss`."""


class PairwiseHinge(RankingLoss):
    """`pairwise_hinge`: every clearly faster config should score at least `margin` lower."""

    def __init__(self, margin: float = 1.0, tie_tol: float = 0.0) -> None:
        super().__init__()
        self.margin, self.tie_tol = margin, tie_tol

    def forward(self, scores: Tensor, target: Tensor, mask: Tensor) -> Tensor:
        return pairwise_hinge(scores, target, mask, self.margin, self.tie_tol)


class PairwiseLogistic(RankingLoss):
    """`pairwise_logistic`: the softplus of every misordered gap."""

    def __init__(self, tie_tol: float = 0.0) -> None:
        super().__init__()
        self.tie_tol = tie_tol

    def forward(self, scores: Tensor, target: Tensor, mask: Tensor) -> Tensor:
        return pairwise_logistic(scores, target, mask, self.tie_tol)


class ListMLE(RankingLoss):
    """`listmle`: the list likelihood of the true order."""

    def __init__(self, tie_tol: float = 0.0) -> None:
        super().__init__()
        self.tie_tol = tie_tol

    def forward(self, scores: Tensor, target: Tensor, mask: Tensor) -> Tensor:
        return listmle(scores, target, mask, self.tie_tol)


class MSE(RankingLoss):
    """`mse`: the pointwise baseline on per-graph standardised targets."""

    def forward(self, scores: Tensor, target: Tensor, mask: Tensor) -> Tensor:
        return mse(scores, target, mask)
