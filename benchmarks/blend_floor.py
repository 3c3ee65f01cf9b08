"""The physics prior's floor (`blend_floor`) decided on saved rankers: every ranker that `corpus_eval.py` left in its
--runs folders ranks its held-out (test) and valid files again, by the model alone and blended with its fitted prior
at every weight of `blend_weights`, so the floors compare on the same models, paired.

    python benchmarks/blend_floor.py --runs /tmp/runs-a /tmp/runs-b --out benchmarks/results/blend_floor.md

A runs folder holds `<variant>/<collection>/seed<s>-fold<k>/ranked/*/rankers/<collection>.ranker` (fits at --seconds or
--budget shares) and `<variant>/whole/seed<s>/rankers/<collection>.ranker` (--whole_job, fold s mod --folds), with the
fold's data root at `folds/fold<k>/npz_all/npz`. Rankers the current code cannot read (older architectures, removed
options) are counted and left out. For each collection the report gives the held-out mean at each fixed weight and
with the weight the valid files pick from each floor up (means over folds of the means within a fold, so a fold with
more rankers does not weigh more), and each floor against the shipped one, ranker by ranker.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from intervals import t_interval
from reports import write_titled_report

from solution.constants import COLLECTIONS
from solution.physics.blend import blend_floor, blend_shares, blend_weights, chosen_weight
from solution.physics.prior import prior_by_row
from solution.submission.ensemble import combine
from solution.tools.ranking import ranked_split, split_metrics
from solution.tools.settings import layered, read_settings
from solution.training.checkpoints import CheckpointError
from solution.training.ranker_file import read_ranker

LAYOUTS = [c for c in COLLECTIONS if c.startswith("layout")]


@dataclasses.dataclass
class Ranked:
    """One saved ranker's mean held-out and valid scores at every blend weight."""

    source: str  # the runs folder and the settings' name, `/whole` added for a whole job's
    fold: int
    test: dict[float, float]
    valid: dict[float, float]

    def picked(self, floor: float) -> float:
        """The held-out score at the weight the valid files pick from `floor` up, as `solution run` picks it."""
        return self.test[chosen_weight({w: {"score": s} for w, s in self.valid.items()}, floor)]


def saved_rankers(runs: Path, stem: str, folds: int) -> list[tuple[Path, str, Path, int]]:
    """(ranker, source, fold data root, fold) of every fit of one collection in a corpus_eval runs folder."""
    found = []
    for path in sorted(runs.glob(f"*/{stem}/seed*-fold*/ranked/*/rankers/{stem}.ranker")):
        fold = int(re.search(r"seed\d+-fold(\d+)", str(path)).group(1))
        found.append((path, f"{runs.name}/{path.relative_to(runs).parts[0]}", fold))
    for path in sorted(runs.glob(f"*/whole/seed*/rankers/{stem}.ranker")):
        fold = int(re.search(r"whole/seed(\d+)", str(path)).group(1)) % folds
        found.append((path, f"{runs.name}/{path.relative_to(runs).parts[0]}/whole", fold))
    return [(path, source, runs / "folds" / f"fold{fold}" / "npz_all" / "npz", fold) for path, source, fold in found]


def split_means(ranker, settings: dict, collection: str, split: str, weights: list[float]) -> dict[float, float]:
    """The split's score at each blend weight, 0 the model alone, as validation takes it (`split_metrics`)."""
    graphs, model = ranked_split(dataclasses.replace(ranker, weight=0.0), settings, split, "blend_floor")
    priors = {index: prior_by_row(graphs, index, ranker.fitted_prior) for index in model}
    means = {}
    for weight in weights:
        shares = np.array(blend_shares(1, weight))
        blended = {index: model[index] if weight == 0 else combine([model[index], priors[index]], shares, "rank")
                   for index in model}  # at weight 1 the prior's ranks alone
        means[weight] = split_metrics(graphs, blended, collection)["score"]
    return means


