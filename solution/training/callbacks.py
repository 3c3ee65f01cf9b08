"""Trainer callbacks and plugins: a learning-rate monitor that tolerates no logger, a best checkpoint that ties go
to the later epoch, atomic checkpoint writes, and the predict callback that writes a collection's submission part."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from ..atomic import atomic_write
from ..submission.ensemble import write_scores
from .checkpoints import read_checkpoint
from .ranker_file import table_row_scores


class LRMonitor(LearningRateMonitor):
    """Logs the learning rate when a logger is set; silently does nothing with `--trainer.logger false`."""

    def on_train_start(self, trainer: pl.Trainer, *args, **kwargs) -> None:
        if trainer.loggers:
            super().on_train_start(trainer, *args, **kwargs)

    def on_train_batch_start(self, trainer: pl.Trainer, *args, **kwargs) -> None:
        if trainer.loggers:
            super().on_train_batch_start(trainer, *args, **kwargs)

    def on_train_epoch_start(self, trainer: pl.Trainer, *args, **kwargs) -> None:
        if trainer.loggers:
            super().on_train_epoch_start(trainer, *args, **kwargs)


class LaterOnTies(ModelCheckpoint):
    """The best checkpoint by its monitored metric, a tie going to the later epoch: a metric that saturates on the
    valid files (tile's top-5 score reaches 1.0 within a few epochs) keeps the most trained of the equal models
    rather than the first."""

    def check_monitor_top_k(self, trainer: pl.Trainer, current: torch.Tensor | None = None) -> bool:
        if current is None or self.save_top_k != 1 or not self.best_k_models:
            return super().check_monitor_top_k(trainer, current)
        best = self.best_k_models[self.kth_best_model_path]
        tied_or_better = current >= best if self.mode == "max" else current <= best
        return trainer.strategy.reduce_boolean_decision(bool(tied_or_better))


class AtomicCheckpointIO(TorchCheckpointIO):
    """Checkpoints written to a temporary file beside the target and renamed into place: a crash leaves the old
    checkpoint or none (Lightning's own way stages the file in /tmp and moves it, a copy across disks); read back
    as data only (`read_checkpoint`: weights_only, registered classes)."""

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        with atomic_write(path, "wb") as handle:
            torch.save(checkpoint, handle)

    def load_checkpoint(self, path, map_location=None, weights_only=None) -> dict:
        return read_checkpoint(path)


class SubmissionWriter(pl.Callback):
    """After `predict`, writes `<out_dir>/<collection>.csv` and the raw per-config scores beside it, with the digest
    and config count of each data file they cover (from every process's predictions, written once)."""

    def __init__(self, out_dir: str = "submissions") -> None:
        self.out_dir = Path(out_dir)

    def on_predict_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        datamodule = trainer.datamodule
        split = datamodule.hparams.predict_split
        table = pl_module.take_predictions()
        if trainer.is_global_zero:
            graphs = datamodule.graphs(split)
            scores = {index: table_row_scores(table, graphs, index) for index in table}
            write_scores(graphs, scores, self.out_dir, datamodule.hparams.collection, split)
