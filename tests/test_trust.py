"""Trust in what comes back: nothing in a checkpoint or scores file runs, one path from a checkpoint to its
predictions, commands that do what their names say, one line per user error, defaults in one place."""

from __future__ import annotations

import inspect
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from solution import errors
from solution.data.datamodule import TpuGraphsDataModule
from solution.models import losses, rankers
from solution.submission.ensemble import write_run
from solution.tools import pipeline
from solution.tools.cli import main
from solution.tools.lightning_cli import lightning_main
from solution.tools.settings import configs_folder, layered, read_settings, read_yaml
from solution.training.checkpoints import CheckpointError
from solution.training.module import RankingModule

REPO = Path(__file__).resolve().parent.parent
TILE = ["--config", str(configs_folder() / "tile_xla.yaml")]
PROGRAM = REPO.parent / "shared" / "fixtures" / "npz" / "layout" / "xla" / "random" / "test" / "fixture_scan_rnn.npz"
QUICK = {"trainer": {"max_epochs": 1, "check_val_every_n_epoch": 1, "num_sanity_val_steps": 0, "accelerator": "cpu"},
         "model": {"ranker": {"init_args": {"hidden": 16, "opcode_dim": 8}}, "warmup_steps": 0},
         "data": {"configs_per_graph": 8, "num_workers": 0}}


@pytest.fixture(scope="module")
def tile_root(tiny_root, tmp_path_factory) -> Path:
    """A data root holding only the tile collection of the tiny dataset (so `solution run` trains nothing else)."""
    root = tmp_path_factory.mktemp("tile-only")
    shutil.copytree(tiny_root / "npz_all" / "npz" / "tile", root / "npz_all" / "npz" / "tile")
    return root


@pytest.fixture(scope="module")
def trained(tile_root, tmp_path_factory) -> Path:
    """A folder holding tile_xla.ckpt, trained for one epoch at a width (16) that differs from the configs'."""
    runs = tmp_path_factory.mktemp("trained")
    settings = layered(read_settings()["tile:xla"], QUICK)
    pipeline.train("tile:xla", settings, None, pipeline.Job(tile_root, runs / "out", runs=runs))
    return runs / "checkpoints"


def edited(trained: Path, folder: Path, change) -> Path:
    """A copy of the trained checkpoint with `change(saved)` applied, as <folder>/tile_xla.ckpt."""
    saved = torch.load(trained / "tile_xla.ckpt", map_location="cpu", weights_only=True)
    change(saved)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(saved, folder / "tile_xla.ckpt")
    return folder / "tile_xla.ckpt"


@pytest.fixture
def marker(tmp_path) -> Path:
    return tmp_path / "code-ran"


@pytest.fixture
def crafted(trained, tmp_path, marker) -> Path:
    """A checkpoint whose ranker names `os.system` with a command that would create `marker`."""
    def change(saved):
        saved["hyper_parameters"]["ranker"] = {"class_path": "os.system",
                                               "init_args": {"command": f"touch {marker}"}}
    return edited(trained, tmp_path / "crafted", change)


def refused(capsys, code: int, crafted: Path, marker: Path) -> None:
    message = capsys.readouterr().err
    assert code == errors.BAD_DATA, message
    assert not marker.exists(), "code from the checkpoint ran"
    assert "hyper_parameters.ranker.class_path" in message and "'os.system'" in message and str(crafted) in message
    assert "Traceback" not in message and message.count("\n") == 1


def test_run_refuses_a_checkpoint_that_names_foreign_code(crafted, marker, tile_root, tmp_path, capsys):
    code = main(["run", "--data.root", str(tile_root), "--checkpoints", str(crafted.parent), "--out",
                 str(tmp_path / "out")])
    refused(capsys, code, crafted, marker)
    assert not (tmp_path / "out" / "submission.csv").exists()


@pytest.mark.parametrize("command", ["predict", "validate", "test", "fit"])
def test_lightning_commands_refuse_a_checkpoint_that_names_foreign_code(command, crafted, marker, tile_root,
                                                                         tmp_path, capsys):
    code = main([command, *TILE, "--data.root", str(tile_root), "--ckpt_path", str(crafted),
                 "--trainer.logger", "false", "--submission.out_dir", str(tmp_path / "out")])
    refused(capsys, code, crafted, marker)


def test_load_from_checkpoint_refuses_foreign_code(crafted, marker):
    with pytest.raises(CheckpointError, match="os.system"):
        RankingModule.load_from_checkpoint(crafted)
    assert not marker.exists()


