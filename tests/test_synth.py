"""Synthetic data: exact file format, answers, determinism, and a runtime law that needs the graph."""

from __future__ import annotations

import csv
import math
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

from solution.constants import COLLECTIONS, CONFIGURABLE_OPCODES, SPLITS
from solution.data.reader import list_files, read_graph
from solution.format import (
    LAYOUT_CONFIG_DIM,
    LAYOUT_GROUP,
    LAYOUT_MINOR_TO_MAJOR,
    NODE_FEAT_DIM,
    OPCODE_NAMES,
    SHAPE_DIMS,
    TILE_CONFIG_DIM,
)
from solution.layouts import PERMS, perm_index
from solution.synth import files, graphs, law, layouts, ops, tiles
from solution.synth.ops import Op
from solution.tools.synth import main as synth_main

LAYOUT_DTYPES = {"node_feat": np.float32, "node_opcode": np.uint8, "edge_index": np.int64,
                 "node_config_feat": np.float32, "node_config_ids": np.int64, "node_splits": np.int64,
                 "config_runtime": np.int64}
TILE_DTYPES = {"node_feat": np.float32, "node_opcode": np.uint8, "edge_index": np.int64, "config_feat": np.float32,
               "config_runtime": np.int64, "config_runtime_normalizers": np.int64}


