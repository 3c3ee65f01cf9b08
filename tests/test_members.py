"""Seed ensembles in the pipeline (`members`): fits in equal parts of the time, their checkpoints, and the rank
ensemble that `solution run` predicts and validates with."""

from __future__ import annotations

import shutil
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest

from solution.constants import SPLITS
from solution.data.reader import collection_dir
from solution.data.splits import family_of, pooled_models
from solution.errors import SettingsError
from solution.submission.ensemble import combine, read_run
from solution.submission.files import collection_file_stem
from solution.tools import pipeline
from solution.tools.cli import main
from solution.tools.plan import OVERHEAD_SECONDS, Plan, Sizes
from solution.tools.settings import configs_folder, layered, read_settings
from solution.training.ranker_file import read_ranker

COLLECTION = "layout:xla:random"
STEM = collection_file_stem(COLLECTION)


def demo_settings(**top) -> dict:
    """The demo's settings of COLLECTION, fitted briefly, ranking by the model alone unless `top` says otherwise."""
    configs = configs_folder()
    return layered(read_settings(configs, [configs / "demo.yaml"])[COLLECTION],
                   {"trainer": {"max_epochs": 2, "check_val_every_n_epoch": 1}, "blend_weights": [], **top})


@pytest.fixture(scope="module")
def two_members(tiny_root, tmp_path_factory) -> tuple[pipeline.Job, list[Path]]:
    job = pipeline.Job(tiny_root, tmp_path_factory.mktemp("members"))
    return job, pipeline.train_members(COLLECTION, demo_settings(members=2), None, job)


def test_members_are_saved_beside_the_first_fit_and_found_again(two_members):
    job, checkpoints = two_members
    folder = job.output / "checkpoints"
    assert checkpoints == [folder / f"{STEM}.ckpt", folder / f"{STEM}.member1.ckpt"]
    assert pipeline.given_checkpoints(folder)[COLLECTION] == checkpoints


def test_given_checkpoints_take_members_in_order_up_to_the_first_gap(tmp_path):
    for name in ("tile_xla.ckpt", f"{STEM}.ckpt", f"{STEM}.member1.ckpt", f"{STEM}.member3.ckpt"):
        (tmp_path / name).touch()
    found = pipeline.given_checkpoints(tmp_path)
    assert found == {"tile:xla": [tmp_path / "tile_xla.ckpt"],
                     COLLECTION: [tmp_path / f"{STEM}.ckpt", tmp_path / f"{STEM}.member1.ckpt"]}


def alone(job: pipeline.Job, checkpoint: Path, folder: Path) -> dict[str, np.ndarray]:
    """The test scores of one checkpoint ranking alone, as `solution run` writes them."""
    ranked = pipeline.Job(job.root, folder)
    pipeline.evaluate(COLLECTION, checkpoint, demo_settings(), ranked, validate=False)
    return read_run(ranked.collection_files / f"{STEM}.scores.npz").scores


def test_the_submission_ranks_by_the_members_rank_ensemble(two_members, tmp_path):
    job, checkpoints = two_members
    ranked = pipeline.Job(job.root, tmp_path)
    pipeline.evaluate(COLLECTION, checkpoints, demo_settings(members=2), ranked, validate=False)
    members = [alone(job, checkpoint, tmp_path / f"member{j}") for j, checkpoint in enumerate(checkpoints)]
    combined = read_run(ranked.collection_files / f"{STEM}.scores.npz").scores
    assert set(combined) == set(members[0]) == set(members[1])
    assert any(not np.allclose(members[0][stem], members[1][stem]) for stem in combined), "seeds gave one model"
    for stem, values in combined.items():
        np.testing.assert_allclose(values, combine([m[stem] for m in members], np.ones(2), "rank"))
    assert (ranked.collection_files / f"{STEM}.csv").is_file()
    assert len(read_ranker(ranked.saved_rankers / f"{STEM}.ranker").members) == 2


def test_one_member_validates_as_lightning_does_and_a_repeated_member_changes_nothing(two_members, tmp_path):
    job, checkpoints = two_members
    settings = demo_settings(member_folds=False)  # both members validate on the collection's own valid files
    pl.seed_everything(0, verbose=False)
    model, datamodule = pipeline.load(checkpoints[0], COLLECTION, settings, job)
    logged = pl.Trainer(logger=False, enable_progress_bar=False).validate(model, datamodule, verbose=False)[0]
    alone = pipeline.evaluate(COLLECTION, checkpoints[0], settings, job, predict=False)
    twice = pipeline.evaluate(COLLECTION, [checkpoints[0]] * 2, settings, job, predict=False)
    assert alone["score"] == pytest.approx(logged["val/score"], abs=1e-6)
    assert alone["opa"] == pytest.approx(logged["val/opa"], abs=1e-6)
    assert twice == pytest.approx(alone) and alone["files"] == len(datamodule.graphs("valid"))


