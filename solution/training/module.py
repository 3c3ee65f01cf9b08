"""The LightningModule: standardize features, score configs, train with a ranking loss, score validation."""

from __future__ import annotations

import math

import lightning.pytorch as pl
import numpy as np
import torch

from ..constants import TILE_CONFIG_DIM
from ..data.features import Standardizer
from ..models.baselines import ConfigOnlyRanker
from ..models.losses import get_loss
from ..models.rankers import build_model
from .metrics import (
    mean_over_graphs,
    ordered_pair_accuracy,
    ranking_tau,
    submitted_positions,
    tile_score,
    tile_topk_error,
)
from .segments import SegmentTraining


VARIANTS = ("graph", "config_only")


class ScoreTable:
    """Per-graph scores gathered from chunks (and averaged over repeated chunkings), indexed by config row."""

    def __init__(self) -> None:
        self.parts: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}

    def add(self, batch: dict[str, torch.Tensor], scores: torch.Tensor) -> None:
        mask = batch["config_mask"].cpu().numpy()  # [G, C]
        rows, target = batch["config_index"].cpu().numpy(), batch["target"].cpu().numpy()
        values = scores.detach().float().cpu().numpy()
        for g, graph_id in enumerate(batch["graph_id"].tolist()):
            keep = mask[g]
            self.parts.setdefault(graph_id, []).append((rows[g][keep], values[g][keep], target[g][keep]))

    def graph(self, graph_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(config rows seen, their mean scores, their targets) of one graph, in row order."""
        rows, values, target = (np.concatenate(x) for x in zip(*self.parts[graph_id]))
        seen, inverse = np.unique(rows, return_inverse=True)
        mean = np.bincount(inverse, weights=values) / np.bincount(inverse)
        targets = np.zeros(len(seen))
        targets[inverse] = target
        return seen, mean, targets

    def __iter__(self):
        return iter(sorted(self.parts))

    def gather(self) -> None:
        """Merge every process's parts into this table, on every process (nothing to do in one process)."""
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            return
        every: list[dict | None] = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(every, self.parts)
        self.parts = {}
        for parts in every:
            for graph_id, pieces in parts.items():
                self.parts.setdefault(graph_id, []).extend(pieces)


def graph_metrics(task: str, scores: np.ndarray, target: np.ndarray) -> dict[str, float]:
    """The collection's metrics for one graph; `score` is the one the competition averages."""
    if task == "tile":
        return {"score": tile_score(scores, target), **{f"top{k}_error": tile_topk_error(scores, target, k)
                                                        for k in (1, 5, 10)}}
    tau = ranking_tau(scores, target)  # of the ranking the submission would hold, as `solution score` computes it
    return {"score": tau, "kendall_tau": tau, "opa": ordered_pair_accuracy(submitted_positions(scores), target)}


class RankingModule(pl.LightningModule):
    """Ranks the configs of a graph: lower score = faster. Hyper-parameters come from the YAML configs."""

    def __init__(
        self,
        task: str = "layout",
        node_feat_dim: int = 152,
        variant: str = "graph",
        hidden: int = 128,
        opcode_dim: int = 32,
        graph_layers: int = 2,
        config_layers: int = 2,
        cross_attention: bool = True,
        heads: int = 4,
        temperature: float = 0.5,
        edge_direction: str = "forward",
        dropout: float = 0.0,
        encode_once: bool = True,
        compile: bool = False,
        segment_sampled: int = 0,
        segment_keep_stale: float = 0.5,
        segment_refresh_every: int = 1,
        segment_halo: int = 0,
        head_epochs: int = 0,
        loss: str = "hinge",
        margin: float = 1.0,
        lr: float = 1e-3,
        weight_decay: float = 1e-4,
        warmup_steps: int = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        if variant not in VARIANTS:
            raise ValueError(f"variant={variant!r}; expected one of {', '.join(VARIANTS)}")
        if head_epochs and variant != "graph":
            raise ValueError(f"head_epochs={head_epochs} needs variant='graph' (a model with a readout head)")
        self.model = ConfigOnlyRanker(task, hidden) if variant == "config_only" else build_model(
            task, node_feat_dim, hidden=hidden, opcode_dim=opcode_dim, graph_layers=graph_layers,
            config_layers=config_layers, cross_attention=cross_attention, heads=heads, temperature=temperature,
            edge_direction=edge_direction, dropout=dropout, encode_once=encode_once,
        )
        self.node_scaler = Standardizer(node_feat_dim)
        self.config_scaler = Standardizer(TILE_CONFIG_DIM) if task == "tile" else None
        self.register_buffer("scalers_fitted", torch.tensor(False))
        self.segments = SegmentTraining(segment_sampled, segment_keep_stale, segment_refresh_every, segment_halo)
        self.loss_fn = get_loss(loss, **({"margin": margin} if loss == "hinge" else {}))
        self.val_table = self.last_table = ScoreTable()
        self.graph_results: dict[int, dict[str, float]] = {}
        self.predictions = ScoreTable()

    def configure_model(self) -> None:
        if self.hparams.compile:  # in place: checkpoints keep the same keys with compile on or off
            self.model.compile(dynamic=True)

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None)
        if stage == "fit" and not bool(self.scalers_fitted) and datamodule is not None:
            sums = datamodule.feature_sums()
            self.node_scaler.fit(*sums["node_feat"])
            if self.config_scaler is not None:
                self.config_scaler.fit(*sums["config_feat"])
            self.scalers_fitted.fill_(True)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        batch = dict(batch, node_feat=self.node_scaler(batch["node_feat"]))
        if self.config_scaler is not None:
            batch["config_feat"] = self.config_scaler(batch["config_feat"])
        return self._score(batch).float()  # [G, C]; float32 also under bf16 autocast

    def _score(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The model's scores; batches with a graph over the budget (data.segment_nodes) go through segment
        training."""
        if "node_segment" not in batch or self.hparams.variant != "graph":
            return self.model(batch)
        mode = ("head" if self.head_phase else "train") if self.training else "eval"
        return self.segments.scores(self.model, batch, mode, self.current_epoch if self._trainer else 0)

    @property
    def head_phase(self) -> bool:
        """Whether training is in its last `head_epochs`, which train the readout only."""
        trainer = self._trainer
        return bool(self.hparams.head_epochs) and trainer is not None and trainer.max_epochs is not None and \
            self.current_epoch >= trainer.max_epochs - self.hparams.head_epochs

    def on_train_epoch_start(self) -> None:
        if self.hparams.head_epochs:  # the head phase freezes everything but the readout
            self.model.requires_grad_(not self.head_phase)
            self.model.readout.requires_grad_(True)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        scores = self(batch)
        loss = self.loss_fn(scores, batch["target"], batch["config_mask"])
        self.log("train/loss", loss, prog_bar=True, on_epoch=True, batch_size=batch["graph_id"].numel())
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.val_table.add(batch, self(batch))

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.validation_step(batch, batch_idx)

    def on_validation_epoch_end(self) -> None:
        self._log_table("val")

    def on_test_epoch_end(self) -> None:
        self._log_table("test")

    def _log_table(self, prefix: str) -> None:
        """Logs the mean of each per-graph metric; keeps the table and per-graph metrics as `last_table` and
        `graph_results` (graph id -> metrics) for run records."""
        self.last_table, self.val_table = self.val_table, ScoreTable()
        self.last_table.gather()  # each process scored its shard: metrics over the whole set, once
        self.graph_results = {g: graph_metrics(self.hparams.task, *self.last_table.graph(g)[1:])
                              for g in self.last_table}
        per_graph = list(self.graph_results.values())
        if not per_graph:
            return
        for name in per_graph[0]:
            self.log(f"{prefix}/{name}", mean_over_graphs(m[name] for m in per_graph), prog_bar=name == "score",
                     sync_dist=True)  # the same value on every process: averaging leaves it unchanged

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        scores = self(batch)
        self.predictions.add(batch, scores)
        return scores

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        total = max(int(self.trainer.estimated_stepping_batches), 1)
        warmup = min(self.hparams.warmup_steps, total - 1)

        def factor(step: int) -> float:  # linear warm-up, then cosine to zero
            if step < warmup:
                return (step + 1) / (warmup + 1)
            return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(total - warmup, 1)))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
