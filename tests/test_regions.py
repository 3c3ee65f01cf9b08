"""Downstream layout regions: hand-built chains with known answers, and the real-format fixtures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from solution.constants import NODE_FEAT_DIM, SHAPE_DIMS, SHAPE_PRODUCT
from solution.data.features import node_feature_width, signed_log
from solution.data.preprocess import Preprocessing, build_record
from solution.data.reader import read_graph
from solution.data.regions import REGION_FEATURES, layout_regions

FIXTURES = Path(__file__).resolve().parent.parent.parent / "shared" / "fixtures" / "npz"


def shaped(*shapes: tuple[int, ...]) -> np.ndarray:
    """[n, 140] node features holding only each node's output dims and their product."""
    feat = np.zeros((len(shapes), NODE_FEAT_DIM), np.float32)
    for i, shape in enumerate(shapes):
        feat[i, SHAPE_DIMS.start:SHAPE_DIMS.start + len(shape)] = shape
        feat[i, SHAPE_PRODUCT] = np.prod(shape)
    return feat


# 0 param [4, 8] -> 1 conv [4, 8] (configurable) -> 2 add [4, 8] (also reads 6) -> 3 exp [4, 8] -> 4 reduce [4]
#                                                                                 3 -> 5 dot [4, 8] (configurable)
# 6 param [4, 8]; 5 -> 7 neg [4, 8]
NODES = shaped((4, 8), (4, 8), (4, 8), (4, 8), (4,), (4, 8), (4, 8), (4, 8))
EDGES = np.array([[1, 0], [2, 1], [2, 6], [3, 2], [4, 3], [5, 3], [7, 5]])  # [consumer, producer] as on disk
CONFIGURABLE = np.array([1, 5])


def test_a_region_follows_same_shape_consumers_and_stops_at_a_shape_change_or_a_configurable_node():
    regions = layout_regions(NODES, EDGES, CONFIGURABLE, np.array([1, 5, 4]), hops=8)
    # conv: add and exp inherit its layout (not the reduce: another shape; not the dot: it sets its own); the add
    # also reads param 6, where another layout may meet this one
    assert regions[0].tolist() == [2, 64, 1]
    assert regions[1].tolist() == [1, 32, 0]  # dot: neg alone
    assert regions[2].tolist() == [0, 0, 0]  # the reduce has no consumer
    assert regions.shape == (3, REGION_FEATURES)


def test_a_region_reaches_no_further_than_its_hops():
    assert layout_regions(NODES, EDGES, CONFIGURABLE, np.array([1]), hops=1).tolist() == [[1, 32, 1]]
    assert layout_regions(NODES, EDGES, CONFIGURABLE, np.array([1]), hops=0).tolist() == [[0, 0, 0]]


def test_a_region_counts_an_operand_from_inside_it_as_no_meeting():
    # a diamond: conv 1 -> 2 neg, 1 -> 3 abs, (2, 3) -> 4 add: both operands of the add carry the conv's layout
    nodes = shaped((4, 8), (4, 8), (4, 8), (4, 8), (4, 8))
    edges = np.array([[1, 0], [2, 1], [3, 1], [4, 2], [4, 3]])
    assert layout_regions(nodes, edges, np.array([1]), np.array([1]), hops=4).tolist() == [[3, 96, 0]]


@pytest.mark.parametrize("stem", ["fixture_conv_reshape_dot", "fixture_scan_rnn"])
def test_reach_adds_three_region_columns_to_every_kept_node_of_a_real_file(stem):
    path = FIXTURES / "layout" / "xla" / "random" / "train" / f"{stem}.npz"
    if not path.exists():
        pytest.fail(f"missing real-format fixture {path}: the tests need ../shared beside the project root")
    raw = read_graph(path, "train")
    plain, _ = build_record(raw, Preprocessing(), dedup_configs=False)
    reached, _ = build_record(raw, Preprocessing(reach=4), dedup_configs=False)
    width = node_feature_width()
    assert plain["node_feat"].shape[1] == width and reached["node_feat"].shape[1] == width + REGION_FEATURES
    np.testing.assert_array_equal(reached["node_feat"][:, :width], plain["node_feat"])
    ids = raw.config_node_ids
    expected = signed_log(layout_regions(raw.node_feat, raw.edge_index, ids, ids, 4))  # [nc, 3]
    np.testing.assert_allclose(reached["node_feat"][reached["config_node"], width:], expected)
    assert (expected[:, 0] > 0).any()  # some configurable node passes its layout on
    assert (reached["node_feat"][:, width:] >= 0).all()


def test_reach_must_not_be_negative():
    with pytest.raises(ValueError, match="data.reach=-1"):
        Preprocessing(reach=-1)
