"""The main job: synthetic data -> brief training of all five collections -> submission.csv and a score table."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

import numpy as np

from ..atomic import atomic_write
from ..constants import COLLECTIONS
from ..data.reader import list_files, read_graph
from ..data.synth import generate
from ..models.baselines import random_scores
from ..submission.files import check, collection_file_stem, merge, read_answers, score
from ..training.module import graph_metrics
from .cli import lightning_main

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def random_baseline(root: Path, collection: str, seed: int) -> float:
    """Mean validation score of random orderings."""
    rng = np.random.default_rng(seed)
    task = collection.split(":")[0]
    values = []
    for path in list_files(root, collection, "valid"):
        target = read_graph(path, "valid").target()
        values.append(graph_metrics(task, random_scores(len(target), rng), target)["score"])
    return float(np.mean(values))


def train(collection: str, common: list[str], extra: list[str]) -> tuple[float, str]:
    """Fit one collection; return the best validation score and its checkpoint."""
    name = collection_file_stem(collection)
    fit = lightning_main(["fit", "--config", str(CONFIGS / f"{name}.yaml"), *common, *extra])
    checkpoint = fit.trainer.checkpoint_callback
    if checkpoint.best_model_score is None:  # fewer epochs than check_val_every_n_epoch: validate the last
        metrics = fit.trainer.validate(fit.model, datamodule=fit.datamodule, verbose=False)[0]
        return float(metrics["val/score"]), checkpoint.last_model_path
    return float(checkpoint.best_model_score), checkpoint.best_model_path


def predict(collection: str, common: list[str], checkpoint: str, out: Path) -> None:
    name = collection_file_stem(collection)
    lightning_main(["predict", "--config", str(CONFIGS / f"{name}.yaml"), *common, "--ckpt_path", checkpoint,
                    "--submission.out_dir", str(out)])


def table(rows: dict[str, dict[str, float]]) -> str:
    """A markdown table of collections x columns, with the final mean as the last row."""
    columns = list(next(iter(rows.values())))
    lines = ["| collection | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for collection, values in rows.items():
        lines.append(f"| {collection} | " + " | ".join(f"{values[c]:.4f}" for c in columns) + " |")
    means = {c: float(np.mean([v[c] for v in rows.values()])) for c in columns}
    lines.append("| **final (mean)** | " + " | ".join(f"**{means[c]:.4f}**" for c in columns) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="solution demo", description=__doc__)
    parser.add_argument("--data", default="data/synthetic", help="dataset folder; generated when empty")
    parser.add_argument("--size", default="tiny", choices=("tiny", "small", "realistic"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="submissions", help="where the CSVs and scores.md go")
    parser.add_argument("--runs", default="runs/demo", help="where logs and checkpoints go")
    parser.add_argument("--max_epochs", type=int, default=None, help="override configs/demo.yaml")
    args = parser.parse_args(argv)
    for name in ("lightning.pytorch", "lightning.fabric"):  # ten fits: keep the log to the results
        logging.getLogger(name).setLevel(logging.WARNING)
    os.environ.setdefault("WANDB_SILENT", "true")
    root, out = Path(args.data), Path(args.out)
    if not (root / "npz_all").is_dir():
        print(f"generating {args.size} synthetic data in {root} ...")
        generate(root, args.size, args.seed)

    common = ["--config", str(CONFIGS / "demo.yaml"), "--data.root", str(root), "--seed_everything", str(args.seed),
              "--trainer.logger.init_args.save_dir", args.runs, "--trainer.enable_progress_bar", "false"]
    if args.max_epochs is not None:
        common += ["--trainer.max_epochs", str(args.max_epochs)]
    rows = {}
    for collection in COLLECTIONS:
        print(f"\n=== {collection}")
        model_valid, checkpoint = train(collection, common, [])
        baseline_valid, _ = train(collection, common, ["--model.variant", "config_only"])
        predict(collection, common, checkpoint, out)
        rows[collection] = {"random (valid)": random_baseline(root, collection, args.seed),
                            "config-only (valid)": baseline_valid, "model (valid)": model_valid}

    submission = merge([out / f"{collection_file_stem(c)}.csv" for c in COLLECTIONS], out / "submission.csv", root)
    check(submission, root).raise_if_bad()
    test_scores = score(submission, read_answers(root / "answers.csv"))
    for collection in COLLECTIONS:
        rows[collection]["model (test)"] = test_scores[collection]["score"]
    report = table(rows)
    with atomic_write(out / "scores.md") as handle:
        handle.write(f"# Demo scores ({args.size} synthetic data, seed {args.seed})\n\n{report}\n")
    print(f"\n{report}\n\nwrote {submission} and {out / 'scores.md'}; compare the runs with: "
          f"solution compare {args.runs}")
    return 0
