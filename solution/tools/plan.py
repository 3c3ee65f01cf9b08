"""The wall-clock plan of a budgeted job (`solution run --budget S`, the kernel's SOLUTION_TIME_BUDGET): what the
steps around each collection's training will take, estimated from its files' sizes; how long each collection then
trains; what is cut, in a fixed order, when time is short; and the progress lines that say where the job stands.

A collection's time is its preprocessing (inside its training time), its training, the physics prior's fit, then
validating and predicting. Estimates are `BudgetSettings` rates x the sizes the files' headers give, each kind of
step re-scaled by what the job's own steps of that kind took (so that a slower machine is learned, not assumed).
Training gets what the estimates leave, shared out by `share`; where it would get less than `train_at_least` of
the time left, the later steps are cut, in this order: the prior's steps (halved, down to `min_prior_steps`), its
penalty search (one fit with the first penalty), the validation configs per file (halved, down to
`min_valid_configs`), the ensemble members (to one)."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from ..constants import SPLITS
from ..data.reader import DataError, array_shapes, list_files
from ..data.tasks import task_of
from ..errors import SettingsError
from ..physics.fit import PriorFit
from .settings import section

OVERHEAD_SECONDS = 10.0  # the process's start-up before the plan begins (imports), the final merge and check

STEP_NAMES = {"setup": "preprocessing", "prior": "the physics prior's fit", "evaluate": "validating and predicting"}


@dataclass(frozen=True)
class BudgetSettings:
    """A collection's part in a budgeted job (`budget:` in configs/): its `share` of the training time, and the
    seconds per unit of size that the plan reserves for its other steps (measured on 2 CPU cores)."""

    share: float = 0.2  # of the training time, against the shares of the other collections present
    order: int = 0  # the job trains its collections by this, lowest first (ties: the submission's order)
    start: float = 3.0  # per collection: building its data modules, models and trainers; one training step
    node: float = 2e-5  # preprocessing: per node of a file
    row: float = 4e-6  # preprocessing and scoring: per config row (layout: config x configurable node; tile: config)
    prior: float = 3e-4  # the physics prior's fit: per train file it reads, per Adam step of each of its fits
    work: float = 1.5e-7  # with data.config_work, preprocessing: per node of a file x config of it walked
    train_at_least: float = 0.5  # of the time left: below it the later steps are cut
    min_prior_steps: int = 50  # cuts leave the prior's fit at least this many steps
    min_valid_configs: int = 64  # ... and validation at least this many configs of each valid file
    spare_least: float = 0.5  # with member_time: spare, a further member fits only with this much of the first's time


def training_shares(settings: Mapping[str, Mapping]) -> dict[str, float]:
    """Collection -> its share of the training time when every collection in `settings` is present (sums to 1)."""
    shares = {c: budget_settings(s, c).share for c, s in settings.items()}
    return {c: share / sum(shares.values()) for c, share in shares.items()}


def training_order(settings: Mapping[str, Mapping]) -> list[str]:
    """The collections of `settings` in the order the job trains them: by `budget.order`, ties kept in their
    order. Time a collection leaves (one stopped by its max_epochs) passes to those after it, so the ones that use
    all of theirs go last."""
    return sorted(settings, key=lambda c: budget_settings(settings[c], c).order)


def budget_settings(settings: Mapping, collection: str) -> BudgetSettings:
    """The collection's `budget:` settings; an unknown key or a negative number is a SettingsError."""
    budget = section(settings, "budget", BudgetSettings, collection)
    if not all(isinstance(value, (int, float)) and value >= 0 for value in dataclasses.astuple(budget)):
        raise SettingsError(f"{collection}: budget={settings.get('budget')!r}; expected numbers >= 0")
    return budget


@dataclass(frozen=True)
class Sizes:
    """One collection's files by split, from their headers: [files, 3] nodes, configs, configurable nodes (tile: 1)."""

    files: Mapping[str, np.ndarray]

    def nodes(self, *splits: str) -> int:
        return int(sum(self.files[s][:, 0].sum() for s in splits))

    def walked(self, split: str, configs: int = 0) -> int:
        """Nodes x configs of a split's files, each file's configs cut to `configs` where above 0."""
        counts = self.files[split][:, 1]
        return int((np.minimum(counts, configs or counts) * self.files[split][:, 0]).sum())

    def rows(self, split: str, configs: int = 0) -> int:
        """Config rows of a split's files, each file's configs cut to `configs` where above 0."""
        counts = self.files[split][:, 1]
        return int((np.minimum(counts, configs or counts) * self.files[split][:, 2]).sum())


