"""Faults and scale: a killed fit resumes to the same metrics, writes survive crashes, faults get clear messages,
graphs shard over processes, DDP validation equals one process, bf16 and compile run."""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from solution.atomic import atomic_write
from solution.data.cache import ArrayCache
from solution.data.reader import DataError
from solution.data.sets import ShardSampler
from solution.tools.lightning_cli import lightning_main
from solution.tools.tracking import SUMMARY

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
LAYOUT = ["--config", str(CONFIGS / "layout_xla_default.yaml"), "--config", str(CONFIGS / "demo.yaml")]


def quiet(root: Path, runs: Path) -> list[str]:
    return ["--data.root", str(root), "--trainer.enable_progress_bar", "false",
            "--trainer.logger.init_args.save_dir", str(runs)]


def solution(*args: str) -> list[str]:
    return [sys.executable, "-m", "solution", *args]


def summaries(runs: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(runs.rglob(SUMMARY))]


def wait_for(predicate, process: subprocess.Popen, seconds: float = 180) -> None:
    end = time.monotonic() + seconds
    while not predicate():
        assert process.poll() is None, "the fit ended before it could be killed"
        assert time.monotonic() < end, "timed out waiting for the fit"
        time.sleep(0.05)


# ---------------------------------------------------------------- resume after a kill


@pytest.mark.parametrize("kill_when", ["before the first checkpoint", "after a checkpoint"])
def test_killed_fit_resumes_with_ckpt_path_last_to_the_same_metrics(tiny_root, tmp_path, kill_when):
    fit = ["fit", *LAYOUT, "--trainer.max_epochs", "6", "--trainer.check_val_every_n_epoch", "2",
           "--trainer.deterministic", "true"]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    subprocess.run(solution(*fit, *quiet(tiny_root, whole)), check=True, capture_output=True)
    process = subprocess.Popen(solution(*fit, *quiet(tiny_root, killed)), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    if kill_when == "after a checkpoint":
        wait_for(lambda: any(killed.rglob("last.ckpt")), process)
    else:
        wait_for(lambda: any(killed.rglob(SUMMARY)), process)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert [s["status"] for s in summaries(killed)] == ["running"]

    subprocess.run(solution(*fit, *quiet(tiny_root, killed), "--ckpt_path", "last"), check=True,
                   capture_output=True)
    (expected,), (resumed,) = summaries(whole), summaries(killed)  # resumed in the killed run's own folder
    assert resumed["status"] == "finished" and resumed["run_id"] == summaries(killed)[0]["run_id"]
    assert resumed["last"] == expected["last"] and resumed["best"] == expected["best"]
    assert resumed["last"]["epoch"] == 5


def test_ckpt_path_last_without_an_unfinished_run_says_what_to_do(tiny_root, tmp_path):
    with pytest.raises(SystemExit, match="no unfinished fit with these settings.*--checkpoint.dirpath"):
        lightning_main(["fit", *LAYOUT, *quiet(tiny_root, tmp_path), "--ckpt_path", "last"])


# ---------------------------------------------------------------- writes under faults


def test_a_crash_mid_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "submission.csv"
    target.write_text("old\n")
    with pytest.raises(KeyboardInterrupt):
        with atomic_write(target) as handle:
            handle.write("half a new fi")
            raise KeyboardInterrupt
    assert target.read_text() == "old\n" and os.listdir(tmp_path) == ["submission.csv"]


@pytest.mark.parametrize("code, words", [(errno.ENOSPC, "the disk is full"), (errno.EACCES, "permission denied")])
def test_disk_full_and_permission_denied_name_the_file(tmp_path, code, words):
    target = tmp_path / "per_graph.csv"
    target.write_text("old\n")
    with pytest.raises(OSError, match=f"cannot write {target}: {words}.*the old file is unchanged"):
        with atomic_write(target):
            raise OSError(code, os.strerror(code))
    assert target.read_text() == "old\n" and os.listdir(tmp_path) == ["per_graph.csv"]


def test_an_unwritable_cache_folder_says_how_to_choose_another(tmp_path, monkeypatch):
    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(tempfile, "mkdtemp", denied)
    source = tmp_path / "graph.npz"
    source.write_bytes(b"x")
    with pytest.raises(OSError, match=f"cannot write the preprocessing cache {tmp_path / 'cache'}.*SOLUTION_CACHE"):
        ArrayCache(tmp_path / "cache").load(source, {}, lambda: ({}, {}))


@pytest.mark.parametrize("fault, message", [("missing", "valid.*no such split folder"),
                                            ("empty", "valid.*no .npz files")])
def test_a_missing_or_empty_split_is_named(tiny_root, tmp_path, fault, message):
    root = shutil.copytree(tiny_root, tmp_path / "data")
    split = next(root.rglob("layout/xla/default/valid"))
    shutil.rmtree(split)
    if fault == "empty":
        split.mkdir()
    with pytest.raises(DataError, match=message):
        lightning_main(["fit", *LAYOUT, *quiet(root, tmp_path / "runs"), "--trainer.max_epochs", "1"])


def test_fit_never_writes_into_the_data_folder(tiny_root, tmp_path):
    def tree(root: Path) -> dict[str, tuple[int, int]]:
        return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}

    root = shutil.copytree(tiny_root, tmp_path / "data")
    before = tree(root)
    lightning_main(["fit", *LAYOUT, *quiet(root, tmp_path / "runs"), "--trainer.max_epochs", "1",
                    "--data.cache_dir", str(tmp_path / "cache")])
    assert tree(root) == before and any((tmp_path / "cache").iterdir())


