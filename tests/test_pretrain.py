"""Starts: `solution pretrain` fits them on a corpus, and the package's own (`model.init_from: shipped`) fit the
shipped settings of their collection."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import torch

from solution.data.reader import collection_dir
from solution.tools.cli import main
from solution.tools.lightning_cli import lightning_main
from solution.tools.pretrain import pooled_root
from solution.training.checkpoints import CheckpointError
from solution.training.module import shipped_starts
from solution.training.ranker_file import MEMBER_KEYS

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
COLLECTION = "layout:xla:random"
BRIEF = ["--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false", "--trainer.logger", "false",
         "--data.num_workers", "0", "--data.configs_per_graph", "8"]


def corpus_copy(tiny_root: Path, target: Path) -> Path:
    """layout:xla:random of the tiny data, with one train file's copy among its test files (a test file that holds
    runtimes, as the program corpus's do)."""
    source = collection_dir(tiny_root, COLLECTION)
    folder = target.joinpath("npz", *COLLECTION.split(":"))
    shutil.copytree(source, folder)
    shutil.copy(sorted((source / "train").glob("*.npz"))[0], folder / "test" / "timed.npz")
    return target


def fit(tiny_root: Path, tmp_path: Path, *args: str, lr: str = "0", start_lr: str = "0"):
    """A brief fit of the shipped xla:random settings (and `args`, BRIEF over them) at these rates (at 0 the start
    stays as it was), its checkpoints in a folder of its own."""
    folder = tmp_path / f"ckpt{len(list(tmp_path.glob('ckpt*')))}"
    return lightning_main(["fit", "--config", str(CONFIGS / "layout_xla_random.yaml"), "--data.root", str(tiny_root),
                           "--checkpoint.dirpath", str(folder), *args, *BRIEF, "--model.lr", lr,
                           "--model.start_lr", start_lr])


def ranker_weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {key: value for key, value in module.state_dict().items() if key.startswith("ranker.")}


def test_the_pooled_corpus_trains_every_timed_file(tiny_root, tmp_path):
    """Train, valid and the test file with runtimes train; the valid files also pick the checkpoint."""
    corpus = corpus_copy(tiny_root, tmp_path / "corpus")
    source = collection_dir(corpus, COLLECTION)
    pooled = collection_dir(pooled_root(corpus, COLLECTION, tmp_path / "pooled"), COLLECTION)
    names = {split: sorted(p.name for p in (pooled / split).iterdir()) for split in ("train", "valid")}
    valid = [p.name for p in (source / "valid").glob("*.npz")]
    assert names["train"] == sorted([*(p.name for p in (source / "train").glob("*.npz")), *valid, "timed.npz"])
    assert names["valid"] == sorted(valid) and len(valid) > 0
    assert not (pooled / "test").exists()


def test_pretrain_writes_a_start_a_fit_begins_from(tiny_root, tmp_path):
    """The start holds weights and settings (no optimizer state), names its corpus, and a fit of the same settings
    starts at its weights."""
    corpus, out, demo = corpus_copy(tiny_root, tmp_path / "corpus"), tmp_path / "starts", CONFIGS / "demo.yaml"
    assert main(["pretrain", "--data.root", str(corpus), "--out", str(out), "--collections", COLLECTION,
                 "--seconds", "5", "--config", str(demo)]) == 0
    start = torch.load(out / "layout_xla_random.ckpt", weights_only=True)
    assert set(start) == {*MEMBER_KEYS, "start"} and start["start"]["corpus"] == str(corpus)
    assert start["datamodule_hyper_parameters"]["root"] == str(corpus)
    started = fit(tiny_root, tmp_path, "--config", str(demo), "--model.init_from", str(out))
    weights = ranker_weights(started.model)
    assert weights and all(torch.equal(value, start["state_dict"][key]) for key, value in weights.items())


def test_the_shipped_start_fits_the_shipped_settings(tiny_root, tmp_path, caplog):
    """configs/layout_xla_random.yaml starts from the package's start; the weights the start lacks (features that
    begin at zero, added after it was made) keep their zeros; under other widths it is passed over with a line saying
    so, while the same file given by path is refused."""
    saved = torch.load(shipped_starts() / "layout_xla_random.ckpt", weights_only=True)["state_dict"]
    weights = ranker_weights(fit(tiny_root, tmp_path).model)
    assert weights and all(torch.equal(value, saved[key]) for key, value in weights.items() if key in saved)
    assert all(not value.any() for key, value in weights.items() if key not in saved)
    narrow = ["--model.ranker.init_args.hidden", "16"]
    with caplog.at_level(logging.INFO, logger="lightning.pytorch"):  # another test may have quietened it
        module = fit(tiny_root, tmp_path, *narrow).model
    assert "the package's start is of other ranker settings" in caplog.text
    assert not any(torch.equal(value, saved[key]) for key, value in ranker_weights(module).items()
                   if key in saved and value.shape == saved[key].shape and value.numel() > 1)
    try:
        fit(tiny_root, tmp_path, *narrow, "--model.init_from", str(shipped_starts()))
    except CheckpointError as error:
        assert "model.init_from needs a checkpoint of the same ranker settings" in str(error)
    else:
        raise AssertionError("a start of other widths given by path was not refused")


def test_a_fit_from_its_start_trains_at_start_lr(tiny_root, tmp_path):
    """`model.start_lr` is the rate of a fit that takes its start's weights; one whose start is passed over (other
    widths) or off trains at `model.lr`."""
    rates = {"lr": "0.002", "start_lr": "0.0005"}
    narrow = ["--model.ranker.init_args.hidden", "16"]
    runs = {"started": fit(tiny_root, tmp_path, **rates), "passed over": fit(tiny_root, tmp_path, *narrow, **rates),
            "off": fit(tiny_root, tmp_path, "--model.init_from", "null", **rates)}
    initial = {name: run.trainer.optimizers[0].param_groups[0]["initial_lr"] for name, run in runs.items()}
    assert initial == {"started": 0.0005, "passed over": 0.002, "off": 0.002}
