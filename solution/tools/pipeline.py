"""The whole job on a data root: fit each collection (within a time budget, or load given checkpoints), predict
every test file, merge the collections' files into one submission.csv and check it. A collection whose settings ask for
`members` > 1 fits that many seeds and ranks by their rank ensemble: each in an equal part of its time (`member_time:
split`; with `member_folds`, each member validates on models it never trains on), or, under a budget, the first
with the collection's whole time and the others only with the time every collection's first fit left (`member_time:
spare`; without a budget, one fit); one whose `blend_weights` name weights above 0
blends the physics prior of physics/prior.py (its weights fitted on the train files, `prior_fit`) into the
model's ranks with the weight that scores best on the valid files (from `blend_floor` up). `solution run`, the demo
and the Kaggle kernel all run this; it needs neither the Lightning CLI nor W&B."""

from __future__ import annotations

import argparse
import importlib
import logging
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
from lightning.pytorch.callbacks import Callback

from ..allocator import keep_freed_buffers
from ..constants import COLLECTIONS
from ..data.datamodule import TpuGraphsDataModule
from ..data.reader import collection_dir, find_collections
from ..data.sets import GraphSet
from ..data.splits import FAMILY_PATTERN, pooled_models
from ..errors import SettingsError
from ..metrics import final_score
from ..physics.blend import blend_floor, blend_metrics, blend_weights, chosen_weight, scored_priors
from ..physics.fit import PriorFit, fit_prior
from ..physics.prior import UNIT, WEIGHTS
from ..submission.ensemble import write_scores
from ..submission.files import check, collection_file_stem, format_scores, merge
from ..training.callbacks import AtomicCheckpointIO, LaterOnTies
from ..training.checkpoints import CheckpointError, read_checkpoint, saved_settings
from ..training.inference import ScoreTable, load_weights
from ..training.module import RankingModule, build_module, start_checkpoint
from ..training.ranker_file import SavedRanker, describe, read_ranker
from .plan import Plan, collection_sizes, prior_fitted, training_order
from .ranking import ranked_split, ranker_path, resolved, split_metrics
from .settings import read_settings, section, started_from, with_checkpoint

SELECTABLE = ("val/score", "val/kendall_tau")  # validation metrics of every task, higher better
MIN_SECONDS = 1.0  # a collection that finds the budget spent still trains one step, so it has a checkpoint
MEMBER_SEED_STEP = 1000  # ensemble member j trains with seed_everything + 1000 j
QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}  # a script's log: no bars


def say(message: str) -> None:
    """Progress for the log, flushed so that it interleaves with Lightning's own lines."""
    print(message, flush=True)


# ---------------------------------------------------------------- one collection


@dataclass(frozen=True)
class Job:
    """Where the job reads and writes, and how long it trains."""

    root: Path  # the data (read only)
    output: Path  # submission.csv, collections/, rankers/, checkpoints/
    cache: Path | None = None  # preprocessed graphs; None: the default ($SOLUTION_CACHE or ~/.cache/solution)
    budget: float | None = None  # wall-clock seconds of the whole job (`plan.py`); None: each its max_epochs
    checkpoints: Path | None = None  # a folder of <collection>.ckpt to use instead of training
    rankers: Path | None = None  # a folder of <collection>.ranker to rank with instead of training
    runs: Path | None = None  # where checkpoints and rankers go (<runs>/checkpoints, rankers); None: the output
    # collection -> the settings given when the user sets nothing (a checkpoint's settings replace those freely;
    # a value the user set that contradicts a checkpoint is an error); None: the settings run() is given
    defaults: Mapping[str, Mapping] | None = None
    # extra Trainer arguments of a collection's fit (e.g. a logger and run-record callbacks): (collection, settings)
    trainer_extras: Callable[[str, Mapping], dict] = field(default=lambda collection, settings: {})
    clock: Callable[[], float] = time.monotonic  # the job's seconds (tests give their own)
    budget_source: str = "--budget"  # what the user set the budget with, for the plan's errors

    @property
    def collection_files(self) -> Path:
        """Where each collection's ranked test configs go: <output>/collections/<collection>.csv, beside its raw
        scores."""
        return self.output / "collections"

    @property
    def saved_rankers(self) -> Path:
        """Where the job saves each collection's ranker, beside its checkpoints: <runs>/rankers/<collection>.ranker
        (runs: the output folder where not set)."""
        return (self.runs or self.output) / "rankers"

    def checkpoint_path(self, collection: str, member: int = 0) -> Path:
        """<runs>/checkpoints/<collection>.ckpt, and <collection>.member<j>.ckpt for ensemble member j > 0."""
        return (self.runs or self.output) / "checkpoints" / f"{member_name(collection, member)}.ckpt"


