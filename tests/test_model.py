"""Rankers: shapes, masking, config-order invariance, coupling, config links, graph independence.

The batches are the ones training feeds a ranker: small files written with npz_factory, preprocessed by the
package (`load_graph`), batched by its `Collate` (with targets), standardized as `RankingModule.forward` does.
"""

from __future__ import annotations

import functools
import math
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from npz_factory import layout_arrays, tile_arrays, write_npz
from scipy.stats import kendalltau
from torch.nn import functional as F
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils.flop_counter import FlopCounterMode

from solution.constants import PAD
from solution.data.batch import Batch, Collate, Item
from solution.data.datamodule import TpuGraphsDataModule
from solution.data.features import Standardizer
from solution.data.preprocess import Graph, Preprocessing, load_graph
from solution.data.reader import read_graph
from solution.data.tasks import LAYOUT, TILE, Task
from solution.errors import SettingsError
from solution.format import LAYOUT_GROUP
from solution.models import layers, scatter
from solution.models.baselines import ConfigOnlyRanker, EarlyFusionRanker
from solution.models.layers import ConfigLinks, LinkBlock, SAGEBlock, in_chunks
from solution.models.losses import PairwiseHinge
from solution.models.rankers import (
    LayoutRanker,
    TileRanker,
    literal_tile_features,
    operand_layout_features,
    physical_layout_features,
)
from solution.models.spec import build
from solution.physics.propagation import WORK_FEATURES, Propagation

SMALL = dict(hidden=16, opcode_dim=4, heads=2)
TASK_IDS = {"argnames": "task", "argvalues": [LAYOUT, TILE], "ids": ["layout", "tile"]}
needs_torch_scatter = pytest.mark.skipif(  # `make test` sets SOLUTION_REQUIRE_SCATTER=1: fail, do not skip
    not scatter.AVAILABLE and not os.environ.get("SOLUTION_REQUIRE_SCATTER"), reason="torch_scatter not installed"
)


def preprocess(arrays: dict[str, np.ndarray], settings: Preprocessing, split: str = "valid") -> Graph:
    """The record the data module builds from a file holding `arrays` (no cache: built in memory)."""
    with tempfile.TemporaryDirectory() as folder:
        path = write_npz(Path(folder) / split / "model_batch_8.npz", arrays)
        return load_graph(path, split, settings, cache=None)


# what the data module runs by default for each task (tile: nothing to prune around)
SETTINGS = {LAYOUT.name: Preprocessing(), TILE.name: Preprocessing(prune="none")}


@functools.lru_cache(maxsize=None)
def record(task_name: str, nodes: int, configs: int, configurable: int, seed: int) -> Graph:
    """A preprocessed valid-split graph (no dedup: every config kept), with runtimes."""
    if task_name == LAYOUT.name:
        arrays = layout_arrays(n=nodes, c=configs, nc=configurable, split="valid", seed=seed)
    else:
        arrays = tile_arrays(n=nodes, c=configs, split="valid", seed=seed)
    return preprocess(arrays, SETTINGS[task_name])


def graphs_of(task: Task) -> list[Graph]:
    """Three graphs of uneven sizes, config counts and (layout) numbers of configurable nodes."""
    return [record(task.name, 14, 5, 3, seed=1), record(task.name, 9, 8, 5, seed=2),
            record(task.name, 11, 3, 2, seed=3)]


def feature_width(task: Task) -> int:
    return graphs_of(task)[0].node_feat.shape[1]


def _fitted(width: int, rows: np.ndarray) -> Standardizer:
    """A Standardizer fitted as RankingModule.setup fits it from the data module's feature sums."""
    x = np.asarray(rows, dtype=np.float64)
    scaler = Standardizer(width)
    scaler.fit(x.sum(0), (x**2).sum(0), len(x))
    return scaler


@functools.lru_cache(maxsize=None)
def scalers(task: Task) -> tuple[Standardizer, Standardizer | None]:
    """Node (and tile config) standardizers fitted on graphs_of(task), the 'train set' of these tests."""
    graphs = graphs_of(task)
    node = _fitted(feature_width(task), np.concatenate([g.node_feat for g in graphs]))
    config = _fitted(task.config_width, np.concatenate([g.configs for g in graphs])) \
        if task.standardize_configs else None
    return node, config


def standardize(task: Task, batch: Batch) -> Batch:
    """What RankingModule.forward does to a batch before its ranker sees it."""
    node, config = scalers(task)
    with torch.no_grad():
        batch = batch.replace(node_feat=node(batch.node_feat))
        if config is not None:
            batch = batch.replace(config_feat=config(batch.config_feat))
    return batch


def batch_of(task: Task, graphs: list[Graph], rows: list[np.ndarray] | None = None, ids: list[int] | None = None,
             segment_nodes: int = 0) -> Batch:
    """The package's batch of `graphs` (every config, or the given rows), standardized."""
    rows = rows if rows is not None else [np.arange(g.num_configs) for g in graphs]
    ids = ids if ids is not None else list(range(len(graphs)))
    collate = Collate(task, fill_default_layout=task.has_config_nodes, segment_nodes=segment_nodes)
    return standardize(task, collate([(g, Item(i, r)) for g, i, r in zip(graphs, ids, rows)]))


def make_model(task: Task, seed: int = 0, ranker: type | None = None, live: bool = False, **settings
               ) -> torch.nn.Module:
    """A small ranker; `live` gives the zero-initialised projection of the physical features random weights, so
    that a test of how the model slices its inputs covers their path too."""
    torch.manual_seed(seed)
    ranker = ranker or (LayoutRanker if task is LAYOUT else TileRanker)
    defaults = {"hidden": 16} if ranker is ConfigOnlyRanker else SMALL
    model = ranker(feature_width(task), task.config_width, **{**defaults, **settings}).eval()
    for extra in ("physics", "operands", "literal", "cost"):
        if live and getattr(model, extra, None) is not None:
            torch.nn.init.normal_(getattr(model, extra).weight)
    return model


