"""How the score on held-out program families moves over a fit's epochs: a diagnostic of what carries over to new
programs, and when.

    python benchmarks/held_out_curve.py                      # layout:xla:random, fold 1 held out, seed 3, 75 s
    python benchmarks/held_out_curve.py --fold 0 --seconds 120 --config benchmarks/variants/graphs4.yaml

Holds out corpus_eval's fold of families (the same fold assignment), fits on the train files of the other families
(as corpus_eval's fits do) within --seconds with the shipped settings and any --config layers, and validates after
every epoch on the held-out families' labelled files (their train and valid files; the corpus's test files carry no
runtimes), where corpus_eval's fits validate on the training families' valid files (`--watch training` shows that
curve instead).
"""

from __future__ import annotations

import argparse
import tempfile
from datetime import date
from pathlib import Path

import lightning.pytorch as pl
from corpus_eval import CorpusFile, family_folds, link_fold_root, read_manifest
from reports import write_report

from solution.data.reader import collection_dir
from solution.tools import pipeline
from solution.tools.settings import read_settings


class Curve(pl.Callback):
    """Each epoch's val/score."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, float]] = []

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.rows.append((trainer.current_epoch, float(trainer.callback_metrics["val/score"])))


def held_out_root(corpus: Path, files: list[CorpusFile], collection: str, held_out: set[str], out: Path) -> Path:
    """A data root of links: the other families' train files as train, the held-out families' train and valid files
    as valid, their test files as test."""
    source = collection_dir(corpus, collection).resolve()
    target = out.joinpath("npz_all", "npz", *collection.split(":"))
    for f in (f for f in files if f.collection == collection and (f.family in held_out or f.split == "train")):
        split = ("test" if f.split == "test" else "valid") if f.family in held_out else "train"
        (target / split).mkdir(parents=True, exist_ok=True)
        (target / split / f"{f.stem}.npz").symlink_to(source / f.split / f"{f.stem}.npz")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/programs-small"))
    parser.add_argument("--collection", default="layout:xla:random")
    parser.add_argument("--fold", type=int, default=1)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=75.0)
    parser.add_argument("--watch", choices=("held-out", "training"), default="held-out",
                        help="validate on the held-out families' files, or on the training families' valid files")
    parser.add_argument("--config", type=Path, action="append", default=[], help="settings layers (repeatable)")
    parser.add_argument("--out", type=Path, help="default: benchmarks/results/held_out_curve[-training].md")
    args = parser.parse_args(argv)
    suffix = "-training" if args.watch == "training" else ""
    args.out = args.out or Path(f"benchmarks/results/held_out_curve{suffix}.md")
    files = read_manifest(args.data)
    fold_of = family_folds(files, args.collection, 3)
    held_out = sorted(f for f, k in fold_of.items() if k == args.fold)
    settings = read_settings(None, [str(c) for c in args.config])[args.collection]
    settings = {**settings, "seed_everything": args.seed, "members": 1,
                "trainer": {**settings["trainer"], "check_val_every_n_epoch": 1}}
    curve = Curve()
    with tempfile.TemporaryDirectory(prefix="held-out-curve-") as work:
        make_root = held_out_root if args.watch == "held-out" else link_fold_root  # training: as corpus_eval's fits
        root = make_root(args.data, files, args.collection, set(held_out), Path(work) / "root")
        job = pipeline.Job(root, Path(work) / "run", trainer_extras=lambda c, s: {"callbacks": [curve]})
        pipeline.train(args.collection, settings, args.seconds, job)
    command = " ".join(["python benchmarks/held_out_curve.py", f"--collection {args.collection}", f"--fold {args.fold}",
                        f"--seed {args.seed}", f"--seconds {args.seconds:g}", f"--watch {args.watch}",
                        *(f"--config {c}" for c in args.config)])
    watched = {"held-out": "the held-out families' train and valid files",
               "training": "the training families' valid files"}[args.watch]
    report = [f"# The validation score over epochs: {args.collection}, fold {args.fold} held out", "",
              f"Command: `{command}`, {date.today()}.", "",
              f"Held out: {', '.join(held_out)}; trains on the other families' train files and validates every "
              f"epoch on {watched} (Kendall tau against their measured runtimes).",
              "", "| epoch | score |", "|---|---|", *(f"| {e} | {v:.4f} |" for e, v in curve.rows)]
    write_report(args.out, "\n".join(report) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