def member_name(collection: str, member: int) -> str:
    """'layout_xla_random' for the first (or only) fit of a collection, 'layout_xla_random.member2' for member 2."""
    return collection_file_stem(collection) + (f".member{member}" if member else "")


def members(settings: Mapping) -> int:
    """How many seeds a collection's settings fit and ensemble (`members`, default 1)."""
    count = settings.get("members", 1)
    if not isinstance(count, int) or count < 1:
        raise SettingsError(f"members={count!r}; expected a whole number of fits >= 1")
    return count


def member_folds(settings: Mapping) -> bool:
    """Whether ensemble members hold out folds of whole models (`member_folds`, default false)."""
    value = settings.get("member_folds", False)
    if not isinstance(value, bool):
        raise SettingsError(f"member_folds={value!r}; expected true or false")
    return value


MEMBER_TIMES = ("split", "spare")


def member_time(settings: Mapping, collection: str) -> str:
    """How the job times a collection's members (`member_time`): 'split', each an equal part of its time (each its
    max_epochs without a budget); 'spare', the first its whole time, the others after every collection's first
    fit, from the budget's time left (none without a budget)."""
    value = settings.get("member_time", "split")
    if value not in MEMBER_TIMES:
        raise SettingsError(f"{collection}: member_time={value!r}; expected one of {', '.join(MEMBER_TIMES)}")
    if value == "spare" and member_folds(settings) and members(settings) > 1:
        raise SettingsError(f"{collection}: member_time=spare with member_folds: a first fit's folds would depend on "
                            "how many members the spare time trains; set member_folds: false or member_time: split")
    return value


def first_fits(settings: Mapping, collection: str) -> Mapping:
    """The settings the job first trains a collection with: one member where its members wait for spare time,
    otherwise its own."""
    return {**settings, "members": 1} if member_time(settings, collection) == "spare" else settings


def member_data(settings: Mapping, member: int, count: int, root: Path) -> dict:
    """The data settings of ensemble member `member` of `count`: with `member_folds`, train + valid pooled (under
    `root`) and split into `count` folds of whole models (`data.family_pattern` names a model's variants; fewer
    folds where there are fewer models, members then sharing folds in turn), the member's fold its valid files and
    the others its train files; otherwise, or with a single fold, the collection's own splits."""
    data = dict(settings["data"])
    if member_folds(settings) and count > 1:
        folds = min(count, pooled_models({**data, "root": str(root)}))
        if folds > 1:
            data.update(folds=folds, fold=member % folds)
    return data


def build_datamodule(data: Mapping, job: Job) -> TpuGraphsDataModule:
    """The data module of `data` settings with this job's paths, ranking every test file."""
    return TpuGraphsDataModule(**{**data, "root": str(job.root), "predict_split": "test", "limit_graphs": None,
                                  "cache_dir": str(job.cache) if job.cache else None})


