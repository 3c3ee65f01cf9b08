"""The command line end to end on tiny data: fit -> predict -> submit -> check -> score, the demo, inspect."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from solution.constants import COLLECTIONS
from solution.submission.ensemble import read_run
from solution.submission.files import check, collection_file_stem, read_answers, score
from solution.tools.cli import lightning_main, main

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
QUICK = ["--trainer.max_epochs", "2", "--trainer.check_val_every_n_epoch", "1", "--trainer.enable_progress_bar",
         "false", "--model.hidden", "16", "--model.opcode_dim", "8", "--data.configs_per_graph", "8"]


def run_args(collection: str, root: Path, runs: Path) -> list[str]:
    return ["--config", str(CONFIGS / f"{collection_file_stem(collection)}.yaml"), "--config",
            str(CONFIGS / "demo.yaml"), "--data.root", str(root), "--trainer.logger.init_args.save_dir", str(runs),
            *QUICK]


@pytest.fixture(scope="module")
def predicted(tiny_root, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """Fit and predict every collection briefly; returns the submissions folder and the checkpoints."""
    out, runs = tmp_path_factory.mktemp("submissions"), tmp_path_factory.mktemp("runs")
    checkpoints = {}
    for collection in COLLECTIONS:
        fit = lightning_main(["fit", *run_args(collection, tiny_root, runs)])
        checkpoints[collection] = fit.trainer.checkpoint_callback.best_model_path
        lightning_main(["predict", *run_args(collection, tiny_root, runs), "--ckpt_path", checkpoints[collection],
                        "--submission.out_dir", str(out)])
    return out, checkpoints


def test_fit_predict_submit_gives_a_valid_scored_submission(predicted, tiny_root):
    out, checkpoints = predicted
    assert all(Path(c).is_file() for c in checkpoints.values())
    assert main(["submit", "--dir", str(out), "--data.root", str(tiny_root)]) == 0
    report = check(out / "submission.csv", tiny_root)
    assert report.ok, report.problems
    assert main(["check-submission", str(out / "submission.csv"), "--data.root", str(tiny_root)]) == 0
    scores = score(out / "submission.csv", read_answers(tiny_root / "answers.csv"))
    assert set(COLLECTIONS) <= set(scores) and np.isfinite(scores["final"])
    raw = read_run(out / "layout_xla_random.scores.npz")
    assert sorted(raw.scores) == sorted(i.split(":")[-1] for i in report.rows if i.startswith("layout:xla:random"))


def test_predict_is_deterministic_and_permutation_averaging_covers_all(predicted, tiny_root, tmp_path):
    _, checkpoints = predicted
    collection = "layout:nlp:default"
    args = [*run_args(collection, tiny_root, tmp_path / "runs"), "--ckpt_path", checkpoints[collection],
            "--data.eval_chunk", "16", "--data.predict_repeats", "3"]
    for name in ("a", "b"):
        lightning_main(["predict", *args, "--submission.out_dir", str(tmp_path / name)])
    first = np.load(tmp_path / "a" / "layout_nlp_default.scores.npz")
    second = np.load(tmp_path / "b" / "layout_nlp_default.scores.npz")
    for stem in first.files:
        np.testing.assert_array_equal(first[stem], second[stem])
    assert check(tmp_path / "a" / "layout_nlp_default.csv").ok


def test_validate_reproduces_the_checkpoint_score(predicted, tiny_root, tmp_path):
    _, checkpoints = predicted
    collection = "tile:xla"
    cli = lightning_main(["validate", *run_args(collection, tiny_root, tmp_path), "--ckpt_path",
                          checkpoints[collection]])
    assert "val/score" in cli.trainer.callback_metrics
    assert "val/top5_error" in cli.trainer.callback_metrics


def test_demo_writes_submission_and_table(tiny_root, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(tiny_root, data)
    assert main(["demo", "--data", str(data), "--out", str(tmp_path / "sub"), "--runs", str(tmp_path / "runs"),
                 "--max_epochs", "1"]) == 0
    assert check(tmp_path / "sub" / "submission.csv", data).ok
    table = (tmp_path / "sub" / "scores.md").read_text()
    for collection in COLLECTIONS:
        assert f"| {collection} |" in table
    assert "config-only (valid)" in table and "random (valid)" in table and "final (mean)" in table


def test_inspect_reports_bad_files(tiny_root, tmp_path, capsys):
    data = tmp_path / "data"
    shutil.copytree(tiny_root, data)
    assert main(["inspect", str(data), "--per-graph"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {p.name}" in out for p in (data / "npz_all/npz/tile/xla/train").glob("*.npz"))
    bad = sorted((data / "npz_all/npz/layout/xla/random/train").glob("*.npz"))[0]
    bad.write_bytes(bad.read_bytes()[:100])
    capsys.readouterr()
    assert main(["inspect", str(data)]) == 1
    assert str(bad) in capsys.readouterr().out


@pytest.mark.parametrize("collection", COLLECTIONS)
def test_print_config_matches_snapshot(collection, capsys):
    """The resolved settings of each shipped YAML; regenerate with
    `solution fit --config configs/<name>.yaml --print_config > tests/snapshots/<name>.yaml`."""
    name = collection_file_stem(collection)
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(CONFIGS / f"{name}.yaml"), "--print_config"])
    printed = settings_lines(capsys.readouterr().out)
    snapshot = Path(__file__).parent / "snapshots" / f"{name}.yaml"
    assert printed == settings_lines(snapshot.read_text()), f"configs/{name}.yaml drifted from {snapshot}"


def settings_lines(text: str) -> list[str]:
    """The YAML without comment lines (the first one names the installed Lightning version)."""
    return [line for line in text.splitlines() if not line.lstrip().startswith("#")]