# ---------------------------------------------------------------- sharding over processes


def test_training_shards_cover_every_graph_in_an_order_fixed_by_seed_and_epoch():
    graphs = list(range(10))
    shards = [ShardSampler(graphs, train=True, seed=3, rank=r, world=3) for r in range(3)]
    for shard in shards:
        shard.set_epoch(1)
    drawn = [list(shard) for shard in shards]
    assert [len(d) for d in drawn] == [len(s) for s in shards] == [4, 4, 4]  # padded to equal steps
    assert {i for d in drawn for i, _ in d} == set(graphs)
    assert all(seed == (3, 1, i) for d in drawn for i, seed in d)  # the draw depends on seed, epoch, graph

    one = ShardSampler(graphs, train=True, seed=3)
    one.set_epoch(1)
    first = list(one)
    assert sorted(i for i, _ in first) == graphs and list(one) == first  # a resumed epoch draws the same
    one.set_epoch(2)
    assert [i for i, _ in one] != [i for i, _ in first]


def test_evaluation_shards_hold_every_item_exactly_once():
    items = list(range(11))
    shards = [ShardSampler(items, train=False, rank=r, world=4) for r in range(4)]
    assert sorted(i for shard in shards for i in shard) == items
    assert [len(shard) for shard in shards] == [len(list(shard)) for shard in shards] == [3, 3, 3, 2]


DRIVER = """
import json, sys
from solution.tools.lightning_cli import lightning_main
cli = lightning_main(sys.argv[2:])
if cli.trainer.is_global_zero:
    json.dump({k: float(v) for k, v in cli.trainer.callback_metrics.items()}, open(sys.argv[1], "w"))
"""


