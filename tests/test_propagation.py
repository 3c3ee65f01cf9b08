"""Layouts carried through a whole layout file as XLA carries them: the work each config causes, on hand-made and
real-format files."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from test_prior import FIXTURES

from solution.data.preprocess import config_operands, propagation
from solution.data.reader import RawGraph, read_graph
from solution.data.tasks import TASKS
from solution.format import ELEMENT_TYPE, ELEMENT_TYPES, LAYOUT_GROUP, NODE_FEAT_DIM, OPCODE_IDS
from solution.layouts import block_keys, block_layout
from solution.physics.prior import layout_traffic
from solution.physics.propagation import (
    BYTE_PARTS,
    MATMUL,
    PARTS,
    Propagation,
    dot_keys,
    file_propagation,
)
from solution.programs import hlo
from solution.programs.encode import InlinedModule, arrays, flatten, tensor_ranks
from solution.programs.law import LayoutLaw, computation_runs

UNSET = [-1] * 6


def raw_graph(opcodes: list[str], dims: list[list[int]], operands: list[list[int]], configs: np.ndarray,
              dimensions: dict[int, list[int]] | None = None, element_type: str = "f32") -> RawGraph:
    """A hand-made layout file: node i runs opcodes[i] on its operands into a row-major tensor of dims[i] (with
    its `dimensions` attribute), all of `element_type`; the reshapes and dots are configurable, with configs
    [c, nc, 18]; the last node is the root."""
    n = len(opcodes)
    feat = np.zeros((n, NODE_FEAT_DIM), np.float32)
    feat[:, ELEMENT_TYPE + ELEMENT_TYPES.index(element_type)] = 1
    for i, shape in enumerate(dims):
        feat[i, 21:21 + len(shape)] = shape
        feat[i, 134:134 + len(shape)] = list(range(len(shape)))[::-1]
        feat[i, 31:31 + len((dimensions or {}).get(i, []))] = (dimensions or {}).get(i, [])
    feat[-1, 0] = 1
    edges = np.array([[user, operand] for user, ops in enumerate(operands) for operand in ops], np.int64)
    ids = np.array([i for i, name in enumerate(opcodes) if name in ("reshape", "dot")], np.int64)
    return RawGraph(Path("hand.npz"), TASKS["layout"], feat, np.array([OPCODE_IDS[o] for o in opcodes]), edges,
                    configs.astype(np.int8), np.ones(len(configs), np.int64), ids)


def encoded_file(path: Path) -> tuple[hlo.Module, InlinedModule, RawGraph]:
    """An HLO text file parsed, flattened and encoded by the official rules, as a layout file of one default config."""
    module = hlo.read_module(path)
    graph = flatten(module)
    encoded = arrays(module, graph)
    configs = np.zeros((1, len(encoded["node_config_ids"]), 18), np.int8)
    return module, graph, RawGraph(path, TASKS["layout"], encoded["node_feat"], encoded["node_opcode"],
                                   encoded["edge_index"], configs, np.ones(1), encoded["node_config_ids"],
                                   encoded["node_splits"].reshape(-1))


def blocks(output: list[int] | None = None, given: list[int] | None = None) -> list[int]:
    """One configurable node's 18 config columns: output and input minor-to-major (None: left to the compiler)."""
    return (output or [-1, -1]) + [-1] * 4 + (given or [-1, -1]) + [-1] * 4 + UNSET


# [16, 256] f32 stored in 8 x 128 tiles: the 256 minor (row-major) 16 x 256 x 4 bytes; the 16 minor 128 x 256 x 4
ROW, COLUMN = 4 * 4096, 4 * 32768


@pytest.mark.parametrize("rank", range(LAYOUT_GROUP + 1))
def test_a_config_blocks_layout_is_its_orders_place_among_the_permutations_or_the_default_where_unset(rank):
    rng = np.random.default_rng(rank)
    perms = list(itertools.permutations(range(rank)))
    orders = [perms[i] for i in rng.integers(len(perms), size=50)]
    configs = np.full((100, LAYOUT_GROUP), -1, np.int8)
    for row, order in enumerate(orders):
        configs[row, :rank] = order
    configs[50:, :rank] = np.where(rng.random((50, rank)) < 0.5, -1, configs[:50, :rank])  # some dims left unset
    expected = [perms.index(order) for order in orders] + [
        perms.index(orders[row]) if (configs[50 + row, :rank] >= 0).all() else -1 for row in range(50)]
    if rank == 0:  # a scalar: its one order set (0) or left to the compiler
        configs[::2, 0] = 0
        expected = [0 if b >= 0 else -1 for b in configs[:, 0]]
    assert block_layout(block_keys(configs)[:, 0], rank).tolist() == expected


