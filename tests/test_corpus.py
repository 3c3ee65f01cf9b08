"""The real-program corpus: exact file format, and a runtime law with the physics docs/corpus.md describes."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="the corpus needs the extra [programs]: pip install '.[programs]'")
jnp = pytest.importorskip("jax.numpy")

from solution.constants import COLLECTIONS, SPLITS  # noqa: E402
from solution.data.reader import list_files, read_graph  # noqa: E402
from solution.data.splits import family_of  # noqa: E402
from solution.format import LAYOUT_GROUP  # noqa: E402
from solution.programs import encode, hlo, law, zoo  # noqa: E402
from solution.tools.synth import main as synth_main  # noqa: E402

LAYOUT_DTYPES = {"node_feat": np.float32, "node_opcode": np.uint8, "edge_index": np.int64,
                 "node_config_feat": np.float32, "node_config_ids": np.int64, "node_splits": np.int64,
                 "config_runtime": np.int64}
TILE_DTYPES = {"node_feat": np.float32, "node_opcode": np.uint8, "edge_index": np.int64, "config_feat": np.float32,
               "config_runtime": np.int64, "config_runtime_normalizers": np.int64}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("programs")
    assert synth_main(["--programs", "--size", "tiny", "--out", str(out)]) == 0
    return out


def load(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as npz:
        return {key: npz[key] for key in npz.files}


def files(root: Path, collection: str) -> list[tuple[str, Path]]:
    return [(split, path) for split in SPLITS for path in list_files(root, collection, split)]


# ---------------------------------------------------------------- the files


@pytest.mark.parametrize("collection", COLLECTIONS)
def test_every_file_has_the_exact_format(corpus, collection):
    dtypes = TILE_DTYPES if collection == "tile:xla" else LAYOUT_DTYPES
    for split, path in files(corpus, collection):
        arrays = load(path)
        assert {k: v.dtype for k, v in arrays.items()} == dtypes, path
        graph = read_graph(path)
        if split == "test":
            assert not arrays["config_runtime"].any(), f"{path}: test runtimes must be zero"
        else:
            assert (arrays["config_runtime"] > 0).all(), path
        if collection != "tile:xla":
            assert arrays["node_splits"][0, 0] == 0 and arrays["node_splits"][0, -1] == len(arrays["node_feat"])
            assert graph.num_configs == len(arrays["node_config_feat"])


@pytest.mark.parametrize("collection", [c for c in COLLECTIONS if c != "tile:xla"])
def test_layout_configs_are_permutations_or_default(corpus, collection):
    for _, path in files(corpus, collection):
        blocks = load(path)["node_config_feat"].reshape(-1, LAYOUT_GROUP).astype(np.int64)  # [C * NC * 3, 6]
        used = (blocks >= 0).sum(axis=1)
        assert ((blocks[:, :, None] >= 0) | (blocks[:, :, None] == -1)).all()
        for rank in np.unique(used):
            rows = blocks[used == rank]
            assert (np.sort(rows[:, :rank], axis=1) == np.arange(rank)).all(), path  # a permutation, then -1s
            assert (rows[:, rank:] == -1).all(), path


def test_test_runtimes_are_kept_for_scoring(corpus):
    answers = {row["ID"]: row["Runtimes"] for row in csv.DictReader((corpus / "answers.csv").open())}
    for collection in COLLECTIONS:
        for path in list_files(corpus, collection, "test"):
            truth = answers[f"{collection}:{path.stem}"].split(";")
            assert len(truth) == len(load(path)["config_runtime"]) and float(truth[0]) > 0
    submission = (corpus / "sample_submission.csv").read_text().splitlines()
    assert submission[0] == "ID,TopConfigs" and len(submission) == 1 + len(answers)


def test_files_name_their_family(corpus):
    manifest = list(csv.DictReader((corpus / "programs.csv").open()))
    assert {row["collection"] for row in manifest} == set(COLLECTIONS)
    for row in manifest:
        assert row["file"].startswith(row["family"] + "_") or row["split"] == "test"
        if row["split"] != "test":
            assert family_of(row["file"], "_.*$") == row["family"]  # data.family_pattern for families
        assert (corpus / "hlo" / f"{row['program']}.hlo").is_file()


def test_runtimes_differ_across_configs(corpus):
    for collection in ("layout:xla:random", "layout:nlp:random", "tile:xla"):
        spread = [np.unique(load(path)["config_runtime"]).size > 1 for path in list_files(corpus, collection, "train")]
        assert all(spread), collection


def test_same_seed_same_files(corpus, tmp_path):
    assert synth_main(["--programs", "--size", "tiny", "--out", str(tmp_path), "--collections", "layout:nlp:random",
                       "tile:xla"]) == 0
    for collection in ("layout:nlp:random", "tile:xla"):
        for split, path in files(corpus, collection):
            again = load(tmp_path / path.relative_to(corpus))
            for key, value in load(path).items():
                np.testing.assert_array_equal(again[key], value, err_msg=f"{path} {key}")


def test_full_size_needs_programs(capsys):
    with pytest.raises(SystemExit):
        synth_main(["--size", "full", "--out", "unused"])
    assert "--programs" in capsys.readouterr().err


@pytest.mark.parametrize("family", sorted(zoo.FAMILIES))
def test_every_family_lowers_to_a_graph_with_layouts_that_matter(family):
    """Each zoo family, at its smallest scale: an encoded graph with configurable nodes (convolutions, dots and
    reshapes only), and a runtime that changes when some configurable output is stored in another order."""
    program = zoo.lower(family, np.random.default_rng(1), 0.05)
    module = hlo.parse_module(program.hlo)
    graph = encode.flatten(module)
    arrays = encode.arrays(module, graph)
    ids = arrays["node_config_ids"]
    assert program.family == family and program.kind == zoo.FAMILIES[family][0] and len(ids)
    assert set(arrays["node_opcode"][ids].tolist()) <= {26, 34, 75}
    rule = law.LayoutLaw(module, graph, ids, program.hlo)
    ranks = (arrays["node_feat"][ids, 21:27] > 0).sum(1)  # [NC]
    blocks = np.full((len(ids) + 1, len(ids), 18), -1, np.float32)  # row 0: every layout the compiler's
    for k, rank in enumerate(ranks):
        blocks[k + 1, k, :rank] = np.arange(rank)  # row k + 1: node k's output minor-to-major in axis order
    runtimes = rule.runtime(blocks)
    assert np.isfinite(runtimes).all() and (runtimes > 0).all()
    assert (runtimes[1:] != runtimes[0]).any()


# ---------------------------------------------------------------- the law


def law_of(function, *shapes) -> tuple[law.LayoutLaw, list[str], np.ndarray]:
    """The law of a small program, its nodes' opcodes and its configurable node ids."""
    text = jax.jit(function).lower(*(jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes)).as_text(dialect="hlo")
    module = hlo.parse_module(text)
    graph = encode.flatten(module)
    ids = encode.arrays(module, graph)["node_config_ids"]
    return law.LayoutLaw(module, graph, ids, text), [n.opcode for n in graph.nodes], ids


