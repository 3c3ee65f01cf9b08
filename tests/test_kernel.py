"""The one-file Kaggle kernel: generated from the package, never stale, and runs with nothing but the image's
packages against read-only data."""

from __future__ import annotations

import ast
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from solution import errors
from solution.constants import COLLECTIONS
from solution.submission.files import check, collection_file_stem, read_answers, score
from solution.tools import bundle, kernel, pipeline
from solution.tools.cli import main
from solution.tools.lightning_cli import lightning_main
from solution.tools.plan import training_order
from solution.tools.settings import layered, read_settings
from solution.training.checkpoints import CheckpointError
from solution.training.module import STARTS_FOLDER, shipped_starts, start_checkpoint

REPO = Path(__file__).resolve().parent.parent
KERNEL = REPO / bundle.KERNEL_FILE
# Runs a script as `__main__` with these packages made unimportable, as on a stock Kaggle image; then reports
# what the script imported.
RUNNER = """\
import importlib.abc, json, runpy, sys
HIDDEN = {"solution", "torch_scatter", "lightning", "jsonargparse"}
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Hide())
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    print("IMPORTED", json.dumps({
        "bundled": getattr(sys.modules.get("solution"), "__bundled__", False),
        "torch_scatter": "torch_scatter" in sys.modules,
        "aliased": sys.modules.get("lightning.pytorch") is sys.modules.get("pytorch_lightning"),
    }))
"""


def test_committed_kernel_is_current():
    assert KERNEL.read_text(encoding="utf-8") == bundle.render(), (
        f"{KERNEL.name} is stale: regenerate it with `solution kernel`")


def test_kernel_embeds_the_job_and_no_command_line_modules():
    tree = ast.parse(KERNEL.read_text(encoding="utf-8"))
    assigned = {node.targets[0].slice.value for node in tree.body if isinstance(node, ast.Assign)
                and isinstance(node.targets[0], ast.Subscript) and node.targets[0].value.id == "SOURCES"}
    assert {"solution", "solution.tools.kernel", "solution.models.rankers", "solution.data.datamodule",
            "solution.submission.files", "solution.data", "solution.models"} <= assigned
    assert not assigned & {"solution.tools.cli", "solution.tools.bundle", "solution.synth.files",
                           "solution.tools.synth", "solution.tools.demo"}
    docstring = ast.get_docstring(tree)
    for variable in ("SOLUTION_DATA_ROOT", "SOLUTION_OUTPUT_DIR", "SOLUTION_TIME_BUDGET", "SOLUTION_CHECKPOINTS",
                     "SOLUTION_RANKERS"):
        assert variable in docstring


@pytest.mark.parametrize("text", ["plain", "ends with a quote'", "'''triple''' and ''''four", "back\\slash\\",
                                  "tab\tand\nnewline \\n ''' \\'''", ""])
def test_literal_round_trips(text):
    assert ast.literal_eval(bundle.literal(text)) == text


def test_lightning_modules_refuses_other_lightning_packages():
    assert bundle.lightning_modules({"m": "import lightning.pytorch as pl\nfrom lightning.pytorch.cli import X"}) \
        == ("lightning.pytorch", "lightning.pytorch.cli")
    with pytest.raises(ValueError, match="lightning.fabric"):
        bundle.lightning_modules({"m": "import lightning.fabric"})


def test_kernel_command_writes_script_and_metadata(tmp_path, capsys):
    out = tmp_path / "k" / "kernel.py"
    assert main(["kernel", "--out", str(out), "--metadata", "--id", "someone/tpu-ranking"]) == 0
    assert out.read_text(encoding="utf-8") == bundle.render()
    meta = json.loads((out.parent / bundle.METADATA_FILE).read_text())
    assert meta["id"] == "someone/tpu-ranking" and meta["code_file"] == "kernel.py"
    assert meta["enable_gpu"] and not meta["enable_internet"] and meta["kernel_type"] == "script"
    assert meta["competition_sources"] == [kernel.COMPETITION]
    assert "kaggle kernels push" in capsys.readouterr().out


def data_root(parent: Path) -> Path:
    (parent / "npz_all" / "npz").mkdir(parents=True)
    return parent


