"""Run labels from what differs from each collection's defaults, and `solution compare` grouping by them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from solution.constants import COLLECTIONS
from solution.submission.files import collection_file_stem
from solution.tools import compare, tracking
from solution.tools.settings import layered

HINGE, LISTMLE = "solution.models.losses.PairwiseHinge", "solution.models.losses.ListMLE"
BASE = {  # shared by every collection, as configs/base.yaml
    "seed_everything": 0,
    "trainer": {"max_epochs": 100, "check_val_every_n_epoch": 5},
    "model": {"ranker": {"class_path": "solution.models.rankers.LayoutRanker",
                         "init_args": {"hidden": 128, "config_layers": 2}},
              "loss": {"class_path": HINGE, "init_args": {"margin": 1.0}}, "lr": 0.001},
    "data": {"root": "data/synthetic", "prune": "k_hop", "hops": 1, "configs_per_graph": 128, "num_workers": 4},
}
TILE = {"trainer": {"max_epochs": 60},  # tile differs in its ranker class, pruning and configs per graph
        "model": {"ranker": {"class_path": "solution.models.rankers.TileRanker", "init_args": {"hidden": 128}}},
        "data": {"collection": "tile:xla", "prune": "none", "configs_per_graph": 32}}
EXPERIMENTS = {  # label -> overrides, applied alike to every collection
    "defaults": {},
    "hidden=48,loss=listmle": {"model": {"ranker": {"init_args": {"hidden": 48}},
                                         "loss": {"class_path": LISTMLE, "init_args": {"tie_tol": 0.0}}}},
}


def per_collection(collection: str) -> dict:
    """What configs/<collection stem>.yaml holds: what differs from BASE."""
    if collection == "tile:xla":
        return TILE
    return {"data": {"collection": collection, **({"configs_per_graph": 64} if collection.endswith("default") else {})}}


@pytest.fixture
def configs(tmp_path: Path) -> Path:
    """A configs folder: base.yaml and one file per collection."""
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "base.yaml").write_text(yaml.safe_dump(BASE))
    for collection in COLLECTIONS:
        (folder / f"{collection_file_stem(collection)}.yaml").write_text(yaml.safe_dump(per_collection(collection)))
    return folder


def saved_config(collection: str, overrides: dict, seed: int) -> dict:
    """A fit's saved config: the collection's files and the overrides, with code defaults the files leave out and
    keys that differ per run without being settings."""
    config = layered(layered(BASE, per_collection(collection)), overrides)
    where = f"/scratch/{collection_file_stem(collection)}/{seed}"
    return layered(config, {
        "seed_everything": seed,
        "trainer": {"logger": {"class_path": "solution.tools.tracking.RunLogger",
                               "init_args": {"save_dir": where, "name": f"run{seed}", "id": f"id{seed}"}},
                    "default_root_dir": where, "precision": None},
        "model": {"loss": {"init_args": {"tie_tol": 0.0}}},
        "data": {"root": f"{where}/data", "cache_dir": f"{where}/cache", "num_workers": seed, "limit_graphs": None,
                 "folds": 0, "fold": 0, "seed": seed},
        "checkpoint": {"dirpath": f"{where}/checkpoints"}, "submission": {"out_dir": f"{where}/submissions"},
    })


def write_runs(folder: Path, experiments: dict = EXPERIMENTS) -> dict[str, str]:
    """Experiments (label -> overrides, or collection -> overrides) x five collections x two seeds, as
    `solution fit` leaves them (one summary.json each); returns each run's name -> its experiment's label."""
    labels = {}
    for e, (label, overrides) in enumerate(experiments.items()):
        for c, collection in enumerate(COLLECTIONS):
            for seed in (0, 1):
                name = f"e{e}-{collection_file_stem(collection)}-s{seed}"
                score = 0.5 + 0.1 * e + 0.01 * c + 0.001 * seed
                changes = overrides(collection) if callable(overrides) else overrides
                summary = {"name": name, "run_id": name, "collection": collection, "seed": seed, "status": "finished",
                           "best": {"val/score": score}, "last": {"val/score": score}, "started": len(labels),
                           "config": saved_config(collection, changes, seed)}
                (folder / name).mkdir(parents=True)
                (folder / name / tracking.SUMMARY).write_text(json.dumps(summary))
                labels[name] = label
    return labels


def test_each_run_is_labelled_by_what_differs_from_its_own_collection(configs):
    for label, overrides in EXPERIMENTS.items():
        described = [tracking.describe(saved_config(c, overrides, seed=1), configs) for c in COLLECTIONS]
        assert {d["group"] for d in described} == {label}, "one experiment: one group across collections"
        assert [d["name"] for d in described] == [f"{c} {label} seed1" for c in COLLECTIONS]
        assert described[0]["tags"] == ["tile:xla", *label.split(","), "seed1"]


def test_compare_groups_one_experiment_into_one_row_across_all_collections(configs, tmp_path):
    labels = write_runs(tmp_path / "runs")
    runs = [compare.run_from_summary(p, configs) for p in compare.find_summaries([tmp_path / "runs"])]
    assert {r.name: r.setting for r in runs} == labels
    result = compare.Comparison(sorted(runs, key=lambda r: r.started))
    assert result.settings == list(EXPERIMENTS)  # seeds, roots, paths and workers split no row
    for setting in result.settings:
        assert [result.table[setting, c].n for c in result.collections] == [2] * len(COLLECTIONS)
        assert result.final(setting).n == len(COLLECTIONS)
    assert result.delta("hidden=48,loss=listmle", None) == pytest.approx(0.1)
    rows = [line for line in result.markdown().splitlines() if line.startswith("| hidden=48,loss=listmle |")]
    assert len(rows) == 2 and "(" not in rows[0].split("|")[-2]  # means and deltas; final over all five


def compare_runs(folder: Path, configs: Path) -> compare.Comparison:
    runs = [compare.run_from_summary(p, configs) for p in compare.find_summaries([folder])]
    return compare.Comparison(sorted(runs, key=lambda r: r.started))


def rows(result: compare.Comparison) -> dict[str, list[str]]:
    """Each row's label -> the collections it has runs of."""
    return {s: tuple(c for c in result.collections if result.table[s, c].n) for s in result.settings}


