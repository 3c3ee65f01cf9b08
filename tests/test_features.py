"""features: -1 sentinel for absent layout dims, extra columns, signed log, standardization."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from solution.data.features import (
    PHYSICAL_TILE_FEATURES,
    Standardizer,
    layout_with_sentinel,
    node_features,
    physical_tiles,
    rank,
    signed_log,
    tile_config_features,
)


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
    out = tile_config_features(config, kernel_nodes([300, 256], [1, 0]))
    assert out.dtype == np.float32 and out.shape == (1, 24)
    assert np.allclose(out[0, :4], [0, np.log(2), np.log1p(1e6), -np.log(3)])
    both = tile_config_features(config, kernel_nodes([300, 256], [1, 0]), physical=True)
    assert both.shape == (1, 24 + PHYSICAL_TILE_FEATURES) and np.array_equal(both[:, :24], out)


def kernel_nodes(root_dims: list[int], root_order: list[int], rows: int = 3) -> np.ndarray:
    """node_feat of a small kernel whose root (is_root, the last marked node) has these output dims and layout; the
    node after it is not a root and has other dims."""
    feat = np.zeros((rows, 140), np.float32)
    feat[:, 21:23] = 7.0
    feat[rows - 2, 0] = 1.0
    feat[rows - 2, 21:21 + len(root_dims)] = root_dims
    feat[rows - 2, 134:134 + len(root_order)] = root_order
    return feat


def tile_configs(output_bounds: list[list[int]]) -> np.ndarray:
    config = np.zeros((len(output_bounds), 24), np.float32)
    for i, bounds in enumerate(output_bounds):
        config[i, 8:8 + len(bounds)] = bounds
    return config


def test_physical_tiles_by_hand():
    # output [300, 256], dim 1 most minor; tiles [100, 64]: 3 x 4 exact tiles; [128, 96]: 3 x 3, ragged; none set
    out = physical_tiles(tile_configs([[100, 64], [128, 96], []]), kernel_nodes([300, 256], [1, 0]))
    assert out.shape == (3, PHYSICAL_TILE_FEATURES)
    padding = np.log2(128 * 104 / 6400)
    np.testing.assert_allclose(out[0], [np.log2(12), np.log2(6400), 0, 6, np.log2(100), 0, 0, padding, padding, 1],
                               atol=1e-12)
    ragged = np.log2(384 / 300) + np.log2(288 / 256)
    padding = np.log2(128 * 128 / (96 * 128))
    np.testing.assert_allclose(out[1], [np.log2(9), np.log2(128 * 96), ragged, np.log2(96), 7, 0, 1, padding,
                                        padding + ragged, 1], atol=1e-12)
    assert (out[2] == 0).all()


def test_physical_tiles_follow_the_layout_not_the_dim_order():
    """Transposing the output's dims, its layout and the tile bounds together changes nothing; a bound larger than
    its dim covers the dim once; size-1 dims are never a tile's minor dims."""
    bounds = [[8, 256, 1], [16, 512, 1], [4, 100, 1]]
    plain = physical_tiles(tile_configs(bounds), kernel_nodes([40, 300, 1], [2, 1, 0]))
    swapped = physical_tiles(tile_configs([[b[1], b[0], b[2]] for b in bounds]), kernel_nodes([300, 40, 1], [2, 0, 1]))
    np.testing.assert_allclose(plain, swapped)
    np.testing.assert_allclose(plain[:2, 3:5], [[np.log2(256), 3], [np.log2(300), 4]])  # minor 300 > its bound 512
    assert plain[1, 0] == np.log2(3)  # 40 / 16 -> 3 tiles; 300 within one tile of 512


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
