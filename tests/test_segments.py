"""Segment training: partitions, exact reassembly of the whole-graph scores, the historical table, the head phase,
reproducible draws and the table's round trip through checkpoints.

The batches are the package's: npz_factory files preprocessed by `load_graph` and batched by `Collate` with a
segment budget (see test_model)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from npz_factory import layout_arrays
from test_model import batch_of, make_model, preprocess

from solution.data.batch import Batch, Collate
from solution.data.datamodule import TpuGraphsDataModule
from solution.data.partition import partition
from solution.data.preprocess import Graph, Preprocessing, build_record, pruned_bounds
from solution.data.reader import RawGraph
from solution.data.tasks import LAYOUT
from solution.models.losses import PairwiseHinge
from solution.models.rankers import LayoutRanker
from solution.models.segments import SegmentTraining, split
from solution.models.spec import build
from solution.training.module import RankingModule

LAYERS = 6  # hops of the default LayoutRanker: graph_layers 2 + 2 per link block x config_layers 2
WHOLE = Preprocessing(prune="none")  # graphs kept whole, so that they are larger than the segment budgets


def layout_graphs() -> list[Graph]:
    """Two layout graphs of 40 and 25 nodes (3 and 2 computations), 6 and 4 configs, 5 and 3 configurable nodes."""
    return [preprocess(layout_arrays(n=40, c=6, nc=5, computations=3, seed=1), WHOLE),
            preprocess(layout_arrays(n=25, c=4, nc=3, computations=2, seed=2), WHOLE)]


def config_free_tail(nodes: int = 40, configs: int = 5) -> Graph:
    """A chain graph whose configurable nodes are all among its first 8 nodes: later segments are config-free."""
    arrays = layout_arrays(n=nodes, c=configs, nc=3, computations=1, seed=4)
    configurable = np.array([0, 3, 6])
    arrays["node_opcode"][arrays["node_config_ids"]] = 1  # the factory's own picks: no longer configurable
    arrays["node_opcode"][configurable] = 26  # convolution
    arrays["node_config_ids"] = configurable
    arrays["edge_index"] = np.stack([np.arange(1, nodes), np.arange(nodes - 1)], axis=1)  # [consumer, producer]
    return preprocess(arrays, WHOLE)


def segmented(graphs: list[Graph], budget: int, ids: list[int] | None = None) -> Batch:
    """The package's batch of `graphs` with a segment budget (every config of each graph)."""
    batch = batch_of(LAYOUT, graphs, ids=ids, segment_nodes=budget)
    assert batch.node_segment is not None
    return batch


def whole(batch: Batch) -> Batch:
    """The same batch without its segments: the ranker scores whole graphs."""
    return batch.replace(node_segment=None)


