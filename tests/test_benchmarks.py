"""The benchmark scripts still run (seconds-long smoke mode); their figures are produced by running them."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from solution.tools import pipeline
from solution.tools.settings import read_settings

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_a_report_of_another_checkouts_code_is_refused(monkeypatch, tmp_path):
    """A benchmark writes its figures under its own checkout's commit: where the process runs the solution package of
    another checkout (an environment installed from it), no report is written and the error names both."""
    reports = load("reports")
    assert reports.measured_code() == Path(reports.solution.__file__).resolve().parent
    monkeypatch.setattr(reports, "REPO", tmp_path)
    with pytest.raises(SystemExit, match=f"ran the solution package at .* not this checkout's {tmp_path}"):
        reports.write_report(tmp_path / "report.md", "figures")
    assert not (tmp_path / "report.md").exists()


@pytest.mark.parametrize("name", ["data_bench", "ablations", "speed", "segments", "ensembles", "budget", "scatter",
                                  "predict_scale", "own_programs", "precision", "wall_budget",
                                  "prior_steps"])
def test_benchmark_smoke(name, capsys, tmp_path):
    out_file = ["--out", str(tmp_path / f"{name}.md")] if name != "data_bench" else []
    assert load(name).main(["--smoke", *out_file]) == 0
    out = capsys.readouterr().out
    expected = {"data_bench": ["Node retention", "smaller", "cached", "peak RSS"],
                "ablations": ["tile:xla", "layout:xla:default", "early fusion", "no pruning", "nodes kept", "±",
                              "no readout attention", "Δ against the full model per collection"],
                "speed": ["Headline", "Training step", "Ranking", "What pruning buys", "| train | 16 |",
                          "torch_scatter", "GFLOP/s"],
                "scatter": ["| pool of the configurable nodes [M=", "max, forward + backward",
                            "LayoutRanker, ranking pass", "torch_scatter / torch"]
                if importlib.util.find_spec("torch_scatter") else ["nothing to compare"],
                "own_programs": ["| resnet |", "| transformer |", "`solution predict` of both files",
                                 "`--trainer.precision bf16-mixed` |", "float32 / `--precision bf16-mixed`",
                                 "`solution fit` (shipped layout_xla_random.yaml", "importing the Lightning CLI"],
                "precision": ["| layout:xla:default | 1 |", "| layout:xla:default | 0, 0 |", "Δ (paired)"],
                "predict_scale": ["| 0 (0 started) | cold |", "| 0 (0 started) | warm |", "configs/s", "bert_like"],
                "budget": ["| layout:xla:random | 0.05 |", "after − before", "budget.svg"],
                "prior_steps": ["| layout:xla:random | 9 |", "5 steps: tau, Δ, fit s", "Δ against 10 steps"],
                "wall_budget": ["| 240 |", "wall / budget", "models alone", "layout:nlp:default"],
                "segments": ["| 800 | 4 |", "segments: peak memory of the largest graph / the smallest",
                             "| layout:nlp:random |", "| whole graph | segments |"],
                "ensembles": ["| tile:xla |", "| layout:xla:random |", "2-seed ensemble", "2-fold ensemble", "±",
                              "**mean**"]}[name]
    for text in expected:
        assert text in out


def test_ablation_variants_parse_and_layout_only_ones_never_reach_tile():
    """Every variant's flags are accepted by the CLI for layout (base, collection and demo configs, as a fit layers
    them); on tile the shared ones are (in TileRanker's terms where they differ), and a layout-only one is refused
    by `fit` before any parsing."""
    from solution.tools.lightning_cli import lightning_main

    ablations = load("ablations")
    for collection, stem in (("layout:xla:default", "layout_xla_default"), ("tile:xla", "tile_xla")):
        configs = [f"--config={ablations.CONFIGS / name}.yaml" for name in ("base", stem, "demo")]
        for name, variant in ablations.VARIANTS.items():
            if variant.layout_only and collection.startswith("tile"):
                with pytest.raises(ValueError, match="layout-only"):
                    ablations.fit(collection, 0, variant, [])
                continue
            cli = lightning_main([*configs, "--trainer.logger", "false", *variant.flags(collection)], run=False)
            expected = {"config-only baseline": "ConfigOnlyRanker", "early fusion": "EarlyFusionRanker"}.get(
                name, "LayoutRanker" if collection.startswith("layout") else "TileRanker")
            assert type(cli.model.ranker).__name__ == expected, name


def test_ablation_fits_of_other_code_are_not_reused(tmp_path):
    ablations = load("ablations")
    digest = ablations.code_digest()
    assert digest == ablations.code_digest()
    row = {"variant": "full model", "collection": "tile:xla", "seed": 0, "select": 0.6, "report": 0.5}
    ablations.Results(tmp_path, {"data": "d", "epochs": 1, "code": "older"}).add(row)
    current = ablations.Results(tmp_path, {"data": "d", "epochs": 1, "code": digest})
    assert current.get(variant="full model", collection="tile:xla", seed=0) is None
    assert current.by_seed("full model", "tile:xla") == {}
    older = ablations.Results(tmp_path, {"data": "d", "epochs": 1, "code": "older"})
    assert older.by_seed("full model", "tile:xla") == {0: 0.5}


def test_ablation_deltas_are_paired_by_seed_with_a_t_interval():
    """Δ = variant − reference over the seeds both have, its interval the 95 % t interval of the differences."""
    from scipy import stats

    ablations = load("ablations")
    reference, variant = {0: 0.5, 1: 0.6, 2: 0.7, 3: 0.9}, {0: 0.45, 1: 0.58, 2: 0.66}  # seed 3 not fitted
    gaps = np.array([-0.05, -0.02, -0.04])
    low, high = stats.t.interval(0.95, 2, loc=gaps.mean(), scale=stats.sem(gaps))
    assert ablations.delta(variant, reference) == f"{gaps.mean():+.3f} [{low:+.3f}, {high:+.3f}]"
    assert ablations.delta({0: 0.4}, reference) == "-0.100" and ablations.delta({7: 0.4}, reference) == "–"


def test_fusion_smoke(capsys, tmp_path):
    assert load("fusion").main(["--smoke", "--out", str(tmp_path / "fusion.md")]) == 0
    out = capsys.readouterr().out
    for text in ("| layout:xla:random |", "encode once − early fusion", "Training seconds per fit"):
        assert text in out
    assert (tmp_path / "fusion.md").read_text().startswith("# Encode once vs early fusion")


def test_budget_marks_after_a_fit_ends_get_its_final_weights(tmp_path, monkeypatch):
    """A mark passed in training saves the weights then; marks still ahead when the schedule ends (max_epochs) get
    the final weights, flagged as ended."""
    budget = load("budget")
    saved, clock = [], iter([0.0, 150.0])  # seconds: the first batch, then 2.5 minutes in
    monkeypatch.setattr(budget.time, "monotonic", lambda: next(clock))
    trainer = types.SimpleNamespace(current_epoch=3, global_step=12, should_stop=False, save_checkpoint=saved.append)
    marks = budget.Marks(str(tmp_path), [4, 2, 8])
    marks.on_train_batch_start(trainer, None, None, 0)
    marks.on_train_batch_end(trainer, None, None, None, 0)
    trainer.current_epoch, trainer.global_step = 5, 20
    marks.on_train_end(trainer, None)
    marks.on_fit_end(trainer, None)
    assert saved == [tmp_path / "2.ckpt", tmp_path / "4.ckpt", tmp_path / "8.ckpt"]
    assert json.loads((tmp_path / "marks.json").read_text()) == {
        "2": {"epoch": 3, "steps": 12}, "4": {"epoch": 5, "steps": 20, "ended": True},
        "8": {"epoch": 5, "steps": 20, "ended": True}}


def test_prior_blend_ranks_the_same_fit_with_and_without_the_blend(capsys, tmp_path):
    configs = Path(__file__).resolve().parent.parent / "configs"
    args = ["--data", str(tmp_path / "data"), "--size", "tiny", "--seconds", "2", "--seeds", "1", "--collections",
            "layout:xla:random", "--weights", "0.5", "--config", str(configs / "demo.yaml"), "--runs",
            str(tmp_path / "runs"), "--out", str(tmp_path / "prior_blend.md")]
    assert load("prior_blend").main(args) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| layout:xla:random | 0 |"))
    alone, blend, weight = (cell.strip() for cell in row.strip("|").split("|")[2:5])
    assert weight in ("0", "0.5") and (weight == "0.5" or alone == blend)
    assert (tmp_path / "prior_blend.md").read_text() in out
    fitted = (tmp_path / "runs").glob("layout_xla_random/seed0/fit/checkpoints/*.ckpt")  # the shipped members
    count = pipeline.members(read_settings()["layout:xla:random"])
    assert sorted(path.name for path in fitted) == [f"{pipeline.member_name('layout:xla:random', j)}.ckpt"
                                                    for j in range(count)]


def test_prior_parts_scores_the_whole_prior_and_each_piece_out_on_held_out_files(capsys, tmp_path):
    """The smoke run of benchmarks/prior_parts.py (tiny generator data, each file its own family): one row per
    collection with the whole prior's mean tau and, per variant, its tau and a paired interval of the Δ."""
    out = tmp_path / "prior_parts.md"
    args = ["--smoke", "--collections", "layout:xla:random", "--variants", "no dot records", "--out", str(out)]
    assert load("prior_parts").main(args) == 0
    printed = capsys.readouterr().out
    row = next(line for line in printed.splitlines() if line.startswith("| layout:xla:random |"))
    files, whole, variant = (cell.strip() for cell in row.strip("|").split("|")[1:])
    assert files.endswith("(each a family)") and int(files.split()[0]) > 3
    assert -1 <= float(whole) <= 1
    tau, delta = variant.split(", ", 1)
    assert -1 <= float(tau) <= 1 and delta.startswith(("+", "-")) and "[" in delta
    assert out.read_text() in printed


def test_real_size_runs_two_commits_and_reports_their_ratios(capsys, tmp_path):
    """The smoke run of benchmarks/real_size.py against HEAD (any clone has it): both codes fit and predict, and
    the report holds each figure with a finite ratio; the scratch worktree is gone afterwards."""
    out = tmp_path / "real_size.md"
    assert load("real_size").main(["--smoke", "--against", "HEAD", "--out", str(out)]) == 0
    rows = {line.split("|")[1].strip(): line.split("|")[2:5] for line in out.read_text().splitlines()
            if line.startswith("| ") and not line.startswith("| figure")}
    figures = {"training configs/s of the steps", "fit peak RSS (MiB)", "predict configs/s, start-up included"}
    assert figures <= set(rows)
    for earlier, current, ratio in rows.values():
        assert float(earlier.split()[0]) > 0 and float(current.split()[0]) > 0
        assert np.isfinite(float(ratio.strip().rstrip("x")))
    assert rows["configs a training step"][0].split()[0] == "32.0"  # the demo's configs_per_graph, both codes
    assert out.read_text() in capsys.readouterr().out
    assert "tree-HEAD" not in subprocess.run(["git", "worktree", "list"], cwd=BENCHMARKS.parent, capture_output=True,
                                             text=True).stdout


def test_optimizer_times_both_adamw_kernels_on_the_shipped_rankers_and_finds_the_same_updates(tmp_path):
    assert load("optimizer").main(["--steps", "3", "--rounds", "1", "--out", str(tmp_path / "optimizer.md")]) == 0
    rows = [line.split("|")[1:-1] for line in (tmp_path / "optimizer.md").read_text().splitlines()
            if line.startswith("| layout") or line.startswith("| tile")]
    assert [row[0].strip() for row in rows] == ["layout:xla:random", "tile:xla"]
    for row in rows:
        loop, fused, ratio, apart = (float(cell.strip().rstrip("x")) for cell in row[3:7])
        half = 0.005 + 1e-9  # each figure printed to 2 decimals: the ratio of the unrounded times lies within these
        assert loop > half and fused > 0
        assert (fused - half) / (loop + half) - half <= ratio <= (fused + half) / (loop - half) + half
        assert apart < 1e-5  # after the same steps, the fused kernel's parameters are the loop's


def test_blend_floor_finds_every_saved_fit_and_picks_as_solution_run_does(tmp_path):
    """benchmarks/blend_floor.py: the rankers of a corpus_eval runs folder with their fold's data root, the weight the
    valid files pick from each floor up (ties: the smaller), and each floor against the shipped one, ranker by
    ranker."""
    bench = load("blend_floor")
    runs = tmp_path / "runs"
    fit = runs / "wide" / "layout_xla_default" / "seed4-fold1" / "ranked" / "wide" / "rankers"
    whole = runs / "shipped" / "whole" / "seed5" / "rankers"
    for folder in (fit, whole):
        folder.mkdir(parents=True)
        (folder / "layout_xla_default.ranker").touch()
    found = bench.saved_rankers(runs, "layout_xla_default", folds=3)
    data = runs / "folds"
    assert [(path.parent, source, root, fold) for path, source, root, fold in found] == [
        (fit, "runs/wide", data / "fold1" / "npz_all" / "npz", 1),
        (whole, "runs/shipped/whole", data / "fold2" / "npz_all" / "npz", 2)]

    valid = {0.0: 0.5, 0.25: 0.6, 0.5: 0.6, 1.0: 0.4}
    first = bench.Ranked("runs/wide", 0, {0.0: 0.1, 0.25: 0.2, 0.5: 0.3, 1.0: 0.4}, valid)
    second = bench.Ranked("runs/shipped/whole", 1, {0.0: 0.5, 0.25: 0.5, 0.5: 0.7, 1.0: 0.9}, valid)
    assert [first.picked(floor) for floor in (0.0, 0.25, 0.5, 0.75)] == [0.2, 0.2, 0.3, 0.4]
    rows = {line.split("|")[1].strip(): [cell.strip() for cell in line.strip("|").split("|")[1:]]
            for line in bench.collection_section("layout:xla:default", [first, second], 3) if line.startswith("| ")}
    assert rows["fixed 0.5"] == ["0.500", "0.300 / 0.700", "+0.150 [-0.485, +0.785]", "2 / 0"]  # means over folds,
    # each fold's, then ranker by ranker against the weight picked from the shipped floor (0.25 on both)
    assert rows["picked from 0.5 up"][2:] == ["+0.150 [-0.485, +0.785]", "2 / 0"]  # +0.1, +0.2 against 0.25
    assert rows["picked from 0.25 up"][2:] == ["+0.000 [+0.000, +0.000]", "0 / 0"]  # the shipped floor itself
    assert rows["runs/wide"] == ["1", "0.100", "0.100", "0.200", "0.200"]  # each runs folder's fits apart
    assert rows["runs/shipped/whole"] == ["1", "0.500", "0.500", "0.500", "0.500"]


def test_fit_gap_counts_pairs_by_runtime_gap_as_kendall_tau_does():
    """benchmarks/fit_gap.py: over all bands, the share of pairs ordered right is (1 + tau) / 2 (no ties); each pair
    falls in the band of its |log runtime ratio|, a tied score counting half."""
    from scipy.stats import kendalltau

    bench = load("fit_gap")
    rng = np.random.default_rng(0)
    runtimes, scores = rng.lognormal(0, 0.5, 60), rng.normal(size=60)
    right, pairs = bench.pair_bands(scores, runtimes)
    assert pairs.sum() == 60 * 59 / 2 and np.all(right <= pairs)
    assert right.sum() / pairs.sum() == pytest.approx((1 + kendalltau(scores, runtimes).statistic) / 2)
    right, pairs = bench.pair_bands(np.array([0.0, 1.0, 1.0]), np.array([1.0, 1.03, 2.0]))
    # pairs (0, 1): gap 3 % right; (0, 2): gap 69 % right; (1, 2): gap 66 %, tied scores: half
    assert pairs.tolist() == [0, 1, 0, 0, 0, 2] and right.tolist() == [0, 1, 0, 0, 0, 1.5]


def test_config_holdout_splits_each_files_configs_and_keeps_its_graph(tiny_root, tmp_path):
    """benchmarks/config_holdout.py: both roots train and validate on the same configs of every train and valid file,
    one ranks those it trained on, the other the rest; together the three parts are each file's configs once."""
    from solution.data.reader import collection_dir

    bench = load("config_holdout")
    collection = "layout:xla:random"
    answers = bench.split_world(tiny_root, collection, (0.5, 0.25), 0, tmp_path)
    source = collection_dir(tiny_root, collection)
    files = sorted([*source.glob("train/*.npz"), *source.glob("valid/*.npz")])
    assert files and set(answers) == set(bench.PARTS)

    def rows(arrays) -> np.ndarray:  # [c, nc * 18 + 1]: each config's layouts and runtime, in a canonical order
        table = np.column_stack([arrays["node_config_feat"].reshape(len(arrays["config_runtime"]), -1),
                                 arrays["config_runtime"]])
        return table[np.lexsort(table.T)]

    for path in files:
        full = np.load(path)
        parts = {(part, split): np.load(tmp_path / part.replace(" ", "_") / "npz" / "layout" / "xla" / "random" / split
                                        / path.name) for part in bench.PARTS for split in ("train", "valid", "test")}
        for key in ("node_feat", "edge_index", "node_config_ids"):
            assert all(np.array_equal(p[key], full[key]) for p in parts.values())
        for split in ("train", "valid"):
            assert np.array_equal(rows(parts["trained", split]), rows(parts["held out", split]))
        assert np.array_equal(rows(parts["trained", "test"]), rows(parts["trained", "train"]))
        whole = [parts["trained", "train"], parts["trained", "valid"], parts["held out", "test"]]
        joined = {key: np.concatenate([p[key] for p in whole]) for key in ("node_config_feat", "config_runtime")}
        assert np.array_equal(rows(joined), rows(full))
        held = parts["held out", "test"]["config_runtime"]
        assert np.array_equal(answers["held out"][f"{collection}:{path.stem}"], held)


def test_start_mix_moves_each_weight_toward_the_start_and_zero_where_the_start_has_none():
    """benchmarks/start_mix.py: (1 - a) x the fit's weights + a x the start's; a weight the start lacks started at
    zero; integer buffers stay."""
    import torch

    bench = load("start_mix")
    fit = {"state_dict": {"w": torch.tensor([1.0, 3.0]), "new": torch.tensor([2.0]), "count": torch.tensor(5)}}
    mixed = bench.mixed(fit, {"w": torch.tensor([3.0, -1.0])}, 0.25)["state_dict"]
    assert mixed["w"].tolist() == [1.5, 2.0] and mixed["new"].tolist() == [1.5] and mixed["count"].item() == 5


def test_sibling_start_trains_on_the_siblings_files_under_the_collections_name(tiny_root, tmp_path):
    """benchmarks/sibling_start.py: the collection's folders hold the sibling's train and valid files (links), and
    a collection is no sibling of itself."""
    from solution.data.reader import collection_dir

    bench = load("sibling_start")
    root = bench.sibling_root(tiny_root, "layout:xla:random", "layout:nlp:random", tmp_path / "root")
    for split in ("train", "valid"):
        linked = sorted((root / "npz" / "layout" / "xla" / "random" / split).iterdir())
        source = sorted((collection_dir(tiny_root, "layout:nlp:random") / split).glob("*.npz"))
        assert linked and [p.name for p in linked] == [p.name for p in source]
        assert [p.resolve() for p in linked] == [p.resolve() for p in source]
    with pytest.raises(SystemExit):
        bench.main(["--data", str(tiny_root), "--collection", "layout:nlp:random", "--sibling", "layout:nlp:random",
                    "--out", str(tmp_path / "out")])