class Progress(Callback):
    """Prints each validation score (and the metric the best checkpoint is chosen by, when another) while a
    collection trains: a script's log shows no progress bar."""

    def __init__(self, collection: str, monitor: str = "val/score") -> None:
        self.collection, self.start = collection, time.monotonic()
        self.shown = ["val/score"] + ([monitor] if monitor != "val/score" else [])

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            scores = ", ".join(f"{name} {float(trainer.callback_metrics[name]):.4f}" for name in self.shown)
            seconds = time.monotonic() - self.start
            say(f"  [{self.collection}] epoch {trainer.current_epoch}: {scores} ({seconds:.0f} s)")


class Deadline(Callback):
    """Stops a fit once the job's clock passes `deadline`, checked after each training batch and each validation:
    preprocessing and validation count, as they do on the wall clock; the first batch always trains."""

    def __init__(self, deadline: float, clock: Callable[[], float]) -> None:
        self.deadline, self.clock = deadline, clock

    def on_train_batch_end(self, trainer: pl.Trainer, *args) -> None:
        trainer.should_stop = trainer.should_stop or self.clock() >= self.deadline

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.on_train_batch_end(trainer)


def checkpoint_monitor(settings: Mapping, collection: str) -> str:
    """The validation metric a fit's best checkpoint is chosen by: `checkpoint.monitor`, as `solution fit` reads it
    (default val/score, the competition's metric; val/kendall_tau, every task's whole-ranking tau)."""
    monitor = settings.get("checkpoint", {}).get("monitor", "val/score")
    if monitor not in SELECTABLE:
        raise SettingsError(f"{collection}: checkpoint.monitor={monitor!r}; expected one of {', '.join(SELECTABLE)}")
    return monitor


def train(collection: str, settings: Mapping, seconds: float | None, job: Job, member: int = 0) -> Path:
    """Fit one collection (for at most `seconds` of the job's clock from now, preprocessing included, when given);
    its best checkpoint by `checkpoint_monitor` (the last weights when no validation ran) goes to
    <output>/checkpoints/<collection>.ckpt (ensemble member j > 0:
    <collection>.member<j>.ckpt, trained with seed_everything + 1000 j, and with `member_folds` on the data of
    `member_data`)."""
    path = job.checkpoint_path(collection, member)
    seed = settings.get("seed_everything", 0) + MEMBER_SEED_STEP * member
    limit = f"up to {seconds:.0f} s" if seconds is not None else f"{settings['trainer'].get('max_epochs')} epochs"
    member_note = f" (ensemble member {member}, seed {seed})" if member else ""
    say(f"[{collection}] preprocessing and training for {limit}{member_note}")
    pl.seed_everything(seed, verbose=False)
    datamodule = build_datamodule(member_data(settings, member, members(settings), job.root), job)
    model = build_module(settings["model"], datamodule)
    monitor = checkpoint_monitor(settings, collection)
    best = LaterOnTies(dirpath=path.parent, filename=path.stem, monitor=monitor, mode="max",
                           enable_version_counter=False)
    extras = dict(job.trainer_extras(collection, settings))
    callbacks = [best, Progress(collection, monitor), *extras.pop("callbacks", [])]
    if seconds is not None:
        callbacks.append(Deadline(job.clock() + seconds, job.clock))
    trainer = pl.Trainer(**{**QUIET, **settings["trainer"], **extras}, callbacks=callbacks,
                         plugins=[AtomicCheckpointIO()])
    trainer.fit(model, datamodule=datamodule)
    if not best.best_model_path:
        trainer.save_checkpoint(path)
    stop = "its time" if trainer.current_epoch < trainer.max_epochs else "max_epochs"
    say(f"[{collection}] stopped by {stop} after {trainer.current_epoch} epochs; saved {path}")
    return path


def train_members(collection: str, settings: Mapping, seconds: float | None, job: Job,
                  first: int = 0) -> list[Path]:
    """The checkpoints of the collection's fits `first` to `members` - 1, each with an equal part of the `seconds`
    still left when it starts (each its max_epochs without a limit)."""
    count = members(settings)
    end = None if seconds is None else job.clock() + seconds
    return [train(collection, settings, None if end is None else max((end - job.clock()) / (count - member),
                                                                     MIN_SECONDS), job, member)
            for member in range(first, count)]