def test_layouts_carry_through_element_wise_ops_and_reshapes_out_of_the_files_order_move_their_tensors():
    configs = np.array([
        [blocks(), blocks()],  # every layout the file's (row-major): the reshapes are bitcasts, the negate a pass
        [blocks([0, 1]), blocks()],  # the first writes column-major, the negate keeps it, the second reads it so
        [blocks([0, 1]), blocks(given=[1, 0])],  # ... or has it copied back to row-major and is a bitcast again
        [blocks([0, 1]), blocks([0, 1], [0, 1])],  # ... or reads and writes it column-major
    ])  # [4 configs, 2 configurable nodes, 18]
    raw = raw_graph(["parameter", "reshape", "negate", "reshape"], [[16, 256]] * 4, [[], [0], [1], [2]], configs)
    np.testing.assert_allclose(layout_traffic(raw), [
        ROW,
        (COLUMN + ROW) + COLUMN + (ROW + COLUMN),
        (COLUMN + ROW) + COLUMN + (COLUMN + ROW),  # the copy: read column-major, written row-major
        (COLUMN + ROW) + COLUMN + (COLUMN + COLUMN) + (COLUMN + ROW)])  # the result leaves in the file's order


def test_a_transpose_maps_its_operands_layout_and_its_user_pays_for_another_order():
    # [16, 256] row-major, transposed to [256, 16]: its 256 stays minor, which for [256, 16] is the order (0, 1)
    configs = np.array([[blocks(given=[0, 1])], [blocks(given=[1, 0])]])  # [2, 1, 18]
    raw = raw_graph(["parameter", "transpose", "dot"], [[16, 256], [256, 16], [256, 128]], [[], [0], [1]], configs,
                    dimensions={1: [1, 0]})
    carried, copied = layout_traffic(raw)
    assert carried == pytest.approx(COLUMN + ROW, rel=1e-12)  # the dot writes [256, 128] (32768 elements) and
    # reads the transpose as it comes (a dot's time comes through logs: exact to rounding)
    assert copied - carried == pytest.approx((ROW + COLUMN) + (COLUMN - ROW), rel=1e-12)  # a copy of both orders,
    # then a read of the padded one


def test_a_real_format_files_prior_follows_its_configs_whatever_their_order_and_the_chunking(monkeypatch):
    raw = read_graph(FIXTURES / "layout" / "xla" / "random" / "valid" / "fixture_conv_reshape_dot.npz")
    whole = layout_traffic(raw)
    assert whole.shape == (raw.num_configs,) and np.isfinite(whole).all() and len(np.unique(whole)) > 1
    permutation = np.random.default_rng(0).permutation(raw.num_configs)
    raw.config_feat = raw.config_feat[permutation]
    np.testing.assert_allclose(layout_traffic(raw), whole[permutation])
    monkeypatch.setattr("solution.physics.propagation.CONFIG_CHUNK", 7)
    np.testing.assert_allclose(layout_traffic(raw), whole[permutation])


def test_a_files_propagation_is_read_once_per_process():
    path = FIXTURES / "layout" / "xla" / "random" / "valid" / "fixture_conv_reshape_dot.npz"
    assert file_propagation(str(path), "valid") is file_propagation(str(path), "valid")


