"""Ranking a split with a saved ranker, the one way every command ranks: each member scores every config as
`solution predict` does (settings resolved against its checkpoint, no Lightning), the blend with the physics prior
is the ranker's, and the result is written as a run of the collection."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..data.preprocess import Graph
from ..data.sets import GraphSet
from ..data.splits import SPLIT_DEFAULTS, split_graphs
from ..data.tasks import task_of
from ..metrics import mean_over_graphs
from ..submission.files import collection_file_stem
from ..training.checkpoints import saved_settings
from ..training.inference import ScoreTable, checkpoint_scores
from ..training.ranker_file import SUFFIX, SavedRanker
from .settings import configs_folder, read_settings, read_yaml, with_checkpoint


def ranker_path(folder: Path, collection: str) -> Path:
    """Where a job keeps a collection's ranker: <folder>/<collection stem>.ranker."""
    return folder / f"{collection_file_stem(collection)}{SUFFIX}"


def command_defaults(collection: str) -> list[dict]:
    """What a command gives when nothing is set: configs/base.yaml and the collection's own settings."""
    return [read_yaml(configs_folder() / "base.yaml"), read_settings()[collection]]


def resolved(ranker: SavedRanker, settings: Mapping[str, Any], source: str, member: int = 0,
             defaults: Sequence[Mapping] | None = None) -> dict:
    """A command's `settings` with what the ranker's member `member` fixes put in place (a contradiction is a
    SettingsError naming both values); `defaults`: what the command gives when nothing is set (by default the
    configs folder's, `command_defaults`)."""
    stored = saved_settings(ranker.members[member]) if ranker.members else {"model": {}, "data": ranker.data_settings}
    return with_checkpoint(settings, stored, defaults or command_defaults(ranker.collection), source)


def ranked_split(ranker: SavedRanker, settings: Mapping[str, Any], split: str, source: str,
                 graphs: GraphSet | None = None, defaults: Sequence[Mapping] | None = None
                 ) -> tuple[GraphSet, dict[int, np.ndarray]]:
    """The files of `split` under the ranker's data settings (or `graphs`), and per file its configs' blended
    scores (lower = predicted faster); `defaults` as `resolved` takes them."""
    data = {**SPLIT_DEFAULTS, **resolved(ranker, settings, source, defaults=defaults)["data"]}
    graphs = graphs if graphs is not None else split_graphs(data, split)

    def member_scores(j: int) -> ScoreTable:
        return checkpoint_scores(ranker.members[j], resolved(ranker, settings, source, j, defaults), graphs, source)

    return graphs, ranker.scores(graphs, member_scores)


def split_metrics(graphs: GraphSet, scores: Mapping[int, np.ndarray], collection: str) -> dict[str, float]:
    """The task's metrics of a split with runtimes ranked by `scores` (graph index -> by config row): means over its
    files, as validation takes them."""
    task = task_of(collection)
    per_graph = [task.graph_metrics(scores[i], runtimes_by_row(graphs.load(i))) for i in range(len(graphs))]
    return {name: mean_over_graphs(m[name] for m in per_graph) for name in per_graph[0]} if per_graph else {}


def runtimes_by_row(graph: Graph) -> np.ndarray:
    """[configs] a preprocessed graph's runtimes in its file's config rows."""
    target = np.empty(len(graph.target))
    target[graph.config_index] = graph.target
    return target