def test_find_data_root_prefers_the_competition_then_any_attached_copy(tmp_path):
    with pytest.raises(FileNotFoundError, match="SOLUTION_DATA_ROOT"):
        kernel.find_data_root(tmp_path)
    nested = data_root(tmp_path / "my-copy" / "tpugraphs")
    assert kernel.find_data_root(tmp_path) == nested
    competition = data_root(tmp_path / kernel.COMPETITION)
    assert kernel.find_data_root(tmp_path) == competition


def test_job_settings_from_environment(tmp_path):
    job, profile = kernel.job_from_environment({"SOLUTION_DATA_ROOT": str(tmp_path), "SOLUTION_OUTPUT_DIR": "out",
                                                "SOLUTION_TIME_BUDGET": "90"})
    assert (job.root, job.output, job.budget, job.checkpoints, profile) == (tmp_path, Path("out"), 90.0,
                                                                            None, "kaggle")
    assert job.checkpoint_path("layout:nlp:random") == Path("out/checkpoints/layout_nlp_random.ckpt")
    for key, value, message in [("SOLUTION_TIME_BUDGET", "an hour", "SOLUTION_TIME_BUDGET='an hour'"),
                                ("SOLUTION_TIME_BUDGET", "-5", "seconds >= 0"),
                                ("SOLUTION_KERNEL_PROFILE", "fast", "kaggle, smoke")]:
        with pytest.raises(ValueError, match=message):
            kernel.job_from_environment({"SOLUTION_DATA_ROOT": str(tmp_path), key: value})
    with pytest.raises(FileNotFoundError, match="tile_xla.ckpt"):
        pipeline.given_checkpoints(tmp_path)


def test_kernel_looks_for_every_starting_checkpoint_first(tiny_root, tmp_path, capsys):
    """SOLUTION_INIT_FROM: each collection's fit starts from <collection>.ckpt there; one missing is told before
    anything trains or is written."""
    starts, out = tmp_path / "starts", tmp_path / "out"
    starts.mkdir()
    environ = {"SOLUTION_DATA_ROOT": str(tiny_root), "SOLUTION_OUTPUT_DIR": str(out), "SOLUTION_INIT_FROM": str(starts),
               "SOLUTION_KERNEL_PROFILE": "smoke", "SOLUTION_CACHE": str(tmp_path / "cache")}
    assert kernel.main(read_settings(), environ) == errors.USAGE
    assert f"no checkpoint {starts / 'tile_xla.ckpt'} to start tile:xla from" in capsys.readouterr().err
    assert not out.exists()


def test_load_reads_a_command_line_checkpoint(tiny_root, tmp_path):
    config = REPO / "configs"
    fit = lightning_main(["fit", "--config", str(config / "tile_xla.yaml"), "--config", str(config / "demo.yaml"),
                          "--data.root", str(tiny_root), "--trainer.max_epochs", "1",
                          "--model.ranker.init_args.hidden", "16",
                          "--trainer.logger", "false", "--checkpoint.dirpath", str(tmp_path / "ckpt"),
                          "--trainer.enable_progress_bar", "false"])
    saved = Path(fit.trainer.checkpoint_callback.last_model_path)
    settings = layered(read_settings(config)["tile:xla"], kernel.PROFILES["smoke"])
    job = pipeline.Job(tiny_root, tmp_path / "out", cache=tmp_path)
    model, datamodule = pipeline.load(saved, "tile:xla", settings, job)
    assert model.hparams.ranker["init_args"]["hidden"] == 16 and datamodule.hparams.collection == "tile:xla"
    for name, value in fit.model.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name], value)
    with pytest.raises(CheckpointError, match="'tile:xla'; expected a checkpoint of layout:xla:random"):
        pipeline.load(saved, "layout:xla:random", settings, job)


def read_only_copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    return target


