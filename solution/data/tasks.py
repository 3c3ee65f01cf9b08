"""What differs between the two tasks, layout and tile: file keys, config block, target, batch fields, metrics.

Code elsewhere asks a file's or a collection's task (`TASKS[name]`, `task_of(collection)`); it never compares
task names.
"""

from __future__ import annotations

import numpy as np

from ..constants import COLLECTIONS, PAD
from ..errors import SettingsError
from ..format import LAYOUT_CONFIG_DIM, LAYOUT_GROUP, LAYOUT_SYMBOLS, TILE_CONFIG_DIM
from ..metrics import (
    TILE_SUBMITTED,
    TILE_TOPK,
    kendall_tau,
    mean_over_graphs,
    ordered_pair_accuracy,
    ranking_tau,
    submitted_positions,
    tile_score,
    tile_topk_error,
)
from .features import tile_config_features
from .packing import pack, unpack

COMMON_KEYS = ("node_feat", "node_opcode", "edge_index", "config_runtime")


class Task:
    """The facts and steps of one task; `LAYOUT` and `TILE` are its two instances."""

    name: str
    keys: tuple[str, ...]  # arrays a file of this task must hold
    optional_keys: tuple[str, ...] = ()
    config_key: str  # the file's config block
    config_width: int  # width of one config's input to a ranker (per configurable node for layout)
    submitted: int | None = None  # config ids per submission row; None: every config, a full ranking
    has_config_nodes: bool  # whether configs set per-node layouts (graphs are pruned and segmented around them)
    standardize_configs: bool  # whether config features are numbers to standardize (tile bounds)

    def target(self, runtime: np.ndarray, normalizers: np.ndarray | None) -> np.ndarray:
        """Runtime to rank, lower is faster."""
        return runtime

    def stored_configs(self, config_feat: np.ndarray, node_feat: np.ndarray, physical_tiles: bool = False
                       ) -> np.ndarray:
        """The config block as cached: one row per config (tile: + its physical features with `physical_tiles`)."""
        raise NotImplementedError

    def batch_configs(self, configs: np.ndarray, default_layout: np.ndarray, fill_default: bool) -> np.ndarray:
        """The chosen cached config rows as a ranker reads them."""
        raise NotImplementedError

    def graph_metrics(self, scores: np.ndarray, target: np.ndarray) -> dict[str, float]:
        """The task's metrics of one graph; `score` is the one the competition averages."""
        raise NotImplementedError

    def collection_metrics(self, pairs: list[tuple[np.ndarray, np.ndarray]], lengths: list[int]
                           ) -> dict[str, float]:
        """Means over a collection's (positions, target) graphs of a checked submission; `lengths` are the
        numbers of ids each row submitted."""
        raise NotImplementedError


class LayoutTask(Task):
    name = "layout"
    keys = COMMON_KEYS + ("node_config_feat", "node_config_ids")
    optional_keys = ("node_splits",)
    config_key = "node_config_feat"
    config_width = LAYOUT_CONFIG_DIM * LAYOUT_SYMBOLS  # 18 values, one-hot over -1..5
    has_config_nodes = True
    standardize_configs = False

    def stored_configs(self, config_feat: np.ndarray, node_feat: np.ndarray, physical_tiles: bool = False
                       ) -> np.ndarray:
        return pack(config_feat)  # [c, nc] int64

    def batch_configs(self, configs: np.ndarray, default_layout: np.ndarray, fill_default: bool) -> np.ndarray:
        """[C, nc, 18] layout values; with `fill_default` an all -1 output layout (the compiler's default) is
        replaced by the node's own layout, so that the config says what the node gets."""
        values = unpack(configs)  # [C, nc, 18]
        if fill_default and values.size:
            out = values[..., :LAYOUT_GROUP]  # [C, nc, 6] view
            default = (out == PAD).all(axis=-1)  # [C, nc]
            out[default] = np.broadcast_to(default_layout, out.shape)[default]
        return values

    def graph_metrics(self, scores: np.ndarray, target: np.ndarray) -> dict[str, float]:
        tau = ranking_tau(scores, target)  # of the ranking the submission would hold, as `solution score` does
        return {"score": tau, "kendall_tau": tau, "opa": ordered_pair_accuracy(submitted_positions(scores), target)}

    def collection_metrics(self, pairs: list[tuple[np.ndarray, np.ndarray]], lengths: list[int]
                           ) -> dict[str, float]:
        return {"score": mean_over_graphs(kendall_tau(pred, target) for pred, target in pairs)}


class TileTask(Task):
    name = "tile"
    keys = COMMON_KEYS + ("config_feat", "config_runtime_normalizers")
    config_key = "config_feat"
    config_width = TILE_CONFIG_DIM
    submitted = TILE_SUBMITTED
    has_config_nodes = False
    standardize_configs = True

    def target(self, runtime: np.ndarray, normalizers: np.ndarray | None) -> np.ndarray:
        """runtime / normalizer (0 where a test file's normalizer is 0)."""
        return np.divide(runtime, normalizers, out=np.zeros_like(runtime), where=normalizers > 0)

    def stored_configs(self, config_feat: np.ndarray, node_feat: np.ndarray, physical_tiles: bool = False
                       ) -> np.ndarray:
        return tile_config_features(config_feat, node_feat, physical_tiles)  # [c, 24 (+ 10)]

    def batch_configs(self, configs: np.ndarray, default_layout: np.ndarray, fill_default: bool) -> np.ndarray:
        return np.asarray(configs)  # [C, 24 (+ 10)]

    def graph_metrics(self, scores: np.ndarray, target: np.ndarray) -> dict[str, float]:
        return {"score": tile_score(scores, target), "kendall_tau": ranking_tau(scores, target),
                **{f"top{k}_error": tile_topk_error(scores, target, k) for k in TILE_TOPK}}

    def collection_metrics(self, pairs: list[tuple[np.ndarray, np.ndarray]], lengths: list[int]
                           ) -> dict[str, float]:
        """`score`, and each top-k error that every row submitted enough ids for."""
        entry = {"score": float(np.mean([tile_score(pred, target) for pred, target in pairs]))}
        for k in TILE_TOPK:
            if all(length >= min(k, len(target)) for length, (_, target) in zip(lengths, pairs)):
                entry[f"top{k}_error"] = float(np.mean([tile_topk_error(p, t, k) for p, t in pairs]))
        return entry


LAYOUT, TILE = LayoutTask(), TileTask()
TASKS: dict[str, Task] = {task.name: task for task in (LAYOUT, TILE)}


def task_of(collection: str) -> Task:
    """The task of a collection ('tile:xla' -> TILE)."""
    if collection not in COLLECTIONS:
        raise SettingsError(f"unknown collection {collection!r}; expected one of {', '.join(COLLECTIONS)}")
    return TASKS[collection.split(":")[0]]