def test_members_share_the_time_equally_and_what_one_leaves_moves_on(monkeypatch, tmp_path):
    calls, clock, used = [], [0.0], {}

    def train(collection, settings, seconds, job, member):  # takes `used` of its time, all of it by default
        calls.append((seconds, member))
        clock[0] += used.get(member, 1.0) * seconds
        return Path(f"{member}.ckpt")

    monkeypatch.setattr(pipeline, "train", train)
    job = pipeline.Job(tmp_path, tmp_path, clock=lambda: clock[0])
    assert pipeline.train_members(COLLECTION, {"members": 4}, 100.0, job) == [Path(f"{j}.ckpt") for j in range(4)]
    assert calls == [(25.0, 0), (25.0, 1), (25.0, 2), (25.0, 3)]
    calls.clear()
    used[0] = 0.0  # the first member stops at once: the others share its time
    pipeline.train_members(COLLECTION, {"members": 4}, 90.0, job)
    assert [seconds for seconds, _ in calls] == pytest.approx([22.5, 30.0, 30.0, 30.0])
    calls.clear()
    pipeline.train_members(COLLECTION, {"members": 2}, 0.5, job)
    assert calls == [(pipeline.MIN_SECONDS, 0), (pipeline.MIN_SECONDS, 1)]


def spare_plan(budget: float, clock: list[float], collections: list[str], lines: list[str]) -> Plan:
    """A plan over `collections` with `members: 3, member_time: spare`, whose steps other than training cost
    nothing."""
    free = {"start": 0, "node": 0, "row": 0, "prior": 0}
    settings = {c: {"budget": free, "data": {}, "members": 3, "member_time": "spare"} for c in collections}
    sizes = Sizes({split: np.array([[10, 10, 2]] * 2, np.int64) for split in SPLITS})
    return Plan(budget, settings, dict.fromkeys(collections, sizes), lambda: clock[0], lines.append)


def test_spare_members_share_what_the_first_fits_left_by_their_seconds(monkeypatch, tmp_path, capsys):
    """After the first fits, the time left trains further members, each collection's part in proportion to what
    its first fit took, only as many as get `spare_least` of that each; a collection that gains none is not
    ranked again."""
    first, later = "layout:nlp:default", "layout:xla:random"
    clock, lines, trained, ranked = [0.0], [], [], []

    def train(collection, settings, seconds, job, member):  # takes all of its time
        trained.append((collection, member, seconds, settings["members"]))
        clock[0] += seconds
        return Path(f"{collection}.{member}.ckpt")

    def evaluate(collection, checkpoints, settings, job, prior=None):
        ranked.append((collection, checkpoints, prior))
        return {"score": 1.0}

    monkeypatch.setattr(pipeline, "train", train)
    monkeypatch.setattr(pipeline, "evaluate", evaluate)
    job = pipeline.Job(tmp_path, tmp_path, clock=lambda: clock[0])
    settings = {c: {"members": 3, "member_time": "spare"} for c in (first, later)}
    done = {first: pipeline.Trained([Path("a.ckpt")], np.ones(2), 100.0),
            later: pipeline.Trained([Path("b.ckpt")], None, 300.0)}
    plan = spare_plan(360.0 + OVERHEAD_SECONDS, clock, [first, later], lines)
    scores = pipeline.spare_members([first, later, "tile:xla"], {**settings, "tile:xla": {"members": 3}}, job,
                                    plan, done)
    # 360 s left: the first gets 100 / 400 of it, room for one member of at least 50 s; the later one all the rest
    # (270 s), one member of at least 150 s
    assert trained == [(first, 1, pytest.approx(90.0), 2), (later, 1, pytest.approx(270.0), 2)]
    assert [(c, checkpoints) for c, checkpoints, _ in ranked] == [
        (first, [Path("a.ckpt"), Path(f"{first}.1.ckpt")]), (later, [Path("b.ckpt"), Path(f"{later}.1.ckpt")])]
    assert ranked[0][2] is done[first].prior and ranked[1][2] is None  # the prior fitted once
    assert set(scores) == {first, later}
    clock[0], trained[:], ranked[:] = 0.0, [], []
    plan = spare_plan(1000.0 + OVERHEAD_SECONDS, clock, [first, later], lines)
    pipeline.spare_members([first, later], settings, job, plan, done)
    assert [(c, m) for c, m, _, _ in trained] == [(first, 1), (first, 2), (later, 1), (later, 2)]
    assert sum(seconds for c, _, seconds, _ in trained if c == first) == pytest.approx(250.0)
    clock[0], trained[:], ranked[:] = 0.0, [], []
    plan = spare_plan(40.0 + OVERHEAD_SECONDS, clock, [first, later], lines)  # a slow machine: none
    assert pipeline.spare_members([first, later], settings, job, plan, done) == {}
    assert trained == [] and ranked == []
    assert "[layout:nlp:default] 10 s spare: no further member (each needs 50 s, 0.5 of the first fit's 100 s)" \
        in capsys.readouterr().out