def load(checkpoint: Path, collection: str, settings: Mapping, job: Job) -> tuple[RankingModule, TpuGraphsDataModule]:
    """The model and data module a checkpoint (of this pipeline or of `solution fit`) was trained with, read as
    plain tensors and settings (no pickled code, no Lightning CLI), with this job's data paths and loaders."""
    saved = read_checkpoint(checkpoint)
    stored = saved_settings(saved)
    if stored["data"].get("collection") != collection:
        raise CheckpointError(f"{checkpoint}: datamodule_hyper_parameters.collection = "
                              f"{stored['data'].get('collection')!r}; expected a checkpoint of {collection}")
    defaults = (job.defaults or {}).get(collection, settings)
    resolved = with_checkpoint(settings, stored, [defaults], str(checkpoint))
    datamodule = build_datamodule(resolved["data"], job)
    model = build_module(resolved["model"], datamodule)
    load_weights(model, saved["state_dict"], checkpoint)
    return model, datamodule


@dataclass
class Members:
    """What a collection's members scored on the valid files: per fold of validation, the tables of the members
    that validated on it and the physics priors of its files."""

    groups: dict[int, tuple[list[ScoreTable], dict[int, np.ndarray]]] = field(default_factory=dict)
    files: int = 0  # validation files


def evaluate(collection: str, checkpoints: Path | Sequence[Path], settings: Mapping, job: Job, predict: bool = True,
             validate: bool = True, prior: np.ndarray | None = None) -> dict[str, float]:
    """Validate a checkpoint, or an ensemble of several (with `validate`), save them as the collection's ranker
    (`Job.saved_rankers`) and rank the test files with it into <output>/collections/<collection>.csv
    (with `predict`); returns the validation metrics (`score`, ...) and the number of validation files, or nothing
    when it does not validate. An ensemble ranks by the mean of its members' normalised ranks per graph (as
    `solution ensemble`). With `member_folds`, member j validates on its own fold of models (`member_data`), and the
    validation metrics are those of each file ranked by the one member that never trained on it. With
    `blend_weights` the valid files are always ranked: the weight w that scores best there (from `blend_floor`
    up: the valid files' families are the ones the model trained on, a test file's may not be) blends the physics
    prior's ranks in as w against 1 - w for the members together, in the validation metrics and the ranker (at
    w = 1 no network ranks a test file); a data root without valid files ranks by the model alone when not asked
    to validate. The prior's weights are `prior` where given, else fitted here (`fitted_prior`)."""
    checkpoints = [checkpoints] if isinstance(checkpoints, Path) else list(checkpoints)
    weights = blend_weights(settings, collection)
    if len(weights) > 1 and not validate and not (collection_dir(job.root, collection) / "valid").is_dir():
        say(f"[{collection}] no valid files to pick the physics prior's weight by: ranking by the model alone")
        weights = [0.0]
    ranks_valid = validate or len(weights) > 1
    if prior is None:
        prior = fitted_prior(collection, settings, job) if len(weights) > 1 else UNIT
    doing = " and ".join(word for word, wanted in (("validating", ranks_valid), ("predicting", predict)) if wanted)
    say(f"[{collection}] {doing} with {', '.join(map(str, checkpoints))}")
    members = validate_members(collection, checkpoints, settings, job, prior if len(weights) > 1 else None) \
        if ranks_valid else Members()
    groups = list(members.groups.values())
    metrics = {w: blend_metrics(collection, groups, w) for w in weights} if ranks_valid else {}
    floor = blend_floor(settings, collection)
    weight = chosen_weight(metrics, floor)
    if len(weights) > 1:
        least = f"; at least {floor:g}" if floor > 0 else ""
        say(f"[{collection}] physics prior weight {weight:g} (of {', '.join(f'{w:g}' for w in weights)}{least}): "
            f"val/score {metrics[weight]['score']:.4f} against {metrics[0.0]['score']:.4f} for the model alone")
    ranker = SavedRanker.of_checkpoints([read_checkpoint(c) for c in checkpoints],
                                        prior if len(weights) > 1 else None, weight,
                                        [(w, metrics[w].get("score", np.nan)) for w in metrics])
    path = ranker.save(ranker_path(job.saved_rankers, collection))
    if predict:
        rank_test_files(ranker, path, settings, job)
    if not validate:
        return {}
    return {**metrics[weight], "files": members.files,
            **({"prior_weight": weight} if len(weights) > 1 else {})}


