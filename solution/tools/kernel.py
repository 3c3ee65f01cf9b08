"""The Kaggle notebook job: train (or load) the five collections within a time budget, predict, submit."""

from __future__ import annotations

import logging
import os
import tempfile
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from ..constants import COLLECTIONS
from ..data.datamodule import TpuGraphsDataModule
from ..data.reader import find_collections
from ..submission.files import check, collection_file_stem, format_scores, merge
from ..submission.writer import SubmissionWriter
from ..training.callbacks import AtomicCheckpointIO
from ..training.metrics import final_score
from ..training.module import RankingModule

COMPETITION = "predict-ai-model-runtime"
KAGGLE_INPUT = Path("/kaggle/input")  # attached data, read-only
KAGGLE_WORKING = Path("/kaggle/working")  # the notebook's saved output
DEFAULT_BUDGET = 7 * 3600.0  # seconds of training in a 12-hour GPU session; the rest preprocesses and predicts
SHARES = {"tile:xla": 0.10, "layout:xla:random": 0.20, "layout:xla:default": 0.20, "layout:nlp:random": 0.25,
          "layout:nlp:default": 0.25}  # of the training budget; time one leaves unused is shared among the rest
MIN_SECONDS = 1.0  # a collection that finds the budget spent still trains one step, so it has a checkpoint
# Settings layered on configs/<collection>.yaml; "smoke" is a seconds-long run for tests on a CPU.
PROFILES = {
    "kaggle": {},
    "smoke": {"trainer": {"check_val_every_n_epoch": 1, "num_sanity_val_steps": 0},
              "model": {"hidden": 16, "opcode_dim": 8, "warmup_steps": 0},
              "data": {"configs_per_graph": 8, "eval_chunk": 64, "num_workers": 0}},
}
QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}  # a script's log: no bars



def say(message: str) -> None:
    """Progress for the notebook's log, flushed so that it interleaves with Lightning's own lines."""
    print(message, flush=True)


@dataclass(frozen=True)
class Job:
    """Where the kernel reads and writes, how long it trains and with which profile: from the environment."""

    root: Path  # the competition data (read-only)
    output: Path  # submission.csv, parts/, checkpoints/
    cache: Path  # preprocessed graphs
    budget: float  # seconds of training, all collections together
    checkpoints: Path | None  # a folder of <collection>.ckpt to use instead of training
    profile: str

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> Job:
        profile = environ.get("SOLUTION_KERNEL_PROFILE") or "kaggle"
        if profile not in PROFILES:
            raise ValueError(f"SOLUTION_KERNEL_PROFILE={profile!r}; expected one of {', '.join(PROFILES)}")
        data = environ.get("SOLUTION_DATA_ROOT")
        checkpoints = environ.get("SOLUTION_CHECKPOINTS")
        return cls(root=Path(data) if data else find_data_root(KAGGLE_INPUT),
                   output=Path(environ.get("SOLUTION_OUTPUT_DIR") or KAGGLE_WORKING),
                   cache=Path(environ.get("SOLUTION_CACHE") or Path(tempfile.gettempdir()) / "solution-cache"),
                   budget=budget_seconds(environ.get("SOLUTION_TIME_BUDGET"), DEFAULT_BUDGET),
                   checkpoints=Path(checkpoints) if checkpoints else None, profile=profile)

    @property
    def parts(self) -> Path:
        return self.output / "parts"

    def checkpoint_path(self, collection: str) -> Path:
        return self.output / "checkpoints" / f"{collection_file_stem(collection)}.ckpt"


def budget_seconds(text: str | None, default: float) -> float:
    """SOLUTION_TIME_BUDGET as a number of seconds >= 0 (`default` when unset)."""
    try:
        value = float(text) if text else default
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ValueError(f"SOLUTION_TIME_BUDGET={text!r}; expected a number of seconds >= 0")
    return value