def load(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as npz:
        return {key: npz[key] for key in npz.files}


def all_files(root: Path) -> dict[tuple[str, str], list[Path]]:
    return {(c, s): list_files(root, c, s) for c in COLLECTIONS for s in SPLITS}


def read_csv(path: Path) -> tuple[list[str], dict[str, str]]:
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    return rows[0], {row[0]: row[1] for row in rows[1:]}


# ---------------------------------------------------------------- the files


def check_graph(arrays: dict[str, np.ndarray]) -> None:
    """Keys shared by layout and tile files: node features, opcodes, topological edges, one root."""
    feat, opcode, edges = arrays["node_feat"], arrays["node_opcode"], arrays["edge_index"]
    n = len(feat)
    assert feat.shape == (n, NODE_FEAT_DIM) and opcode.shape == (n,) and edges.ndim == 2 and edges.shape[1] == 2
    assert edges.min() >= 0 and edges.max() < n
    assert (edges[:, 1] < edges[:, 0]).all(), "producers come before consumers"
    assert np.flatnonzero(feat[:, 0]).tolist() == [n - 1], "one root, the last node"
    assert set(np.unique(edges[:, 0])) | set(np.unique(edges[:, 1])) == set(range(n)), "no isolated node"
    one_hot = feat[:, 2:21]
    assert ((one_hot == 0) | (one_hot == 1)).all() and (one_hot.sum(axis=1) == 1).all()
    dims = feat[:, SHAPE_DIMS]
    rank = (dims > 0).sum(axis=1)
    layout = feat[:, LAYOUT_MINOR_TO_MAJOR]
    for r, row in zip(rank, layout):
        assert sorted(row[:r].tolist()) == list(range(r)) and not row[r:].any(), "0-padded minor_to_major"


def check_layout_configs(arrays: dict[str, np.ndarray], search: str) -> None:
    feat, ids = arrays["node_config_feat"], arrays["node_config_ids"]
    c, nc, _ = feat.shape
    assert feat.shape[2] == LAYOUT_CONFIG_DIM and ids.shape == (nc,) and c == len(arrays["config_runtime"])
    assert (np.diff(ids) > 0).all() and np.isin(arrays["node_opcode"][ids], CONFIGURABLE_OPCODES).all()
    groups = feat.reshape(c, nc, LAYOUT_CONFIG_DIM // LAYOUT_GROUP, LAYOUT_GROUP)  # [c, nc, 3, 6]
    used = (groups >= 0).sum(axis=-1)  # [c, nc, 3] dims set per group
    assert ((groups[..., :1] >= 0) | (groups == -1).all(axis=-1, keepdims=True)).all(), "-1 only as padding"
    ranks = (arrays["node_feat"][ids][:, SHAPE_DIMS] > 0).sum(axis=1)
    out = used[:, :, 0]
    assert ((out == 0) | (out == ranks[None])).all(), "an output layout covers the node's rank"
    explicit = groups[used > 0]  # [k, 6]
    for row, r in zip(explicit[:50], (explicit >= 0).sum(axis=1)[:50]):
        assert sorted(row[:r].tolist()) == list(range(r)) and (row[r:] == -1).all()
    is_conv = arrays["node_opcode"][ids] == Op.CONVOLUTION
    assert not used[:, ~is_conv, 2].any(), "kernel layouts only for convolutions"
    if search == "random":
        assert (used[:, :, :2] > 0).all()
    else:
        assert (out == 0).any(), "default configs keep most nodes at -1"
        moved = (used > 0).any(axis=2).sum(axis=1)  # [c] nodes away from default
        assert moved.max() <= 8 and np.median(moved) <= 3


@pytest.mark.parametrize("op", list(Op), ids=lambda op: op.name)
def test_generator_opcode_ids_are_the_official_encoders(op):
    assert OPCODE_NAMES[op].replace("-", "_") == op.name.lower()


def test_layout_files_have_the_real_keys_dtypes_and_shapes(tiny_root):
    for (collection, split), paths in all_files(tiny_root).items():
        if collection == "tile:xla":
            continue
        assert paths, f"no {collection} {split} files"
        for path in paths:
            arrays = load(path)
            assert {k: v.dtype for k, v in arrays.items()} == LAYOUT_DTYPES, path
            check_graph(arrays)
            check_layout_configs(arrays, collection.split(":")[2])
            splits = arrays["node_splits"]
            assert splits.shape[0] == 1 and splits[0, 0] == 0 and (np.diff(splits[0]) > 0).all()
            assert splits[0, -1] == len(arrays["node_feat"])  # the official encoder's form ends with n
            runtime = arrays["config_runtime"]
            assert (runtime == 0).all() if split == "test" else (runtime > 0).all()


def test_tile_files_have_the_real_keys_dtypes_and_shapes(tiny_root):
    for split in SPLITS:
        paths = list_files(tiny_root, "tile:xla", split)
        assert paths
        for path in paths:
            arrays = load(path)
            assert {k: v.dtype for k, v in arrays.items()} == TILE_DTYPES, path
            check_graph(arrays)
            feat = arrays["config_feat"]
            c = len(feat)
            assert feat.shape == (c, TILE_CONFIG_DIM) and arrays["config_runtime_normalizers"].shape == (c,)
            for base in (0, 8):
                bounds = feat[:, base:base + 6]
                assert (feat[:, base + 6] == bounds.sum(axis=1)).all()
                assert np.allclose(feat[:, base + 7], np.where(bounds > 0, bounds, 1).prod(axis=1))
            assert not feat[:, 16:].any(), "input bounds are 0"
            assert len(np.unique(feat, axis=0)) == c, "distinct tile configs"
            assert (arrays["config_runtime_normalizers"] > 0).all()
            runtime = arrays["config_runtime"]
            assert (runtime == 0).all() if split == "test" else (runtime > 0).all()


def test_the_package_reader_accepts_every_file(tiny_root):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for (collection, split), paths in all_files(tiny_root).items():
            for path in paths:
                graph = read_graph(path, split)
                assert graph.is_test == (split == "test")


def test_stems_name_models_in_train_and_valid_and_hashes_in_test(tiny_root):
    for (collection, split), paths in all_files(tiny_root).items():
        for path in paths:
            if split == "test":
                assert len(path.stem) == 16 and int(path.stem, 16) >= 0
            else:
                assert "_like" in path.stem or "_fusion_" in path.stem
                assert path.stem.rsplit("_", 1)[1].isdigit()


def test_answers_and_sample_submission_cover_every_test_file(tiny_root):
    header, answers = read_csv(tiny_root / "answers.csv")
    assert header == ["ID", "Runtimes"]
    sub_header, submission = read_csv(tiny_root / "sample_submission.csv")
    assert sub_header == ["ID", "TopConfigs"]
    expected = {f"{c}:{p.stem}": p for c in COLLECTIONS for p in list_files(tiny_root, c, "test")}
    assert set(answers) == set(submission) == set(expected)
    for row_id, path in expected.items():
        arrays = load(path)
        count = len(arrays["config_runtime"])
        truth = np.array([float(t) for t in answers[row_id].split(";")])
        top = [int(t) for t in submission[row_id].split(";")]
        assert len(truth) == count and (truth > 0).all()
        if row_id.startswith("tile:"):
            assert top == list(range(min(5, count)))
            assert 0.001 < np.median(truth) < 100, "runtime / normalizer is near 1"
        else:
            assert top == list(range(count))
            assert np.array_equal(truth, np.round(truth)), "layout runtimes are integer ns"


def duplicates(arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(rows repeating an earlier config [k], the first row of each [k])."""
    feat = arrays["node_config_feat"]
    _, first, inverse = np.unique(feat.reshape(len(feat), -1), axis=0, return_index=True, return_inverse=True)
    first_of = first[inverse.reshape(-1)]  # [c]
    repeated = np.flatnonzero(first_of != np.arange(len(feat)))
    return repeated, first_of[repeated]


def test_train_duplicates_stay_within_0_4_percent(tiny_root):
    rows = planted = 0
    for collection in COLLECTIONS[1:]:
        for path in list_files(tiny_root, collection, "train"):
            arrays = load(path)
            repeated, first = duplicates(arrays)
            runtime = arrays["config_runtime"]
            assert (np.abs(runtime[repeated] / runtime[first] - 1) <= 0.004).all(), path
            if collection == "layout:xla:random":  # 24^k choices: duplicates there are planted
                rows, planted = rows + len(runtime), planted + len(repeated)
    assert planted >= 0.005 * rows, "1-3% of configs are duplicates"


def test_same_seed_same_bytes_other_seed_other_data(tmp_path):
    subset = ["tile:xla", "layout:nlp:random"]
    a = files.generate(tmp_path / "a", "tiny", seed=3, collections=subset)
    b = files.generate(tmp_path / "b", "tiny", seed=3, collections=subset)
    c = files.generate(tmp_path / "c", "tiny", seed=4, collections=subset)
    written = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert written == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert len(written) > 40 and not any(p.parts[-1].endswith(".tmp") for p in written)
    for rel in written:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
        if rel.suffix == ".npz":
            with zipfile.ZipFile(a / rel) as archive:
                assert {info.date_time for info in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}, "no clock"
    assert (a / "answers.csv").read_text() != (c / "answers.csv").read_text()
    first = list_files(a, "layout:nlp:random", "train")[0]
    other = list_files(c, "layout:nlp:random", "train")[0]
    assert not np.array_equal(load(first)["config_runtime"], load(other)["config_runtime"])
    header, answers = read_csv(a / "answers.csv")
    assert {row_id.rsplit(":", 1)[0] for row_id in answers} == set(subset)


def test_main_writes_the_requested_collections(tmp_path, capsys):
    synth_main(["--out", str(tmp_path), "--size", "tiny", "--seed", "1", "--collections", "tile:xla"])
    assert "wrote 46 files" in capsys.readouterr().out
    assert list_files(tmp_path, "tile:xla", "valid")
    assert not (tmp_path / "npz_all" / "npz" / "layout").exists()


def test_unknown_size_or_collection_and_an_old_dataset_are_refused(tmp_path):
    with pytest.raises(ValueError, match="size"):
        files.generate(tmp_path, "huge")
    with pytest.raises(ValueError, match="collections"):
        files.generate(tmp_path, "tiny", collections=["layout:tpu:random"])
    files.generate(tmp_path, "tiny", collections=["tile:xla"])
    with pytest.raises(FileExistsError, match="tile:xla"):
        files.generate(tmp_path, "tiny", seed=1, collections=["tile:xla"])


# ---------------------------------------------------------------- the layout law


def reference_runtime(graph: layouts.LayoutGraph, choice: np.ndarray) -> float:
    """Walk the graph once for one config, with explicit layouts (the slow path LayoutCost tabulates)."""
    nodes = graph.nodes
    chosen = {(v.node, v.group): tuple(PERMS[v.rank][choice[i]]) for i, v in enumerate(graph.vars)}
    flexible: list[bool] = []
    layouts: list[tuple[int, ...]] = []
    total = 0.0
    for u, node in enumerate(nodes):
        flexible.append(node.rank == 0 or node.op in (Op.BROADCAST, Op.CONSTANT, Op.IOTA, Op.RNG)
                        or (node.op in ops.ELEMENTWISE and all(flexible[p] for p in node.inputs)))
        source = next((i for i, p in enumerate(node.inputs) if not flexible[p]), None)
        inherits = node.op in ops.ELEMENTWISE | {Op.CONCATENATE, Op.SLICE, Op.REDUCE_WINDOW}
        if (u, 0) in chosen:
            layout = chosen[u, 0]
        elif node.op == Op.TRANSPOSE:
            inverse = np.argsort(node.dims)
            layout = tuple(int(inverse[d]) for d in layouts[node.inputs[0]])
        elif node.op == Op.REDUCE:
            kept = [d for d in layouts[node.inputs[0]] if d not in node.dims]
            layout = tuple(d - sum(r < d for r in node.dims) for d in kept)
        elif inherits and source is not None:
            layout = layouts[node.inputs[source]]
        else:
            layout = law.default_layout(node, 0, node.rank)
        layouts.append(layout)
        consumed = []
        for i, p in enumerate(node.inputs):
            group = law.dictates(node, i)
            if group is not None:
                wanted = chosen.get((u, group), law.default_layout(node, group, nodes[p].rank))
            elif node.op in ops.ELEMENTWISE | {Op.CONCATENATE} and source is not None and i != source:
                wanted = layout
            else:
                wanted = layouts[p]
            if wanted is not layouts[p] and not flexible[p]:
                total += law.copy_cost(nodes[p], np.array([layouts[p]]), np.array([wanted]))[0]
            consumed.append(wanted)
        slots = [layout, *consumed]
        for slot_ids, fn in law.node_terms(node, [nodes[p] for p in node.inputs]):
            args = [np.array([slots[s]], np.int64).reshape(1, len(slots[s])) for s in slot_ids]
            total += float(np.asarray(fn(*args)).reshape(-1)[0])
    return total


@pytest.mark.parametrize("kind", graphs.XLA_MODELS + graphs.NLP_MODELS)
def test_tabulated_law_equals_a_walk_over_the_graph(kind):
    rng = np.random.default_rng(0)
    build = graphs.convnet_graph if kind in graphs.XLA_MODELS else graphs.transformer_graph
    graph = layouts.layout_graph(build(rng, 400, kind), kind, 16)
    for search in ("random", "default"):
        choices, _ = layouts.sample_choices(graph, rng, 6, search)
        fast = graph.cost.evaluate(choices)
        slow = [reference_runtime(graph, row) for row in choices]
        np.testing.assert_allclose(fast, slow, rtol=1e-9)


def two_convs() -> layouts.LayoutGraph:
    """param -> conv A -> bias, relu (element-wise chain) -> conv B -> root: both convs configurable."""
    b = graphs.GraphBuilder(np.random.default_rng(0))
    dims = graphs.ConvDims(0, 3, (1, 2), 2, 3, (0, 1), 0, 3, (1, 2))
    window = graphs.Window((3, 3), (1, 1), (1, 1), (1, 1), (1, 1))
    x = b.param((8, 32, 32, 64))
    a = b.conv(x, b.param((3, 3, 64, 128)), (8, 32, 32, 128), dims, window)
    h = b.relu(b.bias(a, 3))
    out = b.conv(h, b.param((3, 3, 128, 128)), (8, 32, 32, 128), dims, window)
    b.root([out])
    return layouts.layout_graph(b, "two_convs", 2)


def test_a_mismatch_across_an_element_wise_chain_costs_exactly_a_copy():
    graph = two_convs()
    index = {(v.node, v.group): i for i, v in enumerate(graph.vars)}
    conv_a, conv_b = graph.config_ids.tolist()
    produced, wanted = index[conv_a, 0], index[conv_b, 1]
    default = np.array([v.default for v in graph.vars])
    x = graph.vars[produced].default  # feature minor (NHWC row-major)
    y = perm_index((1, 3, 2, 0))  # the minor dim moves to a spatial dim

    def runtime(out_a: int, in_b: int) -> float:
        choice = default.copy()
        choice[produced], choice[wanted] = out_a, in_b
        return float(graph.cost.evaluate(choice[None])[0])

    relu = graph.nodes[conv_b].inputs[0]  # the copy is paid on the chain's last node, far from conv A
    assert graph.nodes[relu].op == Op.MAXIMUM
    copies = sum(law.copy_cost(graph.nodes[relu], np.array([s]), np.array([d]))[0]
                 for s, d in ((PERMS[4][x], PERMS[4][y]), (PERMS[4][y], PERMS[4][x])))
    assert copies > 0
    interaction = runtime(x, x) + runtime(y, y) - runtime(x, y) - runtime(y, x)
    np.testing.assert_allclose(interaction, -copies, rtol=1e-9)
    assert runtime(x, y) - runtime(x, x) >= copies / 2, "a mismatch costs at least its copy (conv B also slows)"


def test_size_one_dims_never_force_a_copy():
    node = graphs.Node(Op.ADD, (8, 1, 256), "f32")
    same = law.copy_cost(node, np.array([[2, 1, 0]]), np.array([[2, 0, 1]]))
    moved = law.copy_cost(node, np.array([[2, 1, 0]]), np.array([[0, 2, 1]]))
    assert same[0] == 0 and moved[0] > 0


def one_hot(graph: layouts.LayoutGraph, choices: np.ndarray) -> np.ndarray:
    """[c, 1 + sum_v (r_v! - 1)] one-hot of every variable's choice: a per-node additive model, no graph."""
    columns = [np.ones((len(choices), 1))]
    for v, var in enumerate(graph.vars):
        columns.append(np.eye(math.factorial(var.rank))[choices[:, v]][:, 1:])
    return np.hstack(columns)


def additive_fit(graph: layouts.LayoutGraph, rng: np.random.Generator) -> float:
    """Held-out R^2 of least squares on one-hot choices over noise-free runtimes of random configs."""
    choices, _ = layouts.sample_choices(graph, rng, 3000, "random")
    runtime = graph.cost.evaluate(choices)
    features = one_hot(graph, choices)
    assert features.shape[1] < 1000, "keep the fit well determined"
    coef, *_ = np.linalg.lstsq(features[:2000], runtime[:2000], rcond=None)
    residual = runtime[2000:] - features[2000:] @ coef
    return 1 - residual.var() / runtime[2000:].var()


def test_random_runtimes_are_not_per_node_additive():
    fits = []
    for kind in ("resnet_like_train", "inception_like", "bert_like", "gpt_like_train"):
        rng = np.random.default_rng(2)
        build = graphs.convnet_graph if kind in graphs.XLA_MODELS else graphs.transformer_graph
        graph = layouts.layout_graph(build(rng, 600, kind), kind, 10)
        assert graph.cost.pairs, "interaction terms exist"
        fits.append(additive_fit(graph, rng))
    assert max(fits) < 0.97 and np.mean(fits) < 0.9, f"a per-node additive model explains {np.round(fits, 3)}"


def test_noise_is_small_next_to_the_law():
    rng = np.random.default_rng(0)
    graph = layouts.build_layout_graph(rng, "nlp", 600, 10)
    choices, _ = layouts.sample_choices(graph, rng, 1000, "random")
    runtime = graph.cost.evaluate(choices)
    noisy = layouts.noisy(runtime, choices, graph.hash_weights, rng)
    assert noisy.dtype == np.int64 and (noisy > 0).all()
    assert 0 < np.abs(noisy / runtime - 1).max() < 0.01
    assert np.corrcoef(noisy, runtime)[0, 1] > 0.99


def test_default_configs_cluster_tighter_than_random_ones():
    spreads = []
    for seed in range(4):
        rng = np.random.default_rng(seed)
        graph = layouts.build_layout_graph(rng, "xla" if seed % 2 else "nlp", 1500, 40)
        cv = {}
        for search in ("random", "default"):
            runtime = graph.cost.evaluate(layouts.sample_choices(graph, rng, 500, search)[0])
            cv[search] = runtime.std() / runtime.mean()
        spreads.append(cv["default"] / cv["random"])
    assert np.median(spreads) < 0.5


# ---------------------------------------------------------------- the tile law


def test_tile_runtime_has_a_fast_memory_cliff_and_a_per_tile_overhead():
    b = graphs.GraphBuilder(np.random.default_rng(0))
    b.binary(Op.ADD, b.param((512, 4096)), b.param((512, 4096)))
    kernel = tiles.TileKernel(b.nodes, (512, 4096), (0, 1), (), [((0, 1), 4), ((0, 1), 4)], 0.0, 1.0, False)
    tiny, small, good, fits, over = kernel.runtime(np.array([[1, 128], [8, 128], [8, 1024], [64, 2048], [128, 2048]]))
    assert good < small < tiny, "fewer, larger tiles pay less per-tile overhead"
    assert 2 * kernel.footprint(np.array([[64, 2048]]))[0] <= tiles.FAST_MEMORY
    assert over > 2 * fits, "past the fast-memory budget a tile twice as large runs more than twice as long"


def test_tile_normalizer_is_the_default_tile():
    for seed in range(20):
        rng = np.random.default_rng(seed)
        _, kernel = tiles.tile_kernel(rng)
        default = kernel.default_tile()
        for options, t in zip(kernel.candidates(), default):
            assert t in options
        drawn = tiles.sample_tiles(kernel, rng, 30)
        assert len(np.unique(drawn, axis=0)) == len(drawn) <= 30
        y = kernel.runtime(drawn) / kernel.runtime(default[None])
        assert np.all(y > 0) and (0.05 < np.median(y) < 20)
