"""The `solution` command: Lightning CLI (fit/validate/test/predict) plus the package's own sub-commands."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningCLI

from .callbacks import LRMonitor, SubmissionWriter
from .data import TpuGraphsDataModule
from .module import RankingModule

DEFAULT_RUNS = "runs"


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
    return CLI(
        RankingModule,
        TpuGraphsDataModule,
        args=args,
        run=run,
        seed_everything_default=0,
        save_config_kwargs={"overwrite": True},
        trainer_defaults={
            "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": DEFAULT_RUNS}},
        },
    )


def _commands() -> dict[str, Callable[[list[str]], object]]:
    from . import demo, inspection, submission, synth  # imported on use: each pulls in only what it needs

    return {
        "synth": synth.main,
        "inspect": inspection.main,
        "submit": submission.submit_main,
        "check-submission": submission.check_main,
        "score": submission.score_main,
        "demo": demo.main,
    }


USAGE = """usage: solution {fit,validate,test,predict} --config configs/<collection>.yaml [--data.root PATH] ...
       solution demo | synth | inspect | submit | check-submission | score  [--help]"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    commands = _commands()
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if argv[0] in commands:
        return int(commands[argv[0]](argv[1:]) or 0)
    lightning_main(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
