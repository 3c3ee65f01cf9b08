"""Ranker files: saved whole and read back as data, a checkpoint read as a ranker of one member, every crafted or
damaged file refused in one line with nothing run, and the blend they rank by."""

from __future__ import annotations

import copy
import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from solution import errors
from solution.physics.prior import UNIT, WEIGHTS, prior_by_row
from solution.submission.ensemble import normalised_ranks, read_run
from solution.tools import pipeline
from solution.tools.cli import main
from solution.tools.ranking import ranked_split
from solution.tools.settings import configs_folder, layered, read_settings
from solution.training import ranker_file
from solution.training.checkpoints import CheckpointError, read_checkpoint
from solution.training.ranker_file import SavedRanker, read_ranker

QUICK = {"trainer": {"max_epochs": 1, "check_val_every_n_epoch": 1, "num_sanity_val_steps": 0, "accelerator": "cpu"},
         "model": {"ranker": {"init_args": {"hidden": 16, "opcode_dim": 8, "config_hidden": None}},
                   "warmup_steps": 0},
         "data": {"configs_per_graph": 8, "num_workers": 0}}
COLLECTION = "layout:xla:random"
PROGRAM = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "npz" / "layout" / "xla" / "random" / "test" / \
    "fixture_scan_rnn.npz"


@pytest.fixture(scope="module")
def layout_root(tiny_root, tmp_path_factory) -> Path:
    """A data root holding only the tiny dataset's layout:xla:random files."""
    root = tmp_path_factory.mktemp("ranker-data")
    part = Path("npz_all", "npz", "layout", "xla", "random")
    shutil.copytree(tiny_root / part, root / part)
    return root


@pytest.fixture(scope="module")
def checkpoint(layout_root, tmp_path_factory) -> Path:
    """A layout:xla:random checkpoint trained for one epoch."""
    work = tmp_path_factory.mktemp("ranker-fit")
    settings = layered(read_settings()[COLLECTION], QUICK)
    return pipeline.train(COLLECTION, settings, None, pipeline.Job(layout_root, work / "out", runs=work))


@pytest.fixture
def saved(checkpoint, tmp_path) -> Path:
    """A ranker of the checkpoint twice, the plain count of bytes as its prior, at weight 0.5."""
    contents = read_checkpoint(checkpoint)
    ranker = SavedRanker.of_checkpoints([contents, contents], UNIT, 0.5, [(0.0, 0.25), (0.5, 0.5)])
    return ranker.save(tmp_path / "layout_xla_random.ranker")


def test_a_ranker_file_reads_back_what_was_saved(saved, checkpoint):
    ranker = read_ranker(saved)
    assert ranker.collection == COLLECTION and ranker.weight == 0.5 and len(ranker.members) == 2
    assert ranker.tried == [(0.0, 0.25), (0.5, 0.5)]
    np.testing.assert_array_equal(ranker.fitted_prior, UNIT)
    assert list(ranker.prior) == list(WEIGHTS)
    original = read_checkpoint(checkpoint)["state_dict"]
    for member in ranker.members:
        assert set(member) == set(ranker_file.MEMBER_KEYS)
        assert all(torch.equal(member["state_dict"][key], value) for key, value in original.items())


def test_a_checkpoint_reads_as_a_ranker_of_one_member_and_no_prior(checkpoint):
    ranker = read_ranker(checkpoint)
    assert ranker.collection == COLLECTION and len(ranker.members) == 1
    assert ranker.prior == {} and ranker.weight == 0.0


