"""Trainer callbacks and plugins: a learning-rate monitor that tolerates no logger, and atomic checkpoint writes."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import LearningRateMonitor
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


class AtomicCheckpointIO(TorchCheckpointIO):
    """Checkpoints written to a temporary file beside the target and renamed into place: a crash leaves the old
    checkpoint or none (Lightning's own way stages the file in /tmp and moves it, a copy across disks); read back
    as data only (`read_checkpoint`: weights_only, registered classes)."""

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        with atomic_write(path, "wb") as handle:
            torch.save(checkpoint, handle)

    def load_checkpoint(self, path, map_location=None, weights_only=None) -> dict:
        return read_checkpoint(path)
