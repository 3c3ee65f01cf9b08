"""The `solution` command: Lightning CLI (fit/validate/test/predict) plus the package's own sub-commands."""

from __future__ import annotations

import importlib
import sys
import warnings

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback

from .callbacks import LRMonitor, SubmissionWriter
from .data import TpuGraphsDataModule
from .module import RankingModule

DEFAULT_RUNS = "runs"


class FitConfigSaver(SaveConfigCallback):
    """Saves the resolved config of a `fit` into its run folder; other sub-commands, and runs without a
    logger (whose log folder would be the working directory), write nothing."""

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit" and trainer.loggers:
            super().setup(trainer, pl_module, stage)


class CLI(LightningCLI):
    """Lightning CLI whose model takes its task and input width from the data module."""

    def add_arguments_to_parser(self, parser) -> None:
        parser.link_arguments("data.task", "model.task", apply_on="instantiate")
        parser.link_arguments("data.node_feat_dim", "model.node_feat_dim", apply_on="instantiate")
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults({"checkpoint.monitor": "val/score", "checkpoint.mode": "max",
                             "checkpoint.save_last": True, "checkpoint.filename": "best"})
        parser.add_lightning_class_args(SubmissionWriter, "submission")
        parser.add_lightning_class_args(LRMonitor, "lr_monitor")


def lightning_main(args: list[str], run: bool = True) -> CLI:
    """Run one Lightning sub-command (`fit`, `validate`, `test`, `predict`) or build it with run=False."""
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter")  # `main` passes sys.argv on
    return CLI(
        RankingModule,
        TpuGraphsDataModule,
        args=args,
        run=run,
        seed_everything_default=0,
        save_config_callback=FitConfigSaver,
        save_config_kwargs={"overwrite": True},
        trainer_defaults={
            "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": DEFAULT_RUNS}},
        },
    )


# the package's own sub-commands: module and function, imported only when used
COMMANDS = {
    "synth": ("synth", "main"),
    "inspect": ("inspection", "main"),
    "submit": ("submission", "submit_main"),
    "check-submission": ("submission", "check_main"),
    "score": ("submission", "score_main"),
    "demo": ("demo", "main"),
    "kernel": ("bundle", "main"),
}


USAGE = """usage: solution {fit,validate,test,predict} --config configs/<collection>.yaml [--data.root PATH] ...
       solution demo | synth | inspect | submit | check-submission | score | kernel  [--help]"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if argv[0] in COMMANDS:
        module, function = COMMANDS[argv[0]]
        return int(getattr(importlib.import_module(f"solution.{module}"), function)(argv[1:]) or 0)
    lightning_main(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