def test_the_work_comes_in_parts_whose_elements_add_up_to_the_traffic():
    configs = np.array([[blocks([0, 1]), blocks()], [blocks([0, 1]), blocks(given=[1, 0])]])
    raw = raw_graph(["parameter", "reshape", "negate", "reshape"], [[16, 256]] * 4, [[], [0], [1], [2]], configs)
    work = Propagation.of_file(raw).work(configs)
    parts = dict(zip(PARTS, work.parts.T))  # part -> [2]
    np.testing.assert_allclose(parts["fused"], [COLUMN, COLUMN])  # the negate, in the first reshape's order
    np.testing.assert_allclose(parts["relayouts"], [2 * (COLUMN + ROW), COLUMN + ROW])  # the second: a bitcast
    assert work.matmuls.shape == (2, 0, len(MATMUL))  # no dot or convolution
    np.testing.assert_allclose(parts["transposes"], [0, COLUMN + ROW])  # column- to row-major: the minor dim changes
    np.testing.assert_allclose(parts["copies"], 0)
    np.testing.assert_allclose(parts["launches"], [2, 2])  # two relayouts, or one and the copy
    elements = sum(parts[p] for p in PARTS[:BYTE_PARTS])
    np.testing.assert_allclose(elements, layout_traffic(raw))


def test_a_dot_counts_its_multiply_adds_its_bytes_and_its_operands_fed_with_their_contracted_dim_not_minor():
    inputs = [[2, 1, 0], [1, 2, 0], [0, 1, 2]]  # the lhs's contracted dim (2) minor, second-minor, further out
    configs = np.array([[UNSET + order + [-1] * 3 + UNSET] for order in inputs])  # [3 configs, 1 dot, 18]
    raw = raw_graph(["parameter", "parameter", "dot"], [[4, 16, 256], [256, 128], [4, 16, 128]], [[], [], [0, 1]],
                    configs)
    work = Propagation.of_file(raw).work(configs)
    matmul = dict(zip(MATMUL, work.matmuls[:, 0].T))  # field -> [3]
    np.testing.assert_allclose(matmul["multiply_adds"], 4 * 16 * 128 * 256)  # the output fills its tiles; 256
    # elements reduced into each
    lhs = np.array([4 * 16 * 256, 4 * 256 * 128, 256 * 16 * 128])  # elements in tiles: 4 x [16, 256]; 4 x [256,
    # 16 -> 128]; 256 x [16, 4 -> 128]
    np.testing.assert_allclose(matmul["bytes"], 4 * (lhs + 256 * 128 + 4 * 16 * 128))  # f32 lhs, rhs and output
    # the rhs [256, 128] row-major has its contracted dim second-minor under every config
    np.testing.assert_allclose(matmul["second_minor_feeds"], [1, 2, 1])
    np.testing.assert_allclose(matmul["major_feeds"], [0, 0, 1])
    np.testing.assert_allclose(work.parts[0], 0)  # in the file's layouts no copy: the dot's work is all its own


def test_a_dots_contracted_dims_are_read_from_its_shapes_as_the_real_programs_set_them():
    readings = []
    for path in sorted((FIXTURES.parent / "hlo").glob("*.hlo")):
        for computation in hlo.read_module(path).computations.values():
            shapes = {i.name: tuple(i.shape.dims) for i in computation.instructions}
            for dot in (i for i in computation.instructions if i.opcode == "dot"):
                lhs, rhs = (shapes[o] for o in dot.operands)
                truth = [set(hlo.ints(dot.attributes[f"{side}_contracting_dims"])) for side in ("lhs", "rhs")]
                read = dot_keys(lhs, rhs, tuple(dot.shape.dims))
                readings.append((read is not None and [set(k) for k in read] == truth,
                                 read is not None and math.prod(lhs[k] for k in read[0]) == math.prod(
                                     lhs[k] for k in truth[0])))
    right, same_size = np.array(readings).T
    assert len(readings) >= 20 and right.mean() >= 0.85
    assert same_size.all()  # a wrong reading is one the shapes allow as well: a square operand's other dim
    assert dot_keys((32, 64), (64, 16), (32, 16)) == ((1,), (0,))
    assert dot_keys((64, 64), (64, 64), (64, 64)) == ((1,), (0,))  # x . W where every dim matches: W's first
    assert dot_keys((2, 4, 10, 8), (2, 4, 12, 8), (2, 4, 10, 12)) == ((3,), (3,))  # attention's queries . keys
    assert dot_keys((3, 5), (7, 9), (11,)) is None


