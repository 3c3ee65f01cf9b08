"""Experiment tracking: an offline-first W&B logger, run names from settings, and each fit's own run folder."""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
import yaml
from jsonargparse import dict_to_namespace
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger

from ..atomic import atomic_write
from ..data.batch import Batch
from ..errors import SettingsError
from ..submission.files import collection_file_stem
from .settings import agree, class_name, configs_folder, layered, leaves, read_yaml

MODES = ("online", "offline", "disabled")
SUMMARY = "summary.json"
PER_GRAPH = "per_graph.csv"
RANKS = "ranks.png"
PLOTTED_GRAPHS = 4  # graphs in the predicted-vs-true rank plot
SECTIONS = ("model", "data", "trainer")  # of a config: the settings that make an experiment
# Settings that locate data or choose machines, not the experiment: left out of the digest.
# The fold, like the seed, picks a resample: runs of every fold share a digest (and a group).
NOT_SETTINGS = {"seed", "fold", "root", "cache_dir", "num_workers", "logger", "callbacks", "default_root_dir",
                "devices", "accelerator", "num_nodes", "enable_progress_bar"}
# Also left out of run labels: the collection (each run's own) and switches for logging, devices and prediction.
NOT_LABELLED = NOT_SETTINGS | {"collection", "strategy", "plugins", "log_every_n_steps", "enable_model_summary",
                               "enable_checkpointing", "profiler", "predict_split", "family_pattern"}
CONFIGS = configs_folder()  # base.yaml and <collection stem>.yaml, as the CLI reads
DEFAULTS = "defaults"  # the label of a run that changes no setting of its collection
MAX_TAG = 64  # characters W&B allows in a tag


def wandb_mode(requested: str | None = None) -> str:
    """The W&B mode of a run: `WANDB_MODE=disabled` always wins, then `requested`, then WANDB_MODE, else online
    under a W&B sweep agent (which needs the server) and offline otherwise."""
    environment = os.environ.get("WANDB_MODE")
    if environment == "disabled":
        return "disabled"
    default = "online" if os.environ.get("WANDB_SWEEP_ID") else "offline"
    mode = {"dryrun": "offline", "run": "online"}.get(requested or environment, requested or environment or default)
    if mode not in MODES:
        source = "--trainer.logger.init_args.mode" if requested else "WANDB_MODE"
        raise SettingsError(f"{source}={requested or environment!r}; expected one of {', '.join(MODES)}")
    return mode


class RunLogger(WandbLogger):
    """Lightning's W&B logger, offline unless `mode` or WANDB_MODE says otherwise; `WANDB_MODE=disabled`
    switches it off whatever else is set (Lightning's own `offline=True` would override it)."""

    def __init__(
        self,
        save_dir: str = "runs",
        project: str = "tpugraphs",
        name: str | None = None,
        group: str | None = None,
        tags: list[str] | None = None,
        mode: str | None = None,
        log_model: bool = False,
        **kwargs: Any,
    ) -> None:
        requested = "offline" if kwargs.pop("offline", False) and not mode else mode
        self.mode = wandb_mode(requested)
        if self.mode != "disabled":
            Path(save_dir).mkdir(parents=True, exist_ok=True)  # else wandb warns that its git root is missing
        super().__init__(save_dir=save_dir, project=project, name=name, group=group, tags=tags, mode=self.mode,
                         log_model=log_model, **kwargs)
        if self._wandb_init.get("anonymous") is None:  # wandb warns about the key even when it is unset
            self._wandb_init.pop("anonymous", None)

    def finalize(self, status: str) -> None:
        """Ends the W&B run once the trainer is done (Lightning leaves it open), so that the next fit in this
        process starts a run of its own."""
        super().finalize(status)
        if self._experiment is not None:
            self._id = self._experiment.id
            self._experiment.finish(exit_code=0 if status == "success" else 1)
            self._experiment = None

    def run_path(self) -> dict[str, str | None]:
        """Where W&B keeps this run: its path on the server (online) and its local folder (offline)."""
        if self.mode == "disabled":
            return {"mode": self.mode, "path": None, "dir": None}
        run = self.experiment
        return {"mode": self.mode, "path": "/".join(run.path) if isinstance(run.path, list) else str(run.path),
                "dir": str(Path(run.dir).parent)}


# ---------------------------------------------------------------- names from settings


def trainer_defaults() -> dict[str, Any]:
    """Lightning's own Trainer defaults, which the CLI starts from under the config files."""
    parameters = inspect.signature(pl.Trainer.__init__).parameters.values()
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