def run_kernel(tmp_path: Path, environ: dict[str, str]) -> tuple[str, dict]:
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SOLUTION_", "PYTHON"))}
    env.update({"CUDA_VISIBLE_DEVICES": "", "SOLUTION_KERNEL_PROFILE": "smoke", **environ})
    done = subprocess.run([sys.executable, "-I", str(runner), str(KERNEL)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    imported = json.loads(done.stdout.rsplit("IMPORTED ", 1)[1])
    return done.stdout, imported


@pytest.fixture(scope="module")
def kaggle_input(tiny_root, tmp_path_factory) -> Path:
    """The tiny data as an attached, read-only Kaggle input."""
    inputs = tmp_path_factory.mktemp("input")
    read_only_copy(tiny_root, inputs / kernel.COMPETITION)
    yield inputs / kernel.COMPETITION
    for path in [inputs, *inputs.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


def test_kernel_runs_alone_and_writes_a_checked_submission(kaggle_input, tiny_root, tmp_path):
    base = {"SOLUTION_DATA_ROOT": str(kaggle_input), "SOLUTION_CACHE": str(tmp_path / "cache")}
    log, imported = run_kernel(tmp_path, {**base, "SOLUTION_OUTPUT_DIR": str(tmp_path / "trained"),
                                          "SOLUTION_TIME_BUDGET": "600"})
    assert imported == {"bundled": True, "torch_scatter": False, "aliased": True}
    trained = tmp_path / "trained" / "submission.csv"
    report = check(trained, tiny_root)
    assert report.ok and len(report.rows) == report.expected, report.problems
    assert set(score(trained, read_answers(tiny_root / "answers.csv"))) >= {*COLLECTIONS, "final"}
    assert log.count("[plan] ") >= len(COLLECTIONS) and "s of the 600 s budget left" in log
    for collection in COLLECTIONS:
        assert f"[{collection}] preprocessing and training" in log
        assert f"[{collection}] done in " in log and "finish estimated at" in log
        assert (tmp_path / "trained" / "checkpoints" / f"{collection_file_stem(collection)}.ckpt").is_file()
    assert "final (mean of 5)" in log
    done = [log.index(f"[{collection}] done in ") for collection in training_order(read_settings())]
    assert done == sorted(done)  # the collections that stop at their max_epochs first, the xla ones last

    log, _ = run_kernel(tmp_path, {**base, "SOLUTION_OUTPUT_DIR": str(tmp_path / "loaded"),
                                   "SOLUTION_CHECKPOINTS": str(tmp_path / "trained" / "checkpoints"),
                                   "SOLUTION_TIME_BUDGET": "600"})
    assert "preprocessing and training" not in log
    assert (tmp_path / "loaded" / "submission.csv").read_text() == trained.read_text()

    log, _ = run_kernel(tmp_path, {**base, "SOLUTION_OUTPUT_DIR": str(tmp_path / "ranked"),
                                   "SOLUTION_RANKERS": str(tmp_path / "trained" / "rankers"),
                                   "SOLUTION_TIME_BUDGET": "600"})
    assert "preprocessing and training" not in log and log.count("ranking with ") == len(COLLECTIONS)
    assert (tmp_path / "ranked" / "submission.csv").read_text() == trained.read_text()


def test_kernel_starts_fits_from_its_embedded_starts(tmp_path, monkeypatch):
    """`model.init_from: shipped` in the kernel: its embedded starts, written out, are the package's files and
    stand for them (SOLUTION_STARTS), every collection keeping its settings; SOLUTION_INIT_FROM takes every
    collection's place."""
    tree = ast.parse(KERNEL.read_text(encoding="utf-8"))
    embedded = {node.targets[0].slice.value: ast.literal_eval(node.value) for node in tree.body
                if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript)
                and node.targets[0].value.id == "STARTS"}
    assert embedded and set(embedded) == {path.name for path in shipped_starts().glob("*.ckpt")}
    settings, folder = read_settings(), tmp_path / "starts"
    environ: dict[str, str] = {}
    assert kernel.started(settings, environ, embedded, folder) == settings and environ == {STARTS_FOLDER: str(folder)}
    assert all((folder / name).read_bytes() == (shipped_starts() / name).read_bytes() for name in embedded)
    monkeypatch.setenv(STARTS_FOLDER, environ[STARTS_FOLDER])
    shipped = [c for c, chosen in settings.items() if chosen["model"].get("init_from") == "shipped"]
    assert shipped and all(start_checkpoint("shipped", c).parent == folder for c in shipped)
    given = kernel.started(settings, {"SOLUTION_INIT_FROM": "mine"}, embedded, tmp_path / "unused")
    assert {chosen["model"]["init_from"] for chosen in given.values()} == {"mine"}
    assert not (tmp_path / "unused").exists()
