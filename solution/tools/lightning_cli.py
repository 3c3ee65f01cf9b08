"""The Lightning CLI of `solution fit | validate | test | predict`: the data module's task and input widths link to
the model, a checkpoint's settings replace those that shape its inputs, runs are recorded."""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path
from typing import Literal

from lightning.pytorch import Trainer
from lightning.pytorch.cli import LightningCLI

from ..allocator import keep_freed_buffers
from ..data.datamodule import TpuGraphsDataModule
from ..errors import SettingsError
from ..models import baselines  # noqa: F401 -- registers ConfigOnlyRanker, so `--model.ranker ConfigOnlyRanker` works
from ..physics.fit import PriorFit
from ..training.callbacks import LaterOnTies, LRMonitor, SubmissionWriter
from ..training.checkpoints import checkpoint_collection, read_checkpoint, saved_settings
from ..training.module import RankingModule
from ..training.ranker_file import SavedRanker
from .plan import BudgetSettings
from .ranking import ranker_path
from .settings import DERIVED, configs_folder, read_settings, read_yaml, with_checkpoint
from .tracking import RunRecorder, describe, unfinished_run

SUBCOMMANDS = ("fit", "validate", "test", "predict")
DEFAULT_RUNS = "runs"
RUN_LOGGER = "solution.tools.tracking.RunLogger"


class CLI(LightningCLI):
    """Lightning CLI whose model takes its task, and its ranker the input widths, from the data module."""

    def add_arguments_to_parser(self, parser) -> None:
        parser.link_arguments("data.task", "model.task", compute_fn=lambda task: task.name, apply_on="instantiate")
        for width in ("node_feat_dim", "config_width"):
            parser.link_arguments(f"data.{width}", f"model.ranker.init_args.{width}", apply_on="instantiate")
        parser.add_lightning_class_args(LaterOnTies, "checkpoint")
        parser.set_defaults({"checkpoint.monitor": "val/score", "checkpoint.mode": "max",
                             "checkpoint.save_last": True, "checkpoint.filename": "best"})
        parser.add_lightning_class_args(SubmissionWriter, "submission")
        parser.add_lightning_class_args(LRMonitor, "lr_monitor")
        parser.add_argument("--members", type=int, default=1,
                            help="seeds `solution run` fits per collection (timed as member_time says) and ranks by "
                                 "their rank ensemble; fit, validate, test and predict use one model")
        parser.add_argument("--member_time", type=Literal["split", "spare"], default="split",
                            help="how `solution run` times the members: 'split', each an equal part of the "
                                 "collection's time; 'spare', the first all of it, the others only with the time a "
                                 "budget has left after every collection's first fit (none without --budget)")
        parser.add_argument("--member_folds", type=bool, default=False,
                            help="with members > 1, `solution run` fits member j on train + valid less fold j of "
                                 "whole models and validates it on fold j; fit and the other commands ignore it")
        parser.add_argument("--blend_weights", type=list[float], default=[],
                            help="blend weights of the physics prior `solution run` tries on the valid "
                                 "files (the best from blend_floor up is used; 0, the model alone, is always "
                                 "scored); layout only")
        parser.add_argument("--blend_floor", type=float, default=0.0,
                            help="the least blend weight `solution run` may pick on the valid files (the weights "
                                 "below it are scored, not chosen): the valid files' families are the ones the "
                                 "model trained on; layout only")
        parser.add_argument("--prior_fit", type=PriorFit, default=PriorFit(),
                            help="how `solution run` weighs the physics prior's parts: fitted to the runtimes of up "
                                 "to `files` train files (0: the plain count of elements); fit and the other "
                                 "commands ignore it")
        parser.add_argument("--budget", type=BudgetSettings, default=BudgetSettings(),
                            help="the collection's part in `solution run --budget S`: its share of the training "
                                 "time and the rates its other steps are planned at; fit and the other commands "
                                 "ignore it")

    def _parse_ckpt_path(self) -> None:
        """With `--ckpt_path FILE`, the checkpoint's settings (read as data: `read_checkpoint`) replace the model and
        the data settings that shape its inputs, as `solution run --checkpoints` does; a value set on the command
        line or in a --config file that contradicts them is an error that names both."""
        subcommand = self.config.get("subcommand")
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if not ckpt_path or not Path(ckpt_path).is_file():
            return  # none, or one of Lightning's names ("last", "best"), or a missing file the Trainer reports
        saved = read_checkpoint(ckpt_path)
        stored, collection = saved_settings(saved), checkpoint_collection(saved, ckpt_path)
        config = self.config[subcommand].as_dict()
        defaults = [self._subcommand_parsers[subcommand].get_defaults().as_dict(), read_settings()[collection]]
        resolved = with_checkpoint(config, stored, defaults, f"--ckpt_path {ckpt_path}")
        ranker = resolved["model"]["ranker"]
        model = {**{k: v for k, v in resolved["model"].items() if k not in DERIVED},
                 "ranker": {**ranker, "init_args": {k: v for k, v in ranker.get("init_args", {}).items()
                                                    if k not in DERIVED}}}
        data = {k: v for k, v in resolved["data"].items() if k in stored["data"]}
        self.config = self.parser.parse_object({subcommand: {"model": model, "data": data}}, self.config)

    def before_instantiate_classes(self) -> None:
        """A fit's W&B run is named, grouped and tagged by its settings (where not set); the other sub-commands
        start no W&B run (they may name another logger class)."""
        config = self.config[self.subcommand] if self.subcommand else self.config
        logger = config.trainer.logger
        if not (hasattr(logger, "class_path") and logger.class_path == RUN_LOGGER):
            return
        if self.subcommand not in (None, "fit"):
            config.trainer.logger = False
            return
        for key, value in describe(config.as_dict()).items():
            if logger.init_args.get(key) is None:
                logger.init_args[key] = value
        if config.ckpt_path == "last" and config.checkpoint.dirpath is None:
            self.resume_unfinished(config, logger.init_args)

    @staticmethod
    def resume_unfinished(config, logger_args) -> None:
        """`fit --ckpt_path last` with no checkpoint folder given: carry on the latest killed fit with the same
        settings and seed, in its run folder and W&B run."""
        found = unfinished_run(logger_args.get("save_dir") or DEFAULT_RUNS, config.as_dict())
        if found is None:
            raise SystemExit(f"--ckpt_path last: no unfinished fit with these settings and seed under "
                             f"{logger_args.get('save_dir') or DEFAULT_RUNS}; name its folder with "
                             "--checkpoint.dirpath RUN_FOLDER/checkpoints")
        folder, run_id = found
        config.checkpoint.dirpath = str(folder / "checkpoints")
        logger_args["id"], logger_args["resume"] = run_id, "allow"