def collection_defaults(collection: str, configs: Path = CONFIGS) -> dict[str, Any]:
    """A collection's settings before any override: the Trainer's defaults, then configs/base.yaml, then
    configs/<collection stem>.yaml (each where it exists)."""
    defaults: dict[str, Any] = {"trainer": trainer_defaults()}
    for path in (configs / "base.yaml", configs / f"{collection_file_stem(collection)}.yaml"):
        if path.is_file():
            defaults = layered(defaults, read_yaml(path))
    return defaults


def unset(value: Any) -> bool:
    """Whether a value leaves its setting off: None, False, 0 or empty."""
    return value is None or value in (False, 0, "", [], {})


def experiment_settings(config: Mapping) -> dict[str, Any]:
    """The settings of a config that make its experiment (SECTIONS, but NOT_LABELLED keys), by dotted key."""
    flat = leaves({s: config[s] for s in SECTIONS if isinstance(config.get(s), Mapping)})
    return {k: v for k, v in sorted(flat.items()) if NOT_LABELLED.isdisjoint(k.split("."))}


def differences(config: Mapping, defaults: Mapping) -> dict[str, Any]:
    """The experiment settings of a config that differ from the defaults, by dotted key: a value that differs,
    or a set one (not `unset`) where the defaults have none."""
    theirs = leaves(defaults)

    def differs(key: str, value: Any) -> bool:
        return not unset(value) if key not in theirs else not agree(key, value, theirs[key])

    return {k: v for k, v in experiment_settings(config).items() if differs(k, v)}


def short_names(keys: list[str]) -> dict[str, str]:
    """Dotted keys by their last part, with more parts only where two would read alike:
    'model.ranker.init_args.hidden' -> 'hidden', 'model.loss.class_path' -> 'loss'."""
    parts = {k: [p for p in k.split(".") if p not in ("init_args", "class_path")] for k in keys}
    names = {}
    for key, words in parts.items():
        for n in range(1, len(words) + 1):
            names[key] = ".".join(words[-n:])
            if sum(other[-n:] == words[-n:] for other in parts.values()) == 1:
                break
    return names


def shown(key: str, value: Any) -> str:
    """A setting's value in a label: a class by its name in lower case, a string as is, others as JSON."""
    if key.endswith("class_path"):
        return class_name(value).lower()
    return value if isinstance(value, str) else json.dumps(value, default=str)


def setting_changes(config: Mapping, configs: Path = CONFIGS) -> dict[str, Any]:
    """A run's difference set: what its config changes from its own collection's defaults, by dotted key."""
    collection = (config.get("data") or {}).get("collection") or "?"
    return differences(config, collection_defaults(collection, configs))


def label_parts(changes: Mapping[str, Any]) -> list[str]:
    """Changed settings in words, sorted: {'model.ranker.init_args.hidden': 48, ...} -> ['hidden=48', ...]."""
    names = short_names(list(changes))
    return sorted(f"{names[k]}={shown(k, v)}" for k, v in changes.items())


def changes_label(changes: Mapping[str, Any]) -> str:
    """Changed settings as one label: 'hidden=48,loss=listmle', or 'defaults' where nothing changed."""
    return ",".join(label_parts(changes)) or DEFAULTS


def setting_parts(config: Mapping, configs: Path = CONFIGS) -> list[str]:
    """What a run changes from its own collection's defaults, sorted: ['hidden=48', 'loss=listmle']."""
    return label_parts(setting_changes(config, configs))


def setting_label(config: Mapping, configs: Path = CONFIGS) -> str:
    """A run's setting in words, from its own collection's defaults: 'hidden=48,loss=listmle', or 'defaults'
    where it changes nothing. One experiment reads alike on every collection except where an override equals
    one collection's own default (it is left out there); `solution compare` groups such runs together."""
    return changes_label(setting_changes(config, configs))


def settings_digest(config: Mapping) -> str:
    """Six hex digits that differ when any model, data or trainer setting but seeds, paths and machine differs."""
    flat = leaves({section: config[section] for section in SECTIONS if isinstance(config.get(section), Mapping)})
    kept = {k: v for k, v in sorted(flat.items()) if NOT_SETTINGS.isdisjoint(k.split("."))}
    return hashlib.sha1(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:6]


