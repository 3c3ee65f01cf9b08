"""Turn one checked file into a compact training record: prune, transform features, dedup and pack configs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import SettingsError
from ..format import LAYOUT_GROUP, SHAPE_DIMS
from .cache import ArrayCache, code_digest
from .features import layout_with_sentinel, node_features
from .packing import DEDUP_MODES, dedup
from .pruning import STRATEGIES, configurable_nodes, prune_graph
from .reader import RawGraph, read_graph

if TYPE_CHECKING:
    from ..physics.propagation import Propagation


@dataclass(frozen=True)
class Preprocessing:
    """Settings that change a cached record; every field is part of the cache key."""

    prune: str = "k_hop"  # none | k_hop | output_path (layout only; tile kernels are small)
    hops: int = 1
    dedup: str = "min"  # none | first | min | mean, applied to the train split only
    sentinel: bool = True  # -1 instead of 0 for the minor_to_major of absent dims
    extra_features: bool = True  # dimension mod 128 and div 128
    physical_tiles: bool = False  # tile: what each output tile means for the kernel's output (features.physical_tiles)
    config_work: bool = False  # layout: what each config makes the program do (ConfigWork.features), per config
    work_configs: int = 2048  # with config_work, a train file keeps a fixed random subset of at most this many
    # configs (the walk costs each config the whole graph); 0: all
    operand_layouts: bool = False  # layout: the operands each configurable node lays out, and its key dims

    def __post_init__(self) -> None:
        if self.prune not in STRATEGIES:
            raise SettingsError(f"data.prune={self.prune!r}; expected one of {', '.join(STRATEGIES)}")
        if self.dedup not in DEDUP_MODES:
            raise SettingsError(f"data.dedup={self.dedup!r}; expected one of {', '.join(DEDUP_MODES)}")
        if self.hops < 0:
            raise SettingsError(f"data.hops={self.hops}; expected a non-negative integer")
        if self.work_configs < 0:
            raise SettingsError(f"data.work_configs={self.work_configs}; expected configs per train file at most, "
                                "or 0 for all")

    @classmethod
    def of(cls, data: Mapping) -> Preprocessing:
        """The preprocessing named by a data module's settings (`data:` of a config or a checkpoint)."""
        return cls(**{field.name: data[field.name] for field in fields(cls) if field.name in data})


@dataclass
class Graph:
    """A preprocessed graph; the big arrays are memory-mapped from the cache."""

    node_feat: np.ndarray  # [n, F] float32, transformed, not yet standardized
    node_opcode: np.ndarray  # [n] int64
    edge_index: np.ndarray  # [2, m] int64: row 0 producer (source), row 1 consumer (target)
    config_node: np.ndarray  # [nc] int64 pruned node ids of the configurable nodes (layout; empty for tile)
    default_layout: np.ndarray  # [nc, 6] float32 each configurable node's own minor_to_major, -1 padded
    config_dims: np.ndarray  # [nc, 6] float32 each configurable node's output dims, 0 beyond its rank (raw sizes)
    configs: np.ndarray  # layout [c, nc] int64 packed; tile [c, 24] float32 transformed
    config_work: np.ndarray  # [c, K] float32 with `config_work` (K = 0 without): each config's work, centred
    config_operands: np.ndarray  # [nc, 30] float32 with `operand_layouts` ([nc, 0] without): `config_operands`
    target: np.ndarray  # [c] float64 runtime, lower is faster (tile: / normalizer); 0 in test files
    config_index: np.ndarray  # [c] int64 row of each config in the original file
    node_split: np.ndarray  # [k + 1] int64 computation bounds 0 < ... < n in pruned ids (as node_splits; tile: [0, n])
    meta: dict

    @property
    def num_configs(self) -> int:
        return len(self.target)