def test_a_dots_input_is_the_operand_its_shapes_make_the_lhs_whatever_the_node_order():
    configs = np.array([[blocks()], [blocks(given=[0, 1])]])  # x as the file has it, or column-major
    raw = raw_graph(["parameter", "parameter", "dot"], [[256, 128], [16, 256], [16, 128]], [[], [], [0, 1]], configs)
    work = Propagation.of_file(raw).work(configs)  # W [256, 128] comes first, x [16, 256] . W
    np.testing.assert_allclose(work.parts[:, PARTS.index("transposes")], [0, ROW + COLUMN])  # x copied to
    # column-major, not W
    np.testing.assert_allclose(work.matmuls[:, 0, MATMUL.index("second_minor_feeds")], [1, 2])  # W's 256, then x's


def test_the_real_programs_dots_and_convolutions_read_their_operands_in_hlo_order_where_shapes_tell():
    right = []
    for path in sorted((FIXTURES.parent / "hlo").glob("*.hlo")):
        module, graph, raw = encoded_file(path)
        tensors = Propagation.of_file(raw).tensors
        for i, tensor in enumerate(tensors):
            if tensor.name in ("dot", "convolution") and len(set(graph.operands[i])) == 2:
                right.append(tensor.operands == graph.operands[i])
                assert right[-1] or sorted(tensor.operands) == tensor.operands, path  # node order where shapes tie
    assert len(right) >= 20 and np.mean(right) >= 0.9


def test_bytes_moved_follow_the_element_type_and_multiply_adds_do_not():
    configs = np.array([[blocks(given=[0, 1])], [blocks()]])
    graphs = {kind: raw_graph(["parameter", "parameter", "dot"], [[16, 256], [256, 128], [16, 128]],
                              [[], [], [0, 1]], configs, element_type=kind) for kind in ("f32", "bf16", "s8")}
    works = {kind: Propagation.of_file(raw).work(configs) for kind, raw in graphs.items()}
    moved = {kind: np.c_[w.parts[:, :BYTE_PARTS], w.matmuls[:, 0, MATMUL.index("bytes")]] for kind, w in works.items()}
    np.testing.assert_allclose(moved["bf16"], moved["f32"] / 2)
    np.testing.assert_allclose(moved["s8"], moved["f32"] / 4)
    assert moved["f32"].sum(1).min() > 0 and moved["f32"][:, :BYTE_PARTS].sum(1).max() > 0  # a copy, and the dot
    np.testing.assert_allclose(works["s8"].parts[:, BYTE_PARTS:], works["f32"].parts[:, BYTE_PARTS:])
    np.testing.assert_allclose(works["s8"].matmuls[..., MATMUL.index("multiply_adds")],
                               works["f32"].matmuls[..., MATMUL.index("multiply_adds")])


def test_a_loops_body_runs_as_often_as_its_dynamic_slices_say_nested_loops_multiplied():
    dims = [[4, 8], [1, 8], [6, 4, 8], [1, 4, 8], [4, 8], [8, 8], [1, 8], [8, 8], [4, 8], [4, 8], [4, 8]]
    opcodes = ["parameter", "dynamic-slice",  # inner body: reads one of 4 rows per trip
               "parameter", "dynamic-slice", "while",  # outer body: one of 6 slabs per trip, the inner loop,
               "parameter", "parameter", "dynamic-update-slice", "add",  # a row into a buffer of 8 (6 trips fit)
               "parameter", "while"]  # entry
    operands = [[], [0], [], [2], [3, 1], [], [], [5, 6], [4, 4], [], [9, 8]]  # a while's: its operand, body root
    raw = raw_graph(opcodes, dims, operands, np.zeros((1, 0, 18), np.int8))
    raw.node_splits = np.array([0, 2, 9, 11])
    np.testing.assert_array_equal(Propagation.of_file(raw).runs, [24] * 2 + [6] * 7 + [1] * 2)
    raw.node_splits = None  # one computation: no body to find
    np.testing.assert_array_equal(Propagation.of_file(raw).runs, np.ones(11))