def configs(ids: np.ndarray, *rows: dict[int, dict[int, list[int]]]) -> np.ndarray:
    """[C, NC, 18]: one config per dict {node id: {block (0 output, 1 input, 2 kernel): minor-to-major}}."""
    out = np.full((len(rows), len(ids), 18), -1, np.float32)
    slot = {int(node): k for k, node in enumerate(ids)}
    for c, row in enumerate(rows):
        for node, blocks in row.items():
            for block, order in blocks.items():
                out[c, slot[node], block * LAYOUT_GROUP:block * LAYOUT_GROUP + len(order)] = order
    return out


def test_a_small_minor_dimension_pays_for_padding():
    rule, opcodes, ids = law_of(lambda x, w: jnp.tanh(x @ w).sum(), (4096, 16), (16, 3))
    dot = opcodes.index("dot")
    three_minor, wide_minor = configs(ids, {dot: {0: [1, 0]}}, {dot: {0: [0, 1]}})[:, None]
    costs = rule.node_costs(np.concatenate([three_minor, wide_minor]))
    assert costs[0, dot] > 1.5 * costs[1, dot]  # [4096, 3]: 3 lanes padded to 128, or 4096 lanes x 8 sublanes
    assert rule.runtime(np.concatenate([three_minor, wide_minor]))[0] > costs[1].sum() + 1000


