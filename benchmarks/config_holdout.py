"""Does a fit learn the law, or its configs? Every train and valid file of a collection keeps its graph but has its
configs split at random: `--train` of them train, `--valid` choose the checkpoint, the rest are held out. One fit
(`pipeline.train`, the shipped settings, `--seconds`) then ranks the configs it trained on and those it never saw,
of the very same graphs: a gap between the two is a fit of the configs, not of the law.

    python benchmarks/config_holdout.py --data ../shared/datasets/zoo-law/npz --collection layout:xla:random \
        --seconds 120 --seeds 3 --out benchmarks/results/config_holdout.md

Beside the figures of `corpus_eval.py` (other families' programs held out) and `fit_gap.py` (other programs of
the fit's families), this holds out neither: only configs.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from intervals import t_interval
from reports import write_titled_report

from solution.constants import COLLECTIONS
from solution.data.reader import collection_dir
from solution.submission.files import collection_file_stem, score
from solution.tools import pipeline
from solution.tools.settings import read_settings

PARTS = ("trained", "held out")


def root_of(work: Path, part: str) -> Path:
    """The data root under `work` whose test split holds `part`'s configs."""
    return work / part.replace(" ", "_")


def split_world(data: Path, collection: str, shares: tuple[float, float], seed: int, out: Path) -> dict[str, dict]:
    """Under `out`, two data roots of the collection's train and valid files, each file's configs split at random
    by `shares` (train, valid; the rest held out): `trained` ranks the train part as its test split, `held out` the
    held-out part; both train and validate on the same parts (written once, the second root's train and valid
    folders linking to the first's). Returns, per root, ID -> the test split's runtimes."""
    rng = np.random.default_rng(seed)
    answers: dict[str, dict] = {part: {} for part in PARTS}
    folders = {part: root_of(out, part).joinpath("npz", *collection.split(":")) for part in PARTS}
    for split in ("train", "valid", "test"):
        folders["trained"].joinpath(split).mkdir(parents=True)
    folders["held out"].joinpath("test").mkdir(parents=True)
    for split in ("train", "valid"):
        folders["held out"].joinpath(split).symlink_to(folders["trained"].joinpath(split).resolve())
    source = collection_dir(data, collection)
    for path in sorted([*source.glob("train/*.npz"), *source.glob("valid/*.npz")]):
        arrays = dict(np.load(path))
        order = rng.permutation(len(arrays["config_runtime"]))
        cuts = np.round(np.cumsum(shares) * len(order)).astype(int)
        rows = dict(zip(("train", "valid", "held"), np.split(order, cuts)))
        written = (("trained", "train", "train"), ("trained", "valid", "valid"), ("trained", "test", "train"),
                   ("held out", "test", "held"))
        for part, split, chosen in written:
            picked = {**arrays, "node_config_feat": arrays["node_config_feat"][rows[chosen]],
                      "config_runtime": arrays["config_runtime"][rows[chosen]]}
            np.savez(folders[part] / split / path.name, **picked)
        for part, tested in zip(PARTS, ("train", "held")):
            answers[part][f"{collection}:{path.stem}"] = arrays["config_runtime"][rows[tested]].astype(np.float64)
    return answers


def replicate(args: argparse.Namespace, seed: int, work: Path) -> dict[str, float]:
    """One seed: the split, the fit on the trained part, and the score of each part's ranking."""
    collection = args.collection
    answers = split_world(args.data, collection, (args.train, args.valid), seed, work / "data")
    settings = {**pipeline.first_fits(read_settings()[collection], collection), "seed_everything": seed}
    roots = {part: root_of(work / "data", part) for part in PARTS}
    job = pipeline.Job(roots["trained"], work / "fit")
    checkpoints = pipeline.train_members(collection, settings, args.seconds, job)
    scores = {}
    for part in PARTS:
        ranked = pipeline.Job(roots[part], root_of(work / "ranked", part))
        pipeline.evaluate(collection, checkpoints, settings, ranked, validate=False)
        csv = ranked.collection_files / f"{collection_file_stem(collection)}.csv"
        scores[part] = float(score(csv, answers[part])[collection]["score"])
    print(f"seed {seed}: " + ", ".join(f"{part} {value:.4f}" for part, value in scores.items()), flush=True)
    return scores


def report(rows: list[dict[str, float]], args: argparse.Namespace, minutes: float) -> tuple[str, list[str]]:
    """What the figures are, and the table: each seed's scores, then the means and the gap with 95 % t intervals."""
    about = (f"{len(rows)} seeds, {minutes:.0f} min in all. Every train and valid file of {args.collection} in "
             f"{args.data}, its configs split {args.train:g} / {args.valid:g} / {1 - args.train - args.valid:.2g} "
             "(train / valid / held out) at random per seed; one fit of the shipped settings for "
             f"{args.seconds:g} s ranks each file's trained and held-out configs (Kendall tau, mean over files).")
    lines = ["| seed | trained configs | held-out configs | gap |", "|---|---|---|---|"]
    lines += [f"| {k} | {r['trained']:.4f} | {r['held out']:.4f} | {r['trained'] - r['held out']:+.4f} |"
              for k, r in enumerate(rows, args.first_seed)]
    trained, held = ([r[part] for r in rows] for part in PARTS)
    lines.append(f"| **mean** | {t_interval(trained)} | {t_interval(held)} | "
                 f"{t_interval(np.subtract(trained, held), sign='+')} |")
    return about, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="a Kaggle-format root (npz/...)")
    layouts = [c for c in COLLECTIONS if c.startswith("layout:")]
    parser.add_argument("--collection", default="layout:xla:random", choices=layouts)
    parser.add_argument("--train", type=float, default=0.65, help="each file's share of configs that trains")
    parser.add_argument("--valid", type=float, default=0.1, help="... that chooses the checkpoint")
    parser.add_argument("--seconds", type=float, default=120.0, help="training time of the fit")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first_seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/config_holdout.md"))
    args = parser.parse_args(argv)
    if not (args.train > 0 and args.valid > 0 and args.train + args.valid < 1):
        parser.error("--train and --valid: positive shares that leave some configs held out")
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    start, rows = time.monotonic(), []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        with tempfile.TemporaryDirectory(prefix="config-holdout-") as work:
            rows.append(replicate(args, seed, Path(work)))
    about, lines = report(rows, args, (time.monotonic() - start) / 60)
    write_titled_report(args.out, "benchmarks/config_holdout.py", "Configs held out of the same graphs", about, argv,
                        lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