DEMO = {"data": {"configs_per_graph": 32}, "model": {"ranker": {"init_args": {"hidden": 48}}}}  # 32: tile's own


def test_an_override_equal_to_one_collections_default_stays_in_the_experiments_row(configs, tmp_path):
    experiments = {**EXPERIMENTS, "configs_per_graph=32,hidden=48": DEMO}
    write_runs(tmp_path / "runs", experiments)
    described = {c: tracking.describe(saved_config(c, DEMO, seed=0), configs)["group"] for c in COLLECTIONS}
    assert described["tile:xla"] == "hidden=48", "per run, tile's own default is no change"
    assert {g for c, g in described.items() if c != "tile:xla"} == {"configs_per_graph=32,hidden=48"}
    result = compare_runs(tmp_path / "runs", configs)
    assert rows(result) == {label: COLLECTIONS for label in experiments}  # three experiments, three full rows
    assert all(result.table[s, c].n == 2 for s in result.settings for c in COLLECTIONS)
    assert result.delta("configs_per_graph=32,hidden=48", None) == pytest.approx(0.2)
    assert result.resolve("hidden=48") == "configs_per_graph=32,hidden=48"  # a run's own label finds its row
    assert compare.Comparison(result.runs, "defaults").baseline == "defaults"
    shuffled = compare.Comparison(result.runs[::-1])
    assert {s: sorted(r.name for r in shuffled.runs if shuffled.label[r] == s) for s in shuffled.settings} == {
        s: sorted(r.name for r in result.runs if result.label[r] == s) for s in result.settings}


