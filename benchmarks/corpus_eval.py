"""Leave-family-out evaluation on a world of real programs: what the shipped settings score on program families
they never trained on, against the noise ceiling of each collection, over seeds with 95 % intervals.

    python benchmarks/corpus_eval.py                  # small corpus, 3 seeds, 480 s per fit (8 CPU-minutes)
    python benchmarks/corpus_eval.py --data ../shared/datasets/zoo-law/npz --ceilings layout:xla:default=0.858 \
        layout:xla:random=0.937 layout:nlp:default=0.899 layout:nlp:random=0.943 --budget 2400
                                                      # a Kaggle-format world whose runtimes the package did not write
    python benchmarks/corpus_eval.py --data ../shared/datasets/zoo-law/npz --ceilings ... --budget 2400 --whole_job
                                                      # ... as `solution run --budget 2400` runs it, per fold
    python benchmarks/corpus_eval.py --quick          # the same at 60 s per fit: a first look (~35 min on 2 cores)
    python benchmarks/corpus_eval.py --variant wide=path/to/wide.yaml   # + a settings layer, paired against shipped
    python benchmarks/corpus_eval.py --smoke          # tiny corpus, 1 seed, seconds of training: checks the script

The corpus comes from `solution synth --programs` (built under --data unless it is already there). For each
collection the families are split into --folds folds exactly as `data.folds=K`, `data.family_pattern="_.*$"` would
split them (the data splits' `assign_folds` over the train + valid stems, whose `_<variant>_<index>` tail that
pattern drops). The replicate of seed s holds out fold s mod K: every file of those families (train, valid and the
corpus's test files) becomes the test split of a data root of links, and the other families keep their own train /
valid split (both get every remaining file when one of them would be empty, as in the tiny corpus). The fit is
`solution run`'s `pipeline.train` within --seconds (checkpoint selection on that valid split, never on a held-out
family), the held-out files are ranked by `pipeline.evaluate` and the submission part is scored by `solution
score`'s code against the measured (noisy) runtimes: layout by Kendall tau, tile by the top-5 score. With as many
seeds as folds, every family is held out once. With --whole_job (and --budget S), a replicate is instead the whole
job as a user runs it, `solution run --budget S --seed s`, on one data root holding every collection's fold of seed
s: each collection trains its share of what is left when its turn comes (time a collection does not use passes to
the next), and each collection's ranking is scored as above.

Any Kaggle-format data root with runtimes on its train and valid files is a world too (--data, no programs.csv):
its train + valid files are the pool, a file's family is its name up to the first '_', and its test files (no
runtimes) take no part. Such a world has no noise-free runtimes: --ceilings gives each layout collection's noise
ceiling (as its README states it; tile's is 1, the best top-5 score), the same for every replicate.

The noise ceiling of a replicate is the same score of a submission ranked by the noise-free runtimes
(noiseless.csv) on the same held-out files: what a perfect model of the runtime law reaches. A cell is the mean
over replicates with its 95 % t interval; "% of ceiling" is 100 x model / ceiling per replicate. Each --variant
NAME=YAML layers that file over the shipped settings (and any --config layers) and is fitted on the same replicates;
its Δ against the shipped settings is paired by replicate. With --budget S, each collection trains for its share of S
(`budget.share`, preprocessing included), instead of --seconds each. The physics prior's fit of a replicate is made
once and shared by every setting whose fit would be the same. A setting with `members` > 1 fits that many seeds in
equal parts of --seconds and ranks by their rank ensemble, as `solution run` (with `member_time: spare`, shipped,
the further members train only from a whole job's time left: one fit here, as the job's first fit). With --members
K, every setting instead fits K members of --seconds each (seeds as `solution run` gives them) and the ensemble of
its first k is scored as a setting of its own, "NAME xk", paired against the first alone. Replicates run in seed
order, each over every collection, and the report is rewritten after each: a run stopped early keeps the report of
the replicates it finished.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path

import numpy as np
from intervals import t_interval
from reports import cpu_model, measured_code

from solution.atomic import atomic_write
from solution.constants import COLLECTIONS
from solution.data.reader import collection_dir, find_collections, list_files, read_graph
from solution.data.splits import assign_folds
from solution.data.tasks import task_of
from solution.submission.ensemble import ensemble
from solution.submission.files import collection_file_stem, read_answers, score, write_collection
from solution.tools import pipeline
from solution.tools.plan import training_shares
from solution.tools.settings import configs_folder, read_settings

REPO = Path(__file__).resolve().parent.parent
FAMILY_PATTERN = "_.*$"  # data.family_pattern that leaves a corpus stem's family: <family>_<variant>_<index>
SHIPPED = "shipped"


@dataclass(frozen=True)
class CorpusFile:
    """One row of the corpus's programs.csv."""

    collection: str
    split: str
    stem: str
    family: str
    program: str  # the program the file was lowered from (a Kaggle-format root: the file itself)

    @property
    def id(self) -> str:
        return f"{self.collection}:{self.stem}"


