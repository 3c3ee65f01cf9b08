"""The datasets a data module serves: a split's preprocessed graphs, sampled training items, evaluation chunks
covering every config, and each process's shard of them. Free of Lightning: `solution rank` scores through them."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from torch.utils.data import Dataset, DistributedSampler

from .batch import Item
from .cache import ArrayCache
from .preprocess import Graph, Preprocessing, load_graph
from .reader import DataError

log = logging.getLogger(__name__)

SAMPLING = ("uniform", "stratified")


class GraphSet:
    """The files of one collection split, preprocessed once through the cache and loaded on demand (without a
    cache: preprocessed once and kept in memory). With `skip_bad`, a file that fails its checks is left out (and
    listed in `skipped`) instead of stopping the run."""

    def __init__(self, paths: list[Path], split: str, settings: Preprocessing, cache: ArrayCache | None,
                 skip_bad: bool = False) -> None:
        self.split, self.settings, self.cache = split, settings, cache
        self.paths: list[Path] = []
        self.meta: list[dict] = []
        self.kept: list[Graph] = []  # the graphs themselves, when there is no cache to load them from
        self.skipped: list[DataError] = []
        for path in paths:  # builds missing cache entries
            try:
                graph = load_graph(path, split, settings, cache)
            except DataError as err:
                if not skip_bad:
                    raise
                log.warning("skipped a %s file that fails its checks: %s", split, err)
                self.skipped.append(err)
                continue
            self.meta.append(graph.meta)
            self.paths.append(path)
            if cache is None:
                self.kept.append(graph)
        if paths and not self.paths:
            raise DataError(paths[0].parent, split, f"every one of its {len(paths)} files fails its checks "
                            f"(first: {self.skipped[0]})", "at least one readable file")

    def __len__(self) -> int:
        return len(self.paths)

    def load(self, index: int) -> Graph:
        return self.kept[index] if self.cache is None else load_graph(self.paths[index], self.split, self.settings,
                                                                     self.cache)

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
    the graph's index (a fresh sample every epoch). With `row_budget`, a graph of M configurable nodes samples at
    most row_budget // M configs (two at least): a training step's memory follows M x configs, and a program with
    thousands of configurable nodes would otherwise take gigabytes."""

    def __init__(self, graphs: GraphSet, configs_per_graph: int, sampling: str, row_budget: int = 0) -> None:
        self.graphs, self.count, self.sampling, self.row_budget = graphs, configs_per_graph, sampling, row_budget

    def __len__(self) -> int:
        return len(self.graphs)

    def configs_for(self, graph: Graph) -> int:
        """How many configs a step samples from `graph`."""
        nodes = len(graph.config_node)
        if not (self.row_budget and nodes):
            return self.count
        return min(self.count, max(self.row_budget // nodes, 2))

    def __getitem__(self, key: tuple[int, tuple[int, ...]]) -> tuple[Graph, Item]:
        index, draw = key
        graph = self.graphs.load(index)
        rng = np.random.default_rng(draw)
        return graph, Item(index, sample_rows(np.asarray(graph.target), self.configs_for(graph), self.sampling, rng))


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
    """Every config of every graph once, in row order, in as few chunks of at most `chunk` as cover it, of sizes
    within one of each other: the configs a chunk holds are what the cross-config attention compares, so no chunk
    is a small remainder. With `configs` > 0, a graph with more configs than that is covered on a seeded random
    subset of that many (the same for a seed)."""

    def __init__(self, graphs: GraphSet, chunk: int, seed: int = 0, configs: int = 0) -> None:
        self.graphs = graphs
        self.items: list[Item] = []
        for index in range(len(graphs)):
            rows = config_subset(graphs.num_configs(index), configs, (seed, index))
            self.items += [Item(index, part) for part in even_chunks(rows, chunk)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[Graph, Item]:
        item = self.items[index]
        return self.graphs.load(item.graph_id), item


def even_chunks(rows: np.ndarray, chunk: int) -> list[np.ndarray]:
    """`rows` in order, in the fewest parts of at most `chunk`, their sizes within one of each other."""
    return np.array_split(rows, -(-len(rows) // chunk)) if len(rows) else []


def config_subset(count: int, limit: int, seed: tuple[int, ...]) -> np.ndarray:
    """Rows 0..count-1, or with 0 < limit < count a random `limit` of them drawn from `seed`, in ascending order."""
    if 0 < limit < count:
        return np.sort(np.random.default_rng(seed).choice(count, size=limit, replace=False))
    return np.arange(count)
