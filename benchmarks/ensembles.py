"""Ensembles: one model vs a 5-seed ensemble vs a 5-fold ensemble, scored on the synthetic test answers.

    python benchmarks/ensembles.py --data data/synthetic-small --size small --out benchmarks/results/ensembles.md
    python benchmarks/ensembles.py --smoke      # tiny data, two seeds, two folds, one epoch: checks that it runs

Per collection: `--seeds` fits on train (`solution fit`: configs/base.yaml, configs/<collection>.yaml, then
configs/demo.yaml), each predicting the test split; `--folds` fits on train + valid pooled (`--data.folds`, one
fold held out each, seed 0). `solution ensemble` (rank averaging) combines the seeds' predictions, and the folds'.
Every prediction is scored on answers.csv with the competition metric (layout: Kendall tau over all configs; tile:
the top-5 score). Predictions already in <runs>/predictions are reused, so the script resumes where it stopped.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
from reports import write_report

from solution.constants import COLLECTIONS
from solution.submission.ensemble import SUFFIX, ensemble
from solution.submission.files import collection_file_stem, read_answers, score
from solution.synth.files import generate
from solution.tools.lightning_cli import lightning_main

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def test_score(folder: Path, collection: str, answers: dict[str, np.ndarray]) -> float:
    return score(folder / f"{collection_file_stem(collection)}.csv", answers)[collection]["score"]


def predicted(folder: Path, collection: str) -> bool:
    return (folder / f"{collection_file_stem(collection)}{SUFFIX}").is_file()


def train(collection: str, common: list[str], extra: list[str]) -> str:
    """`solution fit` of one collection; its best checkpoint (the last when no validation ran)."""
    fit = lightning_main(["fit", "--config", str(CONFIGS / f"{collection_file_stem(collection)}.yaml"), *common,
                          *extra])
    checkpoint = fit.trainer.checkpoint_callback
    return checkpoint.best_model_path or checkpoint.last_model_path


def predict(collection: str, settings: list[str], checkpoint: str, out: Path) -> None:
    """`solution predict` of the test split with a checkpoint: <out>/<collection>.csv and its raw scores."""
    lightning_main(["predict", "--config", str(CONFIGS / f"{collection_file_stem(collection)}.yaml"), *settings,
                    "--ckpt_path", checkpoint, "--submission.out_dir", str(out)])


def fit_and_predict(collection: str, common: list[str], extra: list[str], outs: dict[Path, list[str]]) -> None:
    """One fit, then one prediction per output folder (with that folder's extra predict settings); skipped when
    every folder already holds this collection."""
    if all(predicted(out, collection) for out in outs):
        return
    checkpoint = train(collection, common, extra)
    for out, settings in outs.items():
        predict(collection, [*common, *extra, *settings], checkpoint, out)


def spread(values: list[float]) -> str:
    return f"{np.mean(values):.4f} ± {np.std(values, ddof=1) if len(values) > 1 else 0.0:.4f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="data/synthetic-small")
    parser.add_argument("--size", default="small", choices=("tiny", "small"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--collections", nargs="+", default=list(COLLECTIONS), choices=list(COLLECTIONS))
    parser.add_argument("--max_epochs", type=int, default=None, help="override configs/demo.yaml")
    parser.add_argument("--runs", default="runs/ensembles", help="logs, checkpoints and predictions")
    parser.add_argument("--out", help="the report (default benchmarks/results/ensembles.md)")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        work = Path(tempfile.mkdtemp(prefix="solution-ensembles-"))
        args.data, args.size, args.seeds, args.folds = str(work / "data"), "tiny", [0, 1], 2
        args.collections, args.max_epochs, args.runs = ["tile:xla", "layout:xla:random"], 1, str(work / "runs")
        args.out = args.out or str(work / "ensembles.md")
    args.out = args.out or "benchmarks/results/ensembles.md"
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    os.environ.setdefault("WANDB_SILENT", "true")
    root, runs = Path(args.data), Path(args.runs)
    if not (root / "npz_all").is_dir():
        generate(root, args.size, seed=0)
    answers = read_answers(root / "answers.csv")
    common = ["--config", str(CONFIGS / "demo.yaml"), "--data.root", str(root), "--trainer.logger.init_args.save_dir",
              str(runs), "--trainer.enable_progress_bar", "false",
              *(["--trainer.max_epochs", str(args.max_epochs)] if args.max_epochs else [])]
    preds = runs / "predictions"
    rows = {}
    for collection in args.collections:
        seeds, folds = [], []
        for seed in args.seeds:
            seeds.append(preds / f"seed{seed}")
            fit_and_predict(collection, common, ["--seed_everything", str(seed)], {seeds[-1]: []})
        for fold in range(args.folds):
            folds.append(preds / f"fold{fold}-of{args.folds}")
            fit_and_predict(collection, common, ["--seed_everything", "0", "--data.folds", str(args.folds),
                                                 "--data.fold", str(fold)], {folds[-1]: []})
        merged = {}
        for name, members in (("seeds", seeds), ("folds", folds)):
            merged[name] = runs / "ensembles" / f"{name}-{collection_file_stem(collection)}"
            ensemble([m / f"{collection_file_stem(collection)}{SUFFIX}" for m in members], merged[name])
        single = [test_score(f, collection, answers) for f in seeds]
        rows[collection] = {
            "1 model": spread(single),
            f"{len(seeds)}-seed ensemble": f"{test_score(merged['seeds'], collection, answers):.4f}",
            f"{args.folds}-fold ensemble": f"{test_score(merged['folds'], collection, answers):.4f}",
            "best single seed": f"{max(single):.4f}",
        }
        write(rows, args, argv)  # after every collection: a stopped run still leaves its finished rows
    return 0


def write(rows: dict[str, dict[str, str]], args: argparse.Namespace, argv: list[str] | None) -> None:
    """The table (collections x columns, with the mean over collections) to `--out`."""
    columns = list(next(iter(rows.values())))
    lines = [f"# Ensembles ({args.size} synthetic data, test split, {len(args.seeds)} seeds, {args.folds} folds)", "",
             f"Command: `python benchmarks/ensembles.py {' '.join(argv if argv is not None else sys.argv[1:])}`", "",
             "Scores on the test split (answers.csv), with the competition metric. 1 model: mean ± sample std over "
             "the seeds, each trained on train. Ensembles: `solution ensemble` rank averaging of the seeds' "
             "predictions, and of the folds' (each trained on "
             f"{args.folds - 1}/{args.folds} of train + valid pooled, seed 0). Best single seed: the best of the "
             "single models, which no one can pick in advance.", "",
             "| collection | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for collection, values in rows.items():
        lines.append(f"| {collection} | " + " | ".join(values.values()) + " |")
    means = [np.mean([float(v[c].split()[0]) for v in rows.values()]) for c in columns]
    lines.append("| **mean** | " + " | ".join(f"**{m:.4f}**" for m in means) + " |")
    write_report(Path(args.out), "\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
