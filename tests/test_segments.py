"""Segment training: partitions, exact reassembly of the whole graph's scores and gradients, every segment
checkpointed.

The batches are the package's: npz_factory files preprocessed by `load_graph` and batched by `Collate` with a
segment budget (see test_model)."""

from __future__ import annotations

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
from solution.models.segments import segmented_scores, split

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
        records.append(build_record(raw, Preprocessing(prune="none"), train=False)[0]["node_split"])
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
                                      {"cross_attention": False}, {"config_hidden": 8}, {"physical_layout": True},
                                      {"operand_layouts": True}, {"runtime_sum": 3.0}])
def test_a_halo_of_every_layer_reproduces_the_whole_graph_scores(settings):
    model, batch = make_model(LAYOUT, live=True, **settings), segmented(layout_graphs(), budget=9)
    if settings.get("operand_layouts"):  # each configurable node's own operand columns, for its segment to carry
        shape = (*batch.config_node.shape, 30)
        batch = batch.replace(config_operands=torch.rand(shape, generator=torch.Generator().manual_seed(0)) * 8)
    assert len(split(batch)) > 4
    with torch.no_grad():
        scores = model(whole(batch))
        exact = segmented_scores(model, batch, halo=LAYERS)
        cut = segmented_scores(model, batch)
    torch.testing.assert_close(exact, scores, atol=1e-5, rtol=1e-5)
    assert (cut - scores).abs().max() > 1e-3  # cutting the edges between segments does change the model


def test_the_ranker_scores_a_segmented_batch_by_its_segments():
    """`ranker(batch)` with node_segment set scores it segment by segment, in training and in evaluation."""
    batch, model = segmented(layout_graphs(), budget=9), make_model(LAYOUT)
    with torch.no_grad():
        torch.testing.assert_close(model(batch), segmented_scores(model, batch))
        assert (model(batch) - model(whole(batch))).abs().max() > 1e-3
    torch.testing.assert_close(model.train()(batch), segmented_scores(model, batch))


def test_one_segment_per_graph_is_the_whole_graph():
    model, batch = make_model(LAYOUT), batch_of(LAYOUT, layout_graphs(), segment_nodes=1000)
    assert batch.node_segment is None  # within the budget: whole graphs
    one_each = batch.replace(node_segment=batch.node_graph.clone())
    with torch.no_grad():
        torch.testing.assert_close(segmented_scores(model, one_each), model(batch), atol=1e-6, rtol=0)


def test_segment_scores_follow_a_permutation_of_the_configs():
    model, batch = make_model(LAYOUT), segmented(layout_graphs(), budget=9)
    order = torch.randperm(batch.config_mask.size(1), generator=torch.Generator().manual_seed(0))
    permuted = batch.replace(config_feat=batch.config_feat[:, order], config_mask=batch.config_mask[:, order])
    with torch.no_grad():
        scores = segmented_scores(model, batch)
        torch.testing.assert_close(segmented_scores(model, permuted), scores[:, order])


def test_every_segment_is_checkpointed_and_recomputed_with_gradients():
    model, batch = make_model(LAYOUT), segmented([config_free_tail()], budget=8)
    segments = len(split(batch))
    used = []
    original = model.embed

    def spy(sub):
        h, z, links = original(sub)
        used.append(z.requires_grad)
        return h, z, links

    model.embed = spy
    scores = segmented_scores(model, batch)
    assert used == [False] * segments  # no graph kept in the forward pass: every segment is checkpointed
    scores.sum().backward()
    assert used[segments:] == [True] * segments  # the backward computes each one again, with gradients
    assert all(p.grad is not None for p in model.encoder.parameters())


@pytest.mark.parametrize("settings", [{}, {"cross_attention": False}, {"config_hidden": 8}, {"runtime_sum": 3.0}])
def test_every_segment_with_gradients_gives_the_whole_graph_gradient(settings):
    batch = segmented(layout_graphs(), budget=9)
    whole_model, parts = make_model(LAYOUT, **settings), make_model(LAYOUT, **settings)
    whole_model(whole(batch)).square().sum().backward()
    segmented_scores(parts, batch, halo=LAYERS).square().sum().backward()
    for (name, a), b in zip(whole_model.named_parameters(), parts.parameters()):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_a_negative_segment_budget_is_refused():
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
