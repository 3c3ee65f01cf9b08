"""The command line end to end on tiny data: fit -> predict -> submit -> check -> score, the demo, inspect."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch

from solution import errors
from solution.constants import COLLECTIONS
from solution.data.datamodule import TpuGraphsDataModule
from solution.submission import files
from solution.submission.ensemble import read_run
from solution.submission.files import check, collection_file_stem, read_answers, score
from solution.tools.cli import main
from solution.tools.lightning_cli import lightning_main

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
QUICK = ["--trainer.max_epochs", "2", "--trainer.check_val_every_n_epoch", "1", "--trainer.enable_progress_bar",
         "false", "--model.ranker.init_args.hidden", "16", "--model.ranker.init_args.opcode_dim", "8",
         "--data.configs_per_graph", "8"]


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


def test_predict_is_deterministic_and_covers_all(predicted, tiny_root, tmp_path):
    _, checkpoints = predicted
    collection = "layout:nlp:default"
    args = [*run_args(collection, tiny_root, tmp_path / "runs"), "--ckpt_path", checkpoints[collection],
            "--data.eval_chunk", "16"]
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


def test_a_fit_starts_from_a_checkpoint(predicted, tiny_root, tmp_path, capsys):
    """`model.init_from`: a folder of <collection>.ckpt starts the fit at its collection's weights and standardizers
    (at rates 0 they stay there); a checkpoint of other widths and a missing one are refused."""
    collection, folder = "layout:xla:random", tmp_path / "pretrained"
    folder.mkdir()
    shutil.copy(predicted[1][collection], folder / f"{collection_file_stem(collection)}.ckpt")
    saved = torch.load(predicted[1][collection], weights_only=True)["state_dict"]
    still = ["--model.lr", "0", "--model.start_lr", "0", "--trainer.max_epochs", "1"]
    started = lightning_main(["fit", *run_args(collection, tiny_root, tmp_path), *still, "--model.init_from",
                              str(folder)])
    fresh = lightning_main(["fit", *run_args(collection, tiny_root, tmp_path), *still])
    for module, same in ((started.model, True), (fresh.model, False)):
        weights = module.state_dict()
        assert set(weights) == set(saved)
        assert all(torch.equal(weights[key], saved[key]) for key in weights if "scaler" in key)  # the same data
        assert all(torch.equal(weights[key], saved[key]) for key in weights if key.startswith("ranker.")) == same
    other_widths = ["--model.init_from", predicted[1][collection]]  # the shipped widths, not QUICK's
    assert main(["fit", *settings(collection, tiny_root, tmp_path), *other_widths]) == errors.BAD_DATA
    assert "model.init_from needs a checkpoint of the same ranker settings" in error_output(capsys)
    out = tmp_path / "out"  # `solution run --init_from`: every collection's checkpoint is looked for first
    assert main(["run", "--data.root", str(tiny_root), "--out", str(out), "--init_from", str(folder)]) == errors.USAGE
    assert f"no checkpoint {folder / 'tile_xla.ckpt'} to start tile:xla from" in error_output(capsys)
    assert not out.exists()


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
    assert main(["inspect", str(data)]) == errors.BAD_DATA
    printed = capsys.readouterr()
    assert f"error: {bad}: key '<file>': found unreadable archive" in printed.err
    assert "1 problem(s), 0 warning(s)" in printed.out and "error" not in printed.out


@pytest.mark.parametrize("collection", COLLECTIONS)
def test_print_config_matches_snapshot(collection, capsys):
    """The resolved settings of each shipped YAML; regenerate with
    `solution fit --config configs/<name>.yaml --print_config > tests/snapshots/<name>.yaml`."""
    name = collection_file_stem(collection)
    assert main(["fit", "--config", str(CONFIGS / f"{name}.yaml"), "--print_config"]) == errors.OK
    printed = settings_lines(capsys.readouterr().out)
    snapshot = Path(__file__).parent / "snapshots" / f"{name}.yaml"
    assert printed == settings_lines(snapshot.read_text()), f"configs/{name}.yaml drifted from {snapshot}"


def settings_lines(text: str) -> list[str]:
    """The YAML without comment lines (the first one names the installed Lightning version)."""
    return [line for line in text.splitlines() if not line.lstrip().startswith("#")]


# ---------------------------------------------------------------- exit codes: one per kind, errors on stderr


def error_output(capsys: pytest.CaptureFixture) -> str:
    """What a failed command printed on stderr, after checking that its stdout holds no error."""
    printed = capsys.readouterr()
    assert "error:" in printed.err and "error" not in printed.out.lower(), printed
    return printed.err


def settings(collection: str, root: Path, folder: Path) -> list[str]:
    """A Lightning sub-command's arguments that never get as far as training: no logger, outputs under `folder`."""
    return ["--config", str(CONFIGS / f"{collection_file_stem(collection)}.yaml"), "--data.root", str(root),
            "--trainer.logger", "false", "--trainer.default_root_dir", str(folder)]


