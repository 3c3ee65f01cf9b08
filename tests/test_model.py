"""Rankers: shapes, masking, config-order invariance, coupling, encode-once equivalence, graph independence."""

from __future__ import annotations

import os

import pytest
import torch

from solution.constants import CONFIGURABLE_OPCODES, LAYOUT_CONFIG_DIM, NUM_OPCODES, PAD, TILE_CONFIG_DIM
from solution.models import scatter
from solution.models.layers import SAGEBlock
from solution.models.rankers import TileRanker, build_model

FEAT = 6
SMALL = dict(hidden=16, opcode_dim=4, heads=2)
needs_torch_scatter = pytest.mark.skipif(  # `make test` sets SOLUTION_REQUIRE_SCATTER=1: fail, do not skip
    not scatter.AVAILABLE and not os.environ.get("SOLUTION_REQUIRE_SCATTER"), reason="torch_scatter not installed"
)


def random_graph(task: str, nodes: int, configs: int, configurable: int, seed: int) -> dict[str, torch.Tensor]:
    """One graph with local node ids: chain edges plus random ones; `configurable` nodes with layouts."""
    g = torch.Generator().manual_seed(seed)
    chain = torch.stack([torch.arange(nodes - 1), torch.arange(1, nodes)])  # producer i -> consumer i + 1
    extra = torch.randint(0, nodes, (2, nodes), generator=g)
    graph = {
        "node_feat": torch.randn(nodes, FEAT, generator=g),
        "node_opcode": torch.randint(0, NUM_OPCODES, (nodes,), generator=g),
        "edge_index": torch.cat([chain, extra], 1),  # [2, E]
    }
    if task == "tile":
        graph["config_feat"] = torch.randn(configs, TILE_CONFIG_DIM, generator=g)  # [c, 24]
    else:
        graph["config_node"] = torch.randperm(nodes, generator=g)[:configurable]  # [k]
        graph["node_opcode"][graph["config_node"]] = CONFIGURABLE_OPCODES[0]
        graph["config_feat"] = torch.randint(-1, 6, (configs, configurable, LAYOUT_CONFIG_DIM), generator=g).float()
    return graph