def test_a_loop_counts_its_bodys_work_once_per_trip():
    configs = np.array([[blocks(given=[0, 1])], [blocks()]])
    opcodes = ["parameter", "parameter", "dynamic-slice", "dot", "while"]
    dims = [[16, 256], [768, 128], [256, 128], [16, 128], [16, 128]]
    operands = [[], [], [1], [0, 2], [3]]
    body = Propagation.of_file(raw_graph(opcodes[:4], dims[:4], operands[:4], configs)).work(configs)  # the dot alone
    raw = raw_graph(opcodes, dims, operands, configs)
    once = Propagation.of_file(raw).work(configs)
    raw.node_splits = np.array([0, 4, 5])  # the dot in a body that slices 1 of 3 weights per trip
    looped = Propagation.of_file(raw).work(configs)
    np.testing.assert_allclose(looped.parts, once.parts + 2 * body.parts)
    amounts = [MATMUL.index("multiply_adds"), MATMUL.index("bytes")]  # x the runs; the feeds stay counts per run
    np.testing.assert_allclose(looped.matmuls[..., amounts], 3 * once.matmuls[..., amounts])
    np.testing.assert_allclose(looped.matmuls[..., 2:], once.matmuls[..., 2:])
    assert body.matmuls[:, 0, 0].min() > 0 and body.parts[0, PARTS.index("transposes")] > 0


def test_a_real_scans_body_runs_its_trip_count_times_as_its_hlo_says():
    path = FIXTURES / "layout" / "xla" / "random" / "valid" / "fixture_scan_rnn.npz"
    text = FIXTURES.parent / "hlo" / "fixture_scan_rnn.hlo"
    module = hlo.read_module(text)
    by_text = computation_runs(module, flatten(module), text.read_text().splitlines())  # [N] from the constants
    runs = Propagation.of_file(read_graph(path)).runs  # [N] from the file's shapes
    assert by_text.max() == 11  # two scans of 10 steps, their conditions tested 11 times
    np.testing.assert_array_equal(runs, np.minimum(by_text, 10))


def test_a_real_programs_loops_and_branches_run_as_its_hlo_says():
    text = FIXTURES.parent / "hlo" / "fixture_embed_loop.hlo"
    module, graph, raw = encoded_file(text)
    by_text = computation_runs(module, graph, text.read_text().splitlines())  # [N] from the constants
    runs = Propagation.of_file(raw).runs  # [N] from the shapes
    assert set(by_text[by_text > 0]) == {0.5, 1, 3, 4}  # two branches; loops of 3 trips, conditions tested 4 times
    counted = by_text > 0  # (the law leaves reduces' scalar regions to their callers)
    np.testing.assert_array_equal(runs[counted], np.minimum(by_text[counted], 3))


def random_configs(graph: InlinedModule, ids: np.ndarray, count: int, seed: int) -> np.ndarray:
    """[count, nc, 18] configs setting each block of each configurable node to a random order 7 times in 10."""
    rng = np.random.default_rng(seed)
    configs = np.full((count, len(ids), 18), -1, np.int64)
    for k, node in enumerate(ids.tolist()):
        for block, rank in enumerate(tensor_ranks(graph, node)):
            for c in np.flatnonzero(rng.random(count) < 0.7) if rank > 0 else []:
                configs[c, k, 6 * block:6 * block + rank] = rng.permutation(rank)
    return configs


def dense(work: dict, count: int) -> np.ndarray:
    """[count, len(PARTS)] one node's Work."""
    out = np.zeros((count, len(PARTS)))
    for part, amount in work.items():
        out[:, part] += amount
    return out


@pytest.mark.parametrize("name", ["fixture_attention_train", "fixture_conv_pool_pad", "fixture_embed_loop"])
def test_one_walk_over_a_programs_hlo_and_over_its_encoded_file_finds_the_same_work_at_most_nodes(name):
    """The corpus law walks the HLO (operand order, contracting dims and each block's operand from the text), the
    prior walks the official encoding of the same program (all of it inferred from shapes): node by node, the same
    engine finds the same work but where the file cannot tell an element-wise op's operand order (and downstream
    of those)."""
    text = FIXTURES.parent / "hlo" / f"{name}.hlo"
    module, graph, raw = encoded_file(text)
    configs = random_configs(graph, raw.config_node_ids, 32, seed=0)
    raw.config_feat = configs.astype(np.int8)
    from_hlo = LayoutLaw(module, graph, raw.config_node_ids, text.read_text()).propagation
    agree, varying, configurable = [], 0, set(raw.config_node_ids.tolist())
    for i, ((work, matmul), (read, read_matmul)) in enumerate(zip(from_hlo.walk(configs),
                                                                   Propagation.of_file(raw).walk(configs))):
        done = dense(work, len(configs))
        same = np.allclose(done, dense(read, len(configs))) and (matmul is None) == (read_matmul is None)
        agree.append(same and (matmul is None or np.allclose(matmul, read_matmul)))
        varying += bool(np.ptp(done, 0).any())
    at_configurable = [agree[i] for i in configurable]
    assert np.mean(agree) >= 0.94 and np.mean(at_configurable) >= 0.85 and varying >= 10