def corrupt(path: Path) -> Path:
    """Cut an npz file short: a zip archive that cannot be read."""
    path.write_bytes(path.read_bytes()[:100])
    return path


def test_bad_arguments_or_settings_exit_2(tiny_root, tmp_path, capsys):
    submission, answers = str(tiny_root / "sample_submission.csv"), str(tiny_root / "answers.csv")
    assert main(["score", submission, "--answers", answers, "--nope"]) == errors.USAGE
    assert "unrecognized arguments: --nope" in error_output(capsys)
    lightning = settings("layout:xla:random", tiny_root, tmp_path)
    assert main(["fit", *lightning, "--data.sampling", "bogus"]) == errors.USAGE
    assert "error: data.sampling='bogus'; expected one of" in error_output(capsys)
    missing = tmp_path / "missing.ckpt"
    assert main(["predict", *lightning, "--ckpt_path", str(missing)]) == errors.USAGE
    assert str(missing) in error_output(capsys)


def test_bad_data_exits_3_naming_the_file(tiny_root, tmp_path, capsys):
    data = tmp_path / "layout/xla/random"  # one collection's folder
    shutil.copytree(tiny_root / "npz_all/npz/layout/xla/random", data)
    bad = corrupt(sorted((data / "test").glob("*.npz"))[0])
    check_args = [str(tiny_root / "sample_submission.csv"), "--data.root", str(data)]
    assert main(["check-submission", *check_args]) == errors.BAD_DATA
    assert f"error: {bad}: key '<file>'" in error_output(capsys)
    train = [corrupt(path) for path in sorted((data / "train").glob("*.npz"))]
    assert main(["fit", *settings("layout:xla:random", data, tmp_path)]) == errors.BAD_DATA
    message = error_output(capsys)
    assert f"error: {data / 'train'}: key 'train': found every one of its {len(train)} files fails" in message
    assert "Traceback" not in message


@pytest.mark.parametrize("command", ["synth", "submit"])
def test_a_failed_write_exits_4_naming_the_path(command, tiny_root, tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    args = {"synth": ["--out", str(blocker / "data"), "--collections", "tile:xla"],
            "submit": [str(tiny_root / "sample_submission.csv"), "--out", str(blocker / "submission.csv")]}[command]
    assert main([command, *args]) == errors.WRITE_FAILED
    assert str(blocker) in error_output(capsys)


def raising(error: Exception) -> Callable[..., None]:
    """A stand-in for a function that fails with `error`."""

    def raise_it(*args, **kwargs) -> None:
        raise error

    return raise_it


def test_a_bug_keeps_its_traceback(tiny_root, tmp_path, monkeypatch):
    """Uncaught, Python prints it and exits 1: also a ValueError raised inside a Trainer's run (not a setting)."""
    monkeypatch.setattr(files, "score", raising(RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):
        main(["score", str(tiny_root / "sample_submission.csv"), "--answers", str(tiny_root / "answers.csv")])
    monkeypatch.setattr(TpuGraphsDataModule, "setup", raising(ValueError("a bug in a run")))
    with pytest.raises(ValueError, match="a bug in a run"):
        main(["fit", *settings("tile:xla", tiny_root, tmp_path)])
