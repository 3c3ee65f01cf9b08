"""Segment training: partitions, exact reassembly of the whole-graph scores, the historical table, the head phase."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from npz_factory import layout_arrays
from test_model import collate, make_model, random_graph

from solution.data.datamodule import Collate, TpuGraphsDataModule
from solution.data.partition import partition
from solution.data.preprocess import Preprocessing, build_record, pruned_bounds
from solution.data.reader import RawGraph
from solution.training.segments import SegmentTraining, split

LAYERS = 4  # graph_layers + config_layers of the default LayoutRanker


def segmented(graphs: list[dict[str, torch.Tensor]], budget: int) -> dict[str, torch.Tensor]:
    """A layout batch whose graphs are cut into runs of at most `budget` nodes."""
    batch = collate(graphs)
    first, parts = 0, []
    for g in graphs:
        parts.append(torch.from_numpy(partition(len(g["node_opcode"]), np.zeros(0, np.int64), budget)) + first)
        first = int(parts[-1].max()) + 1
    return {**batch, "node_segment": torch.cat(parts), "graph_id": torch.arange(len(graphs))}


def layout_graphs() -> list[dict[str, torch.Tensor]]:
    return [random_graph("layout", 40, 6, 5, seed=1), random_graph("layout", 25, 4, 3, seed=2)]


def config_free_tail(nodes: int = 40, configs: int = 5) -> dict[str, torch.Tensor]:
    """A chain graph whose configurable nodes are all among its first 8 nodes: later segments are config-free."""
    graph = random_graph("layout", nodes, configs, 3, seed=4)
    graph["edge_index"] = torch.stack([torch.arange(nodes - 1), torch.arange(1, nodes)])
    graph["config_node"] = torch.tensor([0, 3, 6])
    return graph


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
        raw = RawGraph(None, "layout", arrays["node_feat"], arrays["node_opcode"].astype(np.int64),
                       arrays["edge_index"], arrays["node_config_feat"], arrays["config_runtime"],
                       config_node_ids=arrays["node_config_ids"], node_splits=stored)
        records.append(build_record(raw, Preprocessing(prune="none"), dedup_configs=False)[0]["node_split"])
    assert np.array_equal(records[0], records[1]) and records[0].tolist() == splits.tolist()


@pytest.mark.parametrize("settings", [{}, {"encode_once": False}, {"edge_direction": "both"},
                                      {"cross_attention": False}])
def test_a_halo_of_every_layer_reproduces_the_whole_graph_scores(settings):
    model, batch = make_model("layout", **settings), segmented(layout_graphs(), budget=9)
    assert len(split(batch)) > 4
    with torch.no_grad():
        whole = model(batch)
        exact = SegmentTraining(halo=LAYERS).scores(model, batch, "eval")
        cut = SegmentTraining(halo=0).scores(model, batch, "eval")
    torch.testing.assert_close(exact, whole, atol=1e-5, rtol=1e-5)
    assert (cut - whole).abs().max() > 1e-3  # cutting the edges between segments does change the model


def test_one_segment_per_graph_is_the_whole_graph():
    model, batch = make_model("layout"), segmented(layout_graphs(), budget=1000)
    with torch.no_grad():
        torch.testing.assert_close(SegmentTraining().scores(model, batch, "eval"), model(batch), atol=1e-6, rtol=0)


def test_segment_scores_follow_a_permutation_of_the_configs():
    model, batch = make_model("layout"), segmented(layout_graphs(), budget=9)
    order = torch.randperm(batch["config_mask"].size(1), generator=torch.Generator().manual_seed(0))
    permuted = {**batch, "config_feat": batch["config_feat"][:, order], "config_mask": batch["config_mask"][:, order]}
    with torch.no_grad():
        scores = SegmentTraining().scores(model, batch, "eval")
        torch.testing.assert_close(SegmentTraining().scores(model, permuted, "eval"), scores[:, order])


def test_training_backpropagates_through_the_sampled_segments_only():
    model, batch = make_model("layout"), segmented([config_free_tail()], budget=8)
    training = SegmentTraining(sampled=1, keep_stale=1.0)
    used = []
    original = model.embed

    def spy(sub):
        h, z = original(sub)
        used.append(z.requires_grad)
        return h, z

    model.embed = spy
    scores = training.scores(model, batch, "train")
    assert used == [False] * 5  # no graph kept in the forward pass: the sampled segment is checkpointed
    scores.sum().backward()
    assert used[5:] == [True]  # the backward pass computes that one segment again, with gradients
    assert all(p.grad is not None for p in model.encoder.parameters())


@pytest.mark.parametrize("settings", [{}, {"encode_once": False}])
def test_every_segment_with_gradients_gives_the_whole_graph_gradient(settings):
    batch = segmented(layout_graphs(), budget=9)
    whole, parts = make_model("layout", **settings), make_model("layout", **settings)
    whole(batch).square().sum().backward()
    SegmentTraining(sampled=0, halo=LAYERS).scores(parts, batch, "train").square().sum().backward()
    for (name, a), b in zip(whole.named_parameters(), parts.parameters()):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_the_table_holds_config_free_segments_until_refreshed():
    model, batch = make_model("layout"), segmented([config_free_tail()], budget=8)
    segments = split(batch)
    free = [i for i, s in enumerate(segments) if s.config_free]  # one graph: the position is the table key
    assert free == [1, 2, 3, 4] and len(segments) == 5
    training = SegmentTraining(sampled=5, keep_stale=1.0, refresh_every=2)
    with torch.no_grad():
        fresh = training.scores(model, batch, "train", epoch=0)  # every segment sampled: all fresh
        assert sorted(k[1] for k in training.table) == free
        torch.testing.assert_close(fresh, SegmentTraining().scores(model, batch, "eval"))
        training.sampled = 1
        for p in model.encoder.parameters():
            p.add_(0.1)
        stale = training.scores(model, batch, "train", epoch=1)  # within refresh_every: old table entries
        now = SegmentTraining().scores(model, batch, "eval")
        assert (stale - now).abs().max() > 1e-3
        torch.testing.assert_close(training.scores(model, batch, "eval"), now)  # evaluation: always fresh
        refreshed = SegmentTraining(sampled=1, keep_stale=1.0, refresh_every=2)
        refreshed.table = {key: (0, pool) for key, (_, pool) in training.table.items()}
        torch.testing.assert_close(refreshed.scores(model, batch, "train", epoch=2), now)  # two epochs old: redone


def test_stale_dropout_leaves_table_entries_out_of_the_pool():
    model, batch = make_model("layout"), segmented([config_free_tail()], budget=8)
    kept, dropped = SegmentTraining(sampled=1, keep_stale=1.0), SegmentTraining(sampled=1, keep_stale=1e-9)
    with torch.no_grad():
        for training in (kept, dropped):
            training.scores(model, batch, "train")  # fills the table
        assert torch.equal(kept.scores(model, batch, "head"), dropped.scores(model, batch, "head"))  # no dropout
        differ = [(kept.scores(model, batch, "train") - dropped.scores(model, batch, "train")).abs().max()
                  for _ in range(5)]
    assert min(differ) > 1e-4


def test_settings_are_checked():
    for bad in ({"sampled": -1}, {"keep_stale": 0.0}, {"keep_stale": 1.5}, {"refresh_every": 0}, {"halo": -1}):
        with pytest.raises(ValueError):
            SegmentTraining(**bad)
    with pytest.raises(ValueError, match="segment_nodes"):
        TpuGraphsDataModule(segment_nodes=-1)


def test_collate_numbers_segments_across_the_batch(tiny_root):
    data = TpuGraphsDataModule(root=str(tiny_root), collection="layout:xla:random")
    graphs = data.graphs("train")
    first_chunk = {item.graph_id: item for item in reversed(data.eval_set("train").items)}
    samples = [(graphs.load(i), first_chunk[i]) for i in range(2)]
    budget = max(min(m["nodes"] for m in graphs.meta[:2]) // 2, 1)
    batch = Collate("layout", segment_nodes=budget)(samples)
    segment, node_graph = batch["node_segment"].numpy(), batch["node_graph"].numpy()
    assert len(segment) == len(node_graph) and segment[0] == 0 and np.all(np.diff(segment) >= 0)
    assert not set(segment[node_graph == 0]) & set(segment[node_graph == 1])  # no segment spans two graphs
    assert np.bincount(segment).max() <= budget and len(np.unique(segment[node_graph == 0])) >= 2
    assert "node_segment" not in Collate("layout")(samples)


def test_the_head_phase_trains_the_readout_only(tiny_root):
    import lightning.pytorch as pl

    from solution.training.module import RankingModule

    class Watch(pl.Callback):
        def on_train_epoch_start(self, trainer, module):
            self.before = {k: v.clone() for k, v in module.model.state_dict().items()}

        def on_train_epoch_end(self, trainer, module):
            after = module.model.state_dict()
            self.changed = {k.split(".")[0] for k, v in after.items() if not torch.equal(v, self.before[k])}

    data = TpuGraphsDataModule(root=str(tiny_root), collection="layout:xla:random", configs_per_graph=8,
                               segment_nodes=16)
    module = RankingModule(node_feat_dim=data.node_feat_dim, hidden=16, opcode_dim=4, heads=2, head_epochs=1)
    watch = Watch()
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, limit_val_batches=0, callbacks=[watch])
    trainer.fit(module, data)
    assert watch.changed == {"readout"}
    with pytest.raises(ValueError, match="head_epochs"):
        RankingModule(variant="config_only", head_epochs=1)
