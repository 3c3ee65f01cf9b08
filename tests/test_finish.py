"""Training on with the valid files too (`finish_on_valid`): the time each phase gets, the files the finishing fit
trains on, and which checkpoint the valid files score and which one ranks."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from solution.data.reader import collection_dir
from solution.data.splits import split_files
from solution.errors import SettingsError
from solution.submission.files import collection_file_stem
from solution.tools import pipeline
from solution.tools.settings import configs_folder, layered, read_settings
from solution.training.checkpoints import read_checkpoint, saved_settings
from solution.training.ranker_file import read_ranker

COLLECTION = "layout:xla:random"
STEM = collection_file_stem(COLLECTION)


def demo_settings(**top) -> dict:
    """The demo's settings of COLLECTION, fitted for 4 epochs, ranking by the model alone unless `top` says so."""
    configs = configs_folder()
    return layered(read_settings(configs, [configs / "demo.yaml"])[COLLECTION],
                   {"trainer": {"max_epochs": 4, "check_val_every_n_epoch": 1}, "blend_weights": [], **top})


def test_train_with_valid_trains_on_train_and_valid_and_validates_as_before(tiny_root):
    data = {"root": str(tiny_root), "collection": COLLECTION}
    folder = collection_dir(tiny_root, COLLECTION)
    train, valid = sorted(folder.glob("train/*.npz")), sorted(folder.glob("valid/*.npz"))
    assert train and valid
    assert sorted(split_files({**data, "train_with_valid": True}, "train")) == sorted(train + valid)
    assert sorted(split_files({**data, "train_with_valid": True}, "valid")) == valid
    assert sorted(split_files(data, "train")) == train


def test_the_finish_takes_the_last_part_of_each_members_time(monkeypatch, tmp_path):
    calls, clock = [], [0.0]

    def train(collection, settings, seconds, job, member=0, finished=False):  # uses all of its time
        calls.append((seconds, member, finished, settings))
        clock[0] += seconds or 0.0
        return Path(f"{member}{'.finished' if finished else ''}.ckpt")

    monkeypatch.setattr(pipeline, "train", train)
    job = pipeline.Job(tmp_path, tmp_path, clock=lambda: clock[0])
    settings = {"members": 2, "finish_on_valid": 0.25, "trainer": {"max_epochs": 8}, "data": {}, "model": {}}
    validated, ranking = pipeline.fit_members(COLLECTION, settings, 200.0, job)
    assert validated == [Path("0.ckpt"), Path("1.ckpt")]
    assert ranking == [Path("0.finished.ckpt"), Path("1.finished.ckpt")]
    assert [(s, m, f) for s, m, f, _ in calls] == [(75.0, 0, False), (75.0, 1, False), (25.0, 0, True),
                                                  (25.0, 1, True)]
    finishing = calls[2][3]
    assert finishing["model"]["init_from"] == "0.ckpt" and finishing["data"]["train_with_valid"]
    assert finishing["trainer"]["limit_val_batches"] == 0 and finishing["trainer"]["max_epochs"] == 8
    calls.clear()
    assert pipeline.fit_members(COLLECTION, {**settings, "members": 1}, None, job)[1] == [Path("0.finished.ckpt")]
    assert calls[1][3]["trainer"]["max_epochs"] == 2  # without a limit: its part of max_epochs
    calls.clear()
    validated, ranking = pipeline.fit_members(COLLECTION, {**settings, "finish_on_valid": 0.0}, 100.0, job)
    assert validated == ranking and [s for s, *_ in calls] == [50.0, 50.0]


@pytest.mark.parametrize("value", [1, 1.5, -0.1, True, "half"])
def test_finish_on_valid_is_a_part_of_the_time(value, tmp_path):
    with pytest.raises(SettingsError, match=f"finish_on_valid={value!r}; expected a part of the training time"):
        pipeline.fit_members(COLLECTION, {"finish_on_valid": value}, 10.0, pipeline.Job(tmp_path, tmp_path))


def test_the_valid_files_score_the_validated_fit_and_the_finished_one_ranks(tiny_root, tmp_path):
    """The finished fit starts from the validated checkpoint's weights and trains on; the valid scores and the
    prior's weight are the validated checkpoint's (the finished one has seen the valid files), the saved ranker
    holds the finished weights, and the finished fit's settings name the valid files as training files."""
    settings = demo_settings(finish_on_valid=0.5)
    job = pipeline.Job(tiny_root, tmp_path)
    validated, ranking = pipeline.fit_members(COLLECTION, settings, None, job)
    assert ranking == [job.checkpoint_path(COLLECTION, finished=True)] and ranking != validated
    before, after = (read_checkpoint(path) for path in (validated[0], ranking[0]))
    assert saved_settings(after)["data"]["train_with_valid"] and not saved_settings(before)["data"]["train_with_valid"]
    changed = [key for key, value in before["state_dict"].items()
               if value.is_floating_point() and not torch.equal(value, after["state_dict"][key])]
    assert changed, "the finishing fit trained nothing"
    assert torch.equal(before["state_dict"]["node_scaler.mean"], after["state_dict"]["node_scaler.mean"])
    finished = pipeline.evaluate(COLLECTION, validated, settings, job, predict=False, rank_with=ranking)
    assert finished == pipeline.evaluate(COLLECTION, validated, settings, pipeline.Job(tiny_root, tmp_path / "alone"),
                                         predict=False)
    saved = read_ranker(job.saved_rankers / f"{STEM}.ranker")
    assert all(torch.equal(saved.members[0]["state_dict"][key], after["state_dict"][key]) for key in changed)
