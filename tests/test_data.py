"""Sampling, -1 padding, chunked evaluation and the data module on tiny synthetic data."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from solution.constants import COLLECTIONS, PAD
from solution.data.batch import Batch, Collate
from solution.data.datamodule import TpuGraphsDataModule, usable_workers
from solution.data.features import PHYSICAL_TILE_FEATURES
from solution.data.packing import unpack
from solution.data.preprocess import Preprocessing
from solution.data.reader import list_files, read_graph
from solution.data.sets import ChunkSet, GraphSet, TrainSet, even_chunks, sample_rows
from solution.data.splits import assign_folds, family_of, split_files
from solution.data.tasks import LAYOUT, TILE, task_of
from solution.format import LAYOUT_CONFIG_DIM, TILE_CONFIG_DIM


def _task_options(collection: str) -> dict:
    """Tile collections have no configurable nodes: no pruning around them, no default layouts to fill."""
    return {} if task_of(collection).has_config_nodes else {"prune": "none", "fill_default_layout": False}


@pytest.fixture(scope="module", params=COLLECTIONS)
def datamodule(request, tiny_root, tmp_path_factory) -> TpuGraphsDataModule:
    dm = TpuGraphsDataModule(root=str(tiny_root), collection=request.param, configs_per_graph=16,
                             graphs_per_batch=3, eval_chunk=7, eval_graphs_per_batch=2,
                             cache_dir=str(tmp_path_factory.mktemp("cache")), **_task_options(request.param))
    dm.setup("fit")
    return dm


def test_train_batch_shapes_padding_and_masks(datamodule):
    batch = next(iter(datamodule.train_dataloader()))
    assert isinstance(batch, Batch) and batch.node_segment is None  # no segment budget: whole graphs
    g = batch.graph_id.numel()
    assert batch.num_graphs == g
    n, c = batch.node_feat.shape[0], batch.config_mask.shape[1]
    assert batch.node_feat.shape == (n, datamodule.node_feat_dim)
    assert batch.node_graph.shape == (n,) and batch.node_graph.max() == g - 1
    assert batch.edge_index.shape[0] == 2 and batch.edge_index.max() < n
    assert c <= 16 and batch.target.shape == (g, c) == batch.config_index.shape
    mask = batch.config_mask
    assert (batch.target[~mask] == PAD).all() and (batch.config_index[~mask] == PAD).all()
    graphs = datamodule.graphs("train")
    for row, graph_id in enumerate(batch.graph_id.tolist()):  # the sampled configs' own runtimes
        graph = graphs.load(graph_id)
        runtime_of = dict(zip(np.asarray(graph.config_index).tolist(), np.asarray(graph.target).tolist()))
        runtimes = [runtime_of[index] for index in batch.config_index[row][mask[row]].tolist()]
        np.testing.assert_allclose(batch.target[row][mask[row]].numpy(), runtimes, rtol=1e-6)
    if datamodule.task is LAYOUT:
        k = batch.config_node.shape[1]
        assert batch.config_feat.shape == (g, c, k, LAYOUT_CONFIG_DIM)
        valid_nodes = batch.config_node >= 0
        nodes = batch.config_node[valid_nodes]
        assert (nodes < n).all()
        assert (batch.node_graph[batch.config_node.clamp_min(0)][valid_nodes]
                == torch.arange(g)[:, None].expand_as(valid_nodes)[valid_nodes]).all()
        assert (batch.config_feat[~mask] == PAD).all()
        assert (batch.config_feat[~valid_nodes[:, None, :].expand(g, c, k)] == PAD).all()
    else:
        assert datamodule.task is TILE
        assert batch.config_feat.shape == (g, c, TILE_CONFIG_DIM)
        assert batch.config_node.shape == (g, 0)  # no configurable nodes


def test_eval_chunks_cover_every_config_once(datamodule):
    graphs = datamodule.graphs("valid")
    seen: dict[int, list[int]] = {}
    for batch in datamodule.val_dataloader():
        assert batch.config_mask.sum(1).max() <= 7
        for g, graph_id in enumerate(batch.graph_id.tolist()):
            seen.setdefault(graph_id, []).extend(batch.config_index[g][batch.config_mask[g]].tolist())
    for index in range(len(graphs)):
        raw = read_graph(graphs.paths[index])
        assert sorted(seen[index]) == list(range(raw.num_configs))  # valid split keeps duplicates


@pytest.mark.parametrize("cpus, threads, asked, used", [(1, 1, 4, 0), (2, 2, 4, 0), (2, 1, 4, 1), (8, 2, 4, 4),
                                                        (8, 6, 4, 2), (8, 8, 4, 0), (8, 2, 0, 0)])
def test_loader_workers_leave_the_model_its_cpus(monkeypatch, tiny_root, cpus: int, threads: int, asked: int,
                                                  used: int):
    """data.num_workers is a ceiling: without a GPU, a loader never starts more workers than the CPUs it may use
    less torch's threads, which compute the model."""
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(cpus)))
    monkeypatch.setattr("torch.get_num_threads", lambda: threads)
    assert usable_workers(asked, threads) == used
    dm = TpuGraphsDataModule(root=str(tiny_root), collection="layout:xla:random", num_workers=asked)
    assert dm.predict_dataloader().num_workers == used


