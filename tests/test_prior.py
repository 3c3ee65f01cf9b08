"""The physics prior: the traffic its propagated layouts cause on hand-made and real-format layout files, and the
blend weight `solution run` picks for it on the valid files and applies to the test predictions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_members import COLLECTION, STEM, demo_settings

from solution.constants import NODE_FEAT_DIM
from solution.data.preprocess import Preprocessing, load_graph
from solution.data.reader import RawGraph, read_graph
from solution.data.tasks import TASKS
from solution.errors import SettingsError
from solution.models.prior import graph_prior, layout_traffic
from solution.programs.encode import OPCODE_IDS
from solution.submission.ensemble import combine, read_run
from solution.tools import pipeline

FIXTURES = Path(__file__).resolve().parent.parent.parent / "shared" / "fixtures" / "npz"
UNSET = [-1] * 6


def raw_graph(opcodes: list[str], dims: list[list[int]], operands: list[list[int]], configs: np.ndarray,
              dimensions: dict[int, list[int]] | None = None) -> RawGraph:
    """A hand-made layout file: node i runs opcodes[i] on its operands into a row-major tensor of dims[i] (with
    its `dimensions` attribute); the reshapes and dots are configurable, with configs [c, nc, 18]; the last node is
    the root."""
    n = len(opcodes)
    feat = np.zeros((n, NODE_FEAT_DIM), np.float32)
    for i, shape in enumerate(dims):
        feat[i, 21:21 + len(shape)] = shape
        feat[i, 134:134 + len(shape)] = list(range(len(shape)))[::-1]
        feat[i, 31:31 + len((dimensions or {}).get(i, []))] = (dimensions or {}).get(i, [])
    feat[-1, 0] = 1
    edges = np.array([[user, operand] for user, ops in enumerate(operands) for operand in ops], np.int64)
    ids = np.array([i for i, name in enumerate(opcodes) if name in ("reshape", "dot")], np.int64)
    return RawGraph(Path("hand.npz"), TASKS["layout"], feat, np.array([OPCODE_IDS[o] for o in opcodes]), edges,
                    configs.astype(np.int8), np.ones(len(configs), np.int64), ids)


def blocks(output: list[int] | None = None, given: list[int] | None = None) -> list[int]:
    """One configurable node's 18 config columns: output and input minor-to-major (None: left to the compiler)."""
    return (output or [-1, -1]) + [-1] * 4 + (given or [-1, -1]) + [-1] * 4 + UNSET


# [16, 256] stored in 8 x 128 tiles: the 256 minor (row-major) 16 x 256 = 4096; the 16 minor 128 x 256 = 32768
ROW, COLUMN = 4096, 32768


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
    assert carried == COLUMN + ROW  # the dot writes [256, 128] (32768 elements) and reads the transpose as it comes
    assert copied - carried == (ROW + COLUMN) + (COLUMN - ROW)  # a copy of both orders, then a read of the padded one


def test_a_real_format_files_prior_follows_its_configs_whatever_their_order_and_the_chunking(monkeypatch):
    raw = read_graph(FIXTURES / "layout" / "xla" / "random" / "valid" / "fixture_conv_reshape_dot.npz")
    whole = layout_traffic(raw)
    assert whole.shape == (raw.num_configs,) and np.isfinite(whole).all() and len(np.unique(whole)) > 1
    permutation = np.random.default_rng(0).permutation(raw.num_configs)
    raw.config_feat = raw.config_feat[permutation]
    np.testing.assert_allclose(layout_traffic(raw), whole[permutation])
    monkeypatch.setattr("solution.models.prior.CONFIG_CHUNK", 7)
    np.testing.assert_allclose(layout_traffic(raw), whole[permutation])


def test_graph_prior_of_a_preprocessed_graph_is_its_whole_files_traffic():
    path = FIXTURES / "layout" / "xla" / "random" / "valid" / "fixture_scan_rnn.npz"
    graph = load_graph(path, "valid", Preprocessing(), None)
    assert graph.meta["nodes"] < graph.meta["nodes_raw"]  # pruned: the prior still sees every node
    np.testing.assert_allclose(graph_prior(graph), layout_traffic(read_graph(path))[graph.config_index])


@pytest.mark.parametrize(("weights", "expected"), [([], [0.0]), ([0.5, 0.25, 0.5], [0.0, 0.25, 0.5]), ([0], [0.0])])
def test_prior_weights_always_include_the_model_alone(weights, expected):
    assert pipeline.prior_weights({"prior_weights": weights}, COLLECTION) == expected


@pytest.mark.parametrize("weights", [[1.01], [-0.1], ["half"], 0.5, [True]])
def test_prior_weights_must_be_blend_weights_from_zero_to_one(weights):
    with pytest.raises(SettingsError, match=r"prior_weights=.*expected a list of blend weights in \[0, 1\]"):
        pipeline.prior_weights({"prior_weights": weights}, COLLECTION)