def validate_members(collection: str, checkpoints: Sequence[Path], settings: Mapping, job: Job,
                     prior: np.ndarray | None) -> Members:
    """Each checkpoint loaded with its `member_data` and validated, its table grouped by fold, with the physics
    priors (weights `prior`, where given) of each fold's valid files."""
    members = Members()
    for member, checkpoint in enumerate(checkpoints):
        pl.seed_everything(settings.get("seed_everything", 0), verbose=False)  # the subset of data.valid_configs
        data = member_data(settings, member, len(checkpoints), job.root)
        model, datamodule = load(checkpoint, collection, {**settings, "data": data}, job)
        trainer = pl.Trainer(accelerator=settings["trainer"].get("accelerator", "auto"),
                             devices=settings["trainer"].get("devices", 1), **QUIET)
        trainer.validate(model, datamodule=datamodule, verbose=False)
        fold = data.get("fold", 0)
        if fold not in members.groups:
            valid = datamodule.graphs("valid")
            members.groups[fold] = ([], scored_priors(valid, model.last_table, prior) if prior is not None else {})
            members.files += len(valid)
        members.groups[fold][0].append(model.last_table)
    return members


def rank_test_files(ranker: SavedRanker, source: Path, settings: Mapping, job: Job) -> None:
    """Rank every test file of the ranker's collection with it (as `solution predict --ranker` does) into
    <output>/collections/<collection>.csv and its scores."""
    graphs, scores = ranked_job_split(ranker, source, settings, job, "test")
    write_scores(graphs, scores, job.collection_files, ranker.collection, "test")


def ranked_job_split(ranker: SavedRanker, source: Path, settings: Mapping, job: Job,
                     split: str) -> tuple[GraphSet, dict[int, np.ndarray]]:
    """A split of the job's data root ranked by the ranker (settings resolved against it as `load` resolves them)."""
    defaults = [(job.defaults or {}).get(ranker.collection, settings)]
    graphs = build_datamodule(resolved(ranker, settings, str(source), defaults=defaults)["data"], job).graphs(split)
    return ranked_split(ranker, settings, split, str(source), graphs, defaults)


def fitted_prior(collection: str, settings: Mapping, job: Job) -> np.ndarray:
    """[len(WEIGHTS)] the weights of the physics prior: fitted to the runtimes of the collection's train files as
    `prior_fit` says (`physics/fit.py`), or the plain count of elements where it names no files."""
    fit = section(settings, "prior_fit", PriorFit, collection)
    if fit.files <= 0 or not (collection_dir(job.root, collection) / "train").is_dir():
        return UNIT
    start, graphs = time.monotonic(), build_datamodule(settings["data"], job).graphs("train")
    fitted = fit_prior(graphs, fit, settings["data"].get("family_pattern", FAMILY_PATTERN),
                       settings.get("seed_everything", 0))
    if fitted is None:
        return UNIT
    weights, penalty, files = fitted
    say(f"[{collection}] physics prior's weights fitted on {files} train files (penalty {penalty:g}) in "
        f"{time.monotonic() - start:.0f} s: " + ", ".join(f"{n} {w:.3g}" for n, w in zip(WEIGHTS, weights)))
    return weights


# ---------------------------------------------------------------- the five collections