def describe(config: Mapping, configs: Path = CONFIGS) -> dict[str, Any]:
    """Run name, W&B group and tags of a `fit` config: the group is its `setting_label`, shared by the runs of one
    experiment on every collection (but where an override equals a collection's own default, which that
    collection's label leaves out: `solution compare` joins those); the name adds the collection, seed and fold."""
    data = config.get("data") or {}
    collection, seed, parts = data.get("collection", "?"), config.get("seed_everything"), setting_parts(config, configs)
    label = ",".join(parts) or DEFAULTS
    resample = f"seed{seed}" + (f" fold{data.get('fold', 0)}" if (data.get("folds") or 0) > 1 else "")
    tags = [tag[:MAX_TAG] for tag in (collection, *(parts or [DEFAULTS]), *resample.split())]
    return {"name": f"{collection} {label} {resample}", "group": label, "tags": tags}


# ---------------------------------------------------------------- the run folder


def unfinished_run(save_dir: str | Path, config: Mapping) -> tuple[Path, str] | None:
    """(run folder, run id) of the latest fit under `save_dir` with these settings, seed and fold that never
    finished (it was killed), or None."""
    def key(summary: Mapping) -> tuple:  # the settings, seed and fold
        data = (summary.get("config") or {}).get("data") or {}
        return summary.get("digest"), summary.get("seed"), data.get("fold")

    wanted = key({"digest": settings_digest(config), "seed": config.get("seed_everything"), "config": config})
    found = None
    for path in Path(save_dir).rglob(SUMMARY):
        try:
            summary = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if summary.get("status") == "running" and key(summary) == wanted and (
                found is None or summary.get("started", 0) > found[0]):
            found = (summary.get("started", 0), path.parent, str(summary.get("run_id")))
    return found[1:] if found else None


def run_folder(trainer: pl.Trainer) -> Path | None:
    """Where a fit keeps checkpoints/, config.yaml and summary.json: beside the checkpoints when their folder is
    set, else the logger's own run folder (<save_dir>/<project>/<run id> for W&B); None with neither (no
    logger: nothing is recorded, rather than written into the working directory)."""
    checkpoint = trainer.checkpoint_callback
    if checkpoint is not None and getattr(checkpoint, "dirpath", None):
        return Path(checkpoint.dirpath).parent
    if not trainer.loggers:
        return None
    logger = trainer.loggers[0]
    if isinstance(logger, (CSVLogger, TensorBoardLogger)):
        return Path(logger.log_dir)
    run = logger.version if isinstance(logger.version, str) else f"version_{logger.version}"
    return Path(logger.save_dir or trainer.default_root_dir) / str(logger.name) / run


def code_version() -> dict[str, str | None]:
    """The package version and, in a git checkout, the commit (with '+dirty' when files differ from it)."""
    try:
        package = version("solution")
    except PackageNotFoundError:
        package = None
    here = Path(__file__).resolve().parent

    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, timeout=10,
                                  check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    commit = git("rev-parse", "HEAD")
    if commit and git("status", "--porcelain", "--untracked-files=no"):
        commit += "+dirty"
    return {"package": package, "git": commit}