@pytest.mark.parametrize("starts, budget", [([], 7), ([5, 6, 30], 10), ([3, 9, 12, 40], 16), ([], 100)])
def test_partition_keeps_runs_consecutive_within_the_budget(starts, budget):
    segment = partition(50, np.array(starts, np.int64), budget)
    sizes = np.bincount(segment)
    assert segment[0] == 0 and np.all(np.diff(segment) >= 0) and np.all(np.diff(segment) <= 1)  # consecutive runs
    assert sizes.max() <= budget and sizes.min() > 0
    assert len(sizes) <= 2 * -(-50 // budget) + len(starts)  # merged: never many tiny segments


def test_partition_balances_a_long_computation_and_merges_short_ones():
    assert np.bincount(partition(25, np.zeros(0, np.int64), 10)).tolist() == [8, 8, 9]
    # computations of 2, 2, 3 and 18 nodes: the three short ones share a segment, the long one is cut in two
    assert np.bincount(partition(25, np.array([2, 4, 7]), 10)).tolist() == [7, 9, 9]
    with pytest.raises(ValueError, match="budget"):
        partition(10, np.zeros(0, np.int64), 0)


def test_pruned_bounds_map_each_computation_to_its_kept_nodes():
    keep = np.array([0, 1, 1, 0, 0, 1, 1, 0], bool)  # kept nodes 1, 2, 5, 6 -> pruned ids 0..3
    # computations [0, 3) [3, 4) [4, 6) [6, 7) [7, 8) keep 2, 0, 1, 1, 0 nodes: the empty ones disappear
    assert pruned_bounds(np.array([0, 3, 4, 6, 7, 8]), keep).tolist() == [0, 2, 3, 4]
    assert pruned_bounds(np.array([0, 8]), keep).tolist() == [0, 4]


SCAN_SPLITS = [0, 23, 32, 55, 64, 86]  # a program with two while loops, as the official encoder writes it


@pytest.mark.parametrize("budget", [10, 30, 40, 100])
def test_partition_is_the_same_with_or_without_the_trailing_n(budget):
    full = partition(86, np.array(SCAN_SPLITS), budget)
    assert np.array_equal(full, partition(86, np.array(SCAN_SPLITS[:-1]), budget))
    changes = np.flatnonzero(np.diff(full)) + 1  # first node of each segment but the first
    sizes = np.diff(SCAN_SPLITS)
    if budget >= sizes.max():  # every computation fits: segments are unions of whole computations
        assert set(changes.tolist()) <= set(SCAN_SPLITS)
    assert np.bincount(full).max() <= budget


def test_preprocessed_bounds_do_not_depend_on_the_trailing_n():
    arrays = layout_arrays(n=40, c=4, nc=5, computations=4, seed=3)
    splits = arrays["node_splits"].reshape(-1)
    records = []
    for stored in (splits, splits[:-1]):
        raw = RawGraph(None, LAYOUT, arrays["node_feat"], arrays["node_opcode"].astype(np.int64),
                       arrays["edge_index"], arrays["node_config_feat"], arrays["config_runtime"],
                       config_node_ids=arrays["node_config_ids"], node_splits=stored)
        records.append(build_record(raw, Preprocessing(prune="none"), dedup_configs=False)[0]["node_split"])
    assert np.array_equal(records[0], records[1]) and records[0].tolist() == splits.tolist()


def test_batches_are_cut_along_the_records_computations():
    graphs = layout_graphs()
    batch = segmented(graphs, budget=9)
    assert batch.target is not None and batch.graph_id.tolist() == [0, 1]
    for g, graph in enumerate(graphs):
        expected = partition(len(graph.node_opcode), np.asarray(graph.node_split), 9)
        mine = batch.node_segment[batch.node_graph == g].numpy()
        assert np.array_equal(mine - mine.min(), expected)


@pytest.mark.parametrize("settings", [{}, {"config_layers": 1}, {"edge_direction": "both"},
                                      {"cross_attention": False}, {"config_hidden": 8}])
def test_a_halo_of_every_layer_reproduces_the_whole_graph_scores(settings):
    model, batch = make_model(LAYOUT, **settings), segmented(layout_graphs(), budget=9)
    assert len(split(batch)) > 4
    with torch.no_grad():
        scores = model(whole(batch))
        exact = SegmentTraining(halo=LAYERS)(model, batch, "eval")
        cut = SegmentTraining(halo=0)(model, batch, "eval")
    torch.testing.assert_close(exact, scores, atol=1e-5, rtol=1e-5)
    assert (cut - scores).abs().max() > 1e-3  # cutting the edges between segments does change the model


def test_the_ranker_scores_a_segmented_batch_by_its_segments():
    """`ranker(batch)` with node_segment set hands the batch to its own SegmentTraining (halo from its settings)."""
    batch = segmented(layout_graphs(), budget=9)
    exact, cut = make_model(LAYOUT, segment_halo=LAYERS), make_model(LAYOUT)
    with torch.no_grad():
        scores = exact(whole(batch))
        torch.testing.assert_close(exact(batch), scores, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(cut(batch), SegmentTraining()(cut, batch, "eval"))
        assert (cut(batch) - scores).abs().max() > 1e-3


def test_one_segment_per_graph_is_the_whole_graph():
    model, batch = make_model(LAYOUT), batch_of(LAYOUT, layout_graphs(), segment_nodes=1000)
    assert batch.node_segment is None  # within the budget: whole graphs
    one_each = batch.replace(node_segment=batch.node_graph.clone())
    with torch.no_grad():
        torch.testing.assert_close(SegmentTraining()(model, one_each, "eval"), model(batch), atol=1e-6, rtol=0)


def test_segment_scores_follow_a_permutation_of_the_configs():
    model, batch = make_model(LAYOUT), segmented(layout_graphs(), budget=9)
    order = torch.randperm(batch.config_mask.size(1), generator=torch.Generator().manual_seed(0))
    permuted = batch.replace(config_feat=batch.config_feat[:, order], config_mask=batch.config_mask[:, order])
    with torch.no_grad():
        scores = SegmentTraining()(model, batch, "eval")
        torch.testing.assert_close(SegmentTraining()(model, permuted, "eval"), scores[:, order])


def test_training_backpropagates_through_the_sampled_segments_only():
    model, batch = make_model(LAYOUT), segmented([config_free_tail()], budget=8)
    training = SegmentTraining(sampled=1, keep_stale=1.0)
    used = []
    original = model.embed

    def spy(sub):
        h, z, links = original(sub)
        used.append(z.requires_grad)
        return h, z, links

    model.embed = spy
    scores = training(model, batch, "train")
    assert used == [False] * 5  # no graph kept in the forward pass: the sampled segment is checkpointed
    scores.sum().backward()
    assert used[5:] == [True]  # the backward pass computes that one segment again, with gradients
    assert all(p.grad is not None for p in model.encoder.parameters())


@pytest.mark.parametrize("settings", [{}, {"cross_attention": False}, {"config_hidden": 8}])
def test_every_segment_with_gradients_gives_the_whole_graph_gradient(settings):
    batch = segmented(layout_graphs(), budget=9)
    whole_model, parts = make_model(LAYOUT, **settings), make_model(LAYOUT, **settings)
    whole_model(whole(batch)).square().sum().backward()
    SegmentTraining(sampled=0, halo=LAYERS)(parts, batch, "train").square().sum().backward()
    for (name, a), b in zip(whole_model.named_parameters(), parts.parameters()):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_the_table_holds_config_free_segments_until_refreshed():
    model, batch = make_model(LAYOUT), segmented([config_free_tail()], budget=8, ids=[7])
    segments = split(batch)
    free = [i for i, s in enumerate(segments) if s.config_free]  # one graph: the position is the table key
    assert free == [1, 2, 3, 4] and len(segments) == 5
    training = SegmentTraining(sampled=5, keep_stale=1.0, refresh_every=2)
    with torch.no_grad():
        fresh = training(model, batch, "train", epoch=0)  # every segment sampled: all fresh
        assert sorted(training.table) == [(7, i) for i in free]  # keyed by (graph id, segment)
        torch.testing.assert_close(fresh, SegmentTraining()(model, batch, "eval"))
        training.sampled = 1
        for p in model.encoder.parameters():
            p.add_(0.1)
        stale = training(model, batch, "train", epoch=1)  # within refresh_every: old table entries
        now = SegmentTraining()(model, batch, "eval")
        assert (stale - now).abs().max() > 1e-3
        torch.testing.assert_close(training(model, batch, "eval"), now)  # evaluation: always fresh
        refreshed = SegmentTraining(sampled=1, keep_stale=1.0, refresh_every=2)
        refreshed.table = {key: (0, pool) for key, (_, pool) in training.table.items()}
        torch.testing.assert_close(refreshed(model, batch, "train", epoch=2), now)  # two epochs old: redone


def test_stale_dropout_leaves_table_entries_out_of_the_pool():
    model, batch = make_model(LAYOUT), segmented([config_free_tail()], budget=8)
    kept, dropped = SegmentTraining(sampled=1, keep_stale=1.0), SegmentTraining(sampled=1, keep_stale=1e-9)
    with torch.no_grad():
        for training in (kept, dropped):
            training(model, batch, "train")  # fills the table
        assert torch.equal(kept(model, batch, "head"), dropped(model, batch, "head"))  # no dropout
        differ = [(kept(model, batch, "train", epoch) - dropped(model, batch, "train", epoch)).abs().max()
                  for epoch in range(5)]
    assert min(differ) > 1e-4


def test_settings_are_checked():
    for bad in ({"sampled": -1}, {"keep_stale": 0.0}, {"keep_stale": 1.5}, {"refresh_every": 0}, {"halo": -1}):
        with pytest.raises(ValueError):
            SegmentTraining(**bad)
    with pytest.raises(ValueError, match="segment_sampled"):
        make_model(LAYOUT, segment_sampled=-1)  # the ranker's arguments reach its SegmentTraining
    with pytest.raises(ValueError, match="mode"):
        SegmentTraining()(make_model(LAYOUT), segmented([config_free_tail()], budget=8), "predict")
    with pytest.raises(ValueError, match="segment_nodes"):
        TpuGraphsDataModule("layout:xla:random", segment_nodes=-1)


def test_collate_numbers_segments_across_the_batch(tiny_root):
    data = TpuGraphsDataModule(root=str(tiny_root), collection="layout:xla:random")
    graphs = data.graphs("train")
    first_chunk = {item.graph_id: item for item in reversed(data.eval_set("train").items)}
    samples = [(graphs.load(i), first_chunk[i]) for i in range(2)]
    budget = max(min(m["nodes"] for m in graphs.meta[:2]) // 2, 1)
    batch = Collate(LAYOUT, segment_nodes=budget)(samples)
    segment, node_graph = batch.node_segment.numpy(), batch.node_graph.numpy()
    assert len(segment) == len(node_graph) and segment[0] == 0 and np.all(np.diff(segment) >= 0)
    assert not set(segment[node_graph == 0]) & set(segment[node_graph == 1])  # no segment spans two graphs
    assert np.bincount(segment).max() <= budget and len(np.unique(segment[node_graph == 0])) >= 2
    assert Collate(LAYOUT)(samples).node_segment is None


# ---- reproducible draws ----------------------------------------------------------------------------------------


def training_scores(ranker: LayoutRanker, batch: Batch, epoch: int, seed: int = 0) -> torch.Tensor:
    """The ranker's training-mode scores of `batch` at `epoch`, under `torch.manual_seed(seed)` (what
    seed_everything sets); no optimizer step, so only the segment draws can change them."""
    torch.manual_seed(seed)
    ranker.train()
    ranker.begin_epoch(epoch, max_epochs=100)
    with torch.no_grad():
        return ranker(batch)


def twin(ranker: LayoutRanker) -> LayoutRanker:
    """A ranker built from `ranker`'s spec with its weights (and its table: state_dict holds it)."""
    torch.manual_seed(123)  # other initial weights, replaced by the loaded ones
    other = build(ranker.spec)
    other.load_state_dict(ranker.state_dict())
    return other


def test_segment_draws_are_reproducible_and_change_with_the_epoch():
    batch = segmented([config_free_tail()], budget=8)
    first = make_model(LAYOUT, segment_sampled=1)  # keep_stale 0.5: each stale entry is a coin flip
    second = twin(first)
    by_epoch = []
    for epoch in range(6):
        a = training_scores(first, batch, epoch)
        torch.rand(17), random.random(), np.random.rand()  # other draws in between change nothing
        b = training_scores(second, batch, epoch)
        assert torch.equal(a, b), epoch
        by_epoch.append(a)
    assert not all(torch.equal(by_epoch[0], s) for s in by_epoch[1:])  # other epochs, other segments
    others = [training_scores(first, batch, epoch, seed=1) for epoch in range(6)]
    assert not all(torch.equal(a, b) for a, b in zip(by_epoch, others))  # the run's seed is part of the draw


def test_segment_draws_depend_on_the_graph_not_its_place_in_the_batch():
    tail = config_free_tail()
    ranker = make_model(LAYOUT, segment_sampled=1)
    alone = training_scores(ranker, segmented([tail], budget=8, ids=[5]), epoch=3)
    other = preprocess(layout_arrays(n=20, c=5, nc=2, seed=9), WHOLE)
    paired = training_scores(twin(make_model(LAYOUT, segment_sampled=1)),
                             segmented([other, tail], budget=8, ids=[2, 5]), epoch=3)
    torch.testing.assert_close(paired[1], alone[0], atol=1e-5, rtol=1e-5)
    # the same graph under other ids (another file of the split): other draws
    renamed = [training_scores(twin(ranker), segmented([tail], budget=8, ids=[i]), epoch=3) for i in range(6)]
    assert not all(torch.equal(renamed[0], s) for s in renamed[1:])


# ---- the historical table in the ranker's state -----------------------------------------------------------------


def filled(sampled: int = 1, refresh_every: int = 2) -> tuple[LayoutRanker, Batch]:
    """A ranker whose table holds the config-free segments of a prune="none" record larger than the budget."""
    batch = segmented([config_free_tail()], budget=8, ids=[3])
    ranker = make_model(LAYOUT, segment_sampled=sampled, segment_keep_stale=1.0, segment_refresh_every=refresh_every)
    ranker.train()
    ranker.begin_epoch(0, max_epochs=10)
    torch.manual_seed(0)
    PairwiseHinge()(ranker(batch), batch.target, batch.config_mask).backward()  # a training step's forward
    assert sorted(ranker.segments.table) == [(3, i) for i in (1, 2, 3, 4)]
    return ranker, batch


def assert_same_table(loaded: SegmentTraining, saved: SegmentTraining) -> None:
    assert list(loaded.table) == list(saved.table) and loaded.table
    for key, (epoch, pool) in saved.table.items():
        other_epoch, other = loaded.table[key]
        assert other_epoch == epoch and other.count == pool.count
        for name in ("z_sum", "z_max", "h_sum", "h_max"):
            assert torch.equal(getattr(other, name), getattr(pool, name)), (key, name)


def test_the_table_round_trips_through_the_state_dict():
    ranker, batch = filled()
    state = ranker.state_dict()
    assert "segments._extra_state" in state
    restored = twin(ranker)
    assert_same_table(restored.segments, ranker.segments)
    empty = twin(ranker)
    empty.segments.table = {}
    with torch.no_grad():  # a step of the optimizer: the table now holds stale states
        for model in (ranker, restored, empty):
            for p in model.encoder.parameters():
                p.add_(0.05)
    resumed, original = training_scores(restored, batch, 1), training_scores(ranker, batch, 1)
    assert torch.equal(resumed, original)  # the resumed run is the run it continues
    assert (training_scores(empty, batch, 1) - original).abs().max() > 1e-4  # without the table it would not be


def test_the_table_round_trips_through_a_checkpoint(tmp_path):
    ranker, batch = filled()
    module = RankingModule(ranker, PairwiseHinge(margin=0.5), task="layout", lr=3e-4)
    path = tmp_path / "last.ckpt"
    # what Lightning writes: the hyper-parameters as a plain dict, the state dict
    torch.save({"hyper_parameters": dict(module.hparams), "state_dict": module.state_dict()}, path)
    checkpoint = torch.load(path, weights_only=True)  # no pickled code: specs, tensors and numbers only
    hparams = checkpoint["hyper_parameters"]
    assert hparams["ranker"] == ranker.spec and hparams["loss"]["init_args"]["margin"] == 0.5
    assert "ranker.segments._extra_state" in checkpoint["state_dict"]
    torch.manual_seed(7)
    loaded = RankingModule(**hparams)
    loaded.load_state_dict(checkpoint["state_dict"])
    assert type(loaded.ranker) is LayoutRanker and type(loaded.loss_fn) is PairwiseHinge
    assert loaded.hparams.lr == 3e-4 and loaded.loss_fn.margin == 0.5
    assert_same_table(loaded.ranker.segments, ranker.segments)
    for (name, a), b in zip(ranker.state_dict().items(), loaded.ranker.state_dict().values()):
        if not name.endswith("_extra_state"):
            assert torch.equal(a, b), name
    assert torch.equal(training_scores(loaded.ranker, batch, 1), training_scores(ranker, batch, 1))


def test_the_head_phase_trains_the_readout_only(tiny_root, tmp_path):
    import lightning.pytorch as pl

    def tensors(module):
        return {k: v.clone() for k, v in module.ranker.state_dict().items() if isinstance(v, torch.Tensor)}

    class Watch(pl.Callback):
        def on_train_epoch_start(self, trainer, module):
            self.before = tensors(module)

        def on_train_epoch_end(self, trainer, module):
            after = tensors(module)
            self.changed = {k.split(".")[0] for k, v in after.items() if not torch.equal(v, self.before[k])}

    data = TpuGraphsDataModule(root=str(tiny_root), collection="layout:xla:random", configs_per_graph=8,
                               segment_nodes=16)
    ranker = LayoutRanker(data.node_feat_dim, data.config_width, hidden=16, opcode_dim=4, heads=2, head_epochs=1)
    module = RankingModule(ranker, PairwiseHinge())
    watch = Watch()
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, limit_val_batches=0, callbacks=[watch])
    trainer.fit(module, data)
    assert ranker.head_phase and watch.changed == {"readout"}
    trainer.save_checkpoint(tmp_path / "last.ckpt")  # and a checkpoint of the run rebuilds its modules
    loaded = RankingModule.load_from_checkpoint(tmp_path / "last.ckpt", weights_only=True)
    assert loaded.ranker.spec == ranker.spec and loaded.loss_fn.spec == module.loss_fn.spec
    assert all(torch.equal(v, tensors(module)[k]) for k, v in tensors(loaded).items())