def test_the_prior_ranks_layouts_only():
    assert pipeline.prior_weights({"prior_weights": [0]}, "tile:xla") == [0.0]
    with pytest.raises(SettingsError, match="tile:xla: prior_weights=.*ranks layouts only"):
        pipeline.prior_weights({"prior_weights": [0.5]}, "tile:xla")


@pytest.fixture(scope="module")
def one_fit(tiny_root, tmp_path_factory) -> tuple[pipeline.Job, Path]:
    job = pipeline.Job(tiny_root, tmp_path_factory.mktemp("prior"))
    return job, pipeline.train(COLLECTION, demo_settings(), None, job)


def test_a_prior_that_knows_the_runtimes_is_chosen_and_blended_into_the_test_ranks(one_fit, tmp_path, monkeypatch):
    job, checkpoint = one_fit
    job = pipeline.Job(job.root, tmp_path)
    alone = pipeline.evaluate(COLLECTION, checkpoint, demo_settings(), job)
    oracle = lambda graphs, table: {g: table.graph(g)[2] for g in table}  # noqa: E731 the valid runtimes
    monkeypatch.setattr(pipeline, "scored_priors", oracle)
    blended = pipeline.evaluate(COLLECTION, checkpoint, demo_settings(prior_weights=[0.9]), job)
    assert blended["prior_weight"] == 0.9 and blended["score"] > alone["score"]
    model = read_run(job.parts / "members" / STEM / f"{STEM}.scores.npz").scores
    prior = read_run(job.parts / "members" / f"{STEM}.prior" / f"{STEM}.scores.npz").scores
    combined = read_run(job.parts / f"{STEM}.scores.npz").scores
    graphs = pipeline.load(checkpoint, COLLECTION, demo_settings(), job)[1].graphs("test")
    for index, stem in enumerate(graphs.stems):
        np.testing.assert_allclose(prior[stem], graph_prior(graphs.load(index))[np.argsort(
            graphs.load(index).config_index)])
        np.testing.assert_allclose(combined[stem], combine([model[stem], prior[stem]], np.array([0.1, 0.9]), "rank"))


def test_weight_1_ranks_the_test_files_by_the_prior_alone(one_fit, tmp_path, monkeypatch):
    job, checkpoint = one_fit
    job = pipeline.Job(job.root, tmp_path)
    oracle = lambda graphs, table: {g: table.graph(g)[2] for g in table}  # noqa: E731 the valid runtimes
    monkeypatch.setattr(pipeline, "scored_priors", oracle)
    blended = pipeline.evaluate(COLLECTION, checkpoint, demo_settings(prior_weights=[0.5, 1.0]), job)
    assert blended["prior_weight"] == 1.0 and blended["score"] == pytest.approx(1.0)
    prior = read_run(job.parts / "members" / f"{STEM}.prior" / f"{STEM}.scores.npz").scores
    combined = read_run(job.parts / f"{STEM}.scores.npz").scores
    assert combined.keys() == prior.keys()
    for stem, values in combined.items():
        np.testing.assert_allclose(values, combine([prior[stem]], np.ones(1), "rank"))


def test_a_prior_no_better_than_the_model_leaves_it_alone(one_fit, tmp_path, monkeypatch):
    job, checkpoint = one_fit
    job = pipeline.Job(job.root, tmp_path)
    alone = pipeline.evaluate(COLLECTION, checkpoint, demo_settings(), job)
    own = lambda graphs, table: {g: table.graph(g)[1] for g in table}  # noqa: E731 the model's own scores: a tie
    monkeypatch.setattr(pipeline, "scored_priors", own)
    blended = pipeline.evaluate(COLLECTION, checkpoint, demo_settings(prior_weights=[0.25, 0.5]), job)
    assert blended == {**alone, "prior_weight": 0.0}
    assert not (job.parts / "members" / f"{STEM}.prior").exists()
    model = read_run(job.parts / "members" / STEM / f"{STEM}.scores.npz").scores
    for stem, values in read_run(job.parts / f"{STEM}.scores.npz").scores.items():
        np.testing.assert_allclose(values, combine([model[stem]], np.ones(1), "rank"))


def test_without_valid_files_the_test_files_are_ranked_by_the_model_alone(one_fit, tmp_path, capsys):
    job, checkpoint = one_fit
    test_split = tmp_path / "data" / "npz_all" / "npz" / "layout" / "xla" / "random" / "test"
    test_split.mkdir(parents=True)
    for path in (job.root / "npz_all" / "npz" / "layout" / "xla" / "random" / "test").glob("*.npz"):
        (test_split / path.name).symlink_to(path.resolve())
    ranked = pipeline.Job(tmp_path / "data", tmp_path / "out")
    assert pipeline.evaluate(COLLECTION, checkpoint, demo_settings(prior_weights=[0.5]), ranked, validate=False) == {}
    assert "no valid files to pick the physics prior's weight by" in capsys.readouterr().out
    assert not (ranked.parts / "members").exists() and (ranked.parts / f"{STEM}.scores.npz").is_file()