def collate(graphs: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The batch contract: nodes concatenated, configs (and configurable slots) padded with -1."""
    sizes = [len(g["node_opcode"]) for g in graphs]
    offsets = [sum(sizes[:i]) for i in range(len(graphs))]
    configs = max(len(g["config_feat"]) for g in graphs)
    batch = {
        "node_feat": torch.cat([g["node_feat"] for g in graphs]),  # [N, F]
        "node_opcode": torch.cat([g["node_opcode"] for g in graphs]),  # [N]
        "edge_index": torch.cat([g["edge_index"] + o for g, o in zip(graphs, offsets)], 1),  # [2, E]
        "node_graph": torch.repeat_interleave(torch.arange(len(graphs)), torch.tensor(sizes)),  # [N]
        "config_mask": torch.zeros(len(graphs), configs, dtype=torch.bool),  # [G, C]
    }
    if "config_node" in graphs[0]:
        slots = max(len(g["config_node"]) for g in graphs)
        batch["config_node"] = torch.full((len(graphs), slots), PAD)  # [G, K]
        batch["config_feat"] = torch.full((len(graphs), configs, slots, LAYOUT_CONFIG_DIM), float(PAD))
    else:
        batch["config_feat"] = torch.full((len(graphs), configs, TILE_CONFIG_DIM), float(PAD))  # [G, C, 24]
    for i, (g, offset) in enumerate(zip(graphs, offsets)):
        c = len(g["config_feat"])
        batch["config_mask"][i, :c] = True
        if "config_node" in g:
            batch["config_node"][i, : len(g["config_node"])] = g["config_node"] + offset
            batch["config_feat"][i, :c, : len(g["config_node"])] = g["config_feat"]
        else:
            batch["config_feat"][i, :c] = g["config_feat"]
    return batch


def graphs_of(task: str) -> list[dict[str, torch.Tensor]]:
    """Three graphs of uneven sizes, config counts and numbers of configurable nodes."""
    return [random_graph(task, 14, 5, 3, seed=1), random_graph(task, 9, 8, 5, seed=2),
            random_graph(task, 11, 3, 2, seed=3)]


def make_model(task: str, seed: int = 0, **settings) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model(task, FEAT, **{**SMALL, **settings}).eval()


def score(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return model(batch)


def with_configs(batch: dict[str, torch.Tensor], config_feat: torch.Tensor, **rest) -> dict[str, torch.Tensor]:
    return {**batch, "config_feat": config_feat, **rest}


@pytest.mark.parametrize("task", ["layout", "tile"])
def test_shapes(task: str) -> None:
    batch = collate(graphs_of(task))
    scores = score(make_model(task), batch)
    assert scores.shape == (3, 8) and scores.dtype == torch.float32
    assert torch.isfinite(scores).all()


@pytest.mark.parametrize("task", ["layout", "tile"])
def test_padded_configs_do_not_change_valid_scores(task: str) -> None:
    batch = collate(graphs_of(task))
    model, mask = make_model(task), batch["config_mask"]
    noisy = batch["config_feat"].clone()
    noisy[~mask] = torch.randint(-1, 6, noisy[~mask].shape).float()
    before, after = score(model, batch), score(model, with_configs(batch, noisy))
    torch.testing.assert_close(after[mask], before[mask])
    assert not torch.allclose(after[~mask], before[~mask])  # the padded rows did see the change


def test_padded_configurable_slots_are_ignored() -> None:
    batch = collate(graphs_of("layout"))
    model, empty = make_model("layout"), batch["config_node"] == PAD  # [G, K]
    noisy = batch["config_feat"].clone()
    noisy.permute(0, 2, 1, 3)[empty] = 3.0  # [G, K, C, 18] view: every config of every empty slot
    assert empty.any()
    torch.testing.assert_close(score(model, with_configs(batch, noisy)), score(model, batch))


@pytest.mark.parametrize("task", ["layout", "tile"])
@pytest.mark.parametrize("cross_attention", [True, False])
def test_config_order_invariance(task: str, cross_attention: bool) -> None:
    batch = collate(graphs_of(task))
    model = make_model(task, cross_attention=cross_attention)
    g = torch.Generator().manual_seed(5)
    order = torch.stack([torch.randperm(batch["config_mask"].size(1), generator=g) for _ in range(3)])  # [G, C]
    rows = torch.arange(3)[:, None]
    shuffled = with_configs(batch, batch["config_feat"][rows, order], config_mask=batch["config_mask"][rows, order])
    before, after = score(model, batch), score(model, shuffled)
    mask = shuffled["config_mask"]
    torch.testing.assert_close(after[mask], before[rows, order][mask], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("task", ["layout", "tile"])
@pytest.mark.parametrize("cross_attention", [True, False])
def test_cross_attention_couples_configs_only_when_on(task: str, cross_attention: bool) -> None:
    batch = collate(graphs_of(task))
    model = make_model(task, cross_attention=cross_attention)
    changed = batch["config_feat"].clone()
    changed[1, 0] = torch.randint(-1, 6, changed[1, 0].shape).float()  # config 0 of graph 1
    before, after = score(model, batch), score(model, with_configs(batch, changed))
    assert not torch.allclose(after[1, 0], before[1, 0])
    others = before[1, 1:][batch["config_mask"][1, 1:]], after[1, 1:][batch["config_mask"][1, 1:]]
    if cross_attention:
        assert (others[0] - others[1]).abs().min() > 1e-6  # every other config of graph 1 moved
    else:
        torch.testing.assert_close(*others, atol=0, rtol=0)
    torch.testing.assert_close(after[[0, 2]], before[[0, 2]])  # other graphs never move


@pytest.mark.parametrize("cross_attention", [True, False])
def test_encode_once_matches_per_config_encoding(cross_attention: bool) -> None:
    batch = collate(graphs_of("layout"))
    once = make_model("layout", cross_attention=cross_attention, edge_direction="both")
    per_config = make_model("layout", cross_attention=cross_attention, edge_direction="both", encode_once=False)
    per_config.load_state_dict(once.state_dict())
    torch.testing.assert_close(score(per_config, batch), score(once, batch), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("task", ["layout", "tile"])
def test_graphs_in_a_batch_are_independent(task: str) -> None:
    graphs = graphs_of(task)
    model = make_model(task, cross_attention=True)
    alone = score(model, collate(graphs[:1]))  # [1, 5]
    together = score(model, collate(graphs[:2]))  # [2, 8]
    torch.testing.assert_close(together[0, :5], alone[0], atol=1e-5, rtol=1e-5)


def test_edge_directions_differ() -> None:
    batch = collate(graphs_of("layout"))
    scores = {d: score(make_model("layout", edge_direction=d), batch) for d in ("forward", "reverse", "both")}
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


def test_edge_direction_is_checked() -> None:
    with pytest.raises(ValueError, match="edge_direction"):
        make_model("layout", edge_direction="sideways")


@pytest.mark.parametrize("task", ["layout", "tile"])
def test_gradients_reach_every_parameter(task: str) -> None:
    batch = collate(graphs_of(task))
    model = make_model(task, edge_direction="both").train()
    scores = model(batch)
    weights = torch.randn(scores.shape, generator=torch.Generator().manual_seed(0))
    (scores * weights)[batch["config_mask"]].sum().backward()
    silent = [name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not silent


@needs_torch_scatter
@pytest.mark.parametrize("task", ["layout", "tile"])
def test_scatter_backends_give_the_same_scores(task: str) -> None:
    batch = collate(graphs_of(task))
    model = make_model(task, edge_direction="both")
    with scatter.use_backend("torch"):
        fallback = score(model, batch)
    with scatter.use_backend("torch_scatter"):
        fused = score(model, batch)
    torch.testing.assert_close(fused, fallback, atol=1e-5, rtol=1e-5)


def test_build_model() -> None:
    tile = build_model("tile", FEAT, hidden=8, heads=2, config_layers=3, temperature=0.1)
    assert isinstance(tile, TileRanker)
    with pytest.raises(ValueError, match="task"):
        build_model("fusion", FEAT)