@pytest.mark.parametrize("cpus, used", [(1, 0), (2, 1), (8, 4)])
def test_loader_workers_beside_a_gpu_leave_one_cpu(monkeypatch, tiny_root, cpus: int, used: int):
    """Beside a GPU torch's CPU threads are idle: one CPU feeds the GPU, the others may load."""
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(cpus)))
    monkeypatch.setattr("torch.get_num_threads", lambda: cpus)
    dm = TpuGraphsDataModule(root=str(tiny_root), collection="layout:xla:random", num_workers=4)
    dm.trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cuda", 0)), global_rank=0,
                                 world_size=1)
    assert dm.predict_dataloader().num_workers == used


def test_layout_batch_matches_file(tiny_root, tmp_path):
    dm = TpuGraphsDataModule(root=str(tiny_root), collection="layout:xla:random", fill_default_layout=False,
                             dedup="none", prune="none", cache_dir=str(tmp_path))
    graphs = dm.graphs("train")
    raw, graph = read_graph(graphs.paths[0]), graphs.load(0)
    rows = np.array([3, 0, 5])
    values = LAYOUT.batch_configs(np.asarray(graph.configs[rows]), graph.default_layout, fill_default=False)
    np.testing.assert_array_equal(values, raw.config_feat[rows])
    np.testing.assert_array_equal(unpack(np.asarray(graph.configs)), raw.config_feat)
    batch = Collate(LAYOUT, fill_default_layout=False)([(graph, ChunkSet(graphs, 3).items[0])])
    np.testing.assert_array_equal(batch.config_feat[0].numpy(), raw.config_feat[:3])
    flipped = raw.edge_index[:, ::-1].T  # [consumer, producer] on disk -> [producer, consumer]
    np.testing.assert_array_equal(batch.edge_index.numpy(), flipped)


def test_fill_default_layout_uses_node_layout(tiny_root, tmp_path):
    dm = TpuGraphsDataModule(root=str(tiny_root), collection="layout:xla:default", cache_dir=str(tmp_path))
    graph = dm.graphs("train").load(0)
    rows = np.arange(graph.num_configs)
    raw_values = unpack(np.asarray(graph.configs))
    filled = LAYOUT.batch_configs(np.asarray(graph.configs[rows]), graph.default_layout, fill_default=True)
    default = (raw_values[..., :6] == PAD).all(-1)  # [c, nc]
    assert default.any(), "default collections hold default (all -1) output layouts"
    expected = np.broadcast_to(graph.default_layout, default.shape + (6,))[default]
    np.testing.assert_array_equal(filled[..., :6][default], expected)
    np.testing.assert_array_equal(filled[..., :6][~default], raw_values[..., :6][~default])
    np.testing.assert_array_equal(filled[..., 6:], raw_values[..., 6:])


@pytest.mark.parametrize("mode", ["uniform", "stratified"])
def test_sample_rows_distinct_and_bounded(mode):
    rng = np.random.default_rng(0)
    target = rng.random(500)
    rows = sample_rows(target, 40, mode, rng)
    assert len(rows) == 40 == len(set(rows.tolist())) and rows.max() < 500
    assert sorted(sample_rows(target[:10], 40, mode, rng).tolist()) == list(range(10))


def test_stratified_sampling_spreads_over_runtime_order():
    rng = np.random.default_rng(1)
    target = np.arange(1000, dtype=float)
    ranks = np.sort(sample_rows(target, 10, "stratified", rng))
    assert all(100 * i <= r < 100 * (i + 1) for i, r in enumerate(ranks))