def test_a_tile_run_that_conflicts_with_the_layout_runs_stays_apart(configs, tmp_path):
    def demo_but_tile_hidden_64(collection: str) -> dict:
        return layered(DEMO, {"model": {"ranker": {"init_args": {"hidden": 64}}}}) if collection == "tile:xla" \
            else DEMO

    write_runs(tmp_path / "runs", {"demo": demo_but_tile_hidden_64})
    assert rows(compare_runs(tmp_path / "runs", configs)) == {
        "configs_per_graph=32,hidden=48": tuple(c for c in COLLECTIONS if c != "tile:xla"), "hidden=64": ("tile:xla",)}


def test_a_setting_a_collections_ranker_lacks_does_not_split_the_row(configs, tmp_path):
    layers = layered(DEMO, {"model": {"ranker": {"init_args": {"config_layers": 3}}}})
    write_runs(tmp_path / "runs", {"layers": lambda c: DEMO if c == "tile:xla" else layers})  # tile: no such argument
    assert rows(compare_runs(tmp_path / "runs", configs)) == {"config_layers=3,configs_per_graph=32,hidden=48":
                                                              COLLECTIONS}


def test_runs_of_one_collection_group_only_with_equal_differences(configs, tmp_path):
    write_runs(tmp_path / "runs", {"defaults": {}, "cpg": {"data": {"configs_per_graph": 32}}})
    assert rows(compare_runs(tmp_path / "runs", configs)) == {  # tile's runs of both are alike: the first row
        "defaults": COLLECTIONS, "configs_per_graph=32": tuple(c for c in COLLECTIONS if c != "tile:xla")}


@pytest.mark.parametrize("change, label", [
    ({"data": {"prune": "none"}}, "prune=none"),  # a layout collection's pruning, off
    ({"model": {"lr": 0.01, "ranker": {"init_args": {"config_layers": 3}}}}, "config_layers=3,lr=0.01"),
    ({"data": {"limit_graphs": 5, "folds": 5, "fold": 2}}, "folds=5,limit_graphs=5"),  # keys the files leave out
    ({"trainer": {"precision": "bf16-mixed", "accumulate_grad_batches": 1}}, "precision=bf16-mixed"),
    ({"model": {"loss": {"init_args": {"margin": 0.5}}}, "trainer": {"max_epochs": 60}}, "margin=0.5,max_epochs=60"),
])
def test_labels_name_changed_keys_shortly_and_leave_defaults_out(configs, change, label):
    config = layered(saved_config("layout:xla:random", {}, seed=0), change)
    assert tracking.setting_label(config, configs) == label


def test_collection_defaults_layer_the_collection_file_over_base(configs):
    tile = tracking.collection_defaults("tile:xla", configs)
    assert tile["model"]["ranker"] == TILE["model"]["ranker"], "a new class_path starts its init_args afresh"
    assert tile["model"]["loss"] == BASE["model"]["loss"] and tile["trainer"]["max_epochs"] == 60
    assert tile["trainer"]["accumulate_grad_batches"] == 1  # Lightning's own default, under the files
    layout = tracking.collection_defaults("layout:nlp:default", configs)
    assert layout["data"] == {**BASE["data"], "collection": "layout:nlp:default", "configs_per_graph": 64}
    (configs / "base.yaml").unlink()
    assert tracking.collection_defaults("layout:nlp:default", configs)["data"] == per_collection("layout:nlp:default")[
        "data"]


def test_short_names_take_more_parts_only_where_two_read_alike():
    keys = ["model.ranker.init_args.dropout", "model.loss.init_args.dropout", "model.loss.class_path", "data.hops"]
    assert tracking.short_names(keys) == {"model.ranker.init_args.dropout": "ranker.dropout",
                                          "model.loss.init_args.dropout": "loss.dropout",
                                          "model.loss.class_path": "loss", "data.hops": "hops"}