@dataclass(frozen=True)
class Replicate:
    """One seed of one collection, with the fold of families it holds out."""

    collection: str
    seed: int
    fold: int
    families: tuple[str, ...]  # held out
    root: Path  # the data root of links: the held-out families' files as its test split
    answers: dict[str, np.ndarray]  # ID -> measured runtimes (tile: / normalizer) of every held-out file
    ceiling: float  # the noise-free runtimes' score on those files


@dataclass(frozen=True)
class Fit:
    """The score of one setting's fit on one replicate."""

    variant: str
    replicate: Replicate
    model: float
    seconds: float  # wall time of training (an ensemble: its members') and ranking the held-out files

    @property
    def percent(self) -> float:
        return 100 * self.model / self.replicate.ceiling


# ---------------------------------------------------------------- the corpus and its folds


def build_corpus(root: Path, size: str, seed: int, collections: Sequence[str]) -> None:
    """`solution synth --programs` into `root` (its own process: jax stays out of this one)."""
    command = [sys.executable, "-m", "solution", "synth", "--programs", "--out", str(root), "--size", size,
               "--seed", str(seed), "--collections", *collections]
    print("$", shlex.join(command), flush=True)
    subprocess.run(command, check=True)


def read_manifest(root: Path) -> list[CorpusFile]:
    """Every file of the world with its family: the corpus's programs.csv (its test files are named by a hash), or
    for any other Kaggle-format root, its train and valid files, each of the family its name begins with."""
    if (root / "programs.csv").is_file():
        with open(root / "programs.csv", newline="") as handle:
            return [CorpusFile(row["collection"], row["split"], row["file"], row["family"], row["program"])
                    for row in csv.DictReader(handle)]
    return [CorpusFile(collection, split, path.stem, re.sub(FAMILY_PATTERN, "", path.stem), path.stem)
            for collection in find_collections(root) for split in ("train", "valid")
            for path in list_files(root, collection, split)]


def family_folds(files: list[CorpusFile], collection: str, folds: int) -> dict[str, int]:
    """Family -> fold: the datamodule's fold assignment of the collection's train + valid files with
    data.family_pattern="_.*$", so fold k holds the families data.fold=k would validate on."""
    pool = [f for f in files if f.collection == collection and f.split in ("train", "valid")]
    fold_of = assign_folds([f.stem for f in pool], folds, FAMILY_PATTERN)  # [len(pool)]
    return {f.family: int(k) for f, k in zip(pool, fold_of)}


def link_fold_root(corpus: Path, files: list[CorpusFile], collection: str, held_out: set[str], out: Path) -> Path:
    """A data root under `out` holding links to the corpus's files of `collection`: the `held_out` families' files
    (of every split) as test, the others' train and valid files in their own split, or both splits holding all of
    them when one would be empty. Rebuilt on every call, so it always matches the corpus."""
    source = collection_dir(corpus, collection).resolve()  # links to absolute paths: valid from any folder
    target = out.joinpath("npz_all", "npz", *collection.split(":"))
    mine = [f for f in files if f.collection == collection]
    kept = {split: [f for f in mine if f.family not in held_out and f.split == split] for split in ("train", "valid")}
    if not kept["train"] or not kept["valid"]:
        kept = {split: kept["train"] + kept["valid"] for split in kept}
    placed = {"test": [f for f in mine if f.family in held_out], **kept}
    for split, chosen in placed.items():
        folder = target / split
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("*.npz"):
            stale.unlink()
        for f in chosen:
            (folder / f"{f.stem}.npz").symlink_to(source / f.split / f"{f.stem}.npz")
    return out


