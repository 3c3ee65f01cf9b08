"""features: -1 sentinel for absent layout dims, extra columns, signed log, standardization."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from solution.constants import CONVOLUTION, DOT
from solution.data.features import (
    Standardizer,
    block_dims,
    layout_with_sentinel,
    node_features,
    ordered_operands,
    rank,
    signed_log,
    tile_config_features,
)
from solution.programs.encode import arrays, flatten, tensor_ranks
from solution.programs.hlo import read_module

HLO = Path(__file__).resolve().parent.parent.parent / "shared" / "fixtures" / "hlo"


def nodes_with_ranks(ranks, seed: int = 0) -> np.ndarray:
    """node_feat rows whose output tensors have the given ranks, with a valid minor_to_major in 134.. and 0 after."""
    rng = np.random.default_rng(seed)
    feat = rng.integers(0, 9, size=(len(ranks), 140)).astype(np.float32)
    feat[:, 21:27] = 0
    feat[:, 134:140] = 0
    for i, r in enumerate(ranks):
        feat[i, 21:21 + r] = rng.integers(1, 1000, size=r)
        feat[i, 134:134 + r] = rng.permutation(r)  # contains the valid axis 0
    return feat


RANKS = [0, 1, 2, 3, 4, 5, 6, 2, 1]


def test_rank_counts_shape_dims():
    assert rank(nodes_with_ranks(RANKS)).tolist() == RANKS


def test_sentinel_exactly_beyond_rank():
    feat = nodes_with_ranks(RANKS)
    layout = layout_with_sentinel(feat)
    assert layout.shape == (len(RANKS), 6)
    for i, r in enumerate(RANKS):
        assert np.array_equal(layout[i, :r], feat[i, 134:134 + r])  # kept, including the axis 0
        assert (layout[i, r:] == -1).all()
    assert (feat[:, 134:140] >= 0).all()  # the input is not modified


def test_sentinel_keeps_zero_axis_inside_rank():
    feat = nodes_with_ranks([3])
    feat[0, 134:137] = [0, 2, 1]
    assert layout_with_sentinel(feat)[0].tolist() == [0, 2, 1, -1, -1, -1]


@pytest.mark.parametrize("sentinel", [True, False])
def test_node_features_sentinel_columns(sentinel):
    feat = nodes_with_ranks(RANKS)
    out = node_features(feat, sentinel=sentinel, extra=False)
    expected = layout_with_sentinel(feat) if sentinel else feat[:, 134:140]
    assert np.allclose(out[:, 134:140], signed_log(expected))
    assert np.allclose(out[:, :134], signed_log(feat[:, :134]))


@pytest.mark.parametrize("extra,width", [(True, 152), (False, 140)])
def test_node_features_width_and_dtype(extra, width):
    out = node_features(nodes_with_ranks(RANKS), extra=extra)
    assert out.shape == (len(RANKS), width) and out.dtype == np.float32


def test_extra_columns_are_dims_mod_and_div_128():
    feat = nodes_with_ranks([3, 2])
    feat[0, 21:24] = [127, 128, 1000]
    feat[1, 21:23] = [256, 5]
    out = node_features(feat, extra=True)
    dims = feat[:, 21:27]
    assert np.allclose(out[:, 140:146], np.log1p(dims % 128))
    assert np.allclose(out[:, 146:152], np.log1p(dims // 128))
    assert np.allclose(np.expm1(out[0, 140:143]), [127, 0, 104], atol=1e-3)
    assert np.allclose(np.expm1(out[0, 146:149]), [0, 1, 7], atol=1e-4)


def test_node_features_does_not_modify_input():
    feat = nodes_with_ranks(RANKS)
    before = feat.copy()
    node_features(feat)
    assert np.array_equal(feat, before)


def test_signed_log_properties():
    x = np.array([-1e12, -1e6, -3.0, -1.0, -1e-3, 0.0, 1e-3, 1.0, 3.0, 1e6, 1e12])
    y = signed_log(x)
    assert y[5] == 0.0
    assert np.array_equal(signed_log(-x), -y)  # odd
    assert (np.diff(y) > 0).all()  # strictly increasing
    assert np.allclose(y[x >= 0], np.log1p(x[x >= 0]))
    assert np.isfinite(y).all() and np.abs(y).max() < 30
    assert np.allclose(signed_log(np.array([1.0, np.e - 1])), [np.log(2), 1.0])


def test_tile_config_features():
    config = np.array([[0, 1, 1e6, -2] + [0] * 20], np.float32)
    out = tile_config_features(config)
    assert out.dtype == np.float32 and out.shape == (1, 24)
    assert np.allclose(out[0, :4], [0, np.log(2), np.log1p(1e6), -np.log(3)])


def _fit(x: np.ndarray) -> Standardizer:
    scaler = Standardizer(x.shape[1])
    x64 = x.astype(np.float64)
    scaler.fit(x64.sum(0), (x64**2).sum(0), len(x))
    return scaler


def test_standardizer_zero_mean_unit_variance():
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(500, 7)) * [1, 10, 0.1, 1e3, 5, 2, 3] + [0, 5, -3, 1e4, 7, 0, -1]).astype(np.float32)
    out = _fit(x)(torch.from_numpy(x)).double().numpy()
    assert np.allclose(out.mean(0), 0, atol=1e-4)
    assert np.allclose(out.std(0), 1, atol=1e-4)  # population std: the statistic fitted from sums


@pytest.mark.parametrize("value", [0.0, 1.0, -0.6931472, 13.815511, 27.631021])
def test_standardizer_passes_constant_columns_through(value):
    rng = np.random.default_rng(1)
    x = np.column_stack([rng.normal(size=300), np.full(300, value), rng.normal(size=300) * 4]).astype(np.float32)
    scaler = _fit(x)
    assert scaler.std[1].item() == 1.0
    assert scaler.std[0].item() != 1.0 and scaler.std[2].item() != 1.0
    probe = torch.tensor([[0.0, value + 2.5, 0.0]])
    assert scaler(probe)[0, 1].item() == pytest.approx(2.5, abs=1e-5)  # x - mean, not blown up


def test_standardizer_chunked_sums_like_the_data_module():
    """Statistics summed over many graphs give the same result as over one block."""
    rng = np.random.default_rng(2)
    x = (rng.normal(size=(3000, 4)) * [1, 3, 0.5, 2] + [2, -1, 0, 9]).astype(np.float32)
    total = total_sq = 0.0
    for part in np.array_split(x.astype(np.float64), 17):
        total, total_sq = total + part.sum(0), total_sq + (part**2).sum(0)
    chunked = Standardizer(4)
    chunked.fit(total, total_sq, len(x))
    whole = _fit(x)
    assert torch.allclose(chunked.mean, whole.mean) and torch.allclose(chunked.std, whole.std)
    assert torch.allclose(whole.mean, torch.from_numpy(x.astype(np.float64).mean(0)).float(), atol=1e-5)


def test_standardizer_statistics_are_saved_in_the_state_dict():
    scaler = _fit(np.random.default_rng(3).normal(size=(50, 3)).astype(np.float32) + 4)
    restored = Standardizer(3)
    restored.load_state_dict(scaler.state_dict())
    assert torch.equal(restored.mean, scaler.mean) and torch.equal(restored.std, scaler.std)


def test_standardizer_constant_column_at_large_magnitude():
    """A constant column far from 0 must also pass through (std 1), not get a rounding-noise std."""
    x = np.full((1000, 1), 1e6 + 0.3, np.float32)
    scaler = _fit(x)
    assert scaler.std[0].item() == 1.0


def identity_configs(ranks: np.ndarray) -> np.ndarray:
    """[1, nc, 18] int8: one config setting every block that a node has (ranks [nc, 3]) to 0..rank-1."""
    configs = np.full((1, len(ranks), 18), -1, np.int8)
    for k, node_ranks in enumerate(ranks):
        for b, r in enumerate(node_ranks):
            configs[0, k, 6 * b:6 * b + r] = np.arange(r)
    return configs


@pytest.mark.parametrize("name", ["fixture_scan_rnn", "fixture_conv_reshape_dot", "fixture_attention_train",
                                  "fixture_conv_pool_pad", "fixture_embed_loop"])
def test_block_dims_are_the_dims_of_the_operands_the_hlo_names(name):
    """The files lose operand order; what block_dims recovers from them alone is checked against the HLO text, which
    keeps it: every dims it gives are the true operand's, and it leaves few unknown."""
    module = read_module(HLO / f"{name}.hlo")
    graph = flatten(module)
    encoded = arrays(module, graph)
    ids = encoded["node_config_ids"]
    ranks = np.array([tensor_ranks(graph, i) for i in ids]).reshape(-1, 3)
    dims = block_dims(encoded["node_feat"], encoded["node_opcode"], encoded["edge_index"], ids, identity_configs(ranks))
    assert dims.shape == (len(ids), 3, 6)
    known = 0
    for k, node in enumerate(ids):
        tensors = [node, *graph.operands[node][:2]]
        for b in range(3):
            true = np.zeros(6, np.float32)
            if ranks[k, b]:
                shape = graph.nodes[tensors[b]].shape.dims
                true[:len(shape)] = shape
            if dims[k, b].any() or not ranks[k, b]:
                np.testing.assert_array_equal(dims[k, b], true, err_msg=f"{name}: {graph.names[node]} block {b}")
            known += bool(ranks[k, b]) and dims[k, b].any()
    assert known >= 0.9 * (ranks > 0).sum()


