"""The physics prior: the traffic its propagated layouts cause on hand-made and real-format layout files, and the
blend weight `solution run` picks for it on the valid files and applies to the test predictions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from test_members import COLLECTION, STEM, demo_settings

from solution.data.preprocess import Preprocessing, load_graph
from solution.data.reader import read_graph
from solution.errors import SettingsError
from solution.physics.blend import blend_floor, blend_weights, chosen_weight
from solution.physics.fit import START, PriorFit, fit_weights, within_rows
from solution.physics.prior import UNIT, WEIGHTS, graph_prior, layout_traffic, prior_by_row, prior_work
from solution.physics.propagation import BYTE_PARTS, MATMUL, PARTS, ConfigWork
from solution.submission.ensemble import combine, read_run
from solution.tools import pipeline
from solution.training.ranker_file import read_ranker

FIXTURES = Path(__file__).resolve().parent.parent.parent / "shared" / "fixtures" / "npz"


def test_graph_prior_of_a_preprocessed_graph_is_its_whole_files_traffic():
    path = FIXTURES / "layout" / "xla" / "random" / "valid" / "fixture_scan_rnn.npz"
    graph = load_graph(path, "valid", Preprocessing(), None)
    assert graph.meta["nodes"] < graph.meta["nodes_raw"]  # pruned: the prior still sees every node
    np.testing.assert_allclose(graph_prior(graph), layout_traffic(read_graph(path))[graph.config_index])


@pytest.mark.parametrize(("weights", "expected"), [([], [0.0]), ([0.5, 0.25, 0.5], [0.0, 0.25, 0.5]), ([0], [0.0])])
def test_blend_weights_always_include_the_model_alone(weights, expected):
    assert blend_weights({"blend_weights": weights}, COLLECTION) == expected


@pytest.mark.parametrize("weights", [[1.01], [-0.1], ["half"], 0.5, [True]])
def test_blend_weights_must_lie_from_zero_to_one(weights):
    with pytest.raises(SettingsError, match=r"blend_weights=.*expected a list of blend weights in \[0, 1\]"):
        blend_weights({"blend_weights": weights}, COLLECTION)


def test_the_floor_bounds_the_weight_the_valid_files_pick():
    metrics = {0.0: {"score": 0.8}, 0.25: {"score": 0.7}, 0.5: {"score": 0.75}, 1.0: {"score": 0.5}}
    assert chosen_weight(metrics) == 0.0
    assert chosen_weight(metrics, 0.25) == 0.5  # the best from the floor up
    assert chosen_weight(metrics, 0.6) == 1.0
    assert chosen_weight({}, 0.25) == 0.0  # nothing scored: the model alone


@pytest.mark.parametrize("floor", [-0.1, 0.75, 1.5, "half", True])
def test_blend_floor_lies_from_zero_to_the_largest_weight(floor):
    assert blend_floor({"blend_weights": [0.25, 0.5]}, COLLECTION) == 0.0
    assert blend_floor({"blend_weights": [0.25, 0.5], "blend_floor": 0.5}, COLLECTION) == 0.5
    assert blend_floor({"blend_weights": [], "blend_floor": 0.5}, COLLECTION) == 0.0  # no prior: nothing to bound
    with pytest.raises(SettingsError, match=rf"{COLLECTION}: blend_floor=.*expected a number from 0 to the largest"):
        blend_floor({"blend_weights": [0.25, 0.5], "blend_floor": floor}, COLLECTION)


def test_the_prior_ranks_layouts_only():
    assert blend_weights({"blend_weights": [0]}, "tile:xla") == [0.0]
    with pytest.raises(SettingsError, match="tile:xla: blend_weights=.*ranks layouts only"):
        blend_weights({"blend_weights": [0.5]}, "tile:xla")


def roofline_files(count: int, law: np.ndarray, compute: float, combine,
                   seed: int) -> list[tuple[ConfigWork, np.ndarray]]:
    """`count` files of random work whose runtimes a law gives: its parts weighed by `law` [K], and per dot
    `combine`(its multiply-adds x `compute` x 1.5 per operand fed with its key dim not minor, its bytes)."""
    rng = np.random.default_rng(seed)
    files = []
    for _ in range(count):
        parts = rng.lognormal(8, 1, (64, len(PARTS))) * rng.integers(0, 2, (64, len(PARTS)))
        matmuls = np.stack([rng.lognormal(14, 1, (64, 3)), rng.lognormal(9.5, 1, (64, 3)), rng.integers(0, 3, (64, 3)),
                            rng.integers(0, 3, (64, 3))], -1)  # [64 configs, 3 dots, 4]
        time = combine(compute * matmuls[..., 0] * 1.5 ** (matmuls[..., 2] + matmuls[..., 3]), matmuls[..., 1])
        files.append((ConfigWork(parts, matmuls), parts @ law + time.sum(1)))
    return files


def test_the_fitted_weights_rank_configs_as_a_law_that_weighs_the_parts_otherwise():
    law = np.array([1.0, 2.0, 2.5, 3.0, 8.0, 0.0, 0.0])  # [K] per part, e.g. transposing copies dearer than others
    files = roofline_files(12, law, 0.005, np.maximum, seed=0)
    weights, penalty = fit_weights(files[:8], PriorFit(files=8, steps=200), seed=0)
    assert penalty == 0.01 and weights.shape == (len(WEIGHTS),) and (weights > 0).all()
    held_out = [(stats.kendalltau(prior_work(work, weights), runtime)[0],
                 stats.kendalltau(prior_work(work, UNIT), runtime)[0]) for work, runtime in files[8:]]
    fitted, plain = np.mean(held_out, axis=0)
    assert fitted > 0.9 and fitted > plain + 0.1
    assert weights[PARTS.index("transposes")] / weights[PARTS.index("fused")] > 4  # the law's 8, not START's 1
    assert abs(dict(zip(WEIGHTS, weights))["feed_slowdown"] - np.log(1.5)) < 0.1  # the law's, not START's log 2


def test_the_fit_learns_whether_a_dots_compute_and_memory_time_overlap():
    law = np.full(len(PARTS), 1e-3)  # the dots' time dominates
    sharpness = {}
    for name, law_combines in (("larger", np.maximum), ("sum", np.add)):
        files = roofline_files(8, law, 0.005, law_combines, seed=1)
        weights, _ = fit_weights(files, PriorFit(files=8, steps=300), seed=0)
        sharpness[name] = dict(zip(WEIGHTS, weights))["roofline_sharpness"]
    start = START[WEIGHTS.index("roofline_sharpness")]  # p = 1.1: nearly a sum
    assert sharpness["sum"] < start < sharpness["larger"] and sharpness["larger"] > 2 * sharpness["sum"]


def test_a_dots_time_is_the_p_norm_of_its_compute_and_its_memory_time():
    work = ConfigWork(np.zeros((3, len(PARTS))), np.array([[[100.0, 30.0, 0, 0]], [[100.0, 30.0, 1, 1]],
                                                           [[0.0, 30.0, 2, 0]]]))  # [3 configs, 1 dot, 4]
    weights = dict(zip(WEIGHTS, START), multiply_adds=1.0, matmul_bytes=2.0, feed_slowdown=np.log(1.5))
    compute, memory = np.array([100.0, 225.0, 0.0]), 60.0  # 1.5 x 1.5: an operand fed second-minor, one further out
    for sharpness, expected in ((0.0, compute + memory), (1.0, np.hypot(compute, memory)),
                                (200.0, np.maximum(compute, memory))):
        weights["roofline_sharpness"] = sharpness
        np.testing.assert_allclose(prior_work(work, np.array(list(weights.values()))), expected, rtol=1e-6)
    np.testing.assert_allclose(prior_work(work, UNIT), [30.0] * 3)  # the plain count: its bytes


def test_the_prior_weighs_the_parts_that_move_bytes_and_not_launches_or_lane_reduces():
    rng = np.random.default_rng(0)
    matmuls = np.concatenate([rng.lognormal(8, 1, (16, 2, 2)), rng.integers(0, 3, (16, 2, 2))], -1)  # [16, 2 dots, 4]
    work = ConfigWork(rng.lognormal(8, 1, (16, len(PARTS))), matmuls)
    unseen = ConfigWork(work.parts.copy(), work.matmuls)
    unseen.parts[:, BYTE_PARTS:] = rng.lognormal(12, 1, (16, len(PARTS) - BYTE_PARTS))  # other launches, lane reduces
    weights = rng.lognormal(0, 1, len(WEIGHTS))
    np.testing.assert_array_equal(prior_work(unseen, weights), prior_work(work, weights))
    moved = ConfigWork(work.parts * np.r_[np.full(BYTE_PARTS, 2.0), np.ones(len(PARTS) - BYTE_PARTS)], work.matmuls)
    assert (prior_work(moved, weights) > prior_work(work, weights)).all()


def test_of_several_penalties_the_one_whose_fits_rank_held_out_families_best_is_chosen():
    rng = np.random.default_rng(1)
    law = np.array([1.0, 1.0, 1.0, 1.0, 30.0, 0.0, 0.0])  # transposing copies far dearer than START says
    files = [ConfigWork(rng.lognormal(8, 1, (64, len(PARTS))), np.zeros((64, 0, len(MATMUL)))) for _ in range(6)]
    files = [(work, work.parts @ law) for work in files]
    stems = ["mlp_a", "mlp_b", "cnn_a", "cnn_b", "rnn_a", "rnn_b"]  # three families: one per fold
    fit = PriorFit(files=6, steps=100, penalties=(1000.0, 0.01))
    weights, penalty = fit_weights(files, fit, stems, "_.*$")
    assert penalty == 0.01 and weights[PARTS.index("transposes")] / weights[PARTS.index("fused")] > 4
    assert fit_weights(files, fit, stems[:2], "_.*$")[1] == 1000.0  # one family: no folds, the first penalty


def test_without_files_or_steps_the_fit_stays_where_it_starts():
    np.testing.assert_allclose(fit_weights([], PriorFit(files=4))[0], START)
    work = ConfigWork(np.ones((3, len(PARTS))), np.zeros((3, 0, len(MATMUL))))
    np.testing.assert_allclose(fit_weights([(work, np.arange(3.0))], PriorFit(steps=0))[0], START)


def test_prior_fit_without_files_is_the_plain_count_and_a_wrong_key_is_named(tiny_root, tmp_path):
    job = pipeline.Job(tiny_root, tmp_path)
    np.testing.assert_array_equal(pipeline.fitted_prior(COLLECTION, demo_settings(prior_fit={"files": 0}), job), UNIT)
    with pytest.raises(SettingsError, match=r"prior_fit=.*'file': 3.*some of files, configs, steps, penalties, folds"):
        pipeline.fitted_prior(COLLECTION, demo_settings(prior_fit={"file": 3}), job)


@pytest.fixture(scope="module")
def one_fit(tiny_root, tmp_path_factory) -> tuple[pipeline.Job, Path]:
    job = pipeline.Job(tiny_root, tmp_path_factory.mktemp("prior"))
    return job, pipeline.train(COLLECTION, demo_settings(), None, job)


def test_a_prior_that_knows_the_runtimes_is_chosen_and_blended_into_the_test_ranks(one_fit, tmp_path, monkeypatch):
    job, checkpoint = one_fit
    job = pipeline.Job(job.root, tmp_path)
    alone = pipeline.evaluate(COLLECTION, checkpoint, demo_settings(), job)
    model = read_run(job.collection_files / f"{STEM}.scores.npz").scores
    oracle = lambda graphs, table, weights: {g: table.graph(g)[2] for g in table}  # noqa: E731 the valid runtimes
    monkeypatch.setattr(pipeline, "scored_priors", oracle)
    blended = pipeline.evaluate(COLLECTION, checkpoint, demo_settings(blend_weights=[0.9]), job)
    assert blended["prior_weight"] == 0.9 and blended["score"] > alone["score"]
    combined = read_run(job.collection_files / f"{STEM}.scores.npz").scores
    graphs = pipeline.load(checkpoint, COLLECTION, demo_settings(), job)[1].graphs("test")
    weights = pipeline.fitted_prior(COLLECTION, demo_settings(), job)  # fitted on the train files' runtimes
    assert weights.shape == UNIT.shape and not np.allclose(weights, UNIT)
    ranker = read_ranker(job.saved_rankers / f"{STEM}.ranker")
    assert ranker.weight == 0.9 and [w for w, _ in ranker.tried] == [0.0, 0.9]
    np.testing.assert_allclose(ranker.fitted_prior, weights)
    for index, stem in enumerate(graphs.stems):
        prior = graph_prior(graphs.load(index), weights)[np.argsort(graphs.load(index).config_index)]
        np.testing.assert_allclose(combined[stem], combine([model[stem], prior], np.array([0.1, 0.9]), "rank"))


def test_weight_1_ranks_the_test_files_by_the_prior_alone(one_fit, tmp_path, monkeypatch):
    job, checkpoint = one_fit
    job = pipeline.Job(job.root, tmp_path)
    oracle = lambda graphs, table, weights: {g: table.graph(g)[2] for g in table}  # noqa: E731 the valid runtimes
    monkeypatch.setattr(pipeline, "scored_priors", oracle)
    monkeypatch.setattr("solution.tools.ranking.checkpoint_scores", lambda *_: pytest.fail("a network ranked"))
    blended = pipeline.evaluate(COLLECTION, checkpoint, demo_settings(blend_weights=[0.5, 1.0]), job)
    assert blended["prior_weight"] == 1.0 and blended["score"] == pytest.approx(1.0)
    weights = read_ranker(job.saved_rankers / f"{STEM}.ranker").fitted_prior
    graphs = pipeline.load(checkpoint, COLLECTION, demo_settings(), job)[1].graphs("test")
    combined = read_run(job.collection_files / f"{STEM}.scores.npz").scores
    assert sorted(combined) == sorted(graphs.stems)
    for index, stem in enumerate(graphs.stems):
        np.testing.assert_allclose(combined[stem], prior_by_row(graphs, index, weights))


def test_a_prior_no_better_than_the_model_leaves_it_alone(one_fit, tmp_path, monkeypatch):
    job, checkpoint = one_fit
    job = pipeline.Job(job.root, tmp_path)
    alone = pipeline.evaluate(COLLECTION, checkpoint, demo_settings(), job)
    model = read_run(job.collection_files / f"{STEM}.scores.npz").scores
    own = lambda graphs, table, weights: {g: table.graph(g)[1] for g in table}  # noqa: E731 the model's own scores: a tie
    monkeypatch.setattr(pipeline, "scored_priors", own)
    blended = pipeline.evaluate(COLLECTION, checkpoint, demo_settings(blend_weights=[0.25, 0.5]), job)
    assert blended == {**alone, "prior_weight": 0.0}
    assert read_ranker(job.saved_rankers / f"{STEM}.ranker").weight == 0.0
    for stem, values in read_run(job.collection_files / f"{STEM}.scores.npz").scores.items():
        np.testing.assert_allclose(values, model[stem])


def test_a_floor_blends_the_prior_in_where_the_model_alone_would_score_as_well(one_fit, tmp_path, monkeypatch,
                                                                               capsys):
    job, checkpoint = one_fit
    job = pipeline.Job(job.root, tmp_path)
    alone = pipeline.evaluate(COLLECTION, checkpoint, demo_settings(), job)
    own = lambda graphs, table, weights: {g: table.graph(g)[1] for g in table}  # noqa: E731 the model's own scores: a tie
    monkeypatch.setattr(pipeline, "scored_priors", own)
    blended = pipeline.evaluate(COLLECTION, checkpoint, demo_settings(blend_weights=[0.25, 0.5], blend_floor=0.25), job)
    assert blended == {**alone, "prior_weight": 0.25}  # the tie goes to the floor, not to the model alone
    assert "physics prior weight 0.25 (of 0, 0.25, 0.5; at least 0.25)" in capsys.readouterr().out
    ranker = read_ranker(job.saved_rankers / f"{STEM}.ranker")
    assert ranker.weight == 0.25 and [w for w, _ in ranker.tried] == [0.0, 0.25, 0.5]  # the model alone still scored


def test_without_valid_files_the_test_files_are_ranked_by_the_model_alone(one_fit, tmp_path, capsys):
    job, checkpoint = one_fit
    test_split = tmp_path / "data" / "npz_all" / "npz" / "layout" / "xla" / "random" / "test"
    test_split.mkdir(parents=True)
    for path in (job.root / "npz_all" / "npz" / "layout" / "xla" / "random" / "test").glob("*.npz"):
        (test_split / path.name).symlink_to(path.resolve())
    ranked = pipeline.Job(tmp_path / "data", tmp_path / "out")
    assert pipeline.evaluate(COLLECTION, checkpoint, demo_settings(blend_weights=[0.5]), ranked, validate=False) == {}
    assert "no valid files to pick the physics prior's weight by" in capsys.readouterr().out
    folder = ranked.collection_files
    assert not (folder / "members").exists() and (folder / f"{STEM}.scores.npz").is_file()


def test_files_with_many_dots_bring_fewer_configs_to_a_fit():
    rng = np.random.default_rng(2)
    samples = [(ConfigWork(rng.random((64, len(PARTS))), rng.random((64, dots, len(MATMUL)))), rng.random(64))
               for dots in (1, 10, 100)]
    kept = within_rows(samples, 3 * 320, seed=0)  # a share of 320 dot records a file
    assert [len(work) for work, _ in kept] == [64, 32, 3]
    work, runtimes = kept[2]
    rows = [int(np.flatnonzero((samples[2][0].parts == part).all(1))[0]) for part in work.parts]  # the configs kept
    assert rows == sorted(rows) and len(set(rows)) == 3
    np.testing.assert_array_equal(work.matmuls, samples[2][0].matmuls[rows])
    np.testing.assert_array_equal(runtimes, samples[2][1][rows])
    assert [len(work) for work, _ in within_rows(samples, 30, seed=0)] == [10, 2, 2]  # at least 2: a pair to rank