def measured(corpus: Path, files: list[CorpusFile]) -> dict[str, np.ndarray]:
    """ID -> measured target of each file (tile: runtime / normalizer): from the npz for train and valid files,
    from answers.csv for the corpus's test files (their npz hold zeros, as in Kaggle)."""
    answers = read_answers(corpus / "answers.csv") if any(f.split == "test" for f in files) else {}
    return {f.id: answers[f.id] if f.split == "test" else
            read_graph(collection_dir(corpus, f.collection) / f.split / f"{f.stem}.npz").target() for f in files}


def noise_ceiling(corpus: Path, files: list[CorpusFile], answers: dict[str, np.ndarray], out: Path,
                  ceilings: Mapping[str, float]) -> float:
    """The collection score of a submission ranked by the noise-free runtimes of `files` (one collection), or,
    for a world without them, its ceiling in `ceilings` (tile: 1, the best top-5 score)."""
    collection = files[0].collection
    if not (corpus / "noiseless.csv").is_file():
        if collection not in ceilings and task_of(collection).name != "tile":
            raise SystemExit(f"{corpus}: no noiseless.csv; give {collection}'s noise ceiling with --ceilings")
        return ceilings.get(collection, 1.0)
    noiseless = read_answers(corpus / "noiseless.csv")  # ID <collection>:<split>:<stem>
    part = write_collection(out / f"{collection_file_stem(collection)}.ceiling.csv", collection,
                            {f.stem: noiseless[f"{collection}:{f.split}:{f.stem}"] for f in files})
    return float(score(part, answers)[collection]["score"])


def replicates(corpus: Path, collection: str, seeds: Sequence[int], folds: int, work: Path,
               always_train: Sequence[str] = (), excluded: Sequence[str] = (),
               ceilings: Mapping[str, float] | None = None) -> list[Replicate]:
    """The replicate of each seed s: fold s mod `folds` held out; its data root (<work>/folds/fold<k>, shared by every
    collection's fold k), answers and ceiling. Families in `always_train` are never held out (the folds are made of
    the others) and always train; families in `excluded` take no part at all. Both leave the held-out files as they
    are: a paired test of what training families add."""
    files = [f for f in read_manifest(corpus) if f.family not in excluded]
    fold_of = family_folds([f for f in files if f.family not in always_train], collection, folds)
    made = []
    for seed in seeds:
        fold = seed % folds
        families = tuple(sorted(f for f, k in fold_of.items() if k == fold))
        held = [f for f in files if f.collection == collection and f.family in families]
        root = link_fold_root(corpus, files, collection, set(families), work / "folds" / f"fold{fold}")
        answers = measured(corpus, held)
        made.append(Replicate(collection, seed, fold, families, root, answers,
                              noise_ceiling(corpus, held, answers, root, ceilings or {})))
    return made


# ---------------------------------------------------------------- fitting and scoring


def shared_prior_fits() -> None:
    """Make `pipeline.fitted_prior` fit each (collection, data root, data and fit settings, seed) once in this
    process: settings that differ only in training (members, epochs, the ranker) share their replicate's fit."""
    original = pipeline.fitted_prior
    if getattr(original, "shared", False):
        return
    fitted: dict[tuple[str, str, str], np.ndarray] = {}

    def fitted_prior(collection: str, settings: Mapping, job: pipeline.Job) -> np.ndarray:
        key = json.dumps({k: settings.get(k) for k in ("data", "prior_fit", "seed_everything")}, sort_keys=True,
                         default=str)
        if (collection, str(job.root), key) not in fitted:
            fitted[collection, str(job.root), key] = original(collection, settings, job)
        return fitted[collection, str(job.root), key]

    fitted_prior.shared = True
    pipeline.fitted_prior = fitted_prior