def score(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    with torch.no_grad():
        return model(batch)


# (task, ranker class): every ranker on every task it ranks
MODELS = pytest.mark.parametrize("task, ranker", [(LAYOUT, LayoutRanker), (TILE, TileRanker),
                                                  (LAYOUT, ConfigOnlyRanker), (TILE, ConfigOnlyRanker),
                                                  (LAYOUT, EarlyFusionRanker)],
                                 ids=["layout", "tile", "config_only-layout", "config_only-tile", "early_fusion"])


def test_records_are_what_the_data_module_feeds() -> None:
    assert feature_width(LAYOUT) == feature_width(TILE) == TpuGraphsDataModule("layout:xla:random").node_feat_dim
    assert (LAYOUT.config_width, TILE.config_width) == (126, 24)
    graphs = graphs_of(LAYOUT)
    batch = batch_of(LAYOUT, graphs)
    assert batch.target.shape == batch.config_mask.shape == (3, 8)
    for g, graph in enumerate(graphs):  # each graph's own runtimes, comparable across graphs; -1 beyond them
        np.testing.assert_allclose(batch.target[g, :graph.num_configs].numpy(), graph.target, rtol=1e-6)
    assert (batch.target[~batch.config_mask] == PAD).all()
    node_feat = batch.node_feat[:, feature_width(LAYOUT) - 12:]  # standardized: near zero mean over the set
    assert node_feat.mean().abs() < 0.5
    tile = batch_of(TILE, graphs_of(TILE))
    assert tile.config_node.shape == (3, 0) and tile.config_feat.shape == (3, 8, TILE.config_width)
    valid = tile.config_feat[tile.config_mask]
    torch.testing.assert_close(valid.mean(0), torch.zeros(TILE.config_width), atol=1e-4, rtol=0)


@MODELS
def test_shapes(task: Task, ranker: type) -> None:
    batch = batch_of(task, graphs_of(task))
    scores = score(make_model(task, ranker=ranker), batch)
    assert scores.shape == (3, 8) and scores.dtype == torch.float32
    assert torch.isfinite(scores).all()


@MODELS
def test_padded_configs_do_not_change_valid_scores(task: Task, ranker: type) -> None:
    batch = batch_of(task, graphs_of(task))
    model, mask = make_model(task, ranker=ranker), batch.config_mask
    noisy = batch.config_feat.clone()
    noisy[~mask] = torch.randint(-1, 6, noisy[~mask].shape).float()
    before, after = score(model, batch), score(model, batch.replace(config_feat=noisy))
    torch.testing.assert_close(after[mask], before[mask])
    assert not torch.allclose(after[~mask], before[~mask])  # the padded rows did see the change

@pytest.mark.parametrize(**TASK_IDS)
def test_scores_under_bfloat16_autocast_are_float32_and_do_not_tie(task: Task) -> None:
    """Under bf16 autocast (`--trainer.precision bf16-mixed`, `solution rank --precision bf16-mixed`) the readout
    stays in float32: bf16 scores of 400 configs tied into about a quarter as many values."""
    batch = batch_of(task, [record(task.name, 30, 400, 6, seed=4)])
    model = make_model(task)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = score(model, batch)[0]  # [C]
    full = score(model, batch)[0]
    assert low.dtype == torch.float32
    assert len(torch.unique(low)) == len(torch.unique(full)) == 400
    assert kendalltau(low, full)[0] > 0.9  # the same order but for bf16's rounding of the states



@pytest.mark.parametrize("ranker", [LayoutRanker, ConfigOnlyRanker, EarlyFusionRanker])
def test_padded_configurable_slots_are_ignored(ranker: type) -> None:
    batch = batch_of(LAYOUT, graphs_of(LAYOUT))
    model, empty = make_model(LAYOUT, ranker=ranker), batch.config_node == PAD  # [G, K]
    noisy = batch.config_feat.clone()
    noisy.permute(0, 2, 1, 3)[empty] = 3.0  # [G, K, C, 18] view: every config of every empty slot
    assert empty.any()
    torch.testing.assert_close(score(model, batch.replace(config_feat=noisy)), score(model, batch))


def _shuffled(batch: Batch, seed: int = 5) -> tuple[Batch, torch.Tensor, torch.Tensor]:
    """The batch with each graph's configs in another order (targets and rows follow), the order and row ids."""
    g = torch.Generator().manual_seed(seed)
    order = torch.stack([torch.randperm(batch.config_mask.size(1), generator=g)
                         for _ in range(batch.num_graphs)])  # [G, C]
    rows = torch.arange(batch.num_graphs)[:, None]
    shuffled = batch.replace(config_feat=batch.config_feat[rows, order], config_mask=batch.config_mask[rows, order],
                             target=batch.target[rows, order], config_index=batch.config_index[rows, order])
    return shuffled, order, rows


@pytest.mark.parametrize("task, ranker, settings", [
    (LAYOUT, LayoutRanker, {"cross_attention": True}), (LAYOUT, LayoutRanker, {"cross_attention": False}),
    (LAYOUT, LayoutRanker, {"cross_attention": False, "readout_attention": False}),
    (LAYOUT, LayoutRanker, {"config_hidden": 8}), (LAYOUT, LayoutRanker, {"physical_layout": True}),
    (LAYOUT, LayoutRanker, {"runtime_sum": 3.0}), (TILE, TileRanker, {"cross_attention": True}),
    (TILE, TileRanker, {"cross_attention": False, "config_hidden": 8}),
    (LAYOUT, ConfigOnlyRanker, {}), (TILE, ConfigOnlyRanker, {}),
    (LAYOUT, EarlyFusionRanker, {"cross_attention": True}), (LAYOUT, EarlyFusionRanker, {"cross_attention": False}),
], ids=["layout-cross", "layout-readout_only", "layout-none", "layout-narrow", "layout-physical",
        "layout-runtime_sum", "tile-cross",
        "tile", "config_only-layout", "config_only-tile", "early_fusion-cross", "early_fusion"])
def test_config_order_invariance(task: Task, ranker: type, settings: dict) -> None:
    batch = batch_of(task, graphs_of(task))
    model = make_model(task, ranker=ranker, live=True, **settings)
    shuffled, order, rows = _shuffled(batch)
    before, after = score(model, batch), score(model, shuffled)
    mask = shuffled.config_mask
    torch.testing.assert_close(after[mask], before[rows, order][mask], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("settings", [{}, {"config_hidden": 8}, {"physical_layout": True}],
                         ids=["shipped", "narrow", "physical"])
@pytest.mark.parametrize("rows", [1, 13, 20, 30])
def test_ranking_in_slices_gives_the_whole_pass_scores(rows: int, settings: dict) -> None:
    """inference_rows slices the config-aware layers without gradients (1 to 3 configs, or nodes, per pass on this
    batch of 10 configurable nodes and 8 config slots, uneven last slices): the scores of one whole pass."""
    batch = batch_of(LAYOUT, graphs_of(LAYOUT))
    assert ConfigLinks.of(batch).nodes.numel() == 10 and batch.config_mask.shape[1] == 8
    whole = make_model(LAYOUT, inference_rows=0, live=True, **settings)
    sliced = make_model(LAYOUT, inference_rows=rows, live=True, **settings)
    torch.testing.assert_close(score(sliced, batch), score(whole, batch), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("w", [16, 8])
def test_link_block_dense_products_per_node_and_config(monkeypatch, w: int) -> None:
    """A link block's w x w products per (configurable node, config): 3 sends + 3 receives + its own linear, a map
    per route. Plus one d x w context map per touched node, whatever the configs
    (the encoder's d = 16, the config-aware width w), which the ranker maps once for every slice of configs."""
    links = ConfigLinks.of(batch_of(LAYOUT, graphs_of(LAYOUT)))
    (m, t), c, d = (links.nodes.numel(), links.touched.numel()), 8, 16
    block = LinkBlock(w, context_dim=d)
    monkeypatch.setattr(layers, "sparse_mean", outside_modes(layers.sparse_mean))  # the sparse products uncounted
    with FlopCounterMode(display=False) as counter:
        block(torch.randn(m, c, w), block.context(torch.randn(t, d)), links)
    assert counter.get_total_flops() == 2 * w * (w * 7 * m * c + d * t)


def test_a_link_block_gives_the_same_states_with_and_without_gradients() -> None:
    """The touched nodes' states are built in one buffer either way, and without gradients their GELU runs in place
    on it: the same block output."""
    links = ConfigLinks.of(batch_of(LAYOUT, graphs_of(LAYOUT)))
    block = LinkBlock(8, context_dim=16)
    z, h = torch.randn(links.nodes.numel(), 5, 8), torch.randn(links.touched.numel(), 16)
    trained = block(z, block.context(h), links)
    with torch.inference_mode():
        ranked = block(z, block.context(h), links)
    assert trained.requires_grad and not ranked.requires_grad
    torch.testing.assert_close(ranked, trained.detach(), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("configs", [1, 5])
def test_the_meet_of_a_link_block_is_its_dense_formula_with_its_gradients(configs: int) -> None:
    """meet = GELU(spread @ sends + own term) with the spread matrix dense: the same states and the same gradients
    for the configurable states and the own term, which the in-place sum leaves as it was (one config too, where a
    reshape of it would alias it)."""
    links = ConfigLinks.of(batch_of(LAYOUT, graphs_of(LAYOUT)))
    (m, t), w = (links.nodes.numel(), links.touched.numel()), 8
    block = LinkBlock(w)
    z, own = torch.randn(m, configs, w, requires_grad=True), torch.randn(t, w, requires_grad=True)
    kept = own.detach().clone()
    met = block.meet(z, own, links)
    sent = block.sent(z).view(3 * m, configs * w)  # [3M, C*w]
    formula = F.gelu((links.spread.to_dense() @ sent).view(t, configs, w) + own[:, None])  # [T, C, w]
    # float32 sums in another order (sparse against dense product, the own term first): about 1e-6 apart
    torch.testing.assert_close(met, formula, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(own.detach(), kept, atol=0, rtol=0)
    upstream = torch.randn_like(met)
    got = torch.autograd.grad(met, (z, own), upstream)
    expected = torch.autograd.grad(formula, (z, own), upstream)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def outside_modes(fn):
    def call(*args, **kwargs):
        with _disable_current_modes():
            return fn(*args, **kwargs)
    return call


def test_slices_are_for_inference_only() -> None:
    """With gradients in_chunks makes one call (a training step's graph is the whole pass); without, one call per
    slice, written into one result."""
    calls = []

    def twice(x: torch.Tensor) -> torch.Tensor:
        calls.append(x.shape[1])
        return 2 * x

    x = torch.arange(14.0).view(2, 7)
    with torch.no_grad():
        torch.testing.assert_close(in_chunks(twice, 3, 1, x), 2 * x)
    assert calls == [3, 3, 1]
    calls.clear()
    in_chunks(twice, 3, 1, x.requires_grad_())
    assert calls == [7]


def test_collated_config_order_is_the_shuffled_batch() -> None:
    """Collating the rows in another order gives the same scores, permuted (Collate, not just the ranker)."""
    graphs = graphs_of(LAYOUT)
    model = make_model(LAYOUT)
    g = np.random.default_rng(3)
    orders = [g.permutation(graph.num_configs) for graph in graphs]
    plain, permuted = score(model, batch_of(LAYOUT, graphs)), score(model, batch_of(LAYOUT, graphs, orders))
    for i, order in enumerate(orders):
        torch.testing.assert_close(permuted[i, :len(order)], plain[i, torch.from_numpy(order)], atol=1e-5, rtol=1e-5)


ATTENTION = [(LAYOUT, {"cross_attention": per_node, "readout_attention": readout})
             for per_node in (True, False) for readout in (True, False)] + [
    (TILE, {"cross_attention": on}) for on in (True, False)]  # TileRanker's one attention is its readout's


@pytest.mark.parametrize("task, settings", ATTENTION, ids=["layout-both", "layout-per_node_only",
                                                           "layout-readout_only", "layout-neither", "tile",
                                                           "tile-none"])
def test_cross_attention_couples_configs_only_when_on(task: Task, settings: dict) -> None:
    """Changing one config moves every other config's score of its graph iff some attention compares configs
    (LayoutRanker: per node or in the readout, each enough alone; TileRanker: its readout's)."""
    batch = batch_of(task, graphs_of(task))
    model = make_model(task, **settings)
    cross_attention = any(settings.values())
    changed = batch.config_feat.clone()
    changed[1, 0] = torch.randint(-1, 6, changed[1, 0].shape).float()  # config 0 of graph 1
    before, after = score(model, batch), score(model, batch.replace(config_feat=changed))
    assert not torch.allclose(after[1, 0], before[1, 0])
    others = before[1, 1:][batch.config_mask[1, 1:]], after[1, 1:][batch.config_mask[1, 1:]]
    if cross_attention:
        assert (others[0] - others[1]).abs().min() > 1e-6  # every other config of graph 1 moved
    else:
        torch.testing.assert_close(*others, atol=0, rtol=0)
    torch.testing.assert_close(after[[0, 2]], before[[0, 2]])  # other graphs never move


def test_config_links_are_the_edges_that_touch_configurable_nodes() -> None:
    """ConfigLinks against a plain reading of the batch's edge list: the touched nodes and each route's pairs."""
    batch = batch_of(LAYOUT, graphs_of(LAYOUT))
    links = ConfigLinks.of(batch)
    configurable = batch.config_node[batch.config_node != PAD].tolist()
    assert links.nodes.tolist() == configurable
    edges = batch.edge_index.t().tolist()  # (producer, consumer)
    touched = sorted(set(configurable) | {c for p, c in edges if p in configurable}
                     | {p for p, c in edges if c in configurable})
    assert links.touched.tolist() == touched
    expected = [sorted((p, c) for p, c in edges if p in configurable),  # k's output is read by the touched node
                sorted((c, p) for p, c in edges if c in configurable),  # the touched node produces k's operand
                sorted((k, k) for k in configurable)]
    for (k, t), pairs in zip(links.routes, expected):
        assert sorted(zip(links.nodes[k].tolist(), links.touched[t].tolist())) == pairs


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_layout_embedding_is_the_mlp_of_the_one_hot_layouts(grad: bool) -> None:
    """configure() sums embedding columns without gradients and scatters a one-hot [M*C, 126] with them: the
    numbers of the MLP on the one-hot layouts, either way."""
    batch = batch_of(LAYOUT, graphs_of(LAYOUT))
    model = make_model(LAYOUT, config_hidden=None)  # as wide as hidden: h joins the layouts without a projection
    links = ConfigLinks.of(batch)
    h = torch.randn(batch.node_feat.size(0), SMALL["hidden"])
    values = (batch.config_feat[links.graph, :, links.slot] - PAD).round().long()  # [M, C, 18]
    onehot = torch.nn.functional.one_hot(values, 7).flatten(2).float()  # [M, C, 126]
    expected = h[links.nodes][:, None] + model.config_embed(onehot)
    with torch.set_grad_enabled(grad):
        got = model.configure(h[links.nodes], values, None, None)
    assert got.requires_grad == grad
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def chain_batch(nodes: int = 7, configurable: tuple[int, ...] = (0, 2, 4)) -> Batch:
    """A one-graph batch of the chain 0 -> 1 -> ... -> nodes-1 whose configurable nodes are `configurable`."""
    arrays = layout_arrays(n=nodes, c=4, nc=len(configurable), computations=1, seed=4)
    arrays["node_opcode"][arrays["node_config_ids"]] = 1  # the factory's own picks: no longer configurable
    arrays["node_opcode"][list(configurable)] = 26  # convolution
    arrays["node_config_ids"] = np.array(configurable)
    arrays["edge_index"] = np.stack([np.arange(1, nodes), np.arange(nodes - 1)], axis=1)  # [consumer, producer]
    return batch_of(LAYOUT, [preprocess(arrays, Preprocessing(prune="none"))])


@pytest.mark.parametrize("layers, reached", [(1, [True, True, False]), (2, [True, True, True])])
def test_a_link_block_carries_a_config_two_hops_per_layer(layers: int, reached: list[bool]) -> None:
    """Configurable nodes 0, 2, 4 on a chain: a change of node 0's layouts reaches node 2 (through node 1) in one
    link block and node 4 (relayed by node 2) only in two; config-aware state lives on those three nodes only."""
    batch = chain_batch()
    model = make_model(LAYOUT, config_layers=layers, cross_attention=False)
    changed = batch.config_feat.clone()
    changed[0, 0, 0] = torch.where(changed[0, 0, 0] == 0, 1.0, 0.0)  # config 0, configurable slot 0 (node 0)
    with torch.no_grad():
        _, before, links = model.embed(batch)
        _, after, _ = model.embed(batch.replace(config_feat=changed))
    assert links.nodes.tolist() == [0, 2, 4] and before.shape[:2] == (3, batch.config_feat.size(1))
    moved = (after - before).abs().amax(-1)  # [M, C]
    assert [bool(m > 1e-6) for m in moved[:, 0]] == reached
    torch.testing.assert_close(after[:, 1:], before[:, 1:])  # the other configs do not move (no cross-attention)


@MODELS
def test_graphs_in_a_batch_are_independent(task: Task, ranker: type) -> None:
    graphs = graphs_of(task)
    model = make_model(task, ranker=ranker)
    alone = score(model, batch_of(task, graphs[:1]))  # [1, 5]
    together = score(model, batch_of(task, graphs[:2]))  # [2, 8]
    assert alone.shape == (1, 5) and together.shape == (2, 8)
    torch.testing.assert_close(together[0, :5], alone[0], atol=1e-5, rtol=1e-5)


def test_edge_directions_differ() -> None:
    batch = batch_of(LAYOUT, graphs_of(LAYOUT))
    scores = {d: score(make_model(LAYOUT, edge_direction=d), batch) for d in ("forward", "reverse", "both")}
    assert all(torch.isfinite(s).all() for s in scores.values())
    assert not torch.allclose(scores["forward"], scores["reverse"])  # same weights, other messages
    assert not torch.allclose(scores["forward"], scores["both"])


@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_sage_messages_follow_the_edge_direction(direction: str) -> None:
    block = SAGEBlock(4, direction)
    edge_index = torch.tensor([[0, 1], [1, 2]])  # 0 -> 1 -> 2, row 0 = producer
    x = torch.randn(3, 4, requires_grad=True)
    jacobian = torch.autograd.functional.jacobian(lambda x: block(x, edge_index), x)  # [3, 4, 3, 4]
    depends = jacobian.abs().sum((1, 3)) > 0  # [out node, in node]
    sender, receiver = (0, 1) if direction == "forward" else (1, 0)
    assert depends[receiver, sender] and not depends[sender, receiver]
    assert not depends[0, 2] and not depends[2, 0]


@pytest.mark.parametrize(**TASK_IDS)
def test_edge_direction_is_checked(task: Task) -> None:
    with pytest.raises(ValueError, match="edge_direction"):
        make_model(task, edge_direction="sideways")


def _settings_of(ranker: type) -> dict:
    """Every optional layer of `ranker` switched on."""
    return {ConfigOnlyRanker: {}, EarlyFusionRanker: {"edge_direction": "both"}}.get(
        ranker, {"edge_direction": "both", "config_hidden": 8})


@MODELS
def test_gradients_reach_every_parameter(task: Task, ranker: type) -> None:
    batch = batch_of(task, graphs_of(task))
    model = make_model(task, ranker=ranker, **_settings_of(ranker))
    scores = model.train()(batch)
    weights = torch.randn(scores.shape, generator=torch.Generator().manual_seed(0))
    (scores * weights)[batch.config_mask].sum().backward()
    silent = [name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not silent


@MODELS
def test_a_few_steps_on_the_targets_lower_the_loss(task: Task, ranker: type) -> None:
    batch = batch_of(task, graphs_of(task))
    model, loss = make_model(task, ranker=ranker).train(), PairwiseHinge()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(10):
        optimizer.zero_grad()
        value = loss(model(batch), batch.target, batch.config_mask)
        value.backward()
        optimizer.step()
        losses.append(value.item())
    assert losses[-1] < 0.7 * losses[0]


@needs_torch_scatter
@pytest.mark.parametrize(**TASK_IDS)
def test_scatter_backends_give_the_same_scores(task: Task) -> None:
    batch = batch_of(task, graphs_of(task))
    model = make_model(task, edge_direction="both")
    with scatter.use_backend("torch"):
        fallback = score(model, batch)
    with scatter.use_backend("torch_scatter"):
        fused = score(model, batch)
    torch.testing.assert_close(fused, fallback, atol=1e-5, rtol=1e-5)


def test_a_missing_torch_scatter_is_said_when_a_module_is_set_up(monkeypatch) -> None:
    """Without torch_scatter, a module set up on a GPU says that its scatters run in plain torch (on CPU plain torch
    is the fast path, so nothing is said). The notice goes through Lightning's rank-zero logging, replaced here by
    a list so that no other test's logging set-up can hide it."""
    import lightning.pytorch as pl

    from solution.training import module as module_file
    from solution.training.module import RankingModule

    module = RankingModule(make_model(LAYOUT), PairwiseHinge(), task="layout")
    module.trainer = pl.Trainer(logger=False, enable_progress_bar=False, enable_checkpointing=False)
    strategy = type(module.trainer.strategy)
    for available, device, said in ((True, "cuda", False), (False, "cuda", True), (False, "cpu", False)):
        notices: list[str] = []
        monkeypatch.setattr(module_file, "rank_zero_info", notices.append)
        monkeypatch.setattr(scatter, "AVAILABLE", available)
        monkeypatch.setattr(strategy, "root_device", property(lambda self, device=device: torch.device(device)))
        module.setup("predict")
        assert any("torch_scatter is not installed" in n for n in notices) == said, (available, device)


@MODELS
def test_a_ranker_is_rebuilt_from_its_spec(task: Task, ranker: type) -> None:
    settings = {} if ranker is ConfigOnlyRanker else {"edge_direction": "both", "dropout": 0.1}
    model = make_model(task, ranker=ranker, **settings)
    spec = model.spec
    assert spec["class_path"] == f"{ranker.__module__}.{ranker.__qualname__}"
    assert spec["init_args"]["node_feat_dim"] == feature_width(task)
    assert spec["init_args"]["config_width"] == task.config_width
    assert all(spec["init_args"][k] == v for k, v in settings.items())
    torch.manual_seed(1)  # other initial weights
    rebuilt = build(spec)
    assert type(rebuilt) is ranker and rebuilt.spec == spec
    batch = batch_of(task, graphs_of(task))
    assert not torch.equal(score(rebuilt.eval(), batch), score(model, batch))
    rebuilt.load_state_dict(model.state_dict())
    assert torch.equal(score(rebuilt, batch), score(model, batch))


def test_rankers_take_only_their_own_arguments() -> None:
    with pytest.raises(TypeError, match="config_layers"):
        TileRanker(feature_width(TILE), TILE.config_width, config_layers=3)
    with pytest.raises(TypeError, match="dropout"):
        ConfigOnlyRanker(feature_width(LAYOUT), LAYOUT.config_width, dropout=0.1)


def test_early_fusion_joins_each_config_at_the_input() -> None:
    batch = batch_of(LAYOUT, graphs_of(LAYOUT))
    model = make_model(LAYOUT, ranker=EarlyFusionRanker)
    fused = model.fused_input(batch)  # [N, C, opcode_dim + F + 126]
    assert fused.shape == (len(batch.node_opcode), batch.config_mask.size(1),
                           SMALL["opcode_dim"] + feature_width(LAYOUT) + LAYOUT.config_width)
    configurable = torch.zeros(len(batch.node_opcode), dtype=torch.bool)
    configurable[batch.config_node[batch.config_node != PAD]] = True
    config = fused[..., -LAYOUT.config_width:]  # [N, C, 126]
    assert (config[~configurable] == 0).all()  # no config on the other nodes
    assert (config[configurable].sum(-1) == 18).all()  # one symbol per layout position, every config
    changed = batch.config_feat.clone()
    changed[1, 0] = torch.randint(-1, 6, changed[1, 0].shape).float()
    after = model.fused_input(batch.replace(config_feat=changed))
    assert not torch.equal(after[:, 0], fused[:, 0]) and torch.equal(after[:, 1:], fused[:, 1:])


def test_physical_layout_features_are_the_tiles_a_layout_stores():
    """A [3, 256] output: minor-to-major (1, 0) puts 256 in the lanes (no waste) and 3 in 8 sublanes (8/3); (0, 1)
    puts 3 in 128 lanes (128/3): 32x the bytes. A layout left to the compiler gives zeros."""
    order = torch.tensor([[[1, 0, -1, -1, -1, -1], [0, 1, -1, -1, -1, -1], [-1] * 6]])  # [M=1, C=3, 6]
    dims = torch.tensor([[3.0, 256.0, 0, 0, 0, 0]])  # [M, 6]
    features = physical_layout_features(order, dims)  # [1, 3, 6]
    expected = torch.tensor([[8.0, math.log2(3), 1, 0, math.log(8 / 3), 1],
                             [math.log2(3), 8.0, 0, 1, math.log(128 * 256 / 768), 1],
                             [0, 0, 0, 0, 0, 0]])
    torch.testing.assert_close(features[0], expected)


def test_physical_layout_features_skip_size_1_dims_wherever_the_layout_puts_them():
    """A [3, 1, 256] output stores as the [3, 256] one above: the orders (2, 1, 0) and (1, 2, 0) are the same
    physical layout, and (1, 0, 2) puts 3 in the lanes, 256 in the sublanes."""
    order = torch.tensor([[[2, 1, 0, -1, -1, -1], [1, 2, 0, -1, -1, -1], [1, 0, 2, -1, -1, -1]]])  # [1, 3, 6]
    dims = torch.tensor([[3.0, 1.0, 256.0, 0, 0, 0]])  # [M, 6]
    features = physical_layout_features(order, dims)[0]  # [3, 6]
    flat = physical_layout_features(torch.tensor([[[1, 0, -1, -1, -1, -1], [0, 1, -1, -1, -1, -1]]]),
                                    torch.tensor([[3.0, 256.0, 0, 0, 0, 0]]))[0]  # [2, 6]
    torch.testing.assert_close(features, flat[[0, 0, 1]])


def test_literal_tiles_count_a_size_1_dim_where_the_layout_puts_it():
    """A [3, 1, 256] output over its order's two most-minor dims whatever their size: (2, 1, 0) puts 256 in the lanes
    and the size-1 dim in 8 sublanes (8x the bytes), (1, 2, 0) puts the size-1 dim in 128 lanes (128x); the
    true-rank view of both is the [3, 256] one. Operand blocks without known sizes give zeros."""
    order = torch.tensor([[[2, 1, 0, -1, -1, -1], [1, 2, 0, -1, -1, -1]]])  # [1, 2, 6]
    dims = torch.tensor([[3.0, 1.0, 256.0, 0, 0, 0]])
    literal = physical_layout_features(order, dims, true_rank=False)[0]  # [2, 6]
    expected = torch.tensor([[8.0, 0.0, 1, 0, math.log(8.0), 1], [0.0, 8.0, 0, 1, math.log(128.0), 1]])
    torch.testing.assert_close(literal, expected)
    true_rank = physical_layout_features(order, dims)[0]
    torch.testing.assert_close(true_rank[0], true_rank[1])
    blocks = torch.cat([order, order, order], -1)  # [1, 2, 18]: the same order for output, input and kernel
    features = literal_tile_features(blocks, dims, None)  # [1, 2, 15]
    torch.testing.assert_close(features[0, :, :5], expected[:, :5])
    assert not features[..., 5:].any()
    operands = torch.zeros(1, 30)
    operands[0, :6] = dims[0]  # the input block's operand known: its tiles counted the same way
    torch.testing.assert_close(literal_tile_features(blocks, dims, operands)[0, :, 5:10], expected[:, :5])


def test_a_new_model_with_physical_features_scores_as_one_without():
    """The physical features enter through a zero-initialised projection: an untrained model with them gives the
    scores of the same model without them (they are learned in from there), and training moves the projection."""
    batch = batch_of(LAYOUT, graphs_of(LAYOUT))
    without = make_model(LAYOUT)
    with_physics = make_model(LAYOUT, physical_layout=True)
    missing = with_physics.load_state_dict(without.state_dict(), strict=False).missing_keys
    assert sorted(missing) == ["physics.bias", "physics.weight"]
    torch.testing.assert_close(score(with_physics, batch), score(without, batch))
    with_physics.train()
    with_physics(batch).sum().backward()
    assert with_physics.physics.weight.grad.abs().sum() > 0


def test_the_batch_carries_each_configurable_nodes_output_dims():
    graphs = graphs_of(LAYOUT)
    batch = batch_of(LAYOUT, graphs)
    for g, graph in enumerate(graphs):
        k = len(graph.config_node)
        torch.testing.assert_close(batch.config_dims[g, :k], torch.from_numpy(graph.config_dims))
        assert (batch.config_dims[g, k:] == 0).all()


FIXTURE_FILES = Path(__file__).resolve().parent.parent.parent / "shared" / "fixtures" / "npz" / "layout" / "xla"


@functools.lru_cache(maxsize=None)
def worked_graphs() -> list[Graph]:
    """Real-format files (programs lowered by XLA) preprocessed with each config's work (data.config_work)."""
    paths = [FIXTURE_FILES / "random" / "valid" / f"fixture_{name}.npz" for name in ("conv_reshape_dot", "scan_rnn")]
    return [load_graph(path, "valid", Preprocessing(config_work=True), None) for path in paths]


def test_config_work_follows_the_configs_and_counts_only_within_a_graph() -> None:
    graphs = worked_graphs()
    assert all(g.config_work.shape == (g.num_configs, WORK_FEATURES) for g in graphs)
    batch = batch_of(LAYOUT, graphs, rows=[np.arange(6), np.arange(4, 12)])
    model = make_model(LAYOUT, config_work=True)
    shuffled, order, rows = _shuffled(batch)
    shuffled = shuffled.replace(config_work=batch.config_work[rows, order])
    before, after = score(model, batch), score(model, shuffled)
    mask = shuffled.config_mask
    torch.testing.assert_close(after[mask], before[rows, order][mask], atol=1e-5, rtol=1e-5)
    changed = batch.config_work.clone()
    changed[1, 0] += 1.0  # one config of graph 1 does more work
    moved = score(model, batch.replace(config_work=changed)) != before
    assert moved[1].any() and not moved[0].any()


def test_a_model_that_reads_config_work_names_the_data_setting_it_needs() -> None:
    with pytest.raises(SettingsError, match="data.config_work=true"):
        score(make_model(LAYOUT, config_work=True), batch_of(LAYOUT, graphs_of(LAYOUT)))


def test_config_work_is_the_walks_work_of_each_kept_config() -> None:
    path = FIXTURE_FILES / "random" / "train" / "fixture_conv_reshape_dot.npz"
    graph = load_graph(path, "train", Preprocessing(config_work=True), None)
    raw = read_graph(path, "train")
    expected = Propagation.of_file(raw).work(raw.config_feat[graph.config_index]).features()  # [c, K]
    np.testing.assert_allclose(graph.config_work, expected - expected.mean(0), atol=1e-5)
    assert np.ptp(graph.config_work, axis=0).max() > 0  # the configs' layouts change what the program does
    cut = load_graph(path, "train", Preprocessing(config_work=True, work_configs=5), None)
    again = load_graph(path, "train", Preprocessing(config_work=True, work_configs=5), None)
    assert cut.num_configs == 5 < graph.num_configs
    np.testing.assert_array_equal(cut.config_index, again.config_index)  # a fixed subset
    assert set(cut.config_index.tolist()) <= set(graph.config_index.tolist())
    np.testing.assert_allclose(cut.target, graph.target[np.searchsorted(graph.config_index, cut.config_index)])
    valid = load_graph(path, "valid", Preprocessing(config_work=True, work_configs=5), None)
    assert valid.num_configs == read_graph(path, "valid").num_configs  # other splits keep every config
    with pytest.raises(SettingsError, match="data.work_configs=-1"):
        Preprocessing(config_work=True, work_configs=-1)


def test_operand_layout_features_say_where_each_block_puts_its_key_dims():
    """A dot of x [128, 784] (contracted dim 1) into [128, 100]: its input block (1, 0) puts the key dim 784 minor,
    (0, 1) second-minor; an unset block gives zeros. A convolution's kernel [3, 3, 64, 32] with both feature dims (2,
    3) second-minor and major under (0, 2, 1, 3) and minor under (2, 3, 0, 1); its output block sets nothing."""
    unset = [-1] * 6
    dot = [unset + [1, 0, -1, -1, -1, -1] + unset, unset + [0, 1, -1, -1, -1, -1] + unset, unset * 3]
    conv = [unset + unset + [0, 2, 1, 3, -1, -1], unset + unset + [2, 3, 0, 1, -1, -1], unset * 3]
    order = torch.tensor([dot, conv])  # [M=2, C=3, 18]
    operands = torch.zeros(2, 30)
    operands[0, :2], operands[0, 18 + 1] = torch.tensor([128.0, 784.0]), 1  # input dims, its key dim
    operands[1, 6:10], operands[1, 24 + 2:24 + 4] = torch.tensor([3.0, 3, 64, 32]), 1  # kernel dims, key dims
    features = operand_layout_features(order, operands)  # [2, 3, 24]
    physical, keys = features[..., :12], features[..., 12:].unflatten(-1, (4, 3))  # [2, 3, block, where]
    torch.testing.assert_close(physical[0, :2, :6], physical_layout_features(order[:1, :2, 6:12], operands[:1, :6])[0])
    torch.testing.assert_close(physical[1, :2, 6:], physical_layout_features(order[1:, :2, 12:], operands[1:, 6:12])[0])
    assert physical[0, :, 6:].eq(0).all() and physical[1, :, :6].eq(0).all()  # blocks without an operand
    # [node, config, block (a convolution's output, input, kernel; a dot's input), minor / second-minor / neither]
    expected = torch.zeros(2, 3, 4, 3)
    expected[0, 0, 3, 0], expected[0, 1, 3, 1] = 1, 1  # the dot's input: key minor, then second-minor
    expected[1, 0, 2, 1], expected[1, 1, 2, 0] = 1, 1  # the kernel: a feature dim second-minor, then minor
    torch.testing.assert_close(keys, expected)
    assert features[:, 2].eq(0).all()  # configs that set no block


@functools.lru_cache(maxsize=None)
def operand_graphs() -> list[Graph]:
    """Real-format files (programs lowered by XLA) preprocessed with their operands and key dims."""
    paths = [FIXTURE_FILES / "random" / "valid" / f"fixture_{name}.npz" for name in ("conv_reshape_dot", "scan_rnn")]
    return [load_graph(path, "valid", Preprocessing(operand_layouts=True), None) for path in paths]


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_memory_terms_are_the_memory_features_of_every_node_and_config(grad: bool) -> None:
    """configure() adds what the layouts mean in memory, without gradients from a table of each node's distinct
    (block, layout): either way the numbers of the three feature maps and their linear maps applied to every (node,
    config) row, on real-format files with unset blocks, whatever slice of the configs it is given."""
    batch = batch_of(LAYOUT, operand_graphs())
    model = make_model(LAYOUT, live=True, physical_layout=True, operand_layouts=True, literal_tiles=True)
    links = ConfigLinks.of(batch)
    values = (batch.config_feat[links.graph, :, links.slot] - PAD).round().long()  # [M, C, 18]
    assert (values[..., LAYOUT_GROUP:] == 0).any() and (values > 0).any()  # unset and set blocks alike
    dims, operands = batch.config_dims[links.graph, links.slot], batch.config_operands[links.graph, links.slot]
    order, h = values - 1, torch.randn(links.nodes.numel(), model.config_embed[-1].out_features)
    expected = (model.configure(h, values, None, None) + model.physics(physical_layout_features(
        order[..., :LAYOUT_GROUP], dims)) + model.operands(operand_layout_features(order, operands))
        + model.literal(literal_tile_features(order, dims, operands)))  # [M, C, w]
    with torch.set_grad_enabled(grad):
        terms, index = model.memory_terms(values, dims, operands)
        got = model.configure(h, values, terms, index)
    if not grad:  # a table of fewer distinct (node, block, layout) than (node, config), read by any slice of configs
        assert terms.size(0) < values[..., 0].numel() and index.shape == (*values.shape[:2], 3)
        with torch.no_grad():
            part = model.configure(h, values[:, 2:5], terms, index[:, 2:5])
        torch.testing.assert_close(part, expected[:, 2:5], atol=1e-5, rtol=1e-5)
    assert got.requires_grad == grad
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_runtime_sum_adds_the_log_of_each_graphs_summed_op_costs() -> None:
    """With `runtime_sum` a config's score is the readout's plus log sum_i exp(cost_i) over its graph's configurable
    nodes i; zero-started, the costs add log(M) to every config of a graph and leave the order as without them."""
    batch = batch_of(LAYOUT, graphs_of(LAYOUT))
    model = make_model(LAYOUT, live=True, runtime_sum=3.0)
    with torch.no_grad():
        h, z, links = model.embed(batch)
        costs = 3.0 * model.cost(z).squeeze(-1)  # [M, C]
        graphs = range(batch.config_mask.size(0))
        expected = torch.stack([costs[links.graph == g].exp().sum(0).log() for g in graphs])  # [G, C]
        plain = score(model, batch) - expected
        model.cost = None
        torch.testing.assert_close(plain, score(model, batch), atol=1e-5, rtol=1e-5)
    fresh = make_model(LAYOUT, runtime_sum=3.0)
    missing = fresh.load_state_dict(make_model(LAYOUT).state_dict(), strict=False).missing_keys
    assert sorted(missing) == ["cost.bias", "cost.weight"]
    nodes = torch.bincount(ConfigLinks.of(batch).graph).float().log()[:, None]  # [G, 1] log M of each graph
    torch.testing.assert_close(score(fresh, batch) - nodes, score(make_model(LAYOUT), batch), atol=1e-5, rtol=1e-5)


def test_a_model_with_operand_layouts_ranks_configs_whatever_their_order_and_reads_them_per_graph() -> None:
    graphs = operand_graphs()
    assert [g.config_operands.shape for g in graphs] == [(len(g.config_node), 30) for g in graphs]
    batch = batch_of(LAYOUT, graphs, rows=[np.arange(6), np.arange(4, 12)])
    model = make_model(LAYOUT, live=True, operand_layouts=True)
    shuffled, order, rows = _shuffled(batch)
    before, after = score(model, batch), score(model, shuffled)
    torch.testing.assert_close(after[shuffled.config_mask], before[rows, order][shuffled.config_mask],
                               atol=1e-5, rtol=1e-5)
    changed = batch.config_operands.clone()
    changed[1] = 0  # graph 1's operands unknown
    moved = score(model, batch.replace(config_operands=changed)) != before
    assert moved[1].any() and not moved[0].any()
    fresh = make_model(LAYOUT, operand_layouts=True)  # zero-initialised: scores as the model without them
    missing = fresh.load_state_dict(make_model(LAYOUT).state_dict(), strict=False).missing_keys
    assert sorted(missing) == ["operands.bias", "operands.weight"]
    torch.testing.assert_close(score(fresh, batch), score(make_model(LAYOUT), batch))
    with pytest.raises(SettingsError, match="data.operand_layouts=true"):
        score(model, batch_of(LAYOUT, graphs_of(LAYOUT)))