def find_data_root(inputs: Path) -> Path:
    """The competition's folder under `inputs`, else the first attached input that holds npz_all/npz."""
    found = [inputs / COMPETITION] + sorted(p.parent.parent for depth in ("*", "*/*", "*/*/*")
                                           for p in inputs.glob(f"{depth}/npz_all/npz"))
    for root in found:
        if (root / "npz_all" / "npz").is_dir():
            return root
    raise FileNotFoundError(f"no TpuGraphs data under {inputs} (a folder holding npz_all/npz); attach the "
                            f"{COMPETITION} data or set SOLUTION_DATA_ROOT")


def given_checkpoints(folder: Path | None) -> dict[str, Path]:
    """Collection -> <folder>/<collection>.ckpt for those present; a folder holding none is a mistake."""
    if folder is None:
        return {}
    paths = {c: folder / f"{collection_file_stem(c)}.ckpt" for c in COLLECTIONS}
    found = {c: path for c, path in paths.items() if path.is_file()}
    if not found:
        raise FileNotFoundError(f"SOLUTION_CHECKPOINTS={folder}: no checkpoint there; expected some of "
                                f"{', '.join(p.name for p in paths.values())}")
    return found


def layered(base: Mapping, override: Mapping) -> dict:
    """`base` with the keys of each of `override`'s sections replaced (one level deep)."""
    return {**base, **{key: {**base.get(key, {}), **value} for key, value in override.items()}}


def data_settings(settings: Mapping, job: Job, saved: Mapping | None = None) -> dict:
    """The data module's arguments: the collection's settings (a checkpoint's own, where given, win) with this
    run's paths, every test file, and no more workers than the machine has cores to spare."""
    workers = min(settings["data"]["num_workers"], max((os.cpu_count() or 1) - 1, 0))
    return {**settings["data"], **(saved or {}), "root": str(job.root), "cache_dir": str(job.cache),
            "num_workers": workers, "predict_split": "test", "limit_graphs": None}


class Progress(pl.Callback):
    """Prints each validation score while a collection trains: a script's log shows no progress bar."""

    def __init__(self, collection: str) -> None:
        self.collection, self.start = collection, time.monotonic()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            score = float(trainer.callback_metrics["val/score"])
            say(f"  [{self.collection}] epoch {trainer.current_epoch}: val/score {score:.4f} "
                f"({time.monotonic() - self.start:.0f} s)")


def train(collection: str, settings: Mapping, seconds: float, job: Job) -> Path:
    """Fit one collection for at most `seconds` of training; its best checkpoint by val/score (the last weights
    when time ran out before the first validation) goes to <output>/checkpoints/<collection>.ckpt."""
    path = job.checkpoint_path(collection)
    say(f"[{collection}] preprocessing and training for up to {seconds:.0f} s")
    pl.seed_everything(settings["seed_everything"], verbose=False)
    datamodule = TpuGraphsDataModule(**data_settings(settings, job))
    model = RankingModule(task=datamodule.task, node_feat_dim=datamodule.node_feat_dim, **settings["model"])
    best = ModelCheckpoint(dirpath=path.parent, filename=path.stem, monitor="val/score", mode="max",
                           enable_version_counter=False)
    trainer = pl.Trainer(**settings["trainer"], **QUIET, max_time=timedelta(seconds=seconds),
                         callbacks=[best, Progress(collection)], plugins=[AtomicCheckpointIO()])
    trainer.fit(model, datamodule=datamodule)
    if not best.best_model_path:
        trainer.save_checkpoint(path)
    stop = "the time limit" if trainer.current_epoch < trainer.max_epochs else "max_epochs"
    say(f"[{collection}] stopped by {stop} after {trainer.current_epoch} epochs; saved {path}")
    return path


def train_all(collections: list[str], settings: Mapping[str, Mapping], job: Job) -> dict[str, Path]:
    """Train `collections` in turn, each for its share of the budget still left (preprocessing counts)."""
    start, trained = time.monotonic(), {}
    for index, collection in enumerate(collections):
        left = job.budget - (time.monotonic() - start)
        share = SHARES[collection] / sum(SHARES[c] for c in collections[index:])
        trained[collection] = train(collection, settings[collection], max(left * share, MIN_SECONDS), job)
    return trained