def fit(variant: str, settings: Mapping, replicate: Replicate, seconds: float, work: Path,
        members: int | None = None, trained: Path | None = None) -> list[Fit]:
    """Train on the replicate's other families within `seconds` (the settings' ensemble members each an equal
    part; members that wait for spare time (`member_time: spare`) train only in --whole_job, so here one fit), rank
    its held-out files and score that part: [the fit]. With `members` K, K members of `seconds` each
    (seeds as `solution run` gives them), each ranked once and scored alone (NAME, NAME #1, ...), then the rank
    ensemble of each first k from those rankings (NAME x2, ..., NAME xK), as `solution ensemble` combines them.
    With `trained` (an earlier run's --runs), no training: the shipped fit saved there for this replicate is ranked
    under `settings` (a setting of ranking alone, such as `blend_weights`, is then the only difference)."""
    collection = replicate.collection
    first = pipeline.first_fits(settings, collection)  # spare members wait for a whole job's time left: one fit
    seeded = {**first, "seed_everything": replicate.seed, **({"members": members} if members else {})}
    job = pipeline.Job(replicate.root, work / variant / collection_file_stem(collection)
                       / f"seed{replicate.seed}-fold{replicate.fold}")
    start = time.monotonic()
    if trained is None:
        checkpoints = pipeline.train_members(collection, seeded, seconds * (members or 1), job)
    else:
        fitted = trained / SHIPPED / collection_file_stem(collection) / f"seed{replicate.seed}-fold{replicate.fold}"
        checkpoints = pipeline.given_checkpoints(fitted / "checkpoints")[collection]
    share = (time.monotonic() - start) / len(checkpoints)  # training time per member
    alone = [[c] for c in checkpoints] if members else [checkpoints]  # each member ranked once, or the settings'
    names = [variant, *(f"{variant} #{j}" for j in range(1, len(alone)))]
    fits, folders, ranking = [], [], []
    for name, picked in zip(names, alone):
        begin, ranked = time.monotonic(), pipeline.Job(replicate.root, job.output / "ranked" / name.replace(" ", ""))
        pipeline.evaluate(collection, picked, seeded, ranked, validate=False)
        folders.append(ranked.collection_files)
        ranking.append(time.monotonic() - begin)
        fits.append(scored(name, replicate, ranked.collection_files, share * len(picked) + ranking[-1]))
    for k in range(2, len(alone) + 1):  # --members: the ensemble of the first k, from their ranked scores
        begin, out = time.monotonic(), job.output / "ranked" / f"x{k}"
        ensemble(folders[:k], out)
        fits.append(scored(f"{variant} x{k}", replicate, out, share * k + sum(ranking[:k]) + time.monotonic() - begin))
    return fits


def whole_job(variant: str, settings: Mapping[str, Mapping], replicates: list[Replicate], budget: float,
              work: Path) -> list[Fit]:
    """`solution run --budget <budget> --seed <seed>` on the data root that the replicates of one seed share (one
    per collection): each collection's ranking of its held-out files, scored; each fit's seconds are the job's."""
    seed, root = replicates[0].seed, replicates[0].root
    job = pipeline.Job(root, work / variant / "whole" / f"seed{seed}", budget=budget)
    start = time.monotonic()
    seeded = {c: {**s, "seed_everything": seed} for c, s in settings.items()}
    pipeline.run(job, seeded)
    fits = [scored(variant, r, job.collection_files, time.monotonic() - start) for r in replicates]
    return fits + [first_fit(variant, seeded[f.replicate.collection], f, job) for f in fits]


def first_fit(variant: str, settings: Mapping, job_fit: Fit, job: pipeline.Job) -> Fit:
    """`<variant> first`: the whole job's first fit of the collection ranked alone (its prior and blend chosen as
    the job chose them), so that what its further members added is paired on one run; the job's fit where it
    trained no other member."""
    collection = job_fit.replicate.collection
    if not job.checkpoint_path(collection, 1).is_file():
        return replace(job_fit, variant=f"{variant} first")
    ranked = pipeline.Job(job.root, job.output / "first")
    pipeline.evaluate(collection, [job.checkpoint_path(collection)], settings, ranked, validate=False)
    return scored(f"{variant} first", job_fit.replicate, ranked.collection_files, job_fit.seconds)