def test_kernel_refuses_a_checkpoint_that_names_foreign_code(crafted, marker, tile_root, tmp_path):
    env = {**os.environ, "SOLUTION_DATA_ROOT": str(tile_root), "SOLUTION_CHECKPOINTS": str(crafted.parent),
           "SOLUTION_OUTPUT_DIR": str(tmp_path / "out"), "SOLUTION_KERNEL_PROFILE": "smoke"}
    done = subprocess.run([sys.executable, str(REPO / "kaggle_kernel.py")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == errors.BAD_DATA, done.stderr[-2000:]
    assert not marker.exists()
    assert "'os.system'" in done.stderr and "Traceback" not in done.stderr


class Payload:
    """Unpickling this runs a shell command."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def test_ensemble_refuses_pickled_scores(trained, tile_root, tmp_path, marker, capsys):
    evil = tmp_path / "evil.scores.npz"
    with zipfile.ZipFile(evil, "w") as archive:
        with archive.open("payload.npy", "w") as handle:
            np.lib.format.write_array(handle, np.array([Payload(f"touch {marker}")], dtype=object),
                                      allow_pickle=True)
    code = main(["ensemble", str(evil), str(evil), "--out", str(tmp_path / "ensemble")])
    message = capsys.readouterr().err
    assert code == errors.USAGE and str(evil) in message and not marker.exists()


# ---------------------------------------------------------------- one path from checkpoint to predictions


def test_run_chooses_the_best_checkpoint_by_the_settings_monitor_as_fit_does(tile_root, tmp_path):
    runs = tmp_path / "runs"
    settings = layered(read_settings()["tile:xla"], layered(QUICK, {"trainer": {"max_epochs": 3},
                                                                   "checkpoint": {"monitor": "val/kendall_tau"}}))
    path = pipeline.train("tile:xla", settings, None, pipeline.Job(tile_root, runs / "out", runs=runs))
    states = torch.load(path, map_location="cpu", weights_only=True)["callbacks"]
    (chosen,) = [state for key, state in states.items() if key.startswith("LaterOnTies")]
    assert chosen["monitor"] == "val/kendall_tau" and -1.0 <= float(chosen["best_model_score"]) <= 1.0
    with pytest.raises(errors.SettingsError, match=r"tile:xla: checkpoint.monitor='val/top5_error'; expected one of"):
        pipeline.checkpoint_monitor({"checkpoint": {"monitor": "val/top5_error"}}, "tile:xla")


def test_predict_and_run_give_the_same_predictions_from_the_checkpoints_settings(trained, tile_root, tmp_path):
    """The checkpoint was trained at hidden 16; neither command is told so: both take it from the checkpoint."""
    assert main(["predict", *TILE, "--data.root", str(tile_root), "--ckpt_path", str(trained / "tile_xla.ckpt"),
                 "--submission.out_dir", str(tmp_path / "predict")]) == errors.OK
    assert main(["run", "--data.root", str(tile_root), "--checkpoints", str(trained), "--out",
                 str(tmp_path / "run")]) == errors.OK
    by_cli = np.load(tmp_path / "predict" / "tile_xla.scores.npz")
    by_run = np.load(tmp_path / "run" / "collections" / "tile_xla.scores.npz")
    assert sorted(by_cli.files) == sorted(by_run.files)
    for stem in by_cli.files:
        if stem != "__meta__":
            np.testing.assert_allclose(by_cli[stem], by_run[stem], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("precision", [[], ["--trainer.precision", "bf16-mixed"]], ids=["float32", "bf16-mixed"])
def test_predict_runs_without_importing_lightning_and_writes_what_the_trainer_writes(trained, tile_root, tmp_path,
                                                                                     precision):
    args = [*TILE, "--data.root", str(tile_root), "--ckpt_path", str(trained / "tile_xla.ckpt"), "--data.eval_chunk",
            "3", "--seed_everything", "5", *precision]
    code = ("import sys; from solution.tools.cli import main; code = main(sys.argv[1:]); "
            "sys.exit(code or 10 * any(name.split('.')[0] == 'lightning' for name in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code, "predict", *args, "--submission.out_dir", str(tmp_path / "a")],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr  # 10: it imported Lightning
    lightning_main(["predict", *args, "--submission.out_dir", str(tmp_path / "b")])
    assert (tmp_path / "a" / "tile_xla.csv").read_text() == (tmp_path / "b" / "tile_xla.csv").read_text()
    with np.load(tmp_path / "a" / "tile_xla.scores.npz") as here, np.load(tmp_path / "b" / "tile_xla.scores.npz") as by:
        assert sorted(here.files) == sorted(by.files)
        for key in here.files:
            np.testing.assert_allclose(here[key], by[key], rtol=1e-5, atol=1e-6) if key != "__meta__" \
                else np.testing.assert_array_equal(here[key], by[key])


@pytest.mark.parametrize("extra", [["--print_config"], ["--help"], ["--trainer.accelerator", "gpu"],
                                   ["--trainer.precision", "16-mixed"], ["--seed_everything", "true"],
                                   ["--trainer.callbacks+=lightning.pytorch.callbacks.Timer"], ["stray"]])
def test_predict_leaves_to_the_lightning_cli_what_needs_a_trainer(extra, trained, tile_root):
    from solution.tools.predict import rank_here

    args = [*TILE, "--data.root", str(tile_root), "--ckpt_path", str(trained / "tile_xla.ckpt")]
    assert rank_here("predict", [*args, *extra]) is None
    assert rank_here("predict", [*args[:-1], str(trained / "missing.ckpt")]) is None  # the trainer tells that one


def test_predict_reads_config_files_and_flags_in_their_order(tmp_path):
    from solution.tools.predict import command_line, resolved_command

    layer = tmp_path / "chunk.yaml"
    layer.write_text(yaml.safe_dump({"data": {"eval_chunk": 7, "root": "from-file"}}))
    first = resolved_command(command_line(["--data.eval_chunk", "5", "--config", str(layer)]))
    last = resolved_command(command_line([f"--config={layer}", "--data.eval_chunk=5", "--data.root", "123"]))
    assert first["data"]["eval_chunk"] == 7 and last["data"]["eval_chunk"] == 5
    assert last["data"]["root"] == "123"  # a path stays a string; the other values are read as YAML
    assert resolved_command(command_line(["--trainer.logger", "false"]))["trainer"]["logger"] is False


def test_a_setting_that_contradicts_the_checkpoint_is_refused_naming_both(trained, tile_root, tmp_path, capsys):
    layer = tmp_path / "wide.yaml"
    layer.write_text(yaml.safe_dump({"model": {"ranker": {"init_args": {"hidden": 64}}}}))
    code = main(["run", "--data.root", str(tile_root), "--checkpoints", str(trained), "--config", str(layer),
                 "--out", str(tmp_path / "out")])
    message = capsys.readouterr().err
    assert code == errors.USAGE and "model.ranker.init_args.hidden = 64 (the checkpoint has 16)" in message
    code = main(["predict", "--config", str(configs_folder() / "layout_xla_random.yaml"), "--data.root",
                 str(tile_root), "--ckpt_path", str(trained / "tile_xla.ckpt")])
    message = capsys.readouterr().err
    assert code == errors.USAGE and "data.collection = 'layout:xla:random' (the checkpoint has 'tile:xla')" in message


def test_paths_workers_and_batch_sizes_may_differ_from_the_checkpoint(trained, tile_root, tmp_path):
    assert main(["predict", *TILE, "--data.root", str(tile_root), "--ckpt_path", str(trained / "tile_xla.ckpt"),
                 "--data.num_workers", "1", "--data.eval_graphs_per_batch", "3", "--data.eval_chunk", "5",
                 "--submission.out_dir", str(tmp_path / "p")]) == errors.OK


def test_a_checkpoint_of_another_collection_is_refused(trained, tile_root, tmp_path, capsys):
    def relabel(saved):
        saved["datamodule_hyper_parameters"]["collection"] = "layout:xla:random"
    other = edited(trained, tmp_path / "other", relabel)
    code = main(["run", "--data.root", str(tile_root), "--checkpoints", str(other.parent), "--out", str(tmp_path)])
    message = capsys.readouterr().err
    assert code == errors.BAD_DATA and str(other) in message and "expected a checkpoint of tile:xla" in message


def test_a_checkpoint_with_an_option_this_version_lacks_is_one_line(trained, tile_root, tmp_path, capsys):
    def older(saved):
        saved["hyper_parameters"]["ranker"]["init_args"]["head_epochs"] = 0  # an option this version removed
    old = edited(trained, tmp_path / "old", older)
    code = main(["run", "--data.root", str(tile_root), "--checkpoints", str(old.parent), "--out", str(tmp_path)])
    message = capsys.readouterr().err
    assert code == errors.BAD_DATA and "Traceback" not in message
    assert f"{old}: hyper_parameters.ranker.init_args.head_epochs: TileRanker takes no such argument" in message


def test_a_checkpoint_that_names_a_removed_model_option_is_one_line(trained, tmp_path, capsys):
    """A layout checkpoint written before `shared_link_maps` was removed (its ranker's settings name it, default
    too) is refused before anything is built."""
    def older(saved):
        saved["datamodule_hyper_parameters"]["collection"] = "layout:xla:random"
        saved["hyper_parameters"]["ranker"] = {"class_path": "solution.models.rankers.LayoutRanker",
                                               "init_args": {"hidden": 16, "shared_link_maps": False}}
    old = edited(trained, tmp_path / "old", older)
    code = main(["rank", str(PROGRAM), "--ckpt", str(old)])
    message = capsys.readouterr().err
    assert code == errors.BAD_DATA and "Traceback" not in message, message
    assert f"{old}: hyper_parameters.ranker.init_args.shared_link_maps: LayoutRanker takes no such argument" in message


@pytest.mark.parametrize("key, value", [("traffic", False), ("predict_repeats", 1)])
def test_a_checkpoint_that_names_a_removed_data_setting_is_one_line(key, value, trained, tile_root, tmp_path, capsys):
    """A checkpoint written before `data.traffic` and `data.predict_repeats` were removed (the data module saved
    every setting, defaults too) is refused in one line naming the file and the key."""
    def older(saved):
        saved["datamodule_hyper_parameters"][key] = value
    old = edited(trained, tmp_path / "old", older)
    for command in (["run", "--data.root", str(tile_root), "--checkpoints", str(old.parent), "--out", str(tmp_path)],
                    ["predict", *TILE, "--data.root", str(tile_root), "--ckpt_path", str(old)]):
        code = main(command)
        message = capsys.readouterr().err
        assert code == errors.BAD_DATA and "Traceback" not in message, message
        assert f"{old}: datamodule_hyper_parameters.{key}: a data setting this version removed" in message


@pytest.mark.parametrize("damage", ["text", "truncated", "no state"])
def test_a_file_that_is_not_a_checkpoint_is_one_line(damage, trained, tile_root, tmp_path, capsys):
    path = tmp_path / "bad" / "tile_xla.ckpt"
    path.parent.mkdir()
    whole = (trained / "tile_xla.ckpt").read_bytes()
    if damage == "text":
        path.write_text("not a checkpoint\n")
    elif damage == "truncated":  # an interrupted download
        path.write_bytes(whole[: len(whole) // 2])
    else:
        torch.save({"weights": torch.zeros(2)}, path)
    for command in (["run", "--data.root", str(tile_root), "--checkpoints", str(path.parent), "--out", str(tmp_path)],
                    ["predict", *TILE, "--data.root", str(tile_root), "--ckpt_path", str(path)]):
        code = main(command)
        message = capsys.readouterr().err
        assert code == errors.BAD_DATA and str(path) in message and "Traceback" not in message, message


# ---------------------------------------------------------------- commands that do what their names say


def test_test_scores_a_split_with_runtimes_and_names_it(trained, tile_root, tmp_path, capsys):
    cli = lightning_main(["test", *TILE, "--data.root", str(tile_root), "--ckpt_path",
                          str(trained / "tile_xla.ckpt"), "--trainer.logger", "false"])
    assert "test/valid/score" in cli.trainer.callback_metrics
    code = main(["test", *TILE, "--data.root", str(tile_root), "--ckpt_path", str(trained / "tile_xla.ckpt"),
                 "--data.test_split", "test", "--trainer.logger", "false"])
    message = capsys.readouterr().err
    assert code == errors.USAGE and "nothing to score" in message and "Traceback" not in message


def test_scores_and_their_csv_are_written_as_a_pair(tmp_path, monkeypatch, tile_root):
    from solution import atomic
    from solution.data.reader import list_files

    paths = list_files(tile_root, "tile:xla", "test")
    scores = {p.stem: np.arange(3, dtype=float) for p in paths}
    files = {p.stem: {"digest": "0", "configs": 3} for p in paths}
    csv_path, npz_path = write_run(tmp_path, "tile:xla", "test", scores, files)
    before = csv_path.read_bytes(), npz_path.read_bytes()
    renames = []
    real = os.replace

    def second_fails(src, dst):
        renames.append(dst)
        if len(renames) == 2:
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", second_fails)
    with pytest.raises(errors.WriteError, match="the disk is full"):
        write_run(tmp_path, "tile:xla", "test", {k: v[::-1].copy() for k, v in scores.items()}, files)
    monkeypatch.setattr(atomic.os, "replace", real)
    assert (csv_path.read_bytes(), npz_path.read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([csv_path.name, npz_path.name])


def test_a_pair_whose_second_backup_fails_leaves_both_old_files(tmp_path, monkeypatch):
    from solution import atomic

    first, second = tmp_path / "a.csv", tmp_path / "a.npz"
    first.write_text("old a")
    second.write_text("old b")
    real, links = os.link, []

    def second_fails(src, dst):
        links.append(dst)
        if len(links) == 2:
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "link", second_fails)
    with pytest.raises(errors.WriteError, match="the disk is full"):
        with atomic.atomic_files([first, second]) as (a, b):
            a.write("new a")
            b.write("new b")
    assert (first.read_text(), second.read_text()) == ("old a", "old b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "a.npz"]


def test_submit_says_what_it_checked(tmp_path, tile_root, capsys):
    from solution.data.reader import list_files
    from solution.submission.files import write_collection

    paths = list_files(tile_root, "tile:xla", "test")
    part = write_collection(tmp_path / "tile_xla.csv", "tile:xla", {p.stem: np.arange(3.0) for p in paths})
    assert main(["submit", str(part), "--out", str(tmp_path / "s.csv")]) == errors.OK
    assert "not against the test files" in capsys.readouterr().out


# ---------------------------------------------------------------- one line per user error


def test_a_malformed_yaml_is_one_line_naming_the_file_and_line(tile_root, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  lr: [1, 2\n")
    for command in (["run", "--data.root", str(tile_root), "--config", str(bad), "--out", str(tmp_path)],
                    ["fit", *TILE, "--config", str(bad), "--data.root", str(tile_root)]):
        code = main(command)
        message = capsys.readouterr().err
        assert code == errors.USAGE and str(bad) in message and "Traceback" not in message, message


def test_a_settings_error_inside_the_trainer_is_one_line(tile_root, tmp_path, capsys):
    code = main(["fit", *TILE, "--data.root", str(tile_root), "--data.folds", "50", "--trainer.logger", "false",
                 "--trainer.max_epochs", "1"])
    message = capsys.readouterr().err
    assert code == errors.USAGE and "data.folds=50" in message and "Traceback" not in message


# ---------------------------------------------------------------- defaults in one place


def signature_defaults(function) -> dict:
    return {name: p.default for name, p in inspect.signature(function).parameters.items()
            if p.default is not inspect.Parameter.empty}


def drift(configured: dict, function) -> dict:
    """Settings whose YAML value differs from the signature's default: key -> (YAML, signature)."""
    signature = signature_defaults(function)
    return {k: (v, signature.get(k, "<no default>")) for k, v in configured.items()
            if signature.get(k, "<no default>") != v}


def test_base_yaml_and_the_signatures_give_the_same_defaults():
    base = read_yaml(configs_folder() / "base.yaml")
    model = {k: v for k, v in base["model"].items() if k not in ("ranker", "loss")}
    loss = getattr(losses, base["model"]["loss"]["class_path"].rsplit(".", 1)[-1])
    assert base["model"]["ranker"]["class_path"].endswith(".LayoutRanker")
    assert drift({k: v for k, v in base["data"].items() if k != "root"}, TpuGraphsDataModule) == {}
    assert drift(model, RankingModule) == {}
    assert drift(base["model"]["ranker"]["init_args"], rankers.LayoutRanker) == {}
    assert drift(base["model"]["loss"]["init_args"], loss) == {}


def test_the_tile_rankers_settings_are_its_signatures_defaults():
    tile = read_yaml(configs_folder() / "tile_xla.yaml")["model"]["ranker"]
    assert tile["class_path"].endswith(".TileRanker")
    assert drift(tile["init_args"], rankers.TileRanker) == {}


# ---------------------------------------------------------------- installs as a package


@pytest.mark.slow
def test_an_installed_wheel_carries_its_configs_and_runs_from_another_folder(trained, tile_root, tmp_path):
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(REPO)],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-2000:]
    assert "deprecat" not in build.stderr.lower(), build.stderr[-2000:]
    wheel = next(wheels.glob("solution-*.whl"))
    assert {"solution/configs/base.yaml", "solution/configs/tile_xla.yaml"} <= set(zipfile.ZipFile(wheel).namelist())
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=600)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run([sys.executable, "-m", "solution", "run", "--data.root", str(tile_root), "--checkpoints",
                           str(trained), "--out", "out"], cwd=elsewhere, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(target)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert str(target) in subprocess.run([sys.executable, "-c", "import solution; print(solution.__file__)"],
                                         cwd=elsewhere, capture_output=True, text=True,
                                         env={**os.environ, "PYTHONPATH": str(target)}).stdout
    assert (elsewhere / "out" / "submission.csv").is_file()