class Marker:
    """An object whose unpickling would create a file: what a crafted pickle runs."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


def crafted(saved: Path, tmp_path: Path, how: str, marker: Path) -> Path:
    """A copy of the saved ranker damaged `how`."""
    data = torch.load(saved, weights_only=True)
    data["members"] = [copy.deepcopy(member) for member in data["members"]]  # saved from one checkpoint: unshared
    path = tmp_path / f"{how}.ranker"
    if how == "cut short":
        whole = saved.read_bytes()
        path.write_bytes(whole[: len(whole) // 2])
        return path
    if how == "pickle":
        with path.open("wb") as handle:
            pickle.dump({**data, "members": Marker(marker)}, handle, protocol=2)
        return path
    if how == "foreign class":
        data["members"][1]["hyper_parameters"]["ranker"] = {"class_path": "os.system",
                                                          "init_args": {"command": f"touch {marker}"}}
    elif how == "removed option":
        data["members"][0]["hyper_parameters"]["ranker"]["init_args"]["shared_link_maps_v0"] = True
    elif how == "format":
        data["format"] = "something else"
    elif how == "prior":
        data["prior"] = {"fused": 1.0}
    elif how == "weight":
        data["weight"] = 1.5
    torch.save(data, path)
    return path


WHERE = {"cut short": "not a readable ranker", "pickle": "not a readable ranker",
         "foreign class": "members[1].hyper_parameters.ranker.class_path = 'os.system'",
         "removed option": "members[0].hyper_parameters.ranker.init_args.shared_link_maps_v0",
         "format": "key format is 'something else'", "prior": "key prior holds ['fused']",
         "weight": "key weight is 1.5"}


@pytest.mark.parametrize("how", list(WHERE))
def test_a_crafted_or_damaged_ranker_is_refused_naming_the_file_and_key(how, saved, tmp_path):
    marker = tmp_path / "code-ran"
    path = crafted(saved, tmp_path, how, marker)
    with pytest.raises(CheckpointError) as refused:
        read_ranker(path)
    message = str(refused.value)
    assert message.startswith(f"{path}: ") and WHERE[how] in message and "\n" not in message, message
    assert not marker.exists(), "code from the ranker file ran"


def test_blend_is_the_weighted_mean_of_member_and_prior_ranks(saved, layout_root):
    ranker = read_ranker(saved)
    graphs = pipeline.build_datamodule(ranker.data_settings, pipeline.Job(layout_root, layout_root / "out")).graphs(
        "valid")
    rng = np.random.default_rng(0)
    member = {i: rng.normal(size=graphs.num_configs(i)) for i in range(len(graphs))}
    blended = ranker.scores(graphs, lambda _: FakeTable(member))
    for index in range(len(graphs)):
        prior = prior_by_row(graphs, index, UNIT)
        expected = 0.25 * normalised_ranks(member[index]) * 2 + 0.5 * normalised_ranks(prior)
        np.testing.assert_allclose(blended[index], expected)


def test_a_ranker_at_weight_one_ranks_by_the_prior_without_any_network(saved, layout_root, monkeypatch):
    ranker = read_ranker(saved)
    ranker.weight = 1.0
    monkeypatch.setattr("solution.training.inference.build", lambda *_: pytest.fail("a network was built"))
    graphs = pipeline.build_datamodule(ranker.data_settings, pipeline.Job(layout_root, layout_root / "out")).graphs(
        "valid")
    blended = ranker.scores(graphs, lambda _: pytest.fail("a member scored"))
    for index in range(len(graphs)):
        np.testing.assert_array_equal(np.argsort(blended[index], kind="stable"),
                                      np.argsort(prior_by_row(graphs, index, UNIT), kind="stable"))


class FakeTable:
    """A score table that gives fixed scores to every config row of each graph."""

    def __init__(self, scores: dict[int, np.ndarray]) -> None:
        self.scores = scores

    def graph(self, index: int):
        values = self.scores[index]
        return np.arange(len(values)), values, np.zeros(len(values))


def test_predict_and_validate_rank_with_a_ranker_file(saved, layout_root, tmp_path, capsys):
    out = tmp_path / "predicted"
    assert main(["predict", "--data.root", str(layout_root), "--ranker", str(saved),
                 "--submission.out_dir", str(out)]) == errors.OK
    ranker = read_ranker(saved)
    settings = layered(read_settings()[COLLECTION], {"data": {"root": str(layout_root)}})
    graphs, expected = ranked_split(ranker, settings, "test", str(saved))
    written = read_run(out / "layout_xla_random.scores.npz").scores
    assert sorted(written) == sorted(graphs.stems) and len(written) > 0
    for index, stem in enumerate(graphs.stems):
        np.testing.assert_array_equal(written[stem], expected[index])
    capsys.readouterr()
    assert main(["validate", "--data.root", str(layout_root), "--ranker", str(saved)]) == errors.OK
    shown = capsys.readouterr().out
    assert "valid split of layout:xla:random" in shown and "2 networks and the physics prior at weight 0.5" in shown
    assert "  score " in shown


@pytest.mark.parametrize("how", ["cut short", "pickle", "foreign class"])
def test_every_command_refuses_a_crafted_ranker_in_one_line_running_nothing(how, saved, layout_root, tmp_path,
                                                                           capsys):
    marker = tmp_path / "code-ran"
    path = crafted(saved, tmp_path, how, marker)
    for command in (["predict", "--data.root", str(layout_root), "--ranker", str(path)],
                    ["validate", "--data.root", str(layout_root), "--ranker", str(path)],
                    ["rank", str(PROGRAM), "--ranker", str(path)]):
        code = main(command)
        message = capsys.readouterr().err
        assert code == errors.BAD_DATA and str(path) in message and message.count("\n") == 1, (command, message)
        assert "Traceback" not in message and not marker.exists()


def submitted_order(csv: Path, stem: str) -> list[int]:
    """The order a submission-form CSV holds for `stem` of layout:xla:random."""
    for line in csv.read_text().splitlines()[1:]:
        row_id, order = line.split(",")
        if row_id == f"{COLLECTION}:{stem}":
            return [int(c) for c in order.split(";")]
    raise AssertionError(f"{csv}: no row for {stem}")


@pytest.fixture(scope="module")
def blended_run(layout_root, tmp_path_factory) -> tuple[Path, Path]:
    """`solution run` on the layout files plus a real-format program as a test file, its blend weight held at 0.5:
    (data root, output folder)."""
    work = tmp_path_factory.mktemp("blended-run")
    root = work / "data"
    shutil.copytree(layout_root, root)
    shutil.copy(PROGRAM, root / "npz_all" / "npz" / "layout" / "xla" / "random" / "test")
    quick = work / "quick.yaml"
    quick.write_text(yaml.safe_dump({**QUICK, "blend_weights": [0.5], "prior_fit": {"files": 2, "steps": 5,
                                                                                     "penalties": [1.0]}}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "chosen_weight", lambda metrics, floor: 0.5)
        assert main(["run", "--data.root", str(root), "--config", str(quick), "--out", str(work / "out")]) == errors.OK
    return root, work / "out"


def test_rank_predict_and_run_rank_a_test_file_in_one_order(blended_run, tmp_path):
    root, out = blended_run
    ranker = out / "rankers" / "layout_xla_random.ranker"
    assert read_ranker(ranker).weight == 0.5 and read_ranker(ranker).prior
    by_run = submitted_order(out / "submission.csv", PROGRAM.stem)
    assert main(["predict", "--data.root", str(root), "--ranker", str(ranker),
                 "--submission.out_dir", str(tmp_path / "predicted")]) == errors.OK
    assert submitted_order(tmp_path / "predicted" / "layout_xla_random.csv", PROGRAM.stem) == by_run
    assert main(["rank", str(PROGRAM), "--ranker", str(ranker), "--out", str(tmp_path / "ranked")]) == errors.OK
    rows = json.loads((tmp_path / "ranked.json").read_text())
    assert [r["candidate"] for r in sorted(rows, key=lambda r: r["rank"])] == by_run


def test_run_with_saved_rankers_trains_nothing_and_submits_the_same(blended_run, tmp_path, monkeypatch, capsys):
    root, out = blended_run
    monkeypatch.setattr(pipeline, "train", lambda *_: pytest.fail("a collection was trained"))
    assert main(["run", "--data.root", str(root), "--rankers", str(out / "rankers"),
                 "--out", str(tmp_path / "again")]) == errors.OK
    assert "ranking with" in capsys.readouterr().out
    assert (tmp_path / "again" / "submission.csv").read_text() == (out / "submission.csv").read_text()
    assert (tmp_path / "again" / "rankers" / "layout_xla_random.ranker").is_file()


def test_fit_writes_a_ranker_of_its_best_checkpoint(layout_root, tmp_path):
    runs = tmp_path / "runs"
    assert main(["fit", "--config", str(configs_folder() / "layout_xla_random.yaml"), "--config",
                 str(configs_folder() / "demo.yaml"), "--data.root", str(layout_root), "--trainer.max_epochs", "1",
                 "--trainer.check_val_every_n_epoch", "1", "--trainer.default_root_dir", str(runs),
                 "--trainer.logger", "false"]) == errors.OK
    [checkpoint] = runs.glob("**/checkpoints/best.ckpt")
    ranker = read_ranker(checkpoint.parent.parent / "rankers" / "layout_xla_random.ranker")
    assert ranker.prior == {} and ranker.weight == 0.0 and len(ranker.members) == 1
    best = read_checkpoint(checkpoint)["state_dict"]
    assert all(torch.equal(ranker.members[0]["state_dict"][key], value) for key, value in best.items())