def public(hparams: Mapping) -> dict:
    """Hyper-parameters without the entries Lightning's CLI adds (`_instantiator`)."""
    return {key: value for key, value in hparams.items() if not key.startswith("_")}


def load(checkpoint: Path, collection: str, settings: Mapping, job: Job) -> tuple[RankingModule, TpuGraphsDataModule]:
    """The model and data module a checkpoint (of this kernel or of `solution fit`) was trained with, read as
    plain tensors and settings (no pickled code, no Lightning CLI), with this run's data paths."""
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    model = RankingModule(**public(saved["hyper_parameters"]))
    model.load_state_dict(saved["state_dict"])
    data = data_settings(settings, job, public(saved.get("datamodule_hyper_parameters", {})))
    if data["collection"] != collection:
        raise ValueError(f"{checkpoint}: a checkpoint of {data['collection']}; expected one of {collection}")
    return model, TpuGraphsDataModule(**data)


def evaluate(collection: str, checkpoint: Path, settings: Mapping, job: Job) -> dict[str, float]:
    """Validate a checkpoint and write its test predictions to <output>/parts/<collection>.csv; returns its
    validation metrics (`score`, ...) and the number of validation files."""
    say(f"[{collection}] validating and predicting with {checkpoint}")
    model, datamodule = load(checkpoint, collection, settings, job)
    trainer = pl.Trainer(accelerator=settings["trainer"]["accelerator"], devices=settings["trainer"]["devices"],
                         **QUIET, callbacks=[SubmissionWriter(str(job.parts))])
    metrics = trainer.validate(model, datamodule=datamodule, verbose=False)[0]
    trainer.predict(model, datamodule=datamodule, return_predictions=False)
    return {**{name.removeprefix("val/"): float(value) for name, value in metrics.items()},
            "files": len(datamodule.graphs("valid"))}


def run(settings: Mapping[str, Mapping], environ: Mapping[str, str] = os.environ) -> int:
    """The whole job: train (or load) the five collections with `settings` (collection -> configs/*.yaml
    contents), predict every test file, write a checked submission.csv and print the validation scores."""
    job = Job.from_environment(environ)
    logging.getLogger(pl.__name__).setLevel(logging.WARNING)  # these progress lines replace Lightning's banners
    warnings.filterwarnings("ignore", message="Checkpoint directory .* is not empty")  # shared on purpose
    say(f"solution kernel: data {job.root}, output {job.output}, cache {job.cache}, profile {job.profile}, "
        f"training budget {job.budget:.0f} s, {torch.cuda.device_count()} GPU(s)")
    present = [c for c in COLLECTIONS if c in find_collections(job.root)]
    missing = [c for c in COLLECTIONS if c not in present]
    if missing:
        say(f"the data root holds no {', '.join(missing)}: {'those collections are' if len(missing) > 1 else 'it is'}"
            f" skipped, and submission.csv covers only {', '.join(present)}")
    profiled = {c: layered(settings[c], PROFILES[job.profile]) for c in present}
    checkpoints = {c: path for c, path in given_checkpoints(job.checkpoints).items() if c in present}
    checkpoints.update(train_all([c for c in present if c not in checkpoints], profiled, job))
    scores = {c: evaluate(c, checkpoints[c], profiled[c], job) for c in present}
    parts = [job.parts / f"{collection_file_stem(c)}.csv" for c in present]
    report = check(merge(parts, job.output / "submission.csv", job.root), job.root).raise_if_bad()
    say(f"wrote {report.path}: {len(report.rows)} rows, checked against the test files of {job.root}")
    if not missing:
        scores["final"] = final_score({c: scores[c]["score"] for c in COLLECTIONS})
    say(f"\nvalidation scores of the checkpoints used:\n{format_scores(scores)}")
    return 0