def peak_memory_mib() -> float:
    """Peak memory of this process so far: GPU memory allocated on CUDA, else resident memory."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2**20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS, KiB on Linux


class RunRecorder(SaveConfigCallback):
    """Records each `fit` in its run folder, beside checkpoints/: config.yaml (the resolved config, also logged
    as the W&B config), summary.json (settings, best and last validation metrics, speed, memory, code version,
    W&B path; rewritten after every validation), and at the end per_graph.csv and ranks.png (also logged to
    W&B as a table and an image). Other sub-commands record nothing."""

    folder: Path | None = None  # None: nothing to record (another sub-command, or no logger and no dirpath)
    fixed_folder: Path | None = None  # the run folder of a fit started without the CLI (see `pipeline_records`)

    @classmethod
    def for_settings(cls, settings: Mapping, folder: Path) -> RunRecorder:
        """A recorder of a fit started without the Lightning CLI (the pipeline), from its settings dict."""
        recorder = cls(None, dict_to_namespace(dict(settings)), overwrite=True)
        recorder.fixed_folder = folder
        return recorder

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.folder = (self.fixed_folder or run_folder(trainer)) if stage == "fit" else None
        if self.folder is None:
            return
        self.started = time.time()
        self.settings = self.config.as_dict()
        self.best: dict[str, float] | None = None
        self.last: dict[str, float] = {}
        self.perf: dict[str, float] = {}
        if self.settings.get("ckpt_path") and (self.folder / SUMMARY).is_file():  # resuming: carry the record on
            previous = json.loads((self.folder / SUMMARY).read_text())
            self.started, self.best, self.last = previous["started"], previous["best"], previous["last"]
        if trainer.is_global_zero:
            self.folder.mkdir(parents=True, exist_ok=True)
            with atomic_write(self.folder / self.config_filename) as handle:
                handle.write(self.parser.dump(self.config, skip_none=False) if self.parser is not None
                             else yaml.safe_dump(self.settings, sort_keys=False))
            self.write(trainer, "running")
        for logger in trainer.loggers:
            logger.log_hyperparams(self.settings)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.epoch_start, self.configs_seen = time.perf_counter(), 0

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Batch, batch_idx: int) -> None:
        self.configs_seen += int(batch.config_mask.sum())

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not getattr(self, "configs_seen", 0):  # resumed at the end of an epoch: nothing was timed
            return
        seconds = max(time.perf_counter() - self.epoch_start, 1e-9)
        self.perf = {"perf/train_configs_per_s": self.configs_seen / seconds, "perf/peak_memory_mib": peak_memory_mib()}
        for name, value in self.perf.items():
            pl_module.log(name, value)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or self.folder is None:
            return
        self.last = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
        self.last["epoch"] = trainer.current_epoch
        if "val/score" in self.last and (self.best is None or self.last["val/score"] > self.best["val/score"]):
            self.best = dict(self.last)
        if self.best is not None:
            for logger in trainer.loggers:
                logger.log_metrics({"val/score_best": self.best["val/score"]}, step=trainer.global_step)
        if trainer.is_global_zero:
            self.write(trainer, "running")

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.folder is None or not trainer.is_global_zero:
            return
        results = getattr(pl_module, "graph_results", {})
        if results:
            graphs = trainer.datamodule.graphs("valid")
            columns = ["graph", "configs", *next(iter(results.values()))]
            rows = [[graphs.stems[g], graphs.num_configs(g), *m.values()] for g, m in sorted(results.items())]
            with atomic_write(self.folder / PER_GRAPH) as handle:
                handle.write("\n".join(",".join(map(str, row)) for row in [columns, *rows]) + "\n")
            plot_ranks(pl_module.last_table, graphs.stems, self.folder / RANKS)
            for logger in trainer.loggers:
                if isinstance(logger, WandbLogger):
                    logger.log_table("val/per_graph", columns=columns, data=rows)
                    logger.log_image("val/ranks", [str(self.folder / RANKS)])
        self.write(trainer, "finished")

    def write(self, trainer: pl.Trainer, status: str) -> None:
        """summary.json, rewritten whole (atomically) each time."""
        logger = trainer.loggers[0] if trainer.loggers else None
        checkpoint = trainer.checkpoint_callback
        summary = {
            **describe(self.settings), "status": status, "run_id": getattr(logger, "version", None),
            "setting": setting_label(self.settings),
            "collection": (self.settings.get("data") or {}).get("collection"),
            "seed": self.settings.get("seed_everything"), "digest": settings_digest(self.settings),
            "started": self.started, "seconds": time.time() - self.started, "epochs": trainer.current_epoch,
            "best": self.best, "last": self.last, "perf": self.perf,
            "skipped_files": trainer.datamodule.skipped_files() if trainer.datamodule is not None else [],
            "best_checkpoint": getattr(checkpoint, "best_model_path", None) or None,
            "wandb": logger.run_path() if isinstance(logger, RunLogger) else None,
            "code": code_version(), "config": self.settings,
        }
        with atomic_write(self.folder / SUMMARY) as handle:
            json.dump(summary, handle, indent=2, default=str)


def plot_ranks(table, stems: list[str], path: Path) -> None:
    """Predicted rank against true rank for the first few validation graphs, one panel each, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graph_ids = list(table)[:PLOTTED_GRAPHS]
    figure, axes = plt.subplots(1, len(graph_ids), figsize=(3.2 * len(graph_ids), 3.2), squeeze=False)
    for axis, graph_id in zip(axes[0], graph_ids):
        _, scores, target = table.graph(graph_id)
        axis.scatter(np.argsort(np.argsort(target)), np.argsort(np.argsort(scores)), s=4, alpha=0.5)
        axis.set(title=stems[graph_id][:28], xlabel="true rank (0 = fastest)", ylabel="predicted rank")
    figure.tight_layout()
    with atomic_write(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=80)
    plt.close(figure)


def pipeline_records(runs: Path) -> Callable[[str, Mapping], dict[str, Any]]:
    """Trainer arguments that log and record each fit of the pipeline as `solution fit` would: a W&B run named
    from its settings under <runs>, and the run folder <runs>/<collection>/ (config.yaml, summary.json, ...)."""
    def extras(collection: str, settings: Mapping) -> dict[str, Any]:
        logger = RunLogger(save_dir=str(runs), **describe(settings))
        return {"logger": logger,
                "callbacks": [RunRecorder.for_settings(settings, runs / collection_file_stem(collection))]}

    return extras
