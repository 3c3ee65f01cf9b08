"""The moving average of the weights (`model.weight_average`): its update, and a fit that validates, saves and
ranks with the average rather than the last step's weights."""

from __future__ import annotations

import pytest
import torch

from solution.errors import SettingsError
from solution.tools import pipeline
from solution.tools.settings import configs_folder, layered, read_settings
from solution.training.module import moving_average

COLLECTION = "layout:xla:random"


def test_the_average_moves_a_decays_share_towards_each_step_and_copies_flags() -> None:
    averaged, flag = torch.tensor([1.0, -2.0]), torch.tensor(False)
    update = moving_average(0.75)
    for step in ([3.0, -2.0], [3.0, 6.0]):
        update([averaged, flag], [torch.tensor(step), torch.tensor(True)], torch.tensor(1))
    # 1 -> 1.5 -> 1.875; -2 -> -2 -> 0
    torch.testing.assert_close(averaged, torch.tensor([1.875, 0.0]))
    assert bool(flag)


@pytest.mark.parametrize("decay", [1.0, -0.1])
def test_weight_average_is_a_decay_below_one(decay, tiny_root, tmp_path) -> None:
    settings = fit_settings(decay)
    with pytest.raises(SettingsError, match=rf"model.weight_average={decay}; expected a decay in \[0, 1\)"):
        pipeline.train(COLLECTION, settings, None, pipeline.Job(tiny_root, tmp_path))


def fit_settings(decay: float) -> dict:
    configs = configs_folder()
    return layered(read_settings(configs, [configs / "demo.yaml"])[COLLECTION],
                   {"trainer": {"max_epochs": 3, "check_val_every_n_epoch": 1}, "blend_weights": [],
                    "model": {"weight_average": decay}})


def test_a_fit_validates_saves_and_ranks_with_the_average(tiny_root, tmp_path) -> None:
    job = pipeline.Job(tiny_root, tmp_path)
    settings = fit_settings(0.9)
    checkpoint = pipeline.train(COLLECTION, settings, None, job)
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    average, last = saved["state_dict"], saved["current_model_state"]
    moved = [name for name in average if average[name].is_floating_point() and not torch.equal(average[name],
                                                                                               last[name])]
    assert any(name.startswith("ranker.") for name in moved)
    assert not any("scaler" in name for name in moved)  # the fitted scalers are no weights
    best = next(state["best_model_score"] for key, state in saved["callbacks"].items() if "LaterOnTies" in key)
    validated = pipeline.evaluate(COLLECTION, checkpoint, settings, job, predict=False)["score"]
    assert validated == pytest.approx(float(best), abs=1e-6)  # the score it was chosen by is the average's