def collection_sizes(root, collection: str) -> Sizes:
    """The sizes of every readable file of `collection` under `root` (a split without files counts none)."""
    task, found = task_of(collection), {}
    for split in SPLITS:
        try:
            paths = list_files(root, collection, split)
        except ValueError:  # no such split folder, or no files in it
            paths = []
        rows = []
        for path in paths:
            try:
                shapes = array_shapes(path)
                configurable = shapes["node_config_ids"][0] if task.name == "layout" else 1
                rows.append((shapes["node_feat"][0], shapes["config_runtime"][0], configurable))
            except (DataError, KeyError, IndexError):
                continue  # the data module reports it (or, with data.skip_bad_files, leaves it out)
        found[split] = np.array(rows, np.int64).reshape(-1, 3)
    return Sizes(found)


def cut_penalties(settings: Mapping, rates: BudgetSettings, most_valid: int) -> dict | None:
    """One fit of the prior with its first penalty instead of a search among several by held-out folds."""
    fit = settings.get("prior_fit", {})
    if len(fit.get("penalties", ())) <= 1 or not prior_fitted(settings):
        return None
    return {**settings, "prior_fit": {**fit, "penalties": list(fit["penalties"][:1])}}


def cut_prior_steps(settings: Mapping, rates: BudgetSettings, most_valid: int) -> dict | None:
    """Half the prior's Adam steps, down to `min_prior_steps`."""
    fit, least = settings.get("prior_fit", {}), rates.min_prior_steps
    steps = fit.get("steps", 0)
    if not prior_fitted(settings) or steps <= least:
        return None
    return {**settings, "prior_fit": {**fit, "steps": max(steps // 2, least)}}


def cut_valid_configs(settings: Mapping, rates: BudgetSettings, most_valid: int) -> dict | None:
    """Half the configs validated per valid file (all of them: `most_valid`, the most a valid file holds), down
    to `min_valid_configs`."""
    data, least = settings["data"], rates.min_valid_configs
    now = data.get("valid_configs") or most_valid
    if now <= least:
        return None
    return {**settings, "data": {**data, "valid_configs": max(now // 2, least)}}


def cut_members(settings: Mapping, rates: BudgetSettings, most_valid: int) -> dict | None:
    """One member fewer."""
    count = settings.get("members", 1)
    return {**settings, "members": count - 1} if count > 1 else None


# what is cut when time is short, in order: (the setting it changes, the cut)
CUTS = (("prior_fit.steps", cut_prior_steps), ("prior_fit.penalties", cut_penalties),
        ("data.valid_configs", cut_valid_configs), ("members", cut_members))


def prior_fitted(settings: Mapping) -> bool:
    """Whether the collection fits the physics prior: blend weights above 0 and train files to fit on."""
    return any(settings.get("blend_weights", [])) and settings.get("prior_fit", {}).get("files", 0) > 0


def clock_time(seconds: float) -> str:
    """A moment `seconds` from now as the wall clock reads it, hh:mm:ss."""
    return time.strftime("%H:%M:%S", time.localtime(time.time() + seconds))


@dataclass
class Plan:
    """A budgeted job's time: each collection's estimated steps (seconds) and its training time, re-planned from
    the clock before each collection trains and before its later steps run."""

    budget: float
    settings: dict[str, dict]  # collection -> its settings, as cut so far
    sizes: Mapping[str, Sizes]
    clock: Callable[[], float] = time.monotonic
    say: Callable[[str], None] = print
    given: set[str] = field(default_factory=set)  # collections that load checkpoints instead of training
    # (task, 'prior' or 'files') -> seconds estimated and taken by the job's steps so far; 'files' (preprocessing
    # and scoring) is measured on the steps after training and scales the preprocessing before it too
    totals: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.begin = self.clock()
        self.rates = {c: budget_settings(s, c) for c, s in self.settings.items()}

    # ---------------------------------------------------------------- estimates

    def kind(self, collection: str, step: str) -> tuple[str, str]:
        """The key of `totals` a step's estimates are scaled by."""
        return task_of(collection).name, "prior" if step == "prior" else "files"

    def scale(self, collection: str, step: str) -> float:
        """Measured over estimated seconds of the job's steps of this kind so far (1 before any)."""
        estimated, took = self.totals.get(self.kind(collection, step), (0.0, 0.0))
        return took / estimated if estimated > 0 else 1.0

    def estimate(self, collection: str, step: str, scaled: bool = True) -> float:
        """Seconds of one step ('setup': start and preprocessing of train and valid files; 'prior': the physics
        prior's fit; 'evaluate': start, preprocessing of test files, scoring valid and test configs) as the
        collection's settings stand."""
        settings, sizes, rates = self.settings[collection], self.sizes[collection], self.rates[collection]
        members, data = settings.get("members", 1), settings.get("data", {})
        if step == "setup" and collection in self.given:
            seconds = 0.0
        elif step == "setup":
            seconds = members * (rates.start + rates.node * sizes.nodes("train", "valid")
                                 + rates.row * (sizes.rows("train") + sizes.rows("valid")))
            if data.get("config_work"):
                seconds += rates.work * (sizes.walked("train", data.get("work_configs", 0)) + sizes.walked("valid"))
        elif step == "prior":
            seconds = rates.prior * prior_work(settings, len(sizes.files["train"])) if prior_fitted(settings) else 0.0
        else:
            valid = sizes.rows("valid", data.get("valid_configs", 0))
            seconds = members * (rates.start + rates.row * (valid + sizes.rows("test"))) \
                + rates.node * sizes.nodes("test") + rates.row * sizes.rows("test") \
                + (rates.work * sizes.walked("test") if data.get("config_work") else 0.0)
        return seconds * (self.scale(collection, step) if scaled else 1.0)

    def reserved(self, collection: str, trained: bool = False) -> float:
        """Seconds of the collection's steps other than training (those after it once `trained`)."""
        steps = ("prior", "evaluate") if trained else ("setup", "prior", "evaluate")
        return sum(self.estimate(collection, step) for step in steps)

    def left(self) -> float:
        """Seconds of the budget left, less the final merge."""
        return self.budget - (self.clock() - self.begin) - OVERHEAD_SECONDS

    def training_pool(self, remaining: list[str], trained: bool) -> float:
        """Seconds of training left to `remaining` (the first of them `trained` or not) after their other steps."""
        return self.left() - self.reserved(remaining[0], trained) - sum(self.reserved(c) for c in remaining[1:])

    # ---------------------------------------------------------------- planning

    def check_enough(self, source: str) -> None:
        """A SettingsError before anything runs when even every cut leaves no time to train: the budget is below
        what preprocessing, validating and predicting these files need."""
        need = OVERHEAD_SECONDS
        for collection, settings in self.settings.items():
            for _, cut in CUTS:
                while (smaller := self.cut_once(cut, collection)) is not None:
                    self.settings[collection] = smaller
            need += self.reserved(collection)
            self.settings[collection] = settings
        if need > self.budget:
            raise SettingsError(f"{source} {self.budget:g} is below the ~{need:.0f} s that preprocessing, "
                                f"validating and predicting these files need here (estimated, with every cut); "
                                f"give at least {math.ceil(need * 1.25 / 10) * 10}")

    def training_seconds(self, remaining: list[str]) -> float:
        """Re-plan before remaining[0] trains: cut where training would get less than `train_at_least` of the time
        left (each cut said), then its share of what is left to train; prints the plan."""
        self.cut(remaining, trained=False, least=self.rates[remaining[0]].train_at_least)
        pool = max(self.training_pool(remaining, trained=False), 0.0)
        shares = {c: 0.0 if c in self.given else self.rates[c].share for c in remaining}
        trains = {c: pool * share / sum(shares.values()) if sum(shares.values()) else pool / len(remaining)
                  for c, share in shares.items()}
        lines = [f"[plan] {self.left() + OVERHEAD_SECONDS:.0f} s of the {self.budget:g} s budget left; per collection: "
                 "training s, then preprocessing / prior fit / validating and predicting s (estimated)"]
        lines += [f"[plan]   {c:<20} {trains[c]:6.0f}   " + " / ".join(f"{self.estimate(c, step):.0f}" for step in
                                                                  ("setup", "prior", "evaluate")) for c in remaining]
        self.say("\n".join(lines))
        return trains[remaining[0]]

    def before_later_steps(self, remaining: list[str]) -> None:
        """Re-plan after remaining[0] trained: cut its later steps (and the others') where they no longer fit."""
        self.cut(remaining, trained=True, least=0.0)

    def cut(self, remaining: list[str], trained: bool, least: float) -> None:
        """Apply CUTS in order, each to every remaining collection as far as needed, until training keeps `least`
        of the time left; says each setting cut, from what to what, and the seconds it saves."""
        for key, cut in CUTS:
            for collection in remaining:
                now_trained = trained and collection == remaining[0]
                if now_trained and cut is cut_members:
                    continue  # its members are trained
                before, seconds = self.settings[collection], self.reserved(collection, now_trained)
                while self.training_pool(remaining, trained) < least * self.left():
                    smaller = self.cut_once(cut, collection)
                    if smaller is None:
                        break
                    self.settings[collection] = smaller
                if self.settings[collection] is not before:
                    self.say(f"[plan] time is short: {collection} cuts {key} from {setting(before, key)} to "
                             f"{setting(self.settings[collection], key)}, saving ~"
                             f"{seconds - self.reserved(collection, now_trained):.0f} s")

    def cut_once(self, cut: Callable, collection: str) -> dict | None:
        """The collection's settings with one more step of `cut`, or None where it cannot cut further."""
        most_valid = int(self.sizes[collection].files["valid"][:, 1].max(initial=0))
        return cut(self.settings[collection], self.rates[collection], most_valid)

    # ---------------------------------------------------------------- measuring

    def measured(self, collection: str, step: str, seconds: float) -> None:
        """Record that a step took `seconds`: later estimates of its kind (per task) are re-scaled by all the
        job's steps of that kind so far."""
        self.say(f"[{collection}] {STEP_NAMES[step]} took {seconds:.0f} s "
                 f"(planned {self.estimate(collection, step):.0f} s)")
        key = self.kind(collection, step)
        estimated, took = self.totals.get(key, (0.0, 0.0))
        self.totals[key] = (estimated + self.estimate(collection, step, scaled=False), took + seconds)

    def progress(self, collection: str, planned: float, used: float, remaining: list[str]) -> None:
        """The line after a collection is done: its time used against its plan, and when the job should finish."""
        elapsed = self.clock() - self.begin
        ahead = sum(self.reserved(c) for c in remaining) + OVERHEAD_SECONDS
        finish = elapsed + max(self.left() + OVERHEAD_SECONDS if remaining else 0.0, ahead)
        self.say(f"[{collection}] done in {used:.0f} s of its planned {planned:.0f} s ({planned - used:+.0f} s to "
                 f"the rest); the job: {elapsed:.0f} s of {self.budget:g} s, finish estimated at "
                 f"{clock_time(finish - elapsed)} ({finish:.0f} s)")


def prior_work(settings: Mapping, train_files: int) -> float:
    """File x step units of the prior's fit: its files read, each fit's steps, its fits (one, or one per penalty
    and held-out fold plus the final one)."""
    fit, default = settings.get("prior_fit", {}), PriorFit()
    penalties, folds = len(fit.get("penalties", default.penalties)), fit.get("folds", default.folds)
    fits = 1 + (penalties * folds if penalties > 1 else 0)
    return min(fit.get("files", default.files), train_files) * fit.get("steps", default.steps) * fits


def setting(settings: Mapping, key: str) -> object:
    """The value of a dotted key ('prior_fit.steps'); 'all' for valid_configs 0."""
    value = settings
    for part in key.split("."):
        value = value.get(part, {"members": 1}.get(part, 0))
    return "all" if key == "data.valid_configs" and not value else value