def given_checkpoints(folder: Path | None) -> dict[str, list[Path]]:
    """Collection -> [<folder>/<collection>.ckpt, then its ensemble members <collection>.member1.ckpt, ...
    while they follow on] for those present; a folder holding none is a mistake."""
    if folder is None:
        return {}
    found = {}
    for collection in COLLECTIONS:
        paths = []
        while (path := folder / f"{member_name(collection, len(paths))}.ckpt").is_file():
            paths.append(path)
        if paths:
            found[collection] = paths
    if not found:
        raise FileNotFoundError(f"{folder}: no checkpoint there; expected some of "
                                f"{', '.join(f'{collection_file_stem(c)}.ckpt' for c in COLLECTIONS)}")
    return found


def given_rankers(folder: Path | None) -> dict[str, Path]:
    """Collection -> <folder>/<collection>.ranker for those present; a folder holding none is a mistake."""
    if folder is None:
        return {}
    found = {c: ranker_path(folder, c) for c in COLLECTIONS if ranker_path(folder, c).is_file()}
    if not found:
        raise FileNotFoundError(f"{folder}: no ranker there; expected some of "
                                f"{', '.join(ranker_path(Path(), c).name for c in COLLECTIONS)}")
    return found


def rank_saved(collection: str, path: Path, settings: Mapping, job: Job) -> dict[str, float]:
    """A collection ranked by a saved ranker, as saved: its valid files scored with it, its test files ranked into
    collections/, and the ranker kept with the job's others (`Job.saved_rankers`)."""
    ranker = read_ranker(path)
    if ranker.collection != collection:
        raise CheckpointError(f"{path}: key collection is {ranker.collection!r}; expected a ranker of {collection}")
    say(f"[{collection}] ranking with {path} ({describe(ranker)})")
    metrics = {}
    if (collection_dir(job.root, collection) / "valid").is_dir():
        graphs, scores = ranked_job_split(ranker, path, settings, job, "valid")
        metrics = {**split_metrics(graphs, scores, collection), "files": len(graphs)}
    if path.resolve() != ranker_path(job.saved_rankers, collection).resolve():
        ranker.save(ranker_path(job.saved_rankers, collection))
    rank_test_files(ranker, path, settings, job)
    return metrics


def run(job: Job, settings: Mapping[str, Mapping]) -> dict[str, dict]:
    """Fit (or load) every collection the data root holds, predict its test files, write a checked
    <output>/submission.csv and print the validation scores; returns collection -> validation metrics (and
    `final` when all five are present). Under a budget the job plans its time first (`plan.py`): a budget too
    small for these files is a SettingsError before anything runs."""
    logging.getLogger(pl.__name__).setLevel(logging.WARNING)  # these progress lines replace Lightning's banners
    warnings.filterwarnings("ignore", message="Checkpoint directory .* is not empty")  # shared on purpose
    warnings.filterwarnings("ignore", message=".*LeafSpec.* is deprecated")  # Lightning's, with this torch
    keep_freed_buffers()
    present = [c for c in COLLECTIONS if c in find_collections(job.root)]
    missing = [c for c in COLLECTIONS if c not in present]
    if not present:
        raise FileNotFoundError(f"{job.root}: no TpuGraphs collection there (expected npz_all/npz/<task>/...)")
    for collection in present:  # the blend's settings checked before any training (blend_floor checks both)
        blend_floor(settings[collection], collection)
        if settings[collection]["model"].get("init_from"):  # and where a fit starts from
            start_checkpoint(settings[collection]["model"]["init_from"], collection)
    rankers = {c: path for c, path in given_rankers(job.rankers).items() if c in present}
    given = {c: path for c, path in given_checkpoints(job.checkpoints).items() if c in present and c not in rankers}
    firsts = {c: first_fits(settings[c], c) for c in present}  # spare members wait for a budget's time left
    plan = None
    if job.budget is not None:
        plan = Plan(job.budget, {c: dict(firsts[c]) for c in present},
                    {c: collection_sizes(job.root, c) for c in present}, job.clock, say, given={*given, *rankers})
        plan.check_enough(job.budget_source)
    if missing:
        say(f"the data root holds no {', '.join(missing)}: {'those collections are' if len(missing) > 1 else 'it is'}"
            f" skipped, and submission.csv covers only {', '.join(present)}")
    order, trained = training_order({c: settings[c] for c in present}), {}
    scores = {c: rank_collection(c, order[index:], firsts[c], job, plan, given.get(c), rankers.get(c), trained)
              for index, c in enumerate(order)}
    if plan:
        scores.update(spare_members([c for c in order if c in trained], settings, job, plan, trained))
    scores = {c: scores[c] for c in present}
    files = [job.collection_files / f"{collection_file_stem(c)}.csv" for c in present]
    report = check(merge(files, job.output / "submission.csv", job.root), job.root).raise_if_bad()
    say(f"wrote {report.path}: {len(report.rows)} rows, checked against the test files of {job.root}")
    if not missing:
        scores["final"] = final_score({c: scores[c]["score"] for c in COLLECTIONS})
    say(f"\nvalidation scores of the checkpoints used:\n{format_scores(scores)}")
    return scores


