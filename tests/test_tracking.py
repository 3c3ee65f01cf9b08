"""W&B tracking offline, run folders and summaries, `solution compare` and `solution sweep`."""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from solution.tools import compare, sweep, tracking
from solution.tools.cli import main
from solution.tools.lightning_cli import lightning_main

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
PNG = b"\x89PNG"
QUICK = ["--trainer.max_epochs", "2", "--trainer.check_val_every_n_epoch", "1", "--trainer.enable_progress_bar",
         "false", "--model.ranker.init_args.hidden", "16", "--model.ranker.init_args.opcode_dim", "8",
         "--data.configs_per_graph", "8"]


def fit_args(root: Path, save_dir: Path, *extra: str, collection: str = "layout_xla_random") -> list[str]:
    return ["fit", "--config", str(CONFIGS / f"{collection}.yaml"), "--config", str(CONFIGS / "demo.yaml"),
            "--data.root", str(root), "--trainer.logger.init_args.save_dir", str(save_dir), *QUICK, *extra]


@pytest.mark.parametrize("environment, requested, expected", [
    (None, None, "offline"), ("online", None, "online"), (None, "online", "online"), ("offline", "online", "online"),
    ("disabled", "online", "disabled"), ("disabled", "offline", "disabled"), ("dryrun", None, "offline"),
])
def test_wandb_mode_is_offline_by_default_and_disabled_always_wins(monkeypatch, environment, requested, expected):
    monkeypatch.delenv("WANDB_SWEEP_ID", raising=False)
    if environment is None:
        monkeypatch.delenv("WANDB_MODE", raising=False)
    else:
        monkeypatch.setenv("WANDB_MODE", environment)
    assert tracking.wandb_mode(requested) == expected