def test_row_budget_caps_the_configs_of_graphs_with_many_configurable_nodes(tiny_root, tmp_path):
    graphs = GraphSet(list_files(tiny_root, "layout:xla:random", "train"), "train", Preprocessing(), None)
    nodes = [len(graphs.load(i).config_node) for i in range(len(graphs))]
    budget = 3 * min(nodes)  # the smallest graph samples 3 configs, larger ones fewer, never under 2
    capped, free = TrainSet(graphs, 16, "uniform", budget), TrainSet(graphs, 16, "uniform", 0)
    for index, m in enumerate(nodes):
        rows = capped[(index, (0, 0, index))][1].rows
        assert len(rows) == min(16, max(budget // m, 2), graphs.num_configs(index))
        assert len(rows) * m <= max(budget, 2 * m)
        assert len(free[(index, (0, 0, index))][1].rows) == min(16, graphs.num_configs(index))


def test_eval_chunks_cover_each_config_once_in_row_order(datamodule):
    chunks = datamodule.eval_set("valid")
    graphs = datamodule.graphs("valid")
    for index in range(len(graphs)):
        rows = np.concatenate([i.rows for i in chunks.items if i.graph_id == index])
        assert rows.tolist() == list(range(graphs.num_configs(index)))


@pytest.mark.parametrize("count, chunk, sizes", [(0, 4, []), (3, 4, [3]), (8, 4, [4, 4]), (9, 4, [3, 3, 3]),
                                                (1001, 256, [251, 250, 250, 250]), (1001, 1024, [1001])])
def test_eval_chunks_are_the_fewest_of_near_equal_size(count: int, chunk: int, sizes: list[int]):
    """No chunk is a small remainder: the cross-config attention compares the configs a chunk holds."""
    parts = even_chunks(np.arange(count), chunk)
    assert [len(p) for p in parts] == sizes
    assert np.concatenate([np.arange(0), *parts]).tolist() == list(range(count))


def test_valid_configs_cap_each_file_on_a_fixed_seeded_subset(datamodule):
    graphs = datamodule.graphs("valid")
    counts = [graphs.num_configs(index) for index in range(len(graphs))]
    limit = max(min(counts) // 2, 1)
    first, again = (ChunkSet(graphs, 7, seed=5, configs=limit) for _ in range(2))
    other = ChunkSet(graphs, 7, seed=6, configs=limit)

    def rows(chunks: ChunkSet, index: int) -> np.ndarray:
        return np.concatenate([i.rows for i in chunks.items if i.graph_id == index])

    for index, count in enumerate(counts):
        mine = rows(first, index)
        assert len(mine) == len(np.unique(mine)) == min(limit, count) and mine.max() < count
        assert np.array_equal(mine, rows(again, index))
        assert all(len(i.rows) <= 7 for i in first.items)
    assert any(not np.array_equal(rows(first, i), rows(other, i)) for i in range(len(counts)) if counts[i] > limit)
    assert np.array_equal(rows(ChunkSet(graphs, 7, configs=10**6), 0), np.arange(counts[0]))


def test_valid_configs_reach_the_validation_loader_only(tiny_root, tmp_path):
    kwargs = dict(root=str(tiny_root), collection="layout:xla:random", cache_dir=str(tmp_path), eval_chunk=4)
    capped = TpuGraphsDataModule(**kwargs, valid_configs=3)
    capped.setup("fit")
    valid = capped.val_dataloader().dataset
    assert all(sum(len(i.rows) for i in valid.items if i.graph_id == g) == min(3, capped.graphs("valid")
               .num_configs(g)) for g in range(len(capped.graphs("valid"))))
    train_chunks = capped.eval_set("train")
    assert sum(len(i.rows) for i in train_chunks.items) == sum(
        capped.graphs("train").num_configs(g) for g in range(len(capped.graphs("train"))))
    with pytest.raises(ValueError, match=r"data.valid_configs=-1; expected configs per valid file at most"):
        TpuGraphsDataModule(**kwargs, valid_configs=-1)


@pytest.mark.parametrize("stem, group", [
    ("bert_pretraining.4x4.fp16", "bert_pretraining"), ("mlperf_bert_batch_24_2x2", "mlperf_bert"),
    ("resnet_v1_50_official_batch_128_bf16", "resnet_v1_50_official"),
    ("alexnet_train_batch_32_-1bac9e5e4d6bbbc4", "alexnet_train"), ("resnet_like_7", "resnet_like_7"),
])
def test_family_of_drops_the_parts_that_name_a_variant(stem, group):
    assert family_of(stem) == group


def test_folds_keep_model_variants_together_and_are_balanced():
    stems = [f"net{i}.{t}.fp{p}" for i in range(7) for t in ("2x2", "4x4") for p in (16, 32)] + ["solo"]
    fold_of = assign_folds(stems, 3)
    for i in range(7):
        assert len({f for s, f in zip(stems, fold_of) if s.startswith(f"net{i}.")}) == 1
    assert sorted(np.bincount(fold_of)) == [8, 9, 12] and np.array_equal(fold_of, assign_folds(stems, 3))
    with pytest.raises(ValueError, match="data.folds=9 but the files form only 8 families"):
        assign_folds(stems, 9)


def test_k_fold_splits_pool_train_and_valid_into_disjoint_folds(tiny_root, tmp_path):
    kwargs = dict(root=str(tiny_root), collection="layout:xla:random", cache_dir=str(tmp_path))
    plain = TpuGraphsDataModule(**kwargs)
    pool = sorted(split_files(plain.hparams, "train") + split_files(plain.hparams, "valid"))
    valids = []
    for fold in range(3):
        dm = TpuGraphsDataModule(**kwargs, folds=3, fold=fold)
        train, valid = split_files(dm.hparams, "train"), split_files(dm.hparams, "valid")
        assert valid and not set(train) & set(valid) and sorted(train + valid) == pool
        assert split_files(dm.hparams, "test") == split_files(plain.hparams, "test")
        valids += valid
    assert sorted(valids) == pool  # every graph is validated exactly once over the folds
    with pytest.raises(ValueError, match="data.fold=3; expected 0..2"):
        TpuGraphsDataModule(**kwargs, folds=3, fold=3)


def test_tile_data_refuses_layout_only_settings(tiny_root, tmp_path):
    kwargs = dict(root=str(tiny_root), collection="tile:xla", cache_dir=str(tmp_path))
    for wrong in ({}, {"prune": "none"}, {"prune": "none", "fill_default_layout": False, "segment_nodes": 8}):
        with pytest.raises(ValueError, match="no configurable nodes"):
            TpuGraphsDataModule(**kwargs, **wrong)
    TpuGraphsDataModule(**kwargs, prune="none", fill_default_layout=False)
    with pytest.raises(ValueError, match="data.config_work=true for tile:xla: it reads layout configs"):
        TpuGraphsDataModule(**kwargs, prune="none", fill_default_layout=False, config_work=True)
    layout = dict(root=str(tiny_root), collection="layout:xla:random", cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match="data.physical_tiles=true for layout:xla:random: its configs are layouts"):
        TpuGraphsDataModule(**layout, physical_tiles=True)


def test_physical_tiles_widen_the_tile_configs(tiny_root, tmp_path):
    kwargs = dict(root=str(tiny_root), collection="tile:xla", prune="none", fill_default_layout=False,
                  cache_dir=str(tmp_path))
    plain, physical = (TpuGraphsDataModule(**kwargs, physical_tiles=flag) for flag in (False, True))
    assert (plain.config_width, physical.config_width) == (24, 24 + PHYSICAL_TILE_FEATURES)
    graphs = plain.graphs("train"), physical.graphs("train")
    assert len(graphs[0]) == len(graphs[1]) > 0
    for i in range(len(graphs[0])):
        configs = np.asarray(graphs[1].load(i).configs)
        assert configs.shape[1] == physical.config_width
        np.testing.assert_array_equal(configs[:, :24], np.asarray(graphs[0].load(i).configs))


def test_tile_batch_matches_record(tiny_root, tmp_path):
    dm = TpuGraphsDataModule(root=str(tiny_root), collection="tile:xla", prune="none", fill_default_layout=False,
                             cache_dir=str(tmp_path))
    graphs = dm.graphs("valid")
    items = ChunkSet(graphs, 4).items[:2]
    batch = Collate(TILE)([(graphs.load(item.graph_id), item) for item in items])
    for g, item in enumerate(items):
        graph = graphs.load(item.graph_id)
        c = len(item.rows)
        np.testing.assert_array_equal(batch.config_feat[g, :c].numpy(), np.asarray(graph.configs)[item.rows])
        np.testing.assert_array_equal(batch.config_index[g, :c].numpy(), np.asarray(graph.config_index)[item.rows])
        assert batch.config_mask[g].sum() == c and (batch.config_feat[g, c:] == PAD).all()


def test_segment_budget_adds_node_segments_to_large_batches(tiny_root, tmp_path):
    dm = TpuGraphsDataModule(root=str(tiny_root), collection="layout:xla:random", cache_dir=str(tmp_path))
    graphs = dm.graphs("train")
    item = ChunkSet(graphs, 4).items[0]
    samples = [(graphs.load(item.graph_id), item)]
    n = len(samples[0][0].node_opcode)
    assert Collate(LAYOUT, segment_nodes=n)(samples).node_segment is None  # within the budget: whole graph
    segment = Collate(LAYOUT, segment_nodes=max(n // 3, 1))(samples).node_segment
    assert segment.shape == (n,) and segment.max() >= 1
    assert (segment.diff() >= 0).all() and np.bincount(segment.numpy()).min() > 0  # consecutive, none empty
