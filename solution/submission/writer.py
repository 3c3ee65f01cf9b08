"""The predict callback that writes a collection's submission CSV and raw scores."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl

from .ensemble import write_predictions


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
            write_predictions(table, datamodule.graphs(split), self.out_dir, datamodule.hparams.collection, split)
