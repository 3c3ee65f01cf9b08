"""The LightningModule: a thin training loop around an injected ranker and loss (`model.ranker`, `model.loss`
in the YAML): standardize features, score configs, train with the loss, score validation by the task's metric."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from lightning.pytorch.utilities import rank_zero_info

from ..data.batch import Batch
from ..data.tasks import TASKS
from ..metrics import mean_over_graphs
from ..models import scatter
from ..models.losses import RankingLoss
from ..models.rankers import Ranker
from ..models.spec import build
from ..submission.files import collection_file_stem
from .checkpoints import CheckpointError, read_checkpoint
from .inference import Scorer, ScoreTable, standardized_scores, with_widths

SHIPPED = "shipped"  # `model.init_from: shipped`: the package's starts, shipped_starts()
STARTS_FOLDER = "SOLUTION_STARTS"  # environment: a folder that stands for the package's starts


class RankingModule(pl.LightningModule):
    """Ranks the configs of a graph with `ranker` (lower score = faster), trained with `loss`; the task (from
    the data module) names the metric and whether config features are standardized."""

    def __init__(
        self,
        ranker: Ranker,
        loss: RankingLoss,
        task: str = "layout",
        lr: float = 1e-3,
        weight_decay: float = 1e-4,
        warmup_steps: int = 100,
        compile: bool = False,
        init_from: str | None = None,  # a checkpoint (or folder of them) whose weights and standardizers start the fit
        start_lr: float | None = None,  # the learning rate of a fit that takes its start from init_from; null: lr
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["ranker", "loss", "init_from"])
        scorer = Scorer(ranker, task)  # its parts, under the same keys: a checkpoint also loads into a Scorer
        self.ranker, self.node_scaler, self.config_scaler = scorer.ranker, scorer.node_scaler, scorer.config_scaler
        self.loss_fn = build(loss)
        self.hparams.update(ranker=self.ranker.spec, loss=self.loss_fn.spec)  # a checkpoint's hparams hold specs
        self.task = TASKS[task]
        self.register_buffer("scalers_fitted", torch.tensor(False))
        self.val_table = self.last_table = ScoreTable()
        self.graph_results: dict[int, dict[str, float]] = {}
        self.predictions = ScoreTable()
        self.init_from = init_from
        self.took_start = False  # whether this fit's weights came from init_from (start_lr applies)

    def start_from(self, path: str | Path, strict: bool = True) -> None:
        """Start training from a checkpoint of the same settings (e.g. a fit on the program corpus): its ranker's
        weights and its input standardizers, which then stay as they are. Weights it lacks that begin at zero (a
        feature's projection added after the start was made) keep their zeros. One of other widths is refused, or
        with `strict` off (the package's own starts, under settings of other widths) passed over: random weights."""
        state = read_checkpoint(path)["state_dict"]
        mine = self.state_dict()
        wrong = sorted(key for key, value in mine.items()
                       if (state[key].shape != value.shape if key in state else value.any()))
        if wrong and not strict:
            rank_zero_info(f"{path}: the package's start is of other ranker settings (at {wrong[0]}); this fit "
                           "starts from random weights")
            return
        if wrong:
            raise CheckpointError(f"{path}: model.init_from needs a checkpoint of the same ranker settings; its "
                                  f"weights lack or differ in shape at {', '.join(wrong[:5])} (model.init_from: null "
                                  "starts from random weights)")
        self.load_state_dict({key: state.get(key, value) for key, value in mine.items()})
        self.took_start = True

    def configure_model(self) -> None:
        if self.hparams.compile:  # in place: checkpoints keep the same keys with compile on or off
            self.ranker.compile(dynamic=True)

    def setup(self, stage: str) -> None:
        if not scatter.AVAILABLE and self.trainer.strategy.root_device.type == "cuda":
            rank_zero_info("torch_scatter is not installed: scatter reductions on the GPU run in plain torch (the "
                           "same numbers, slower; `make scatter` builds it)")
        datamodule = getattr(self.trainer, "datamodule", None)
        if stage == "fit" and self.init_from and not bool(self.scalers_fitted) and datamodule is not None:
            self.start_from(start_checkpoint(self.init_from, datamodule.hparams.collection),
                            strict=self.init_from != SHIPPED)
        if stage == "fit" and not bool(self.scalers_fitted) and datamodule is not None:
            sums = datamodule.feature_sums()
            self.node_scaler.fit(*sums["node_feat"])
            if self.config_scaler is not None:
                self.config_scaler.fit(*sums["config_feat"])
            self.scalers_fitted.fill_(True)

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: str | Path, *args: Any, **kwargs: Any) -> RankingModule:
        """Lightning's loader, after the checkpoint's classes are checked against the registry, and always with
        `weights_only` (no pickled code runs)."""
        read_checkpoint(checkpoint_path)
        return super().load_from_checkpoint(checkpoint_path, *args, **{**kwargs, "weights_only": True})

    def forward(self, batch: Batch) -> torch.Tensor:
        return standardized_scores(self.ranker, self.node_scaler, self.config_scaler, batch)  # [G, C]

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        scores = self(batch)
        loss = self.loss_fn(scores, batch.target, batch.config_mask)
        self.log("train/loss", loss, prog_bar=True, on_epoch=True, batch_size=batch.num_graphs)
        return loss

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self.val_table.add(batch, self(batch))

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self.validation_step(batch, batch_idx)

    def on_validation_epoch_end(self) -> None:
        self._log_table("val")

    def on_test_start(self) -> None:
        datamodule = self.trainer.datamodule
        split = datamodule.hparams.test_split
        rank_zero_info(f"scoring the {split} split of {datamodule.hparams.collection}: "
                       f"{len(datamodule.graphs(split))} files, metrics logged as test/{split}/...")

    def on_test_epoch_end(self) -> None:
        self._log_table(f"test/{self.trainer.datamodule.hparams.test_split}")

    def _log_table(self, prefix: str) -> None:
        """Logs the mean of each per-graph metric; keeps the table and per-graph metrics as `last_table` and
        `graph_results` (graph id -> metrics) for run records."""
        self.last_table, self.val_table = self.val_table, ScoreTable()
        self.last_table.gather()  # each process scored its shard: metrics over the whole set, once
        self.graph_results = {g: self.task.graph_metrics(*self.last_table.graph(g)[1:]) for g in self.last_table}
        per_graph = list(self.graph_results.values())
        if not per_graph:
            return
        for name in per_graph[0]:
            self.log(f"{prefix}/{name}", mean_over_graphs(m[name] for m in per_graph), prog_bar=name == "score",
                     sync_dist=True)  # the same value on every process: averaging leaves it unchanged

    def predict_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        scores = self(batch)
        self.predictions.add(batch, scores)
        return scores

    def take_predictions(self) -> ScoreTable:
        """The predictions of every process so far, leaving an empty table for the next predict."""
        table, self.predictions = self.predictions, ScoreTable()
        table.gather()
        return table

    def configure_optimizers(self):
        # fused: one kernel for every parameter, the same updates (within 3e-8) in a fifth of the CPU time of the
        # per-tensor loop, which costs 5-7 ms a step (benchmarks/optimizer.py); under mixed precision the loop, as
        # Lightning's MixedPrecision will not clip the gradients of an optimizer that unscales them itself
        fused = not isinstance(self.trainer.precision_plugin, MixedPrecision)
        started = self.took_start and self.hparams.start_lr is not None
        lr = self.hparams.start_lr if started else self.hparams.lr
        optimizer = torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=self.hparams.weight_decay, fused=fused)
        total = max(int(self.trainer.estimated_stepping_batches), 1)
        warmup = min(self.hparams.warmup_steps, total - 1)

        def factor(step: int) -> float:  # linear warm-up, then cosine to zero
            if step < warmup:
                return (step + 1) / (warmup + 1)
            return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(total - warmup, 1)))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def start_checkpoint(init_from: str | Path, collection: str) -> Path:
    """`model.init_from`: a checkpoint file, a folder of <collection>.ckpt (`solution run`'s checkpoints/,
    `solution pretrain`'s output) holding this collection's, or `shipped`: the package's own starts (solution/starts,
    fitted on its program corpus)."""
    path = shipped_starts() if str(init_from) == SHIPPED else Path(init_from)
    if path.is_dir():
        path = path / f"{collection_file_stem(collection)}.ckpt"
    if not path.is_file():
        raise FileNotFoundError(f"model.init_from={init_from}: no checkpoint {path} to start {collection} from")
    return path


def shipped_starts() -> Path:
    """The package's folder of starts (`solution pretrain` on its program corpus), or the folder SOLUTION_STARTS
    names (the kernel's, where it writes the starts it embeds)."""
    return Path(os.environ.get(STARTS_FOLDER) or Path(__file__).resolve().parents[1] / "starts")


def build_module(model: Mapping, datamodule) -> RankingModule:
    """The module of `model` settings (ranker and loss as class_path/init_args), its task and input widths from
    the data module."""
    ranker = with_widths(model["ranker"], datamodule.node_feat_dim, datamodule.config_width)
    rest = {key: value for key, value in model.items() if key not in ("ranker", "task")}
    return RankingModule(ranker=ranker, task=datamodule.task.name, **rest)