def test_wandb_mode_under_a_sweep_agent_and_bad_values(monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SWEEP_ID", "abc123")
    assert tracking.wandb_mode() == "online"
    monkeypatch.setenv("WANDB_MODE", "cloud")
    with pytest.raises(ValueError, match="WANDB_MODE='cloud'; expected one of online, offline, disabled"):
        tracking.wandb_mode()


def test_lightning_offline_flag_does_not_override_disabled(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    logger = tracking.RunLogger(save_dir=str(tmp_path / "runs"), offline=True)
    assert logger.mode == "disabled" and logger.run_path()["path"] is None
    assert not (tmp_path / "runs").exists()


def test_names_and_digest_follow_the_settings(tmp_path):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump({
        "trainer": {"max_epochs": 5}, "data": {"prune": "k_hop", "hops": 1, "sentinel": True},
        "model": {"loss": {"class_path": "solution.models.losses.PairwiseHinge", "init_args": {"margin": 1.0}},
                  "ranker": {"class_path": "solution.models.rankers.LayoutRanker",
                             "init_args": {"hidden": 64, "cross_attention": True}}}}))
    (tmp_path / "layout_nlp_default.yaml").write_text(yaml.safe_dump({"data": {"collection": "layout:nlp:default"}}))
    config = {"model": {"ranker": {"class_path": "solution.models.rankers.LayoutRanker",
                                   "init_args": {"hidden": 64, "cross_attention": False}},
                        "loss": {"class_path": "solution.models.losses.ListMLE", "init_args": {"tie_tol": 0.0}}},
              "data": {"collection": "layout:nlp:default", "prune": "k_hop", "hops": 2, "sentinel": False,
                       "root": "a"}, "trainer": {"max_epochs": 5, "devices": 1}, "seed_everything": 3}
    described = tracking.describe(config, tmp_path)
    assert described["group"] == "cross_attention=false,hops=2,loss=listmle,sentinel=false"
    assert described["name"] == "layout:nlp:default " + described["group"] + " seed3"
    assert described["tags"] == ["layout:nlp:default", "cross_attention=false", "hops=2", "loss=listmle",
                                 "sentinel=false", "seed3"]
    digest = tracking.settings_digest(config)
    same = {**config, "seed_everything": 4, "data": {**config["data"], "root": "b"}, "trainer": {"max_epochs": 5}}
    assert tracking.settings_digest(same) == digest and tracking.describe(same, tmp_path)["group"] == described["group"]
    model = {**config["model"], "ranker": {**config["model"]["ranker"], "init_args": {"hidden": 32}}}
    assert tracking.settings_digest({**config, "model": model}) != digest


@pytest.fixture(scope="module")
def two_runs(tiny_root, tmp_path_factory):
    """Two offline W&B fits in one save_dir (cross-config attention on and off), then a predict."""
    save_dir = tmp_path_factory.mktemp("tracked") / "runs"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WANDB_MODE", "offline")
        fits = [lightning_main(fit_args(tiny_root, save_dir)),
                lightning_main(fit_args(tiny_root, save_dir, "--model.ranker.init_args.cross_attention", "false"))]
        folders = sorted((save_dir / "tpugraphs").iterdir(), key=lambda p: p.stat().st_mtime)
        wandb_runs = sorted((save_dir / "wandb").glob("offline-run-*"))
        lightning_main(["predict", *fit_args(tiny_root, save_dir)[1:], "--ckpt_path",
                        fits[0].trainer.checkpoint_callback.best_model_path,
                        "--submission.out_dir", str(save_dir.parent / "submissions")])
    return SimpleNamespace(save_dir=save_dir, fits=fits, folders=folders, wandb_runs=wandb_runs)


def test_fit_leaves_config_summary_and_per_graph_table(two_runs, tiny_root):
    assert len(two_runs.folders) == 2 and len(two_runs.wandb_runs) == 2
    for fit, folder in zip(two_runs.fits, two_runs.folders):
        config = yaml.safe_load((folder / "config.yaml").read_text())
        summary = json.loads((folder / "summary.json").read_text())
        ranker = (config["model"]["ranker"]["init_args"], summary["config"]["model"]["ranker"]["init_args"])
        assert ranker[0]["cross_attention"] == ranker[1]["cross_attention"]
        assert summary["status"] == "finished" and summary["epochs"] == 2
        assert summary["best"]["val/score"] == pytest.approx(float(fit.trainer.checkpoint_callback.best_model_score))
        assert summary["best_checkpoint"] == fit.trainer.checkpoint_callback.best_model_path
        assert summary["perf"]["perf/train_configs_per_s"] > 0 and summary["perf"]["perf/peak_memory_mib"] > 0
        assert summary["wandb"]["mode"] == "offline" and Path(summary["wandb"]["dir"]) in two_runs.wandb_runs
        assert list(Path(summary["wandb"]["dir"]).glob("*.wandb")), "the offline W&B run holds its data"
        assert summary["code"]["package"]
        with open(folder / "per_graph.csv") as handle:
            rows = list(csv.DictReader(handle))
        assert len(rows) == len(list((tiny_root / "npz_all/npz/layout/xla/random/valid").glob("*.npz")))
        assert {"graph", "configs", "score", "kendall_tau", "opa"} <= set(rows[0])
        mean = np.mean([float(r["score"]) for r in rows if math.isfinite(float(r["score"]))])
        assert mean == pytest.approx(summary["last"]["val/score"], abs=1e-6)
        assert (folder / "ranks.png").read_bytes()[:4] == PNG
        assert (folder / "checkpoints" / "best.ckpt").is_file()
    first, second = (json.loads((f / "summary.json").read_text()) for f in two_runs.folders)
    assert set(second["setting"].split(",")) - set(first["setting"].split(",")) == {"cross_attention=false"}
    assert "max_epochs=2" in first["setting"].split(",") and first["group"] == first["setting"]
    assert first["name"] == f"layout:xla:random {first['setting']} seed0" and first["digest"] != second["digest"]


def test_predict_starts_no_run(two_runs):
    assert len(list((two_runs.save_dir / "tpugraphs").iterdir())) == 2
    assert sorted((two_runs.save_dir / "wandb").glob("offline-run-*")) == two_runs.wandb_runs


def test_compare_prints_both_runs_with_deltas_and_writes_files(two_runs, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", *map(str, two_runs.folders), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    first, second = (compare.run_from_summary(f / "summary.json") for f in two_runs.folders)
    for run in (first, second):
        assert run.name in printed
    runs_table = [line for line in printed.splitlines() if line.startswith(f"| {second.name} |")]
    assert f"{second.best - first.best:+.4f}" in runs_table[0]
    assert (out / "compare.md").read_text() in printed
    assert (out / "compare.png").read_bytes()[:4] == PNG
    assert main(["compare", str(two_runs.save_dir), "--baseline", second.run_id, "--out", str(out)]) == 0
    assert f"Baseline: **{second.setting}**" in capsys.readouterr().out


def run(name: str, setting: str, best: float, collection: str = "layout:xla:random", digest: str = "aaaaaa",
        seed: int = 0) -> compare.Run:
    return compare.Run(name=name, run_id=name, collection=collection, setting=setting, digest=digest, seed=seed,
                       best=best, last=best, epochs=1, configs_per_s=1.0, peak_mib=1.0, started=0.0,
                       source=f"/r/{name}/summary.json")


def test_comparison_means_spreads_deltas_and_splits_unlike_settings():
    runs = [run("a0", "base", 0.5), run("a1", "base", 0.7, seed=1), run("b0", "new", 0.8),
            run("b1", "new", 0.9, seed=1),
            run("t0", "base", 0.2, collection="tile:xla"), run("c0", "new", 0.1, digest="bbbbbb")]
    result = compare.Comparison(runs)
    assert result.baseline == "base"
    assert result.settings == ["base", "new #aaaaaa", "new #bbbbbb"]
    cell = result.table["new #aaaaaa", "layout:xla:random"]
    assert (cell.mean, cell.n) == (pytest.approx(0.85), 2) and cell.std == pytest.approx(np.std([0.8, 0.9], ddof=1))
    assert result.delta("new #aaaaaa", "layout:xla:random") == pytest.approx(0.85 - 0.6)
    assert result.final("base").mean == pytest.approx(np.mean([0.6, 0.2]))
    assert math.isnan(result.delta("new #aaaaaa", "tile:xla"))
    assert math.isnan(result.delta("new #aaaaaa", None)) and result.final_text("new #aaaaaa") == "0.8500 (1/2)"
    assert result.delta("base", None) == 0.0
    assert compare.Comparison(runs, baseline="b1").baseline == "new #aaaaaa"
    with pytest.raises(ValueError, match="--baseline 'zzz': no such setting or run"):
        compare.Comparison(runs, baseline="zzz")
    assert [r.name for r in compare.select(runs, "tile:*")] == ["t0"]
    assert [r.name for r in compare.select(runs, "new")] == ["b0", "b1", "c0"]


def test_compare_reads_wandb_runs_through_the_api(tmp_path):
    (tmp_path / "tile_xla.yaml").write_text(yaml.safe_dump({"data": {"collection": "tile:xla", "prune": "none"}}))
    config = {"model": {}, "data": {"collection": "tile:xla", "prune": "k_hop"}, "trainer": {}, "seed_everything": 1}
    api = SimpleNamespace(runs=lambda project: [
        SimpleNamespace(name="r1", id="x1", path=["me", "tpugraphs", "x1"], config=config,
                        summary={"val/score_best": 0.9, "val/score": 0.8, "epoch": 4}),
        SimpleNamespace(name="other", id="x2", path=["me", "tpugraphs", "x2"], config={}, summary={}),
    ])
    (found,) = compare.runs_from_wandb("me/tpugraphs", api, tmp_path)
    assert (found.collection, found.setting, found.best, found.last, found.source) == (
        "tile:xla", "prune=k_hop", 0.9, 0.8, "me/tpugraphs/x1")


def test_compare_errors_name_the_problem(tmp_path):
    bad = tmp_path / "summary.json"
    bad.write_text(json.dumps({"name": "x"}))
    with pytest.raises(ValueError, match="summary.json: key\\(s\\) run_id, collection"):
        compare.run_from_summary(bad)
    with pytest.raises(FileNotFoundError, match="nowhere"):
        compare.find_summaries([tmp_path / "nowhere"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit):
        compare.main([str(tmp_path / "empty")])


def test_shipped_sweep_file_is_a_grid_this_runner_reads():
    spec = sweep.read_sweep(CONFIGS / "sweep.yaml")
    runs = sweep.grid(spec["parameters"])
    sizes = [len(p["values"]) for p in spec["parameters"].values()]
    assert len(runs) == math.prod(sizes) and len({json.dumps(r, sort_keys=True) for r in runs}) == len(runs)
    assert runs[0]["seed_everything"] == 0 and runs[1]["seed_everything"] == 1  # last parameter fastest
    cmd = sweep.command(spec["command"], runs[0], "solution", ["--data.root", "d"])
    assert cmd[:4] == [sys.executable, "-m", "solution", "fit"]
    assert "--model.ranker.init_args.cross_attention=true" in cmd and "--model.loss=PairwiseHinge" in cmd
    assert cmd[-2:] == ["--data.root", "d"]


@pytest.mark.parametrize("change, message", [
    ({"method": "bayes"}, "key 'method' is 'bayes'; expected grid"),
    ({"parameters": {"model.loss": {"values": []}}}, "key 'parameters.model.loss'"),
    ({"command": ["solution", "fit"]}, "key 'command'"),
])
def test_sweep_file_errors_name_file_and_key(tmp_path, change, message):
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump({**yaml.safe_load((CONFIGS / "sweep.yaml").read_text()), **change}))
    with pytest.raises(ValueError, match=f"grid.yaml: {message}"):
        sweep.read_sweep(path)


def test_sweep_runs_the_grid_locally(tiny_root, tmp_path, monkeypatch):
    grid = {"method": "grid", "parameters": {"model.ranker.init_args.cross_attention": {"values": [True, False]}},
            "command": ["${interpreter}", "-m", "solution", "fit", "--config", str(CONFIGS / "tile_xla.yaml"),
                        "--config", str(CONFIGS / "demo.yaml"), "${args}"]}
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(grid))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    extra = ["--data.root", str(tiny_root), "--trainer.max_epochs", "1", "--model.ranker.init_args.hidden", "16"]
    assert sweep.main([str(path), "--", *extra]) == 0
    summaries = [json.loads(p.read_text()) for p in (tmp_path / "runs").rglob("summary.json")]
    same, changed = sorted((s["setting"].split(",") for s in summaries), key=len)
    assert set(changed) - set(same) == {"cross_attention=false"} and {"hidden=16", "max_epochs=1"} <= set(same)
    assert not (tmp_path / "runs" / "wandb").exists()


def test_without_a_logger_records_only_beside_an_explicit_checkpoint_folder(tiny_root, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["fit", "--config", str(CONFIGS / "tile_xla.yaml"), "--config", str(CONFIGS / "demo.yaml"),
            "--data.root", str(tiny_root), "--trainer.logger", "false", *QUICK[:2], "--model.ranker.init_args.hidden",
            "16"]
    lightning_main(args)
    assert not list(tmp_path.rglob("summary.json")) and not (tmp_path / "config.yaml").exists()
    lightning_main([*args, "--checkpoint.dirpath", str(tmp_path / "run" / "checkpoints")])
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["wandb"] is None and summary["status"] == "finished"
    assert (tmp_path / "run" / "config.yaml").is_file()


def test_folds_share_a_group_and_digest_but_resume_only_their_own_fold(tmp_path):
    def config(fold: int) -> dict:
        return {"model": {}, "data": {"collection": "layout:xla:default", "folds": 5, "fold": fold}, "trainer": {},
                "seed_everything": 1}

    first, second = tracking.describe(config(0)), tracking.describe(config(3))
    assert first["group"] == second["group"] == "folds=5"
    assert first["name"].endswith("seed1 fold0") and "fold3" in second["tags"]
    assert tracking.settings_digest(config(0)) == tracking.settings_digest(config(3))
    for fold in (0, 3):
        folder = tmp_path / f"run{fold}"
        folder.mkdir()
        (folder / tracking.SUMMARY).write_text(json.dumps({
            "status": "running", "digest": tracking.settings_digest(config(fold)), "seed": 1, "run_id": f"r{fold}",
            "started": 10 - fold, "config": config(fold)}))
    assert tracking.unfinished_run(tmp_path, config(0)) == (tmp_path / "run0", "r0")
    assert tracking.unfinished_run(tmp_path, config(3)) == (tmp_path / "run3", "r3")
    assert tracking.unfinished_run(tmp_path, config(1)) is None


def test_shipped_folds_sweep_covers_every_fold_and_seed():
    spec = sweep.read_sweep(CONFIGS / "folds.yaml")
    runs = sweep.grid(spec["parameters"])
    assert {(r["data.fold"], r["seed_everything"]) for r in runs} == {(f, s) for f in range(5) for s in (0, 1)}
    assert all(r["data.folds"] == 5 for r in runs)