def test_a_dot_runs_faster_with_its_contracting_dim_minor():
    rule, opcodes, ids = law_of(lambda v, w: jnp.tanh(jnp.broadcast_to(v, (1024, 1024)) @ w), (1024,), (1024, 1024))
    dot = opcodes.index("dot")
    block = configs(ids, {dot: {1: [1, 0]}}, {dot: {1: [0, 1]}})  # lhs [M, K]: K minor, then M minor
    costs = rule.node_costs(block)
    assert costs[0, dot] < costs[1, dot]
    runtime = rule.runtime(block)
    assert runtime[0] < runtime[1]


def test_a_layout_mismatch_between_neighbours_costs_a_copy():
    rule, opcodes, ids = law_of(lambda x, w1, w2: jnp.tanh(jnp.tanh(x @ w1) @ w2), (512, 512), (512, 512), (512, 512))
    first, second = [i for i, op in enumerate(opcodes) if op == "dot"]
    a, b = [1, 0], [0, 1]
    block = configs(ids, {first: {0: a}, second: {1: a}}, {first: {0: b}, second: {1: a}},
                    {first: {0: a}, second: {1: b}}, {first: {0: b}, second: {1: b}})
    costs = rule.node_costs(block)
    # only the neighbour's output layout changed: the consumer's cost changes (a copy appears)
    assert costs[1, second] > costs[0, second]
    assert costs[2, second] > costs[3, second]
    runtime = rule.runtime(block)
    interaction = runtime[0] + runtime[3] - runtime[1] - runtime[2]  # not a sum of per-node terms
    assert interaction < -0.05 * runtime.mean()


def test_a_loop_body_costs_its_trip_count():
    def looped(trips):
        return lambda x, w: jax.lax.fori_loop(0, trips, lambda i, c: jnp.tanh(c @ w), x)

    empty = np.zeros((1, 0, 18), np.float32)
    runtime = {}
    for trips in (4, 8, 16):
        rule, opcodes, ids = law_of(looped(trips), (128, 256), (256, 256))
        runtime[trips] = rule.runtime(np.full((1, len(ids), 18), -1, np.float32) if len(ids) else empty)[0]
        assert rule.runs.max() == trips + 1  # the condition runs once more than the body
    assert runtime[16] - runtime[8] == pytest.approx(2 * (runtime[8] - runtime[4]), rel=1e-6)
    assert runtime[16] > 1.5 * runtime[8]


def test_the_noise_free_law_is_deterministic_and_the_noise_is_small():
    rule, opcodes, ids = law_of(lambda x, w1, w2: jnp.tanh(x @ w1) @ w2, (64, 300), (300, 200), (200, 10))
    rng = np.random.default_rng(0)
    block = np.repeat(configs(ids, {}), 500, axis=0)
    block[:, :, :2] = np.array([[0, 1], [1, 0]], np.float32)[rng.integers(2, size=(500, len(ids)))]
    clean = rule.runtime(block)
    np.testing.assert_array_equal(clean, law_of(lambda x, w1, w2: jnp.tanh(x @ w1) @ w2, (64, 300), (300, 200),
                                                (200, 10))[0].runtime(block))
    assert np.unique(clean).size > 1
    measured = law.noisy(clean, rng)
    assert measured.dtype == np.int64
    assert 0.005 < np.std(np.log(measured / clean)) < 0.05


def test_tile_runtimes_depend_on_the_tile():
    kernel = law.TiledKernel(dims=(1024, 1000, 512), out_axes=(0, 1), lane=1, sublane=0, reduced=(2,),
                             operands=[((0, 2), 4), ((2, 1), 4)], flops=2.0, vector_ops=0.0, out_bytes=4)
    tiles = kernel.candidates(40, np.random.default_rng(0))
    assert (tiles == kernel.default_tile()).all(axis=1).sum() == 1
    runtime = kernel.runtime(tiles)
    assert np.unique(runtime).size > 10
    narrow, wide = kernel.runtime(np.array([[256, 8, 512], [256, 128, 512]]))
    assert narrow > 4 * wide  # 8 of 128 lanes used: 16x the grid steps over padded tiles
    feat = kernel.config_feat(tiles)
    assert feat.shape == (len(tiles), 24) and (feat[:, 7] == tiles.prod(axis=1)).all()
