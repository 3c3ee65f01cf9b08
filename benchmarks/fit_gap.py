"""How much of a fit is learning the law and how much is learning its files: every layout ranker that `corpus_eval.py`
left in its --runs folders ranks its fold's train, valid and held-out (test) files, each as the saved ranker ranks
(with its blend); the held-out pairs of configs are then counted ordered right by the gap between their runtimes.

    python benchmarks/fit_gap.py --runs /tmp/runs-a --collections layout:xla:random --out benchmarks/results/fit_gap.md

Train and valid files are the families the fit trained on (valid: other programs of them, the checkpoint's pick); a
train score far above the held-out one is a fit of the files, not the law. A band's share of pairs ordered right
is 0.5 for a coin; pairs inside the runtimes' noise cannot do better.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from blend_floor import LAYOUTS, saved_rankers, saved_rankers_parser
from reports import write_titled_report

from solution.tools.ranking import ranked_split, runtimes_by_row, split_metrics
from solution.tools.settings import layered, read_settings
from solution.training.checkpoints import CheckpointError
from solution.training.ranker_file import read_ranker

SPLITS = ("train", "valid", "test")  # held-out last
GAPS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.5, np.inf)  # band edges of |log(runtime_i / runtime_j)|


def pair_bands(scores: np.ndarray, runtimes: np.ndarray, edges=GAPS) -> tuple[np.ndarray, np.ndarray]:
    """Per band of |log runtime ratio| ([edges[k], edges[k+1])): the pairs of configs whose scores order them as
    their runtimes do (lower = faster; a tie in either counts half), and all the pairs in it. [bands] each."""
    i, j = np.triu_indices(len(runtimes), 1)
    gap = np.abs(np.log(runtimes[i] / runtimes[j]))  # [pairs]
    agree = np.sign(scores[i] - scores[j]) * np.sign(runtimes[i] - runtimes[j])  # [pairs]: 1 right, -1 wrong
    band = np.digitize(gap, edges[1:-1])  # [pairs] in 0..bands-1
    bands = len(edges) - 1
    return (np.bincount(band, (agree + 1) / 2, bands), np.bincount(band, minlength=bands).astype(float))


def measured(path: Path, settings: dict, collection: str) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """One saved ranker's mean score on each split, and its held-out pairs ordered right and counted per band."""
    ranker = read_ranker(path)
    means, right, pairs = {}, np.zeros(len(GAPS) - 1), np.zeros(len(GAPS) - 1)
    for split in SPLITS:
        graphs, scores = ranked_split(ranker, settings, split, "fit_gap")
        means[split] = split_metrics(graphs, scores, collection)["score"]
    for index in range(len(graphs)):  # the last split's: the held-out files
        ok, count = pair_bands(scores[index], runtimes_by_row(graphs.load(index)))
        right, pairs = right + ok, pairs + count
    return means, right, pairs


def collection_section(collection: str, runs: list[Path], folds: int) -> list[str]:
    """The report's part for one collection: each ranker's three splits, then the held-out pairs by runtime gap."""
    settings = read_settings()[collection]
    bands = [f"{lo:g}-{hi:g}" if np.isfinite(hi) else f"{lo:g}+" for lo, hi in zip(GAPS[:-1], GAPS[1:])]
    lines = [f"## {collection}", "", "| ranker | fold | train | valid | held-out |", "|---|---|---|---|---|"]
    by_fold = defaultdict(lambda: [np.zeros(len(bands)), np.zeros(len(bands))])
    stem, unreadable = collection.replace(":", "_"), 0
    for folder in runs:
        for path, source, root, fold in saved_rankers(folder, stem, folds):
            try:
                means, right, pairs = measured(path, layered(settings, {"data": {"root": str(root)}}), collection)
            except CheckpointError:  # written by another version of the package
                unreadable += 1
                continue
            by_fold[fold][0] += right
            by_fold[fold][1] += pairs
            lines.append(f"| {source} | {fold} | " + " | ".join(f"{means[s]:.3f}" for s in SPLITS) + " |")
            print(f"{collection} fold {fold}: {path}", flush=True)
    lines += ["", f"{unreadable} rankers unreadable by this code left out.", "",
              "Held-out pairs ordered right, by |log runtime ratio| (0.1: 10.5 %, 0.5: 65 %; pairs in thousands):",
              "",
              f"| fold | {' | '.join(bands)} |", f"|---{'|---' * len(bands)}|"]
    for fold, (right, pairs) in sorted(by_fold.items()):
        cells = [f"{r / max(p, 1):.2f} ({p / 1e3:.0f}k)" for r, p in zip(right, pairs)]
        lines.append(f"| {fold} | {' | '.join(cells)} |")
    return [*lines, ""]


def main(argv: list[str] | None = None) -> int:
    args = saved_rankers_parser(__doc__, LAYOUTS, "fit_gap.md").parse_args(argv)
    sections = [line for c in args.collections for line in collection_section(c, args.runs, args.folds)]
    write_titled_report(args.out, "benchmarks/fit_gap.py", "Fitting the files against learning the law",
                        "Each saved ranker ranks its fold's train, valid and held-out files as saved (its blend "
                        "included); scores are the collection's metric, means over files. The held-out pairs of "
                        "configs of each fold, over all its rankers, are counted ordered right by the gap between "
                        "their runtimes.", argv, sections)
    return 0


if __name__ == "__main__":
    sys.exit(main())