@dataclass(frozen=True)
class Trained:
    """A collection the job trained: its members' checkpoints, its physics prior's weights (None: not blended) and
    the seconds its fits took."""

    checkpoints: list[Path]
    prior: np.ndarray | None
    seconds: float


def rank_collection(collection: str, remaining: list[str], settings: Mapping, job: Job, plan: Plan | None,
                    checkpoints: list[Path] | None, ranker: Path | None = None,
                    trained: dict[str, Trained] | None = None) -> dict[str, float]:
    """One collection of the job (remaining[0]; the others follow it): fit its members (or use `checkpoints`), fit
    its physics prior, validate, save its ranker and predict, or rank with a saved `ranker`; under a `plan`, with
    the settings and training time it re-plans, each later step timed for the plan's estimates. What it trained
    goes into `trained`."""
    start = job.clock()
    seconds = plan.training_seconds(remaining) if plan else None
    planned = seconds + plan.reserved(collection) if plan else None
    settings = plan.settings[collection] if plan else settings
    if ranker is not None:
        metrics = rank_saved(collection, ranker, settings, job)
        if plan:
            plan.measured(collection, "evaluate", job.clock() - start)
            plan.progress(collection, planned, job.clock() - start, remaining[1:])
        return metrics
    fitted = None
    if checkpoints is None:
        setup = plan.estimate(collection, "setup") if plan else 0.0
        checkpoints = train_members(collection, settings, None if plan is None else setup + seconds, job)
        fitted = job.clock() - start
    if plan:
        plan.before_later_steps(remaining)
        settings = plan.settings[collection]
    began, prior = job.clock(), None
    if len(blend_weights(settings, collection)) > 1:
        prior = fitted_prior(collection, settings, job)
        if plan and prior_fitted(settings):
            plan.measured(collection, "prior", job.clock() - began)
    if fitted is not None and trained is not None:
        trained[collection] = Trained(checkpoints, prior, fitted)
    began = job.clock()
    metrics = evaluate(collection, checkpoints, settings, job, prior=prior)
    if plan:
        plan.measured(collection, "evaluate", job.clock() - began)
        plan.progress(collection, planned, job.clock() - start, remaining[1:])
    return metrics