def scored(name: str, replicate: Replicate, folder: Path, seconds: float) -> Fit:
    """The fit whose ranking of the replicate's held-out files is <folder>/<collection>.csv, announced."""
    part = folder / f"{collection_file_stem(replicate.collection)}.csv"
    done = Fit(name, replicate, float(score(part, replicate.answers)[replicate.collection]["score"]), seconds)
    announce(done)
    return done


def announce(done: Fit) -> None:
    r = done.replicate
    print(f"[{r.collection}] {done.variant} seed {r.seed} fold {r.fold}: {done.model:.4f} "
          f"(ceiling {r.ceiling:.4f}, {done.percent:.1f} %) in {done.seconds:.0f} s", flush=True)


# ---------------------------------------------------------------- the report


def of(fits: list[Fit], variant: str, collection: str) -> list[Fit]:
    """A variant's fits of one collection in replicate order."""
    return [f for f in fits if f.variant == variant and f.replicate.collection == collection]


def finals(fits: list[Fit], variant: str, collections: list[str]) -> tuple[list[float], list[float]]:
    """Per replicate index, the mean over collections of the model's score and of the ceiling."""
    rows = [of(fits, variant, c) for c in collections]  # [collections][replicates]
    return ([float(np.mean([r[i].model for r in rows])) for i in range(len(rows[0]))],
            [float(np.mean([r[i].replicate.ceiling for r in rows])) for i in range(len(rows[0]))])


def shipped_table(fits: list[Fit], collections: list[str]) -> list[str]:
    """Model, ceiling and % of ceiling per collection (and their mean over collections) for the shipped settings."""
    lines = ["| collection | held-out files | model | noise ceiling | % of ceiling |", "|---|---|---|---|---|"]
    for collection in collections:
        mine = of(fits, SHIPPED, collection)
        lines.append(f"| {collection} | {np.mean([len(f.replicate.answers) for f in mine]):.1f} | "
                     f"{t_interval([f.model for f in mine])} | {t_interval([f.replicate.ceiling for f in mine])} | "
                     f"{t_interval([f.percent for f in mine], 1)} |")
    if len(collections) > 1:
        model, ceiling = finals(fits, SHIPPED, collections)
        percent = [100 * m / c for m, c in zip(model, ceiling)]
        lines.append(f"| **mean of the {len(collections)}** | | {t_interval(model)} | {t_interval(ceiling)} | "
                     f"{t_interval(percent, 1)} |")
    return lines


def variant_table(fits: list[Fit], variant: str, collections: list[str], against: str = SHIPPED) -> list[str]:
    """A variant's model score and % of ceiling, with its Δ against `against` (the shipped settings) paired by
    replicate."""
    lines = ["| collection | model | % of ceiling | Δ model | Δ % of ceiling |", "|---|---|---|---|---|"]
    for collection in collections:
        mine, base = of(fits, variant, collection), of(fits, against, collection)
        lines.append(f"| {collection} | {t_interval([f.model for f in mine])} | "
                     f"{t_interval([f.percent for f in mine], 1)} | "
                     f"{t_interval([a.model - b.model for a, b in zip(mine, base)], 3, '+')} | "
                     f"{t_interval([a.percent - b.percent for a, b in zip(mine, base)], 1, '+')} |")
    if len(collections) > 1:
        model, base = finals(fits, variant, collections)[0], finals(fits, against, collections)[0]
        lines.append(f"| **mean of the {len(collections)}** | {t_interval(model)} | | "
                     f"{t_interval([a - b for a, b in zip(model, base)], 3, '+')} | |")
    return lines


