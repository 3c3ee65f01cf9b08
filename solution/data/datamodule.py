"""The LightningDataModule of one collection: its files and folds, preprocessed once, served as sampled training
items and evaluation chunks (solution/data/sets.py) in -1-padded batches."""

from __future__ import annotations

import logging
import os

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from ..constants import SPLITS
from ..errors import SettingsError
from .batch import Collate
from .features import PHYSICAL_TILE_FEATURES, node_feature_width
from .preprocess import Preprocessing
from .sets import SAMPLING, ChunkSet, GraphSet, ShardSampler, TrainSet
from .splits import SPLIT_DEFAULTS, split_graphs
from .tasks import task_of

log = logging.getLogger(__name__)


class TpuGraphsDataModule(pl.LightningDataModule):
    """One collection of a TpuGraphs folder: preprocessed once into the cache, sampled per step,
    evaluated over every config in fixed-size chunks."""

    def __init__(
        self,
        collection: str,
        root: str = "data/synthetic",
        cache_dir: str | None = SPLIT_DEFAULTS["cache_dir"],
        prune: str = "k_hop",
        hops: int = 1,
        dedup: str = "min",
        sentinel: bool = True,
        extra_features: bool = True,
        physical_tiles: bool = False,
        config_work: bool = False,
        work_configs: int = 2048,
        operand_layouts: bool = False,
        fill_default_layout: bool = True,
        segment_nodes: int = 0,
        graphs_per_batch: int = 1,
        configs_per_graph: int = 128,
        sampling: str = "uniform",
        row_budget: int = 32768,
        eval_chunk: int = 1024,
        valid_configs: int = 0,
        eval_graphs_per_batch: int = 1,
        predict_split: str = SPLIT_DEFAULTS["predict_split"],
        test_split: str = SPLIT_DEFAULTS["test_split"],
        limit_graphs: int | None = SPLIT_DEFAULTS["limit_graphs"],
        skip_bad_files: bool = SPLIT_DEFAULTS["skip_bad_files"],
        folds: int = SPLIT_DEFAULTS["folds"],
        fold: int = SPLIT_DEFAULTS["fold"],
        family_pattern: str = SPLIT_DEFAULTS["family_pattern"],
        num_workers: int = 4,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.task = task_of(collection)
        self._check_task_settings()
        self.settings = Preprocessing.of(self.hparams)
        if folds > 1 and not 0 <= fold < folds:
            raise SettingsError(f"data.fold={fold}; expected 0..{folds - 1} for data.folds={folds}")
        if valid_configs < 0:
            raise SettingsError(f"data.valid_configs={valid_configs}; expected configs per valid file at most, "
                                "or 0 for all")
        if row_budget < 0:
            raise SettingsError(f"data.row_budget={row_budget}; expected (configurable node, config) rows per "
                                "training graph, or 0 for no limit")
        if segment_nodes < 0:
            raise SettingsError(f"data.segment_nodes={segment_nodes}; expected a node budget per segment, "
                             "or 0 for whole graphs")
        if sampling not in SAMPLING:
            raise SettingsError(f"data.sampling={sampling!r}; expected one of {', '.join(SAMPLING)}")
        for option, split in (("predict_split", predict_split), ("test_split", test_split)):
            if split not in SPLITS:
                raise SettingsError(f"data.{option}={split!r}; expected one of {', '.join(SPLITS)}")
        self.splits: dict[str, GraphSet] = {}

    def _check_task_settings(self) -> None:
        """Settings that only one task's configs can take: a SettingsError naming the key where the other sets it."""
        h, layout = self.hparams, self.task.has_config_nodes
        for option in ("config_work", "operand_layouts"):
            if not layout and h[option]:
                raise SettingsError(f"data.{option}=true for {h.collection}: it reads layout configs, and a tile "
                                    "config sets no layouts; expected false")
        if layout and h.physical_tiles:
            raise SettingsError(f"data.physical_tiles=true for {h.collection}: its configs are layouts, not tiles; "
                                "expected false")
        if not layout and (h.prune != "none" or h.segment_nodes or h.fill_default_layout):
            raise SettingsError(f"data.prune={h.prune!r}, data.segment_nodes={h.segment_nodes}, "
                                f"data.fill_default_layout={h.fill_default_layout} for {h.collection}: it has no "
                                "configurable nodes to prune around, segment or fill; expected none, 0 and false")

    @property
    def config_width(self) -> int:
        return self.task.config_width + (PHYSICAL_TILE_FEATURES if self.settings.physical_tiles else 0)

    @property
    def node_feat_dim(self) -> int:
        return node_feature_width(self.settings.sentinel, self.settings.extra_features)

    def graphs(self, split: str) -> GraphSet:
        """The preprocessed files of a split (built on first use, then read from the cache); with
        `skip_bad_files`, train and valid files that fail their checks are left out, never test files."""
        if split not in self.splits:
            self.splits[split] = split_graphs(self.hparams, split)
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
        num_workers loader workers at most, and no more than the CPUs the model's own threads leave free."""
        trainer = self.trainer
        on_cpu = trainer is None or trainer.strategy.root_device.type == "cpu"
        workers = usable_workers(self.hparams.num_workers, torch.get_num_threads() if on_cpu else 1)
        rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        seed = torch.initial_seed() % 2**62  # set by seed_everything
        return DataLoader(dataset, batch_size=batch_size, sampler=ShardSampler(dataset, train, seed, rank, world),
                          num_workers=workers, collate_fn=Collate(self.task, self.hparams.fill_default_layout,
                                                                  self.hparams.segment_nodes),
                          persistent_workers=workers > 0)

    def train_dataloader(self) -> DataLoader:
        hp = self.hparams
        train = TrainSet(self.graphs("train"), hp.configs_per_graph, hp.sampling, hp.row_budget)
        return self._loader(train, self.hparams.graphs_per_batch, train=True)

    def eval_set(self, split: str, configs: int = 0) -> ChunkSet:
        seed = torch.initial_seed() % 2**62  # the run's seed (seed_everything): the subset of `configs`
        return ChunkSet(self.graphs(split), self.hparams.eval_chunk, seed, configs)

    def val_dataloader(self) -> DataLoader:
        valid = self.eval_set("valid", configs=self.hparams.valid_configs)
        return self._loader(valid, self.hparams.eval_graphs_per_batch, train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.eval_set(self.hparams.test_split), self.hparams.eval_graphs_per_batch, train=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.eval_set(self.hparams.predict_split), self.hparams.eval_graphs_per_batch, train=False)


def usable_workers(asked: int, busy: int = 1) -> int:
    """`asked` loader workers, but no more than the CPUs this process may run on less the `busy` ones its model
    computes on (on the CPU, torch's threads; on a GPU, the one that feeds it): a worker on a core the model's
    threads use only slows both (2 cores: 0.90-0.95x a fit's wall time without it)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(asked, max(cpus - busy, 0))