def test_a_budgeted_run_fits_spare_members_after_the_first_fits(tiny_root, tmp_path, capsys):
    root, out, layer = tmp_path / "data", tmp_path / "out", tmp_path / "spare.yaml"
    tile = collection_dir(tiny_root, "tile:xla")
    shutil.copytree(tile, root / tile.relative_to(tiny_root))
    layer.write_text("members: 3\nmember_time: spare\ntrainer:\n  max_epochs: 1\n")
    demo = configs_folder() / "demo.yaml"
    assert main(["run", "--data.root", str(root), "--out", str(out), "--config", str(demo), "--config", str(layer),
                 "--budget", "200"]) == 0
    log = capsys.readouterr().out
    assert log.index("[tile:xla] validating and predicting") < log.index("s spare: 2 further members")
    assert len(read_ranker(out / "rankers" / "tile_xla.ranker").members) == 3
    assert (out / "checkpoints" / "tile_xla.member2.ckpt").is_file() and (out / "submission.csv").is_file()


def test_under_a_budget_spare_members_wait_and_split_members_do_not():
    assert pipeline.first_fits({"members": 3, "member_time": "spare"}, COLLECTION)["members"] == 1
    assert pipeline.first_fits({"members": 3}, COLLECTION)["members"] == 3
    with pytest.raises(SettingsError, match="layout:xla:random: member_time='later'; expected one of split, spare"):
        pipeline.member_time({"member_time": "later"}, COLLECTION)
    with pytest.raises(SettingsError, match="member_time=spare with member_folds"):
        pipeline.first_fits({"members": 3, "member_time": "spare", "member_folds": True}, COLLECTION)


@pytest.mark.parametrize("value", [0, -1, 1.5, "two"])
def test_members_must_be_a_whole_number_of_fits(value, tmp_path):
    with pytest.raises(SettingsError, match=f"members={value!r}; expected a whole number of fits >= 1"):
        pipeline.train_members(COLLECTION, {"members": value}, 10.0, pipeline.Job(tmp_path, tmp_path))


def test_member_folds_hold_out_whole_models_and_validate_each_file_once(tiny_root, tmp_path):
    """With `member_folds`, member j trains on train + valid less fold j of whole models and validates on fold j:
    together the members validate every pooled file once, each file by the member that never trained on it, and
    the validation metrics are the mean over those files."""
    settings = demo_settings(members=2, member_folds=True)
    job = pipeline.Job(tiny_root, tmp_path)
    checkpoints = pipeline.train_members(COLLECTION, settings, None, job)
    pooled = sorted(p.name for split in ("train", "valid") for p in (collection_dir(tiny_root, COLLECTION) / split)
                    .glob("*.npz"))
    held_out = []
    for member, checkpoint in enumerate(checkpoints):
        data = pipeline.member_data(settings, member, 2, tiny_root)
        _, datamodule = pipeline.load(checkpoint, COLLECTION, {**settings, "data": data}, job)
        valid, train = ({p.name for p in datamodule.graphs(split).paths} for split in ("valid", "train"))
        groups = {family_of(Path(name).stem) for name in valid}
        assert valid and not groups & {family_of(Path(name).stem) for name in train}, "a model on both sides"
        assert sorted(valid | train) == pooled
        held_out.append((valid, checkpoint))
    assert sorted(held_out[0][0] | held_out[1][0]) == pooled and not held_out[0][0] & held_out[1][0]
    metrics = pipeline.evaluate(COLLECTION, checkpoints, settings, job, predict=False)
    assert metrics["files"] == len(pooled)
    one_by_one = []
    for member, (valid, checkpoint) in enumerate(held_out):
        alone = {**settings, "members": 1, "member_folds": False,
                 "data": pipeline.member_data(settings, member, 2, tiny_root)}
        one_by_one.append((pipeline.evaluate(COLLECTION, checkpoint, alone, job, predict=False), len(valid)))
    expected = sum(m["score"] * n for m, n in one_by_one) / len(pooled)
    assert metrics["score"] == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_member_folds_is_true_or_false(value):
    with pytest.raises(SettingsError, match=f"member_folds={value!r}; expected true or false"):
        pipeline.member_folds({"member_folds": value})


def test_member_folds_are_fewer_where_the_models_are_fewer(tiny_root, monkeypatch):
    """Members beyond the number of models share folds in turn; one model, or one member: the collection's splits."""
    data = {**demo_settings()["data"], "collection": COLLECTION}
    models = pooled_models({**data, "root": str(tiny_root)})
    count = models + 1
    folded = [pipeline.member_data({"data": data, "member_folds": True}, j, count, tiny_root) for j in range(count)]
    assert [(d["folds"], d["fold"]) for d in folded] == [(models, j % models) for j in range(count)]
    assert pipeline.member_data({"data": data, "member_folds": True}, 0, 1, tiny_root) == data
    assert pipeline.member_data({"data": data, "member_folds": False}, 1, 3, tiny_root) == data
    monkeypatch.setattr(pipeline, "pooled_models", lambda data: 1)
    assert pipeline.member_data({"data": data, "member_folds": True}, 1, 3, tiny_root) == data