def test_ddp_fit_and_validation_over_two_processes_match_one_process(tiny_root, tmp_path):
    ddp = ["--trainer.accelerator", "cpu", "--trainer.strategy", "ddp", "--trainer.devices", "2"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    fit = subprocess.run(solution("fit", *LAYOUT, *quiet(tiny_root, tmp_path / "runs"), *ddp,
                                  "--trainer.max_epochs", "2", "--trainer.check_val_every_n_epoch", "1"),
                         capture_output=True, text=True, env=env)
    assert fit.returncode == 0, fit.stderr[-3000:]
    (summary,) = summaries(tmp_path / "runs")
    assert summary["status"] == "finished" and math.isfinite(summary["last"]["val/score"])
    checkpoint = next((tmp_path / "runs").rglob("last.ckpt"))

    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    metrics = {}
    for name, extra in {"one": ["--trainer.devices", "1"], "two": ddp}.items():
        out = tmp_path / f"{name}.json"
        run = subprocess.run([sys.executable, str(driver), str(out), "validate", *LAYOUT,
                              *quiet(tiny_root, tmp_path / "runs"), "--trainer.accelerator", "cpu", *extra,
                              "--ckpt_path", str(checkpoint)], capture_output=True, text=True, env=env)
        assert run.returncode == 0, run.stderr[-3000:]
        metrics[name] = json.loads(out.read_text())
    assert set(metrics["one"]) >= {"val/score", "val/kendall_tau", "val/opa"}
    assert metrics["two"] == pytest.approx(metrics["one"], abs=1e-6)
    assert metrics["one"]["val/score"] == pytest.approx(summary["last"]["val/score"], abs=1e-6)


# ---------------------------------------------------------------- precision and compilation settings


@pytest.mark.parametrize("setting", [["--trainer.precision", "bf16-mixed"], ["--model.compile", "true"]])
def test_bf16_and_compile_settings_train(tiny_root, tmp_path, setting):
    cli = lightning_main(["fit", *LAYOUT, *quiet(tiny_root, tmp_path), "--trainer.max_epochs", "1",
                          "--trainer.check_val_every_n_epoch", "1", "--trainer.limit_train_batches", "2", *setting])
    score = float(cli.trainer.callback_metrics["val/score"])
    assert -1 <= score <= 1 and math.isfinite(float(cli.trainer.callback_metrics["train/loss"]))


def test_a_crash_while_saving_a_checkpoint_keeps_the_previous_one(tmp_path, monkeypatch):
    import torch

    from solution.training.callbacks import AtomicCheckpointIO

    io, path = AtomicCheckpointIO(), tmp_path / "last.ckpt"
    io.save_checkpoint({"epoch": 1}, path)

    def crash(obj, handle, *args, **kwargs):
        handle.write(b"torn")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"epoch": 2}, path)
    monkeypatch.undo()
    assert torch.load(path) == {"epoch": 1} and os.listdir(tmp_path) == ["last.ckpt"]


@pytest.mark.parametrize("mode,best,tied,better,worse", [("max", 1.0, 1.0, 1.2, 0.99), ("min", 0.5, 0.5, 0.4, 0.6)])
def test_the_best_checkpoint_keeps_the_later_of_tied_scores(mode, best, tied, better, worse):
    """A metric that saturates (tile's top-5 score at 1.0) keeps the most trained of the tied models; Lightning's
    own rule keeps the first."""
    from types import SimpleNamespace

    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint

    from solution.training.callbacks import LaterOnTies

    trainer = SimpleNamespace(strategy=SimpleNamespace(reduce_boolean_decision=lambda decision: decision))
    later, first = LaterOnTies(monitor="val/score", mode=mode), ModelCheckpoint(monitor="val/score", mode=mode)
    assert later.check_monitor_top_k(trainer, torch.tensor(worse))  # nothing saved yet: any score is the best
    for callback in (later, first):
        callback.best_k_models, callback.kth_best_model_path = {"best.ckpt": torch.tensor(best)}, "best.ckpt"
    assert later.check_monitor_top_k(trainer, torch.tensor(tied)) and not first.check_monitor_top_k(
        trainer, torch.tensor(tied))
    assert later.check_monitor_top_k(trainer, torch.tensor(better))
    assert not later.check_monitor_top_k(trainer, torch.tensor(worse))
    assert not later.check_monitor_top_k(trainer, None)
