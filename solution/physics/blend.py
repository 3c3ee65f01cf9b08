"""What the physics prior's blend into the members' ranks takes: the weights tried, the shares, the weight picked."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

import numpy as np

from ..data.sets import GraphSet
from ..data.tasks import task_of
from ..errors import SettingsError
from .prior import prior_by_row


class RowTable(Protocol):
    """The scores of a split's graphs by config row (training/inference.py's ScoreTable)."""

    def __iter__(self) -> Iterator[int]: ...  # the graphs it holds

    def graph(self, graph: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...  # rows, scores, targets


def blend_weights(settings: Mapping, collection: str) -> list[float]:
    """The blend weights of the physics prior that `evaluate` tries on the valid files (`blend_weights`, default
    none), ascending and always with 0, the model alone; each in [0, 1] (1: the physics prior alone), above 0
    only for a layout collection."""
    weights = settings.get("blend_weights", [])
    if not (isinstance(weights, list) and all(isinstance(w, (int, float)) and not isinstance(w, bool) and 0 <= w <= 1
                                              for w in weights)):
        raise SettingsError(f"{collection}: blend_weights={weights!r}; expected a list of blend weights in [0, 1]")
    if any(weights) and task_of(collection).name != "layout":
        raise SettingsError(f"{collection}: blend_weights={weights!r}; the physics prior ranks layouts only: "
                            "expected [] for a tile collection")
    return sorted({0.0, *map(float, weights)})


def blend_shares(members: int, weight: float) -> list[float]:
    """The rank ensemble's weights: 1 - `weight` shared by the `members` (none where the prior ranks alone), then
    `weight` for the prior where above 0."""
    return [(1 - weight) / max(members, 1)] * members + ([weight] if weight > 0 else [])


def scored_priors(graphs: GraphSet, table: RowTable, weights: np.ndarray) -> dict[int, np.ndarray]:
    """Graph -> the physics prior of the config rows the table scored, in its row order."""
    return {graph: prior_by_row(graphs, graph, weights)[table.graph(graph)[0]] for graph in table}


def chosen_weight(metrics: Mapping[float, Mapping[str, float]]) -> float:
    """The blend weight whose validation metrics score best (ties: the first, the smaller); 0 where none were taken."""
    return max(metrics, key=lambda w: metrics[w].get("score", -np.inf)) if metrics else 0.0
