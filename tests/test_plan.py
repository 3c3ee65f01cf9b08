"""The wall-clock plan of a budgeted job: sizes read from the files' headers, estimates that scale with them and
with what the job's own steps took, training shares, cuts in their order, and a budget too small refused up front.
Time is injected: nothing here sleeps or reads the wall clock."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from solution import errors
from solution.constants import COLLECTIONS, SPLITS
from solution.data.reader import DataError, array_shapes, list_files, read_graph
from solution.errors import SettingsError
from solution.tools import pipeline
from solution.tools.cli import main
from solution.tools.plan import (
    OVERHEAD_SECONDS,
    Plan,
    Sizes,
    budget_settings,
    collection_sizes,
    training_order,
    training_shares,
)
from solution.tools.settings import read_settings

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "npz"
LAYOUT = "layout:xla:random"


def test_sizes_from_headers_are_those_of_the_arrays(tiny_root):
    for collection in COLLECTIONS:
        sizes = collection_sizes(tiny_root, collection)
        for split in SPLITS:
            graphs = [read_graph(path) for path in list_files(tiny_root, collection, split)]
            expected = [(len(g.node_feat), g.num_configs, 1 if g.config_node_ids is None else len(g.config_node_ids))
                        for g in graphs]
            assert sizes.files[split].tolist() == [list(row) for row in expected], (collection, split)


def test_sizes_leave_out_a_file_that_does_not_read(tiny_root, tmp_path):
    root = tmp_path / "data"
    shutil.copytree(tiny_root, root)
    train = list_files(root, LAYOUT, "train")
    train[0].write_bytes(train[0].read_bytes()[:100])
    sizes = collection_sizes(root, LAYOUT)
    assert len(sizes.files["train"]) == len(train) - 1
    assert sizes.files["valid"].tolist() == collection_sizes(tiny_root, LAYOUT).files["valid"].tolist()


def test_array_shapes_of_real_format_files_and_of_a_cut_one(tmp_path):
    files = sorted(FIXTURES.rglob("*.npz"))
    assert files
    for path in files:
        with np.load(path) as npz:
            assert array_shapes(path) == {key: npz[key].shape for key in npz.files}, path
    cut = tmp_path / "cut.npz"
    cut.write_bytes(files[0].read_bytes()[:200])
    with pytest.raises(DataError, match="cut.npz: key '<file>': found unreadable archive"):
        array_shapes(cut)


def sizes(nodes: int, configs: int, configurable: int, files: dict[str, int] | None = None) -> Sizes:
    """A collection's splits of files all of one size, `files` of them per split (default 2 each)."""
    files = files or dict.fromkeys(SPLITS, 2)
    return Sizes({split: np.array([[nodes, configs, configurable]] * files[split], np.int64).reshape(-1, 3)
                  for split in SPLITS})


def settings(share: float, prior_files: int = 0, **rates) -> dict:
    return {"budget": {"share": share, **rates}, "data": {}, "blend_weights": [0.5] if prior_files else [],
            "prior_fit": {"files": prior_files, "steps": 400, "penalties": [0.01, 0.1], "folds": 3}}