def pruned_bounds(bounds: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """[k' + 1] computation bounds (0, ..., n as RawGraph.computation_bounds) in pruned ids: each bound becomes
    the number of kept nodes before it; computations left without a kept node disappear."""
    kept_before = np.concatenate([[0], np.cumsum(keep)])  # [n + 1]
    return np.unique(kept_before[bounds]).astype(np.int64)


def build_record(raw: RawGraph, settings: Preprocessing, train: bool) -> tuple[dict[str, np.ndarray], dict]:
    """All preprocessing of one file, as arrays for the cache plus a JSON-able summary; a `train` file's configs
    are deduplicated (and with `config_work`, cut to `work_configs`)."""
    n, m = len(raw.node_feat), len(raw.edge_index)
    pruned = prune_graph(raw, settings.prune, settings.hops)
    keep = pruned.keep
    edges = pruned.new_id[raw.edge_index[pruned.edge_keep]]  # [m', 2] as [consumer, producer]
    configs = raw.task.stored_configs(raw.config_feat, raw.node_feat, settings.physical_tiles)
    target = raw.target()
    rows, target = dedup(configs, target, settings.dedup if train else "none")
    if settings.config_work and train and 0 < settings.work_configs < len(rows):
        kept = np.sort(np.random.default_rng(0).choice(len(rows), settings.work_configs, replace=False))
        rows, target = rows[kept], target[kept]
    config_ids = configurable_nodes(raw)
    walk = propagation(raw) if settings.config_work or settings.operand_layouts else None
    arrays = {
        "node_feat": node_features(raw.node_feat[keep], settings.sentinel, settings.extra_features),
        "node_opcode": raw.node_opcode[keep],
        "edge_index": np.ascontiguousarray(edges[:, ::-1].T),  # [2, m'] producer -> consumer
        "config_node": pruned.new_id[config_ids],
        "default_layout": layout_with_sentinel(raw.node_feat[config_ids]),
        "config_dims": raw.node_feat[config_ids][:, SHAPE_DIMS].astype(np.float32),
        "configs": configs[rows],
        "config_work": config_work(walk, raw.config_feat[rows]) if settings.config_work else np.zeros(
            (len(rows), 0), np.float32),
        "config_operands": config_operands(walk, len(config_ids)) if settings.operand_layouts else np.zeros(
            (len(config_ids), 0), np.float32),
        "target": target,
        "config_index": rows.astype(np.int64),
        "node_split": pruned_bounds(raw.computation_bounds(), keep),
    }
    meta = {
        "kind": raw.task.name, "is_test": raw.is_test,
        "nodes_raw": n, "edges_raw": m, "nodes": int(keep.sum()), "edges": int(pruned.edge_keep.sum()),
        "configs_raw": raw.num_configs, "configs": len(rows),
    }
    return arrays, meta


def propagation(raw: RawGraph) -> Propagation:
    """The physics prior's view of a file (its walk), which config_work and config_operands read."""
    from ..physics.propagation import Propagation  # the walk reads the data layer: imported here, not above

    return Propagation.of_file(raw)


def config_work(walk: Propagation, configs: np.ndarray) -> np.ndarray:
    """[c, K] what each of `configs` [c, nc, 18] makes the file's program do, by the physics prior's walk, centred
    over them (a file's own scale says nothing of how its configs rank)."""
    work = walk.work(configs).features()  # [c, K]
    return work - work.mean(0) if len(work) else work


OPERAND_COLUMNS = 5 * LAYOUT_GROUP  # config_operands: input and kernel dims, key dims of output, input, kernel


def config_operands(walk: Propagation, configurable: int) -> np.ndarray:
    """[nc, 30] what each of a file's `configurable` nodes' three layout blocks lay out: the sizes of the operands
    its input and kernel blocks set (6 each, 0 beyond their rank or where the block sets none), then per block
    (output, input, kernel) which of its dims are key dims, 1 or 0 (6 each): a dot's contracted dims, a
    convolution's feature dims, as the walk reads them from the shapes (the files keep no dimension numbers)."""
    out = np.zeros((configurable, OPERAND_COLUMNS), np.float32)
    for node, slot in walk.slots.items():
        blocks = {-1: 0}  # operand (-1: the output) -> its block
        for block, operand in enumerate(slot.laid_out, start=1):
            if operand >= 0:
                dims = walk.tensors[operand].dims
                out[slot.column, (block - 1) * LAYOUT_GROUP:(block - 1) * LAYOUT_GROUP + len(dims)] = dims
                blocks.setdefault(operand, block)
        keyed = walk.tensors[node].keyed
        for operand, keys in keyed[1] if keyed else []:
            if operand in blocks:
                out[slot.column, (2 + blocks[operand]) * LAYOUT_GROUP + np.array(keys, np.int64)] = 1.0
    return out


# the modules whose code shapes a cached record: a change to any of them makes new cache entries
RECORD_CODE = [__name__, "solution.constants", "solution.format", "solution.layouts", "solution.data.reader",
               "solution.data.pruning", "solution.data.features", "solution.data.packing",
               "solution.physics.propagation"]


def record_cache(folder: str | Path | None = None) -> ArrayCache:
    """The cache of preprocessed records, keyed by the code that builds them as well as the file and settings."""
    return ArrayCache(folder, code_digest(RECORD_CODE))


def load_graph(path: Path, split: str, settings: Preprocessing, cache: ArrayCache | None) -> Graph:
    """The preprocessed record of a file, from the cache when it holds one (no cache: built in memory)."""
    train = split == "train"

    def build() -> tuple[dict[str, np.ndarray], dict]:
        return build_record(read_graph(path, split), settings, train)

    if cache is None:
        arrays, meta = build()
    else:
        arrays, meta = cache.load(path, {**asdict(settings), "dedup_on": train, "split": split}, build)
    return Graph(**arrays, meta={**meta, "path": str(path), "split": split, "stem": path.stem})