def test_the_corpus_law_prices_the_walks_work_its_copies_among_it():
    """A config that makes a copy costs the law more than the compiler's layouts, at the copy's node and in all."""
    text = FIXTURES.parent / "hlo" / "fixture_conv_reshape_dot.hlo"
    module, graph, raw = encoded_file(text)
    law = LayoutLaw(module, graph, raw.config_node_ids, text.read_text())
    configs = np.concatenate([np.full((1, len(raw.config_node_ids), 18), -1),
                              random_configs(graph, raw.config_node_ids, 31, seed=1)])
    costs = law.node_costs(configs)  # [32, N]
    copies = np.stack([dense(work, len(configs))[:, PARTS.index("copies")] + dense(work, len(configs))[
        :, PARTS.index("transposes")] for work, _ in law.propagation.walk(configs)], 1)  # [32, N] bytes copied
    assert (copies[0] == 0).all() and copies.sum() > 0
    node = np.argmax(copies.sum(0))
    assert (costs[copies[:, node] > 0, node] > costs[0, node]).all()
    np.testing.assert_allclose(law.runtime(configs), costs.sum(1))
    assert law.runtime(configs)[copies.sum(1) > 0].min() > 0 and np.unique(law.runtime(configs)).size > 10


@pytest.mark.parametrize("name", ["fixture_conv_reshape_dot", "fixture_scan_rnn"])
def test_each_configurable_nodes_operands_and_key_dims_are_the_hlo_texts(name):
    """config_operands of a real-format file against the HLO text it was encoded from: the operand shapes its input
    and kernel blocks lay out, a dot's contracting dims, a convolution's feature dims (dim_labels)."""
    raw = read_graph(FIXTURES / "layout" / "xla" / "random" / "valid" / f"{name}.npz")
    graph = flatten(hlo.read_module(FIXTURES.parent / "hlo" / f"{name}.hlo"))
    operands = config_operands(propagation(raw), len(raw.config_node_ids)).reshape(-1, 5, LAYOUT_GROUP)  # [nc, 5, 6]
    checked = set()
    for k, node in enumerate(raw.config_node_ids.tolist()):
        instruction, shapes = graph.nodes[node], [graph.nodes[o].shape.dims for o in graph.operands[node]]
        dims, keys = operands[k, :2], operands[k, 2:]  # [2, 6] input and kernel sizes, [3, 6] key dims per block
        if instruction.opcode == "dot":
            truth = [(0, set()), (1, set(hlo.ints(instruction.attributes["lhs_contracting_dims"])))]
            expected = [shapes[0], []]
        elif instruction.opcode == "convolution":
            labels = hlo.conv_dims(instruction.attributes["dim_labels"])
            truth = [(0, {labels.output_feature}), (1, {labels.input_feature}),
                     (2, {labels.kernel_input_feature, labels.kernel_output_feature})]
            expected = shapes
        else:  # a reshape lays out its operand and has no key dims
            truth, expected = [(b, set()) for b in range(3)], [shapes[0], []]
        for block, sizes in enumerate(expected):
            np.testing.assert_array_equal(dims[block], list(sizes) + [0] * (LAYOUT_GROUP - len(sizes)))
        for block, key in truth:
            assert set(np.flatnonzero(keys[block]).tolist()) == key, (name, node, instruction.opcode, block)
        checked.add(instruction.opcode)
    assert "dot" in checked and (name != "fixture_conv_reshape_dot" or checked == {"dot", "convolution", "reshape"})