def spare_members(order: list[str], settings: Mapping[str, Mapping], job: Job, plan: Plan,
                  trained: Mapping[str, Trained]) -> dict[str, dict]:
    """After every collection's first fit: the budget's time left fits the further members of the collections
    (of `order`, in turn) whose `member_time` is 'spare', each collection's part of it in proportion to the
    seconds its first fit took and split equally among its members, as many as get at least `budget.spare_least`
    of that first fit's time each (none on a machine where the first fits took their whole time); each collection
    that gains members is validated and ranked again as their ensemble. Returns those collections' metrics."""
    waiting = [c for c in order if members(settings[c]) > 1 and member_time(settings[c], c) == "spare"]
    scores = {}
    for collection in waiting:  # each re-ranking reserved as with all its members, until its count is known
        plan.settings[collection] = {**plan.settings[collection], "members": members(settings[collection])}
    for index, collection in enumerate(waiting):
        pool = plan.left() - sum(plan.estimate(other, "evaluate") for other in waiting[index:])
        first = trained[collection].seconds
        part = max(pool, 0.0) * first / sum(trained[other].seconds for other in waiting[index:])
        least = plan.rates[collection].spare_least * first
        wanted = members(settings[collection]) - 1
        count = min(wanted, int(part // least)) if least > 0 else wanted
        plan.settings[collection] = {**plan.settings[collection], "members": 1 + count}
        if count == 0:
            say(f"[{collection}] {part:.0f} s spare: no further member (each needs {least:.0f} s, "
                f"{plan.rates[collection].spare_least:g} of the first fit's {first:.0f} s)")
            continue
        say(f"[{collection}] {part:.0f} s spare: {count} further member{'s' if count > 1 else ''}")
        extra = train_members(collection, plan.settings[collection], part, job, first=1)
        began = job.clock()
        scores[collection] = evaluate(collection, [*trained[collection].checkpoints, *extra], plan.settings[collection],
                                      job, prior=trained[collection].prior)
        plan.measured(collection, "evaluate", job.clock() - began)
    return scores


def main(argv: list[str] | None = None) -> int:
    """`solution run --data.root PATH`: the whole job in one command."""
    parser = argparse.ArgumentParser(prog="solution run", description=__doc__)
    parser.add_argument("--data.root", dest="root", required=True, help="the data: a folder holding npz_all/npz")
    parser.add_argument("--out", default="submissions",
                        help="submission.csv, collections/, rankers/ and checkpoints/ go here")
    parser.add_argument("--config", action="append", default=[], type=Path,
                        help="a YAML layered over every collection's configs/ settings (repeatable), "
                             "e.g. configs/demo.yaml")
    parser.add_argument("--budget", type=float, default=None,
                        help="wall-clock seconds of the whole job, start to checked submission.csv (planned from the "
                             "files' sizes, re-planned as it goes); default: each collection its max_epochs")
    parser.add_argument("--rankers", type=Path, default=None,
                        help="a folder of <collection>.ranker (an earlier run's <out>/rankers/) to rank those "
                             "collections with, as saved, instead of training them")
    parser.add_argument("--checkpoints", type=Path, default=None,
                        help="a folder of <collection>.ckpt to use instead of training those collections")
    parser.add_argument("--cache", type=Path, default=None, help="preprocessed graphs; default: the data module's")
    parser.add_argument("--seed", type=int, default=None, help="seed_everything for every collection")
    parser.add_argument("--init_from", type=Path, default=None,
                        help="a folder of <collection>.ckpt (an earlier run's <out>/checkpoints/, e.g. on the program "
                             "corpus) whose weights start each collection's training")
    args = parser.parse_args(argv)
    if args.budget is not None and args.budget < 0:
        parser.error(f"--budget {args.budget}: expected seconds >= 0")
    checked = importlib.import_module("solution.tools.lightning_cli")  # imported here: the kernel reads no files
    for layer in args.config:  # a key the Lightning CLI does not accept is refused before anything trains
        checked.check_settings_file(layer)
    settings, defaults = read_settings(layers=args.config), read_settings()
    if args.seed is not None:
        settings = {c: {**s, "seed_everything": args.seed} for c, s in settings.items()}
    if args.init_from is not None:
        settings = started_from(settings, args.init_from)
    run(Job(Path(args.root), Path(args.out), args.cache, args.budget, args.checkpoints, args.rankers,
            defaults=defaults), settings)
    return 0