def ensemble_table(fits: list[Fit], base: str, members: int, collections: list[str]) -> list[str]:
    """Per collection, the members' mean alone and each prefix ensemble, paired by replicate against it and
    against the first member alone."""
    lines = ["| collection | ensemble | model | % of ceiling | Δ against one fit (members' mean) | Δ against the "
             "first member |", "|---|---|---|---|---|---|"]
    for collection in collections:
        alone = [of(fits, base if j == 0 else f"{base} #{j}", collection) for j in range(members)]  # [K][R]
        mean = [float(np.mean([member[i].model for member in alone])) for i in range(len(alone[0]))]
        percent = [float(np.mean([member[i].percent for member in alone])) for i in range(len(alone[0]))]
        lines.append(f"| {collection} | one fit | {t_interval(mean)} | {t_interval(percent, 1)} | | |")
        for k in range(2, members + 1):
            mine = [f.model for f in of(fits, f"{base} x{k}", collection)]
            lines.append(f"| | x{k} | {t_interval(mine)} | "
                         f"{t_interval([f.percent for f in of(fits, f'{base} x{k}', collection)], 1)} | "
                         f"{t_interval([a - b for a, b in zip(mine, mean)], 3, '+')} | "
                         f"{t_interval([a - f.model for a, f in zip(mine, alone[0])], 3, '+')} |")
    return lines


def replicate_table(fits: list[Fit]) -> list[str]:
    """Every fit: which seed and families, how many files, its scores and wall time."""
    lines = ["| collection | settings | seed | held-out families (fold) | files | model | ceiling | % | wall s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for f in fits:
        r = f.replicate
        lines.append(f"| {r.collection} | {f.variant} | {r.seed} | {', '.join(r.families)} ({r.fold}) | "
                     f"{len(r.answers)} | {f.model:.4f} | {r.ceiling:.4f} | {f.percent:.1f} | {f.seconds:.0f} |")
    return lines


def report(fits: list[Fit], collections: list[str], variants: dict[str, Path], args: argparse.Namespace,
           command: str, minutes: float) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    layers = ", ".join(str(p) for p in args.config) or "none"
    corpus = (args.data / "programs.csv").is_file()
    lines = [
        f"# Leave-family-out evaluation on {'the real-program corpus' if corpus else args.data}", "",
        f"Command: `{command}`  ", f"Written by benchmarks/corpus_eval.py on {date.today()}, commit {commit}, "
        f"{os.cpu_count()} CPU cores ({cpu_model()}); {minutes:.0f} min in all; replicates finished: "
        f"{len(of(fits, SHIPPED, collections[0]))} of {args.seeds}.", "",
        (corpus_line(args) if corpus else
         f"World: {args.data}, its train + valid files; a file's family is its name up to the first '_'. Noise "
         f"ceilings as given: {', '.join(f'{c} {v:g}' for c, v in args.ceilings.items()) or 'none'} (tile: 1). ")
        + f"Settings: configs/<collection>.yaml over configs/base.yaml, extra layers: {layers}. "
        + (f"No training: every setting ranks the shipped fits saved under {args.trained}. " if args.trained else
           f"Each fit trains {trained_for(args)} (`pipeline.train`, as `solution run`), selecting its checkpoint on "
           "the valid files of the families it trains on. ")
        + f"Families in {args.folds} folds (data.folds={args.folds}, "
        f'data.family_pattern="_.*$"); the replicate of seed s ({args.first_seed}..{args.first_seed + args.seeds - 1}) '
        f"holds out fold s mod {args.folds}: every file of those families (train, valid and "
        "test) is ranked and scored against its measured runtimes by `solution score`'s code (layout: Kendall "
        "tau; tile: top-5 score). "
        + ("The noise ceiling is the same score of the ranking by the noise-free runtimes on the same files. "
           if corpus else "") + "Cells: mean over replicates [95 % t interval]; % of ceiling = 100 x model / ceiling "
        "per replicate.", *([f"Families never held out, always training: {', '.join(args.always_train)}."]
                            if args.always_train else []),
        *([f"Families left out of everything: {', '.join(args.exclude)}."] if args.exclude else []), "",
        "## Shipped settings", "", *shipped_table(fits, collections), ""]
    for name, path in variants.items():
        lines += [f"## Variant `{name}`: {path} layered on top", "",
                  "Δ against the shipped settings, paired by replicate (same seed, same held-out families):", "",
                  *variant_table(fits, name, collections), ""]
    for name in [SHIPPED, *variants] if any(f.variant == f"{SHIPPED} first" for f in fits) else []:
        lines += [f"## `{name}` against its first fits", "",
                  "Each collection's ranking by the whole job against its first fit ranked alone (as the job ranked it "
                  "before any further member; the same fit where the job trained none), paired by replicate:", "",
                  *variant_table(fits, name, collections, against=f"{name} first"), ""]
    for base in [SHIPPED, *variants] if args.members else []:
        lines += [f"## Seed ensembles of `{base}`: members of {args.seconds:g} s each", "",
                  f"One fit: the mean of the {args.members} members alone per replicate (each a fit of another seed). "
                  "xk: the rank ensemble of the first k members, k x the training time. Δ paired by replicate, "
                  "against the mean of the members alone and against the first member alone:", "",
                  *ensemble_table(fits, base, args.members, collections), ""]
    return "\n".join(lines + ["## Every fit", "", *replicate_table(fits), ""])


def corpus_line(args: argparse.Namespace) -> str:
    """Where the program corpus came from: built by this command, or found at --data (its programs counted)."""
    if args.built:
        return f"Corpus: `solution synth --programs --size {args.size} --seed {args.corpus_seed}` ({args.data}). "
    programs = {(f.collection.split(":")[1], f.program) for f in read_manifest(args.data)}
    kinds = ", ".join(f"{sum(k == kind for k, _ in programs)} {kind}" for kind in ("xla", "nlp"))
    return f"Corpus: the program corpus found at {args.data} ({kinds} programs; built beforehand). "


# ---------------------------------------------------------------- the command


def seconds_of(args: argparse.Namespace, collection: str) -> float:
    """A collection's training seconds per fit: its share of --budget as `solution run` gives it, or --seconds."""
    return args.budget * training_shares(read_settings())[collection] if args.budget is not None else args.seconds


def trained_for(args: argparse.Namespace) -> str:
    """How long each fit trains, in the report's words."""
    if args.budget is None:
        return f"{args.seconds:g} s"
    if args.whole_job:
        return (f"within the whole job `solution run --budget {args.budget:g} --seed <seed>` on a data root holding "
                f"every collection's fold ({', '.join(args.collections)}): each its share of the time left when its "
                "turn comes")
    return (f"its share of a {args.budget:g} s budget (" +
            ", ".join(f"{c} {seconds_of(args, c):g} s" for c in args.collections) + ")")


def ceiling(text: str) -> tuple[str, float]:
    """'layout:xla:random=0.937' -> (collection, ceiling)."""
    collection, sep, value = text.partition("=")
    try:
        if sep and collection in COLLECTIONS and 0 < float(value) <= 1:
            return collection, float(value)
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"{text!r}: expected COLLECTION=CEILING, a collection of {', '.join(COLLECTIONS)} "
                                     "and a ceiling in (0, 1]")