class Clock:
    """The job's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def free_plan(budget: float, clock: Clock, lines: list[str]) -> Plan:
    """Five collections whose steps other than training cost nothing."""
    shared = read_settings()
    zero = {"start": 0, "node": 0, "row": 0, "prior": 0}
    return Plan(budget, {c: settings(training_shares(shared)[c], **zero) for c in COLLECTIONS},
                {c: sizes(10, 10, 2) for c in COLLECTIONS}, clock, lines.append)


def test_training_time_is_shared_out_and_what_one_leaves_moves_on():
    clock, lines = Clock(), []
    plan, budget = free_plan(1000.0, clock, lines), 1000.0 - OVERHEAD_SECONDS
    shares = training_shares(read_settings())
    assert sum(shares.values()) == pytest.approx(1.0)
    assert plan.training_seconds(list(COLLECTIONS)) == pytest.approx(budget * shares["tile:xla"])
    assert lines[0].startswith("[plan] 1000 s of the 1000 s budget left")
    assert all(f"[plan]   {c}" in lines[0] for c in COLLECTIONS)
    # tile stops at once: its time goes to the rest by their shares
    rest = list(COLLECTIONS[1:])
    assert plan.training_seconds(rest) == pytest.approx(budget * shares[LAYOUT] / sum(shares[c] for c in rest))
    clock.now = 400.0  # the next collection finds 400 s gone
    assert plan.training_seconds(rest[1:]) == pytest.approx((budget - 400) * shares[rest[1]]
                                                            / sum(shares[c] for c in rest[1:]))


def test_collections_that_stop_early_train_first_so_their_time_passes_on():
    shipped = read_settings()
    assert training_order(shipped) == ["tile:xla", "layout:nlp:default", "layout:nlp:random", "layout:xla:default",
                                       "layout:xla:random"]
    assert training_order({c: {} for c in COLLECTIONS}) == list(COLLECTIONS)  # ties keep the submission's order
    assert training_order({"tile:xla": {"budget": {"order": 2}}, LAYOUT: {"budget": {"order": 1}}}) == \
        [LAYOUT, "tile:xla"]
    with pytest.raises(SettingsError, match="budget"):
        training_order({"tile:xla": {"budget": {"order": -1}}})


def test_estimates_grow_with_the_files_and_learn_from_the_jobs_own_steps():
    rates = {"start": 2.0, "node": 1e-3, "row": 1e-5, "prior": 1e-4}
    plan = Plan(1e6, {"tile:xla": settings(0.1, **rates), LAYOUT: settings(0.2, 8, **rates),
                      "layout:nlp:random": settings(0.2, 8, **rates)},
                {"tile:xla": sizes(100, 50, 1), LAYOUT: sizes(1000, 300, 20), "layout:nlp:random": sizes(500, 300, 20)},
                Clock(), print)
    # 2 files a split: setup reads train and valid, evaluate scores valid and test and preprocesses test
    assert plan.estimate(LAYOUT, "setup") == pytest.approx(2.0 + 1e-3 * 4000 + 1e-5 * 4 * 6000)
    assert plan.estimate(LAYOUT, "evaluate") == pytest.approx(2.0 + 1e-5 * 4 * 6000 + 1e-3 * 2000 + 1e-5 * 2 * 6000)
    assert plan.estimate(LAYOUT, "prior") == pytest.approx(1e-4 * 2 * 400 * (1 + 2 * 3))  # 2 train files, 7 fits
    assert plan.estimate("tile:xla", "prior") == 0.0
    other = {step: plan.estimate("layout:nlp:random", step) for step in ("setup", "prior", "evaluate")}
    tile = plan.estimate("tile:xla", "evaluate")
    plan.measured(LAYOUT, "evaluate", 3 * plan.estimate(LAYOUT, "evaluate"))
    plan.measured(LAYOUT, "prior", 0.5 * plan.estimate(LAYOUT, "prior"))
    assert plan.estimate("layout:nlp:random", "evaluate") == pytest.approx(3 * other["evaluate"])
    assert plan.estimate("layout:nlp:random", "setup") == pytest.approx(3 * other["setup"])  # preprocessing too
    assert plan.estimate("layout:nlp:random", "prior") == pytest.approx(0.5 * other["prior"])
    assert plan.estimate("tile:xla", "evaluate") == pytest.approx(tile)  # another task learns nothing from it


def test_walking_each_configs_work_is_reserved_for_the_configs_a_train_file_keeps():
    rates = {"start": 0.0, "node": 0.0, "row": 0.0, "prior": 0.0, "work": 1e-6}
    plan = Plan(1e6, {LAYOUT: {**settings(1.0, **rates), "data": {"config_work": True, "work_configs": 100}},
                      "layout:nlp:random": settings(1.0, **rates)},
                {c: sizes(1000, 300, 20) for c in (LAYOUT, "layout:nlp:random")}, Clock(), print)
    # 2 files a split of 1000 nodes: train walks 100 configs a file, valid and test all 300
    assert plan.estimate(LAYOUT, "setup") == pytest.approx(1e-6 * 1000 * (2 * 100 + 2 * 300))
    assert plan.estimate(LAYOUT, "evaluate") == pytest.approx(1e-6 * 1000 * 2 * 300)
    assert plan.estimate("layout:nlp:random", "setup") == plan.estimate("layout:nlp:random", "evaluate") == 0.0


def test_short_time_cuts_the_later_steps_in_order_and_says_so():
    lines = []
    rates = {"start": 0.0, "node": 0.0, "row": 1e-3, "prior": 1e-3, "min_valid_configs": 100}
    plan = Plan(315.0, {LAYOUT: settings(1.0, 8, **rates)},
                {LAYOUT: sizes(1000, 1000, 10, {"train": 1, "valid": 8, "test": 1})}, Clock(), lines.append)
    # 10 s of rows a file: set-up 90 s (train and valid), evaluate 100 s (valid, test twice), prior 2.8 s; of the
    # 305 s left, the steps other than training may take 152.5 s: the prior's cuts fall short, half the valid configs do
    seconds = plan.training_seconds([LAYOUT])
    cuts = [line for line in lines if line.startswith("[plan] time is short")]
    assert cuts == [f"[plan] time is short: {LAYOUT} cuts prior_fit.steps from 400 to 50, saving ~2 s",
                    f"[plan] time is short: {LAYOUT} cuts prior_fit.penalties from [0.01, 0.1] to [0.01], saving ~0 s",
                    f"[plan] time is short: {LAYOUT} cuts data.valid_configs from all to 500, saving ~40 s"]
    assert seconds == pytest.approx(305 - 90 - 60 - 0.05)
    assert plan.settings[LAYOUT]["data"]["valid_configs"] == 500 and plan.settings[LAYOUT]["prior_fit"]["steps"] == 50


def test_a_budget_below_what_the_files_need_is_refused_before_anything_runs():
    rates = {"start": 10.0, "node": 0.0, "row": 0.0, "prior": 1.0}
    plan = Plan(60.0, {c: settings(0.2, 8, **rates) for c in COLLECTIONS[1:]},
                {c: sizes(10, 10, 2) for c in COLLECTIONS[1:]}, Clock(), print)
    before = {c: dict(s) for c, s in plan.settings.items()}
    # with every cut: 4 x (10 s set-up + 10 s evaluate + 2 files x 50 steps x 1 s of prior) + 10 s
    with pytest.raises(SettingsError, match=r"--budget 60 is below the ~490 s .*; give at least 620"):
        plan.check_enough("--budget")
    assert plan.settings == before


def test_solution_run_refuses_a_budget_too_small_in_one_line(tiny_root, tmp_path, capsys):
    assert main(["run", "--data.root", str(tiny_root), "--out", str(tmp_path / "out"), "--budget", "1"]) == \
        errors.USAGE
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --budget 1 is below the ~") and "give at least" in err and "\n" not in err
    assert not (tmp_path / "out").exists()


def test_a_fit_stops_at_its_deadline_on_the_jobs_clock(tiny_root, tmp_path, capsys):
    calls = iter([0.0] + [100.0] * 10_000)  # the deadline is set at 0; every later reading is past it
    job = pipeline.Job(tiny_root, tmp_path, clock=lambda: next(calls))
    configs = read_settings(layers=[Path(pipeline.__file__).parents[1] / "configs" / "demo.yaml"])
    path = pipeline.train("tile:xla", configs["tile:xla"], 5.0, job)
    assert "[tile:xla] stopped by its time" in capsys.readouterr().out
    assert torch.load(path, weights_only=True)["global_step"] == 1  # one step: a checkpoint all the same


def test_the_kernel_names_its_variable_for_a_budget_too_small(tiny_root, tmp_path, capsys):
    from solution.tools import kernel

    environ = {"SOLUTION_DATA_ROOT": str(tiny_root), "SOLUTION_OUTPUT_DIR": str(tmp_path / "out"),
               "SOLUTION_CACHE": str(tmp_path / "cache"), "SOLUTION_TIME_BUDGET": "5"}
    assert kernel.main(read_settings(), environ) == errors.USAGE
    assert capsys.readouterr().err.startswith("error: SOLUTION_TIME_BUDGET 5 is below the ~")
    assert not (tmp_path / "out").exists()


def test_budget_settings_refuse_an_unknown_key_and_a_negative_rate():
    with pytest.raises(SettingsError, match=r"tile:xla: budget=\{'shares': 1\} .*some of share, order, start, node"):
        budget_settings({"budget": {"shares": 1}}, "tile:xla")
    with pytest.raises(SettingsError, match=r"budget=\{'row': -1\}; expected numbers >= 0"):
        budget_settings({"budget": {"row": -1}}, "tile:xla")
