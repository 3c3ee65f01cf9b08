"""Every shipped command on real-format files: ../shared/fixtures/npz holds programs lowered by XLA and encoded
with the official TpuGraphs rules (a full layout:xla:random collection), the closest thing to the real download
these machines can hold. Their runtimes are random: these tests prove the format is accepted, not quality."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_kernel import run_kernel

from solution import errors
from solution.constants import COLLECTIONS
from solution.data.reader import DataError, list_files, read_graph
from solution.submission.files import check
from solution.tools.cli import main
from solution.tools.lightning_cli import lightning_main

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO.parent / "shared" / "fixtures" / "npz"
COLLECTION = "layout:xla:random"
CONFIGS = REPO / "configs"
# one brief CPU epoch; 8-node segments so that the while-loop program trains and predicts in segments
BRIEF = ["--config", str(CONFIGS / "layout_xla_random.yaml"), "--config", str(CONFIGS / "demo.yaml"),
         "--trainer.max_epochs", "1", "--trainer.check_val_every_n_epoch", "1", "--trainer.enable_progress_bar",
         "false", "--model.ranker.init_args.hidden", "16", "--model.ranker.init_args.opcode_dim", "8",
         "--data.configs_per_graph", "8",
         "--data.segment_nodes", "8"]


@pytest.fixture(scope="module")
def fixtures() -> Path:
    """The real-format files; their absence is a broken checkout, never a reason to skip."""
    if not list(FIXTURES.glob("layout/xla/random/*/*.npz")):
        pytest.fail(f"no real-format fixtures under {FIXTURES}: the tests need the shared/ folder beside the "
                    "project root (../shared/fixtures/npz)")
    return FIXTURES


def brief(root: Path, runs: Path) -> list[str]:
    return [*BRIEF, "--data.root", str(root), "--trainer.logger.init_args.save_dir", str(runs)]


def test_fixtures_read_with_node_splits_in_the_encoders_form(fixtures):
    splits = {}
    for split in ("train", "valid", "test"):
        for path in list_files(fixtures, COLLECTION, split):
            graph = read_graph(path)
            n = len(graph.node_feat)
            assert graph.node_splits[0] == 0 and graph.node_splits[-1] == n, path
            assert graph.computation_bounds().tolist() == graph.node_splits.tolist(), path
            assert graph.is_test == (split == "test")
            splits[path.stem] = graph.node_splits.tolist()
    assert splits["fixture_scan_rnn"] == [0, 23, 32, 55, 64, 86] and splits["fixture_conv_reshape_dot"] == [0, 15]


def test_inspect_passes_and_counts_computations(fixtures, capsys):
    assert main(["inspect", str(fixtures), "--per-graph"]) == 0
    out = capsys.readouterr().out
    assert "all files passed the checks" in out
    assert "computations min/med/max" in out and "1/3/5" in out
    scan = [line for line in out.splitlines() if "fixture_scan_rnn.npz" in line]
    assert len(scan) == 3 and all("computations    5" in line for line in scan)


def test_fit_predict_and_check_submission(fixtures, tmp_path, capsys):
    fit = lightning_main(["fit", *brief(fixtures, tmp_path / "runs")])
    checkpoint = fit.trainer.checkpoint_callback.best_model_path
    assert Path(checkpoint).is_file() and np.isfinite(float(fit.trainer.callback_metrics["val/score"]))
    summary = json.loads(next((tmp_path / "runs").rglob("summary.json")).read_text())
    assert summary["status"] == "finished" and summary["skipped_files"] == []
    out = tmp_path / "submissions"
    assert main(["predict", *brief(fixtures, tmp_path / "runs"), "--ckpt_path", checkpoint,
                 "--submission.out_dir", str(out)]) == 0  # in this process, without the trainer
    lightning_main(["predict", *brief(fixtures, tmp_path / "runs"), "--ckpt_path", checkpoint,
                    "--submission.out_dir", str(tmp_path / "by_trainer")])
    csv = out / "layout_xla_random.csv"
    assert csv.read_text() == (tmp_path / "by_trainer" / "layout_xla_random.csv").read_text()
    with np.load(out / "layout_xla_random.scores.npz") as here, \
            np.load(tmp_path / "by_trainer" / "layout_xla_random.scores.npz") as by_trainer:
        assert sorted(here.files) == sorted(by_trainer.files)
        for key in here.files:
            np.testing.assert_allclose(here[key], by_trainer[key], rtol=1e-5, atol=1e-6) if key != "__meta__" \
                else np.testing.assert_array_equal(here[key], by_trainer[key])
    capsys.readouterr()
    assert main(["check-submission", str(csv), "--data.root", str(fixtures)]) == 0
    report = check(csv, fixtures)
    assert sorted(report.rows) == [f"{COLLECTION}:fixture_conv_reshape_dot", f"{COLLECTION}:fixture_scan_rnn"]
    assert all(sorted(order.tolist()) == list(range(50)) for order in report.rows.values())


def broken_copy(fixtures: Path, target: Path, split: str, stem: str) -> Path:
    """A copy of the fixtures whose `split`/`stem` file has node_splits out of order; returns that file."""
    shutil.copytree(fixtures, target)
    path = target / "layout" / "xla" / "random" / split / f"{stem}.npz"
    with np.load(path) as npz:
        arrays = {key: npz[key] for key in npz.files}
    arrays["node_splits"] = arrays["node_splits"][:, ::-1].copy()  # n first: not cumulative counts
    path.chmod(0o644)
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)
    return path


def test_fit_skips_a_bad_train_file_and_records_it(fixtures, tmp_path):
    bad = broken_copy(fixtures, tmp_path / "data", "train", "fixture_scan_rnn")
    with pytest.raises(DataError, match="node_splits"):
        lightning_main(["fit", *brief(tmp_path / "data", tmp_path / "strict"), "--data.skip_bad_files", "false"])
    fit = lightning_main(["fit", *brief(tmp_path / "data", tmp_path / "runs")])
    assert fit.datamodule.graphs("train").stems == ["fixture_conv_reshape_dot"]
    summary = json.loads(next((tmp_path / "runs").rglob("summary.json")).read_text())
    (skipped,) = summary["skipped_files"]
    assert skipped["split"] == "train" and skipped["file"] == str(bad) and "'node_splits'" in skipped["error"]


def test_predict_stops_on_a_bad_test_file_naming_it(fixtures, tmp_path, capsys):
    fit = lightning_main(["fit", *brief(fixtures, tmp_path / "runs")])
    bad = broken_copy(fixtures, tmp_path / "data", "test", "fixture_conv_reshape_dot")
    command = ["predict", *brief(tmp_path / "data", tmp_path / "runs"), "--ckpt_path",
               fit.trainer.checkpoint_callback.best_model_path, "--submission.out_dir", str(tmp_path / "out")]
    with pytest.raises(DataError, match="node_splits") as info:
        lightning_main(command)
    assert info.value.file == str(bad)
    assert main(command) == errors.BAD_DATA  # without the trainer: the same one line
    assert str(bad) in capsys.readouterr().err
    assert not (tmp_path / "out" / "layout_xla_random.csv").exists()


def test_kernel_names_missing_collections_and_writes_what_it_can(fixtures, tmp_path):
    log, _ = run_kernel(tmp_path, {"SOLUTION_DATA_ROOT": str(fixtures), "SOLUTION_CACHE": str(tmp_path / "cache"),
                                   "SOLUTION_OUTPUT_DIR": str(tmp_path / "out"), "SOLUTION_TIME_BUDGET": "600"})
    missing = [c for c in COLLECTIONS if c != COLLECTION]
    assert f"the data root holds no {', '.join(missing)}" in log
    assert (tmp_path / "out" / "collections" / "layout_xla_random.csv").is_file()
    report = check(tmp_path / "out" / "submission.csv", fixtures)
    assert report.ok and len(report.rows) == report.expected == 2, report.problems