def config_files(args: list[str]) -> list[str]:
    """The files named by `--config FILE` / `-c FILE` / `--config=FILE` in a command line."""
    named = [value for flag, value in zip(args, args[1:]) if flag in ("--config", "-c")]
    return named + [arg.split("=", 1)[1] for arg in args if arg.startswith("--config=")]


def lightning_main(args: list[str], run: bool = True) -> CLI:
    """Run one Lightning sub-command (`fit`, `validate`, `test`, `predict`) or build it with run=False."""
    for path in config_files(args):  # a broken file is told by name and line, as `solution run` tells it
        if Path(path).is_file():
            read_yaml(path)
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter")  # `main` passes sys.argv on
    warnings.filterwarnings("ignore", message=".*LeafSpec.* is deprecated")  # Lightning's, with this torch
    warnings.filterwarnings("ignore", message="The dirpath has changed from")  # predict restores a fit's callback
    keep_freed_buffers()
    cli = CLI(
        RankingModule,
        TpuGraphsDataModule,
        args=args,
        run=run,
        seed_everything_default=0,
        parser_kwargs={command: {"default_config_files": [str(configs_folder() / "base.yaml")]}
                       for command in SUBCOMMANDS},
        save_config_callback=RunRecorder,
        save_config_kwargs={"overwrite": True},
        trainer_defaults={
            "logger": {"class_path": RUN_LOGGER, "init_args": {"save_dir": DEFAULT_RUNS}},
            "plugins": [{"class_path": "solution.training.callbacks.AtomicCheckpointIO"}],
        },
    )
    if run and cli.subcommand == "fit":
        write_fit_ranker(cli.trainer)
    return cli


def check_settings_file(path: str | Path) -> None:
    """Refuse a settings file the Lightning CLI would refuse (a key it does not accept, such as a renamed one) in
    one line naming the file and what is wrong (SettingsError), before `solution run` trains anything."""
    read_yaml(path)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
            lightning_main(["fit", "--config", str(path), "--print_config"])
    except SystemExit as stop:
        if stop.code:
            told = stderr.getvalue()  # usage lines, then `error: ...` over one or more indented lines
            said = " ".join(line.strip() for line in told[told.find("error:"):].splitlines()) if "error:" in told \
                else "not accepted by the settings parser"
            raise SettingsError(f"{path}: {said.removeprefix('error:').strip()}") from None


def write_fit_ranker(trainer: Trainer) -> Path | None:
    """After `solution fit`, its best checkpoint (else its last) as <run>/rankers/<collection>.ranker beside its
    checkpoints/: a ranker of one network and no prior, which every command ranks with as it ranks a run's."""
    callback = trainer.checkpoint_callback
    checkpoint = callback.best_model_path or callback.last_model_path if callback else ""
    if not checkpoint:
        return None
    ranker = SavedRanker.of_checkpoints([read_checkpoint(checkpoint)])
    path = ranker.save(ranker_path(Path(checkpoint).parent.parent / "rankers", ranker.collection))
    print(f"wrote {path}: rank with it by `solution predict --ranker {path}` (or rank, validate, test)")
    return path
