"""The `solution` command: Lightning CLI (fit/validate/test/predict) plus the package's own sub-commands."""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from pathlib import Path

from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningCLI

from .callbacks import LRMonitor, SubmissionWriter, collection_file_stem
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
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter")  # `main` passes sys.argv on
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


def submit_main(argv: list[str]) -> int:
    """`solution submit`: merge the five collection CSVs into one submission and check it."""
    from .constants import COLLECTIONS
    from .submission import SubmissionError, merge

    parser = argparse.ArgumentParser(prog="solution submit", description=submit_main.__doc__)
    parser.add_argument("--data.root", "--root", dest="root", default=None, help="data root, to check against")
    parser.add_argument("--dir", default="submissions", help="folder holding <collection>.csv files")
    parser.add_argument("--out", default=None, help="output file (default: <dir>/submission.csv)")
    args = parser.parse_args(argv)
    folder = Path(args.dir)
    inputs = [folder / f"{collection_file_stem(c)}.csv" for c in COLLECTIONS]
    missing = [str(p) for p in inputs if not p.is_file()]
    if missing:
        print(f"error: missing {', '.join(missing)}: run `solution predict` for those collections first")
        return 1
    try:
        out = merge(inputs, Path(args.out) if args.out else folder / "submission.csv", args.root)
    except SubmissionError as err:
        print(f"error: {err}")
        return 1
    print(f"wrote {out}" + (" (checked against the test files)" if args.root else ""))
    return 0


# the package's own sub-commands: module and function, imported only when used
COMMANDS = {
    "synth": ("synth", "main"),
    "inspect": ("inspection", "main"),
    "submit": ("cli", "submit_main"),
    "check-submission": ("submission", "check_main"),
    "score": ("submission", "score_main"),
    "demo": ("demo", "main"),
}


USAGE = """usage: solution {fit,validate,test,predict} --config configs/<collection>.yaml [--data.root PATH] ...
       solution demo | synth | inspect | submit | check-submission | score  [--help]"""


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