def test_ordered_operands_follow_the_shapes_not_the_node_ids():
    """A dot's output holds operand 1's free dims last, a convolution's input has the output's batch size: the
    producers' order in the graph does not matter, and a pair that no rule tells apart stays unknown."""
    dims = np.zeros((3, 6), np.float32)
    dims[0, :2], dims[1, :2] = (8, 16), (4, 8)  # node 0 is [8, 16] (operand 1), node 1 is [4, 8] (operand 0)
    dot = np.zeros(140, np.float32)
    dot[21:23] = (4, 16)
    first, second = ordered_operands(dot, DOT, dims, np.array([0, 1]))
    assert (first.tolist(), second.tolist()) == ([1], [0])
    dims[0, :3], dims[1, :3] = (2, 3, 5), (2, 5, 3)
    dot[21:24] = (2, 3, 3)  # both hold the output's first and last sizes
    assert [o.size for o in ordered_operands(dot, DOT, dims, np.array([0, 1]))] == [0, 0]
    conv = np.zeros(140, np.float32)
    conv[21:25] = (32, 7, 7, 16)  # NHWC output: batch 32 at dim 0, feature 16 at dim 3
    conv[[93, 100, 105, 106]] = (0, 3, 0, 3)  # input batch, kernel output feature, output batch, output feature
    dims[0, :4], dims[1, :4] = (3, 3, 8, 16), (32, 9, 9, 8)  # node 0 the kernel, node 1 the input
    first, second = ordered_operands(conv, CONVOLUTION, dims, np.array([0, 1]))
    assert (first.tolist(), second.tolist()) == ([1], [0])


def test_block_dims_leave_a_block_no_config_sets_unknown():
    """A dot's kernel block is never set: no dims there, whatever its producers."""
    feat = nodes_with_ranks([2, 2, 2])
    feat[2, 21:23] = (4, 16)
    feat[0, 21:23], feat[1, 21:23] = (4, 8), (8, 16)
    edges = np.array([[2, 0], [2, 1]])  # [consumer, producer]
    configs = identity_configs(np.array([[2, 2, 0]]))
    dims = block_dims(feat, np.array([0, 0, DOT]), edges, np.array([2]), configs)
    np.testing.assert_array_equal(dims[0, :, :2], [[4, 16], [4, 8], [0, 0]])
