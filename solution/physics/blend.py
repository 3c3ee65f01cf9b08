"""The physics prior's blend into the members' ranks: the weights tried, their shares and valid metrics, the pick."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

import numpy as np

from ..data.sets import GraphSet
from ..data.tasks import task_of
from ..errors import SettingsError
from ..metrics import mean_over_graphs
from ..submission.ensemble import combine
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


def blend_floor(settings: Mapping, collection: str) -> float:
    """The least blend weight the valid files may pick (`blend_floor`, default 0): the weights below it are still
    scored, the model alone among them, but not chosen. A number in [0, 1] no greater than the largest blend weight;
    without blend weights above 0 (no prior), 0."""
    floor, weights = settings.get("blend_floor", 0.0), blend_weights(settings, collection)
    top = max(weights)  # 0: no prior, and any floor up to 1 bounds nothing
    if isinstance(floor, bool) or not isinstance(floor, (int, float)) or not 0 <= floor <= (top or 1):
        raise SettingsError(f"{collection}: blend_floor={floor!r}; expected a number from 0 to the largest of "
                            f"blend_weights={weights}")
    return float(floor) if top > 0 else 0.0


def blend_shares(members: int, weight: float) -> list[float]:
    """The rank ensemble's weights: 1 - `weight` shared by the `members` (none where the prior ranks alone), then
    `weight` for the prior where above 0."""
    return [(1 - weight) / max(members, 1)] * members + ([weight] if weight > 0 else [])


def scored_priors(graphs: GraphSet, table: RowTable, weights: np.ndarray) -> dict[int, np.ndarray]:
    """Graph -> the physics prior of the config rows the table scored, in its row order."""
    return {graph: prior_by_row(graphs, graph, weights)[table.graph(graph)[0]] for graph in table}


def chosen_weight(metrics: Mapping[float, Mapping[str, float]], floor: float = 0.0) -> float:
    """The blend weight from `floor` up whose validation metrics score best (ties: the first, the smaller); 0 where
    none were taken."""
    allowed = [w for w in metrics if w >= floor]
    return max(allowed, key=lambda w: metrics[w].get("score", -np.inf)) if allowed else 0.0


def blend_metrics(collection: str, groups: Sequence[tuple[list[RowTable], Mapping[int, np.ndarray]]],
                  weight: float = 0.0) -> dict[str, float]:
    """The task's validation metrics, means over the graphs of every group (tables of members that scored the same
    files, and the physics priors of those files: graph -> the table's rows): per graph, the rank
    ensemble of the group's members, with the prior's ranks at `weight` when it is above 0; a member alone keeps
    its own metrics (ranks keep the order of its scores)."""
    task, per_graph = task_of(collection), []
    for tables, priors in groups:
        shares = np.array(blend_shares(len(tables), weight))
        for graph in tables[0]:
            _, _, target = tables[0].graph(graph)
            scores = [table.graph(graph)[1] for table in tables] + ([priors[graph]] if weight > 0 else [])
            per_graph.append(task.graph_metrics(combine(scores, shares, "rank"), target))  # ranked [c]
    return {name: mean_over_graphs(m[name] for m in per_graph) for name in per_graph[0]} if per_graph else {}
