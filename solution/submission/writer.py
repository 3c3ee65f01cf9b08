"""The predict callback that writes a collection's submission CSV and raw scores."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import numpy as np

from .ensemble import file_record, write_run
from .files import SubmissionError


class SubmissionWriter(pl.Callback):
    """After `predict`, writes `<out_dir>/<collection>.csv` and the raw per-config scores beside it, with the digest
    and config count of each data file they cover (from every process's predictions, written once)."""

    def __init__(self, out_dir: str = "submissions") -> None:
        self.out_dir = Path(out_dir)

    def on_predict_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        datamodule = trainer.datamodule
        graphs = datamodule.graphs(datamodule.hparams.predict_split)
        table = pl_module.take_predictions()
        if not trainer.is_global_zero:
            return
        scores, files = {}, {}
        for graph_id in table:
            rows, mean, _ = table.graph(graph_id)
            if not np.array_equal(rows, np.arange(graphs.num_configs(graph_id))):
                raise SubmissionError(f"{graphs.paths[graph_id]}: predictions cover {len(rows)} of "
                                      f"{graphs.num_configs(graph_id)} configs; expected every config ranked "
                                      "(nothing was written)")
            path = graphs.paths[graph_id]
            scores[path.stem] = mean
            files[path.stem] = file_record(path, len(rows), graphs.cache)
        write_run(self.out_dir, datamodule.hparams.collection, datamodule.hparams.predict_split, scores, files)