def seconds(text: str) -> float:
    """A positive number of seconds ('0' would give each fit the one-step minimum, not "no limit")."""
    try:
        if float(text) > 0:
            return float(text)
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"{text!r}: expected a positive number of seconds")


def named_layer(text: str) -> tuple[str, Path]:
    """'NAME=path/to/layer.yaml' -> (NAME, path)."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path or name == SHIPPED:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=path/to/layer.yaml (NAME not {SHIPPED!r})")
    return name, Path(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, help="the corpus root (built there when missing); default "
                                                  "data/programs-<size>")
    parser.add_argument("--size", default="small", choices=("tiny", "small", "full"))
    parser.add_argument("--corpus_seed", type=int, default=0, help="solution synth --seed")
    parser.add_argument("--collections", nargs="+", default=list(COLLECTIONS), choices=list(COLLECTIONS))
    parser.add_argument("--seeds", type=int, default=3, help="replicates: seeds F..F+N-1 (F: --first_seed), "
                        "seed s holding out fold s mod --folds")
    parser.add_argument("--first_seed", type=int, default=0, help="the first replicate's seed (fresh seeds re-test "
                        "a comparison whose settings were chosen on seeds 0..N-1)")
    parser.add_argument("--folds", type=int, default=3, help="folds of families per collection")
    parser.add_argument("--always_train", nargs="*", default=[], metavar="FAMILY",
                        help="families never held out: the folds are made of the others, these always train")
    parser.add_argument("--exclude", nargs="*", default=[], metavar="FAMILY",
                        help="families left out of training and of the held-out files")
    parser.add_argument("--seconds", type=seconds, default=480.0, help="training time per fit")
    parser.add_argument("--budget", type=seconds, default=None, help="a whole job's seconds: each collection trains "
                        "its `solution run --budget` share of it per fit (instead of --seconds)")
    parser.add_argument("--whole_job", action="store_true", help="with --budget: each replicate is one `solution "
                        "run --budget` over every collection's fold (unused time passes on, as it does there)")
    parser.add_argument("--ceilings", type=ceiling, nargs="*", default=[], metavar="COLLECTION=CEILING",
                        help="noise ceilings of a world without noiseless.csv (e.g. its README's valid ceilings)")
    parser.add_argument("--config", type=Path, action="append", default=[],
                        help="a YAML layered over every collection's shipped settings (repeatable)")
    parser.add_argument("--variant", type=named_layer, action="append", default=[],
                        help="NAME=YAML: also fit the settings with this layer on top, paired against them")
    parser.add_argument("--members", type=int, default=None,
                        help="fit N members of --seconds each per setting and replicate; score the ensembles of "
                             "the first 1..N")
    parser.add_argument("--runs", type=Path, default=Path("runs/corpus_eval"),
                        help="fold roots, checkpoints, ranked files")
    parser.add_argument("--trained", type=Path, help="an earlier run's --runs: rank its shipped fits under each "
                        "setting instead of training (for settings of ranking alone, such as blend_weights)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "corpus_eval.md")
    parser.add_argument("--quick", action="store_true", help="60 s per fit")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny corpus, 1 seed, 2 folds, 3 s per fit, tile:xla and layout:xla:default, demo sizes")
    args = parser.parse_args(argv)
    measured_code()  # this checkout's package, before any work
    if args.whole_job and (args.budget is None or args.members or args.trained):
        parser.error("--whole_job needs --budget, and takes neither --members nor --trained")
    given = argv if argv is not None else sys.argv[1:]
    if args.quick:
        args.seconds = 60.0
    if args.smoke:
        work = Path(tempfile.mkdtemp(prefix="corpus-eval-"))
        args.data, args.size, args.seeds, args.folds, args.seconds = work / "data", "tiny", 1, 2, 3.0
        args.collections, args.runs = ["tile:xla", "layout:xla:default"], work / "runs"
        args.config = [configs_folder() / "demo.yaml", *args.config]
    args.data = args.data or Path(f"data/programs-{args.size}")
    args.ceilings = dict(args.ceilings)
    args.built = not args.data.exists()
    if args.built:
        build_corpus(args.data, args.size, args.corpus_seed, args.collections)
    shared_prior_fits()
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # pipeline.train prints its own progress
    variants = dict(args.variant)
    settings = {SHIPPED: read_settings(layers=args.config),
                **{name: read_settings(layers=[*args.config, path]) for name, path in variants.items()}}
    start, fits = time.monotonic(), []
    command = shlex.join(["python", "benchmarks/corpus_eval.py", *given])
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    shutil.rmtree(args.runs / "folds", ignore_errors=True)  # links only: every fold root is made anew
    rounds = {c: replicates(args.data, c, seeds, args.folds, args.runs, args.always_train, args.exclude,
                            args.ceilings) for c in args.collections}
    for index in range(args.seeds):
        if args.whole_job:
            for name, chosen in settings.items():
                fits += whole_job(name, {c: chosen[c] for c in args.collections},
                                  [rounds[c][index] for c in args.collections], args.budget, args.runs)
        else:
            for collection in args.collections:
                for name, chosen in settings.items():
                    fits += fit(name, chosen[collection], rounds[collection][index], seconds_of(args, collection),
                                args.runs, args.members, args.trained)
        text = report(fits, args.collections, variants, args, command, (time.monotonic() - start) / 60)
        with atomic_write(args.out) as handle:
            handle.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
