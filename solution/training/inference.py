"""Scoring without a trainer: a checkpoint's ranker with its input standardizers, run over every config of a
graph in the chunks `solution predict` uses. `solution rank` scores through it without importing Lightning."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..data.batch import Batch, Collate
from ..data.features import Standardizer
from ..data.sets import ChunkSet, GraphSet
from ..data.tasks import TASKS, task_of
from ..models.rankers import Ranker
from ..models.spec import build
from .checkpoints import CheckpointError


class ScoreTable:
    """Per-graph scores gathered from chunks, indexed by config row."""

    def __init__(self) -> None:
        self.parts: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}

    def add(self, batch: Batch, scores: torch.Tensor) -> None:
        mask = batch.config_mask.cpu().numpy()  # [G, C]
        rows, target = batch.config_index.cpu().numpy(), batch.target.cpu().numpy()
        values = scores.detach().float().cpu().numpy()
        for g, graph_id in enumerate(batch.graph_id.tolist()):
            keep = mask[g]
            self.parts.setdefault(graph_id, []).append((rows[g][keep], values[g][keep], target[g][keep]))

    def graph(self, graph_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(config rows seen, their scores (the mean of a row scored more than once), their targets) of one graph,
        in row order."""
        rows, values, target = (np.concatenate(x) for x in zip(*self.parts[graph_id]))
        seen, inverse = np.unique(rows, return_inverse=True)
        mean = np.bincount(inverse, weights=values) / np.bincount(inverse)
        targets = np.zeros(len(seen))
        targets[inverse] = target
        return seen, mean, targets

    def __iter__(self):
        return iter(sorted(self.parts))

    def gather(self) -> None:
        """Merge every process's parts into this table, on every process (nothing to do in one process)."""
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            return
        every: list[dict | None] = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(every, self.parts)
        self.parts = {}
        for parts in every:
            for graph_id, pieces in parts.items():
                self.parts.setdefault(graph_id, []).extend(pieces)


def standardized_scores(ranker: Ranker, node_scaler: Standardizer, config_scaler: Standardizer | None,
                        batch: Batch) -> torch.Tensor:
    """[G, C] the ranker's scores of a batch whose node features (and tile configs) are standardized first."""
    batch = batch.replace(node_feat=node_scaler(batch.node_feat))
    if config_scaler is not None:
        batch = batch.replace(config_feat=config_scaler(batch.config_feat))
    return ranker(batch).float()  # float32 also under bf16 autocast


def load_weights(model: nn.Module, state_dict: Mapping[str, torch.Tensor], source: str | Path) -> None:
    """A checkpoint's weights into a module built from its settings; weights of another shape are refused."""
    try:
        model.load_state_dict(state_dict)
    except RuntimeError as error:
        raise CheckpointError(f"{source}: state_dict does not fit the model its hyper_parameters describe "
                              f"({str(error).splitlines()[0]}); expected a checkpoint written by this version "
                              "of the package") from error


def with_widths(ranker: Mapping, node_feat_dim: int, config_width: int) -> dict:
    """A ranker's settings (class_path, init_args) with the input widths its data gives."""
    widths = {"node_feat_dim": node_feat_dim, "config_width": config_width}
    return {**ranker, "init_args": {**ranker.get("init_args", {}), **widths}}


class Scorer(nn.Module):
    """The part of a trained RankingModule that scores: its ranker and standardizers, under the same state_dict
    keys, so that a checkpoint's weights load into it as they are."""

    def __init__(self, ranker: Ranker | Mapping, task: str) -> None:
        super().__init__()
        self.ranker = build(ranker)
        init_args = self.ranker.spec["init_args"]
        self.node_scaler = Standardizer(init_args["node_feat_dim"])
        self.config_scaler = Standardizer(init_args["config_width"]) if TASKS[task].standardize_configs else None

    @classmethod
    def of_checkpoint(cls, saved: Mapping[str, Any], model: Mapping, source: str | Path) -> Scorer:
        """The scorer of a checkpoint read by `read_checkpoint`, built from `model` settings resolved against it
        (`with_checkpoint`: its architecture, and speed settings such as inference_rows from the command)."""
        stored = saved["hyper_parameters"]["ranker"]["init_args"]
        ranker = with_widths(model["ranker"], stored["node_feat_dim"], stored["config_width"])
        scorer = cls(ranker, saved["hyper_parameters"]["task"])
        own = scorer.state_dict().keys()
        load_weights(scorer, {key: value for key, value in saved["state_dict"].items() if key in own}, source)
        return scorer.eval()

    def forward(self, batch: Batch) -> torch.Tensor:
        return standardized_scores(self.ranker, self.node_scaler, self.config_scaler, batch)

    @torch.inference_mode()
    def score(self, graphs: GraphSet, collate: Collate, chunk: int, precision: str | int | None = None) -> ScoreTable:
        """Every config of every graph, `chunk` configs a batch, as `solution predict` scores them, at a trainer's
        `precision` (CPU_PRECISIONS)."""
        table = ScoreTable()
        chunks = ChunkSet(graphs, chunk)
        with on_cpu_at(precision):
            for index in range(len(chunks)):
                batch = collate([chunks[index]])
                table.add(batch, self(batch))
        return table


# trainer precisions a CPU ranks at without Lightning: float32, or its model in bfloat16 under autocast (scores
# and standardizers in float32); its forward 1.3-1.45x faster where the CPU computes bfloat16 natively
CPU_PRECISIONS = (None, 32, "32", "32-true", "bf16-mixed")


def on_cpu_at(precision: str | int | None) -> contextlib.AbstractContextManager:
    """The CPU autocast of a trainer precision in CPU_PRECISIONS: bfloat16 for 'bf16-mixed', none otherwise."""
    if precision not in CPU_PRECISIONS:
        raise ValueError(f"precision {precision!r}: expected one of {CPU_PRECISIONS}")
    return torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16-mixed" else contextlib.nullcontext()


def checkpoint_scores(saved: Mapping[str, Any], settings: Mapping, graphs: GraphSet, source: str | Path) -> ScoreTable:
    """Every config of `graphs` scored by a checkpoint read by `read_checkpoint`, under `settings` resolved against
    it (`with_checkpoint`): its model, the collate and chunks of its data settings."""
    data = settings["data"]
    scorer = Scorer.of_checkpoint(saved, settings["model"], source)
    collate = Collate(task_of(data["collection"]), data["fill_default_layout"], data["segment_nodes"])
    precision = (settings.get("trainer") or {}).get("precision")
    return scorer.score(graphs, collate, data["eval_chunk"], precision)
