"""`solution ensemble`: rank and z-score averaging of runs' raw scores, refused on different data files."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from scipy.stats import rankdata

from solution.constants import COLLECTIONS
from solution.data.reader import list_files
from solution.submission.ensemble import EnsembleError, ensemble, file_record, main, read_run, write_run
from solution.submission.files import check, collection_file_stem, expected_test_files
from solution.tools.cli import main as solution
from solution.tools.lightning_cli import lightning_main

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def make_run(out: Path, root: Path, seed: int, transform: Callable[[np.ndarray], np.ndarray] | None = None) -> Path:
    """A predict-like output folder: random scores for every test file, written by the predict code path."""
    rng = np.random.default_rng(seed)
    counts = expected_test_files(root)  # ID -> c
    for collection in COLLECTIONS:
        paths = list_files(root, collection, "test")
        scores = {p.stem: rng.normal(size=counts[f"{collection}:{p.stem}"]) for p in paths}  # stem -> (c,)
        if transform is not None:
            scores = {stem: transform(values) for stem, values in scores.items()}
        write_run(out, collection, "test", scores, {p.stem: file_record(p, len(scores[p.stem])) for p in paths})
    return out


def hand_run(out: Path, collection: str, scores: dict[str, np.ndarray]) -> Path:
    """A run on made-up files (no data needed): stem -> (c,) scores."""
    files = {stem: {"digest": "d" * 32, "configs": len(values)} for stem, values in scores.items()}
    return write_run(out, collection, "test", scores, files)[1]


def csv_orders(path: Path) -> dict[str, list[int]]:
    with open(path, newline="") as handle:
        return {row["ID"]: [int(i) for i in row["TopConfigs"].split(";")] for row in csv.DictReader(handle)}


@pytest.fixture(scope="module")
def run_a(tiny_root, tmp_path_factory) -> Path:
    return make_run(tmp_path_factory.mktemp("a"), tiny_root, seed=1)


@pytest.mark.parametrize("method", ["rank", "score"])
def test_identical_runs_reproduce_the_single_run(run_a, tiny_root, tmp_path, method, capsys):
    out = tmp_path / "ens"
    assert main([str(run_a)] * 3 + ["--method", method, "--out", str(out), "--data.root", str(tiny_root)]) == 0
    printed = capsys.readouterr().out
    for collection in COLLECTIONS:
        name = collection_file_stem(collection)
        assert (out / f"{name}.csv").read_text() == (run_a / f"{name}.csv").read_text()
        single, combined = read_run(run_a / f"{name}.scores.npz"), read_run(out / f"{name}.scores.npz")
        assert combined.files == single.files and combined.extra["ensemble"]["weights"] == [1.0, 1.0, 1.0]
        for stem, values in single.scores.items():
            np.testing.assert_array_equal(np.argsort(combined.scores[stem]), np.argsort(values))
        assert f"{collection:<32}     3  {method}" in printed
    assert check(out / "submission.csv", tiny_root).ok


def test_an_ensemble_can_be_ensembled_again(run_a, tiny_root, tmp_path):
    run_b = make_run(tmp_path / "b", tiny_root, seed=2)
    first = ensemble([run_a, run_b], tmp_path / "e1")[1]
    second = ensemble([tmp_path / "e1", tmp_path / "e1"], tmp_path / "e2")[1]
    assert first.read_text() == second.read_text()
    assert read_run(tmp_path / "e2" / "tile_xla.scores.npz").extra["ensemble"]["runs"] == [
        str(tmp_path / "e1" / "tile_xla.scores.npz")] * 2


def test_rank_average_ignores_a_monotone_rescaling_of_one_run(run_a, tiny_root, tmp_path):
    plain = make_run(tmp_path / "b", tiny_root, seed=2)
    ensemble([run_a, plain], tmp_path / "plain")
    for name, rescale in {"affine": lambda x: 3 * x + 7, "exp": np.exp}.items():
        rescaled = make_run(tmp_path / f"b_{name}", tiny_root, seed=2, transform=rescale)
        ensemble([run_a, rescaled], tmp_path / name)
        assert (tmp_path / name / "submission.csv").read_text() == (tmp_path / "plain" / "submission.csv").read_text()
        for collection in COLLECTIONS:
            npz = f"{collection_file_stem(collection)}.scores.npz"
            got, want = read_run(tmp_path / name / npz).scores, read_run(tmp_path / "plain" / npz).scores
            assert all(np.array_equal(got[stem], want[stem]) for stem in want)


def test_score_average_of_a_run_with_itself_is_the_run(run_a, tmp_path):
    ensemble([run_a, run_a], tmp_path / "ens", method="score")
    for collection in COLLECTIONS:
        name = collection_file_stem(collection)
        assert (tmp_path / "ens" / f"{name}.csv").read_text() == (run_a / f"{name}.csv").read_text()
        for stem, values in read_run(run_a / f"{name}.scores.npz").scores.items():
            combined = read_run(tmp_path / "ens" / f"{name}.scores.npz").scores[stem]
            np.testing.assert_allclose(combined, (values - values.mean()) / values.std(), atol=1e-12)


def test_two_run_rank_average_by_hand(tmp_path):
    a = np.array([0.3, 0.1, 0.1, 0.9, 0.5, 0.2])  # a tie at configs 1 and 2
    b = np.array([60.0, 50.0, 40.0, 30.0, 20.0, 10.0])
    runs = [hand_run(tmp_path / name, "layout:nlp:default", {"g": s}) for name, s in (("a", a), ("b", b))]
    ensemble(runs, tmp_path / "ens", weights=[1, 3])
    # ranks of a: [4, 1.5, 1.5, 6, 5, 3] -> [0.6, 0.1, 0.1, 1, 0.8, 0.4]; of b: [6, 5, 4, 3, 2, 1] -> [1, 0.8, ..., 0]
    want = (1 * (rankdata(a) - 1) / 5 + 3 * (rankdata(b) - 1) / 5) / 4
    got = read_run(tmp_path / "ens" / "layout_nlp_default.scores.npz").scores["g"]
    np.testing.assert_allclose(got, want, atol=1e-15)
    np.testing.assert_allclose(got, [0.9, 0.625, 0.475, 0.55, 0.35, 0.1], atol=1e-15)
    assert csv_orders(tmp_path / "ens" / "layout_nlp_default.csv") == {"layout:nlp:default:g": [5, 4, 2, 3, 1, 0]}


def test_tile_combines_all_configs_before_taking_the_top_five(tmp_path):
    # 20 configs: run A's top five are 0..4, run B's 5..9, each at the bottom of the other run; config 19 is sixth
    # in both, and 10..18 sit in the middle of both
    middle, compromise = list(range(10, 19)), [19]
    order_a = [0, 1, 2, 3, 4, *compromise, *middle, 5, 6, 7, 8, 9]
    order_b = [5, 6, 7, 8, 9, *compromise, *middle, 0, 1, 2, 3, 4]
    a, b = np.argsort(order_a).astype(float), np.exp(np.argsort(order_b))  # score = position (any scale)
    runs = [hand_run(tmp_path / name, "tile:xla", {"k": s}) for name, s in (("a", a), ("b", b))]
    ensemble(runs, tmp_path / "ens")
    top = csv_orders(tmp_path / "ens" / "tile_xla.csv")["tile:xla:k"]
    mean_rank = (rankdata(a) + rankdata(b)) / 2  # 19: 6; 10: 7; 11: 8; 0 and 5: 8.5; ...
    assert top == list(np.argsort(mean_rank, kind="stable")[:5]) == [19, 10, 11, 0, 5]
    assert not {19, 10, 11} & (set(order_a[:5]) | set(order_b[:5]))


@pytest.mark.parametrize("change", ["stem", "configs", "digest"])
def test_runs_on_other_files_are_refused(run_a, tiny_root, tmp_path, change, capsys):
    collection = "layout:xla:default"
    paths = list_files(tiny_root, collection, "test")
    first = read_run(run_a / "layout_xla_default.scores.npz")
    scores, files = dict(first.scores), dict(first.files)
    stem = paths[0].stem
    if change == "stem":
        scores["renamed"], files["renamed"] = scores.pop(stem), files.pop(stem)
    elif change == "configs":
        scores[stem] = scores[stem][:-1]
        files[stem] = {**files[stem], "configs": len(scores[stem])}
    else:
        files[stem] = {**files[stem], "digest": "0" * 32}
    other = write_run(tmp_path / "other", collection, "test", scores, files)[1]
    assert solution(["ensemble", str(run_a), str(tmp_path / "other"), "--out", str(tmp_path / "ens")]) == 2
    message = capsys.readouterr().err
    assert stem in message and str(run_a / "layout_xla_default.scores.npz") in message and str(other) in message
    assert collection in message and not (tmp_path / "ens").exists()  # nothing written


def test_weights_must_match_the_runs_and_be_positive(run_a, tmp_path, capsys):
    weights = ["--weights", "1", "2", "3"]
    assert solution(["ensemble", str(run_a), str(run_a), *weights, "--out", str(tmp_path / "e")]) == 2
    assert "error: --weights: 3 value(s) for 2 run(s)" in capsys.readouterr().err
    with pytest.raises(EnsembleError, match="positive"):
        ensemble([run_a, run_a], tmp_path / "e", weights=[1, 0])
    assert not (tmp_path / "e").exists()


def test_scores_without_provenance_ask_for_a_new_predict(tmp_path, capsys):
    np.savez(tmp_path / "tile_xla.scores.npz", k=np.zeros(3))  # as written before provenance was recorded
    assert solution(["ensemble", str(tmp_path), "--out", str(tmp_path / "e")]) == 2
    assert "solution predict` again" in capsys.readouterr().err


def test_predict_records_the_files_it_scored(tiny_root, tmp_path):
    collection = "layout:xla:random"
    lightning_main(["predict", "--config", str(CONFIGS / "layout_xla_random.yaml"), "--config",
                    str(CONFIGS / "demo.yaml"), "--data.root", str(tiny_root), "--trainer.logger", "false",
                    "--trainer.enable_progress_bar", "false", "--model.ranker.init_args.hidden", "16",
                    "--model.ranker.init_args.opcode_dim", "8",
                    "--submission.out_dir", str(tmp_path)])
    run = read_run(tmp_path / "layout_xla_random.scores.npz")
    paths = list_files(tiny_root, collection, "test")
    assert (run.collection, run.split) == (collection, "test")
    counts = expected_test_files(tiny_root)
    assert run.files == {p.stem: file_record(p, counts[f"{collection}:{p.stem}"]) for p in paths}
    assert ensemble([tmp_path, tmp_path], tmp_path / "ens")[0] == [(collection, 2, "rank")]
    assert (tmp_path / "ens" / "layout_xla_random.csv").read_text() == (tmp_path / "layout_xla_random.csv").read_text()
