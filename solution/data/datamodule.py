"""Datasets, config sampling, -1-padded batching and the LightningDataModule of one collection."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from ..errors import SettingsError
from .batch import Collate, Item
from .cache import ArrayCache
from .features import node_feature_width
from .preprocess import Graph, Preprocessing, load_graph, record_cache
from ..constants import SPLITS
from .reader import DataError, list_files
from .tasks import task_of

log = logging.getLogger(__name__)

SAMPLING = ("uniform", "stratified")


class GraphSet:
    """The files of one collection split, preprocessed once through the cache and loaded on demand. With
    `skip_bad`, a file that fails its checks is left out (and listed in `skipped`) instead of stopping the run."""

    def __init__(self, paths: list[Path], split: str, settings: Preprocessing, cache: ArrayCache | None,
                 skip_bad: bool = False) -> None:
        self.split, self.settings, self.cache = split, settings, cache
        self.paths: list[Path] = []
        self.meta: list[dict] = []
        self.skipped: list[DataError] = []
        for path in paths:  # builds missing cache entries
            try:
                self.meta.append(load_graph(path, split, settings, cache).meta)
            except DataError as err:
                if not skip_bad:
                    raise
                log.warning("skipped a %s file that fails its checks: %s", split, err)
                self.skipped.append(err)
                continue
            self.paths.append(path)
        if paths and not self.paths:
            raise DataError(paths[0].parent, split, f"every one of its {len(paths)} files fails its checks "
                            f"(first: {self.skipped[0]})", "at least one readable file")

    def __len__(self) -> int:
        return len(self.paths)

    def load(self, index: int) -> Graph:
        return load_graph(self.paths[index], self.split, self.settings, self.cache)

    def num_configs(self, index: int) -> int:
        return self.meta[index]["configs"]

    @property
    def stems(self) -> list[str]:
        return [p.stem for p in self.paths]


def sample_rows(target: np.ndarray, count: int, mode: str, rng: np.random.Generator) -> np.ndarray:
    """`count` distinct config rows: uniform, or stratified over the runtime order (one per runtime band),
    which favours pairs far apart in runtime over near-ties."""
    c = len(target)
    if c <= count:
        return rng.permutation(c)
    if mode == "uniform":
        return rng.choice(c, count, replace=False)
    order = np.argsort(target, kind="stable")
    edges = np.linspace(0, c, count + 1).astype(np.int64)
    picks = edges[:-1] + (rng.random(count) * (edges[1:] - edges[:-1])).astype(np.int64)
    return rng.permutation(order[picks])


class TrainSet(Dataset):
    """Each item is one graph with `configs_per_graph` sampled configs, drawn with the seed the sampler pairs with
    the graph's index (a fresh sample every epoch)."""

    def __init__(self, graphs: GraphSet, configs_per_graph: int, sampling: str) -> None:
        self.graphs, self.count, self.sampling = graphs, configs_per_graph, sampling

    def __len__(self) -> int:
        return len(self.graphs)

    def __getitem__(self, key: tuple[int, tuple[int, ...]]) -> tuple[Graph, Item]:
        index, draw = key
        graph = self.graphs.load(index)
        rng = np.random.default_rng(draw)
        return graph, Item(index, sample_rows(np.asarray(graph.target), self.count, self.sampling, rng))


class ShardSampler(DistributedSampler):
    """This process's share of a dataset. Training: an order fixed by (seed, epoch), padded so that every rank
    takes the same number of steps, each index paired with its own draw seed (seed, epoch, index), so that a
    resumed or sharded run draws what an uninterrupted one would. Evaluation: every item exactly once over the
    ranks, in order, no padding."""

    def __init__(self, dataset: Dataset, train: bool, seed: int = 0, rank: int = 0, world: int = 1) -> None:
        super().__init__(dataset, num_replicas=world, rank=rank, shuffle=train, seed=seed)
        self.train = train

    def __iter__(self):
        if not self.train:
            return iter(self._evaluation_share())
        return ((int(i), (self.seed, self.epoch, int(i))) for i in super().__iter__())

    def __len__(self) -> int:
        return self.num_samples if self.train else len(self._evaluation_share())

    def _evaluation_share(self) -> range:
        return range(self.rank, len(self.dataset), self.num_replicas)