def rank_again(runs: list[Path], collection: str, folds: int) -> tuple[list[Ranked], int]:
    """Every readable ranker of `collection` in `runs`, ranked again; and how many could not be read."""
    settings = read_settings()[collection]
    weights = blend_weights(settings, collection)  # ascending, 0 (the model alone) first
    stem = collection.replace(":", "_")
    ranked, unreadable = [], 0
    for folder in runs:
        for path, source, root, fold in saved_rankers(folder, stem, folds):
            rooted = layered(settings, {"data": {"root": str(root)}})
            try:
                ranker = read_ranker(path)
                means = {split: split_means(ranker, rooted, collection, split, weights) for split in ("test", "valid")}
            except CheckpointError:  # written by an older version of the package
                unreadable += 1
                continue
            ranked.append(Ranked(source, fold, means["test"], means["valid"]))
            print(f"{collection} fold {fold}: {path}", flush=True)
    return ranked, unreadable


def fold_mean(ranked: list[Ranked], value) -> str:
    """The mean over folds of the mean within each fold of value(ranker), and each fold's mean."""
    by_fold = defaultdict(list)
    for r in ranked:
        by_fold[r.fold].append(value(r))
    means = {fold: float(np.mean(v)) for fold, v in sorted(by_fold.items())}
    return f"{np.mean(list(means.values())):.3f} | " + " / ".join(f"{m:.3f}" for m in means.values())


def collection_section(collection: str, ranked: list[Ranked], unreadable: int) -> list[str]:
    """The report's part for one collection: fixed weights, floors, floors against the shipped one."""
    settings = read_settings()[collection]
    shipped = blend_floor(settings, collection)
    weights = sorted(ranked[0].test)
    folds = sorted({r.fold for r in ranked})
    counts = ", ".join(f"fold {k}: {sum(r.fold == k for r in ranked)}" for k in folds)
    lines = [f"## {collection}", "", f"{len(ranked)} rankers ({counts}); {unreadable} unreadable by this code. "
             f"Shipped floor: {shipped:g}.", "",
             f"| blend | held-out mean over folds | folds {' / '.join(map(str, folds))} | against the shipped floor, "
             "ranker by ranker | up / down |", "|---|---|---|---|---|"]
    rows = [(f"fixed {w:g}", lambda r, w=w: r.test[w]) for w in weights]
    rows += [(f"picked from {floor:g} up", lambda r, floor=floor: r.picked(floor)) for floor in weights[:-1]]
    for name, value in rows:
        diffs = [value(r) - r.picked(shipped) for r in ranked]
        up, down = sum(d > 1e-9 for d in diffs), sum(d < -1e-9 for d in diffs)
        lines.append(f"| {name} | {fold_mean(ranked, value)} | {t_interval(diffs, sign='+')} | {up} / {down} |")
    lines += ["", "| runs folder, settings | rankers | model alone | its folds | picked from the shipped floor up | "
              "its folds |", "|---|---|---|---|---|---|"]
    for source in sorted({r.source for r in ranked}):
        own = [r for r in ranked if r.source == source]
        lines.append(f"| {source} | {len(own)} | {fold_mean(own, lambda r: r.test[0.0])} | "
                     f"{fold_mean(own, lambda r: r.picked(shipped))} |")
    return [*lines, ""]


def saved_rankers_parser(doc: str, collections: list[str], out: str) -> argparse.ArgumentParser:
    """The arguments of a script that ranks saved rankers again: runs folders, collections, folds, its report."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, nargs="+", required=True, help="corpus_eval.py --runs folders")
    parser.add_argument("--collections", nargs="+", default=collections, choices=collections)
    parser.add_argument("--folds", type=int, default=3, help="corpus_eval.py's --folds: a whole job's seed s holds "
                                                            "out fold s mod folds")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / out)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = saved_rankers_parser(__doc__, LAYOUTS, "blend_floor.md").parse_args(argv)
    sections = []
    for collection in args.collections:
        ranked, unreadable = rank_again(args.runs, collection, args.folds)
        sections += collection_section(collection, ranked, unreadable) if ranked else []
    write_titled_report(args.out, "benchmarks/blend_floor.py", "The prior's floor on saved rankers",
                        "Each ranker ranks its fold's held-out (test) and valid files again: the model alone, "
                        "blended with its fitted prior by rank at each weight. A floor's row takes, for each ranker, "
                        "the weight its valid files pick from the floor up. Means over folds of the means within a "
                        "fold; intervals 95 % t over rankers.", argv, sections)
    return 0


if __name__ == "__main__":
    sys.exit(main())
