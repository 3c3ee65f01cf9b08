"""Trainer callbacks and plugins: a learning-rate monitor that tolerates no logger, a best checkpoint that ties go
to the later epoch, and atomic checkpoint writes."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from ..atomic import atomic_write
from .checkpoints import read_checkpoint


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