class ChunkSet(Dataset):
    """Every config of every graph, in chunks of at most `chunk`; with `repeats` > 1 each graph is covered
    that many times, each time under another seeded random permutation of chunk membership."""

    def __init__(self, graphs: GraphSet, chunk: int, repeats: int = 1, seed: int = 0) -> None:
        self.graphs = graphs
        self.items: list[Item] = []
        for index in range(len(graphs)):
            c = graphs.num_configs(index)
            for repeat in range(repeats):
                order = np.arange(c) if repeat == 0 else np.random.default_rng((seed, index, repeat)).permutation(c)
                self.items += [Item(index, order[s:s + chunk]) for s in range(0, c, chunk)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[Graph, Item]:
        item = self.items[index]
        return self.graphs.load(item.graph_id), item


FOLD_GROUP = r"\..*$|_batch_\d+|_(?:fp|bf)\d+|_\d+x\d+(?:x\d+)?|_-?[0-9a-f]{16}$"


def model_group(stem: str, variant_parts: str = FOLD_GROUP) -> str:
    """The model a file belongs to: its stem without the parts that name a variant of one model (the default
    drops '.4x4.fp16'-style suffixes, batch sizes, precisions, topologies and a tile kernel's hash)."""
    return re.sub(variant_parts, "", stem) or stem


def assign_folds(stems: list[str], folds: int, variant_parts: str = FOLD_GROUP) -> np.ndarray:
    """[F] fold of each file: whole model groups, in a fixed shuffled order, each to the fold with the fewest
    files so far."""
    groups: dict[str, list[int]] = {}
    for i, stem in enumerate(stems):
        groups.setdefault(model_group(stem, variant_parts), []).append(i)
    if len(groups) < folds:
        raise SettingsError(f"data.folds={folds} but the files form only {len(groups)} model groups "
                         f"(data.fold_variant_parts={variant_parts!r}); use fewer folds")
    names = sorted(groups)
    order = np.random.default_rng(0).permutation(len(names))
    fold_of, sizes = np.zeros(len(stems), dtype=np.int64), np.zeros(folds, dtype=np.int64)
    for g in order:
        target = int(np.argmin(sizes))
        fold_of[groups[names[g]]] = target
        sizes[target] += len(groups[names[g]])
    return fold_of


class TpuGraphsDataModule(pl.LightningDataModule):
    """One collection of a TpuGraphs folder: preprocessed once into the cache, sampled per step,
    evaluated over every config in fixed-size chunks."""

    def __init__(
        self,
        collection: str,
        root: str = "data/synthetic",
        cache_dir: str | None = None,
        prune: str = "k_hop",
        hops: int = 1,
        dedup: str = "min",
        sentinel: bool = True,
        extra_features: bool = True,
        fill_default_layout: bool = True,
        segment_nodes: int = 0,
        graphs_per_batch: int = 1,
        configs_per_graph: int = 128,
        sampling: str = "uniform",
        eval_chunk: int = 256,
        eval_graphs_per_batch: int = 1,
        predict_repeats: int = 1,
        predict_split: str = "test",
        test_split: str = "valid",
        limit_graphs: int | None = None,
        skip_bad_files: bool = True,
        folds: int = 0,
        fold: int = 0,
        fold_variant_parts: str = FOLD_GROUP,
        num_workers: int = 4,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.task = task_of(collection)
        if not self.task.has_config_nodes and (prune != "none" or segment_nodes or fill_default_layout):
            raise SettingsError(f"data.prune={prune!r}, data.segment_nodes={segment_nodes}, data.fill_default_layout="
                             f"{fill_default_layout} for {collection}: it has no configurable nodes to prune around, "
                             "segment or fill; expected none, 0 and false")
        self.settings = Preprocessing(prune, hops, dedup, sentinel, extra_features)
        if folds > 1 and not 0 <= fold < folds:
            raise SettingsError(f"data.fold={fold}; expected 0..{folds - 1} for data.folds={folds}")
        if segment_nodes < 0:
            raise SettingsError(f"data.segment_nodes={segment_nodes}; expected a node budget per segment, "
                             "or 0 for whole graphs")
        if sampling not in SAMPLING:
            raise SettingsError(f"data.sampling={sampling!r}; expected one of {', '.join(SAMPLING)}")
        for option, split in (("predict_split", predict_split), ("test_split", test_split)):
            if split not in SPLITS:
                raise SettingsError(f"data.{option}={split!r}; expected one of {', '.join(SPLITS)}")
        self.splits: dict[str, GraphSet] = {}

    @property
    def config_width(self) -> int:
        return self.task.config_width

    @property
    def node_feat_dim(self) -> int:
        return node_feature_width(self.settings.sentinel, self.settings.extra_features)

    def files(self, split: str) -> list[Path]:
        """The .npz files of a split; with `folds` > 1, train and valid are drawn from train + valid pooled:
        valid is fold `fold` and train the others, each model's variants kept in one fold."""
        hp = self.hparams
        if hp.folds <= 1 or split not in ("train", "valid"):
            return list_files(hp.root, hp.collection, split)[:hp.limit_graphs]
        pool = list_files(hp.root, hp.collection, "train") + list_files(hp.root, hp.collection, "valid")
        fold_of = assign_folds([p.stem for p in pool], hp.folds, hp.fold_variant_parts)
        return [p for p, f in zip(pool, fold_of) if (f == hp.fold) == (split == "valid")][:hp.limit_graphs]

    def graphs(self, split: str) -> GraphSet:
        """The preprocessed files of a split (built on first use, then read from the cache); with
        `skip_bad_files`, train and valid files that fail their checks are left out, never test files."""
        if split not in self.splits:
            cache = record_cache(self.hparams.cache_dir)
            skip = self.hparams.skip_bad_files and split in ("train", "valid")
            self.splits[split] = GraphSet(self.files(split), split, self.settings, cache, skip)
            log.info("%s %s: %d graphs preprocessed", self.hparams.collection, split, len(self.splits[split]))
        return self.splits[split]

    def skipped_files(self) -> list[dict[str, str]]:
        """The files left out so far for failing their checks: split, file and the check's message."""
        return [{"split": split, "file": err.file, "error": str(err)}
                for split, graphs in self.splits.items() for err in graphs.skipped]

    def setup(self, stage: str) -> None:
        needed = {"fit": ("train", "valid"), "validate": ("valid",), "test": (self.hparams.test_split,),
                  "predict": (self.hparams.predict_split,)}[stage]
        for split in needed:
            graphs = self.graphs(split)
            if stage == "predict" and graphs.skipped:  # a submission needs every file of the split it ranks
                raise graphs.skipped[0]
        if stage == "test":
            self.check_scorable(self.hparams.test_split)

    def check_scorable(self, split: str) -> None:
        """A split can be scored when its files hold runtimes: Kaggle's test split holds zeros in their place."""
        graphs = self.graphs(split)
        if split == "test" or all(np.ptp(np.asarray(graphs.load(i).target)) == 0 for i in range(len(graphs))):
            raise SettingsError(f"data.test_split={split}: the {split} files of {self.hparams.collection} under "
                                f"{self.hparams.root} hold no runtimes, so there is nothing to score; expected a "
                                "split with runtimes (valid or train); `solution predict` ranks the test files")

    def feature_sums(self) -> dict[str, tuple[np.ndarray, np.ndarray, int]]:
        """Column sums, sums of squares and row counts of node features (and tile configs) over train."""
        graphs = self.graphs("train")
        sums = {}
        parts = {"node_feat": lambda g: g.node_feat}
        if self.task.standardize_configs:
            parts["config_feat"] = lambda g: g.configs
        for name, get in parts.items():
            total = total_sq = 0.0
            count = 0
            for index in range(len(graphs)):
                x = np.asarray(get(graphs.load(index)), dtype=np.float64)
                total, total_sq, count = total + x.sum(0), total_sq + (x**2).sum(0), count + len(x)
            sums[name] = (np.asarray(total), np.asarray(total_sq), count)
        return sums

    def _loader(self, dataset: Dataset, batch_size: int, train: bool) -> DataLoader:
        """Batches of this process's shard: the rank and world size come from the trainer (one process without);
        num_workers loader workers at most, and no more than the CPUs this process may use can feed."""
        trainer, workers = self.trainer, usable_workers(self.hparams.num_workers)
        rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        seed = torch.initial_seed() % 2**62  # set by seed_everything
        return DataLoader(dataset, batch_size=batch_size, sampler=ShardSampler(dataset, train, seed, rank, world),
                          num_workers=workers, collate_fn=Collate(self.task, self.hparams.fill_default_layout,
                                                                  self.hparams.segment_nodes),
                          persistent_workers=workers > 0)

    def train_dataloader(self) -> DataLoader:
        train = TrainSet(self.graphs("train"), self.hparams.configs_per_graph, self.hparams.sampling)
        return self._loader(train, self.hparams.graphs_per_batch, train=True)

    def eval_set(self, split: str, repeats: int = 1) -> ChunkSet:
        seed = torch.initial_seed() % 2**62  # the run's seed (seed_everything)
        return ChunkSet(self.graphs(split), self.hparams.eval_chunk, repeats, seed)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.eval_set("valid"), self.hparams.eval_graphs_per_batch, train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.eval_set(self.hparams.test_split), self.hparams.eval_graphs_per_batch, train=False)

    def predict_dataloader(self) -> DataLoader:
        chunks = self.eval_set(self.hparams.predict_split, self.hparams.predict_repeats)
        return self._loader(chunks, self.hparams.eval_graphs_per_batch, train=False)


def usable_workers(asked: int) -> int:
    """`asked` loader workers, but at most one fewer than the CPUs this process may run on (the main process
    trains or ranks on the last): extra workers on a small machine only take cores from the model."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(asked, max(cpus - 1, 0))
