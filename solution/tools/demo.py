"""The main job on synthetic data: generate it, run the pipeline over all five collections briefly (configs/
demo.yaml), train the config-only baseline beside each model, and write submission.csv and a score table."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from ..atomic import atomic_write
from ..constants import COLLECTIONS
from ..data.reader import list_files, read_graph
from ..data.tasks import task_of
from ..models.baselines import random_scores
from ..submission.files import read_answers, score
from ..synth.files import generate
from . import pipeline
from .pipeline import Job
from .settings import configs_folder, layered, read_settings
from .tracking import pipeline_records

CONFIG_ONLY = {"model": {"ranker": {"class_path": "solution.models.baselines.ConfigOnlyRanker"}}}


def random_baseline(root: Path, collection: str, seed: int) -> float:
    """Mean validation score of random orderings."""
    rng = np.random.default_rng(seed)
    task = task_of(collection)
    values = []
    for path in list_files(root, collection, "valid"):
        target = read_graph(path, "valid").target()
        values.append(task.graph_metrics(random_scores(len(target), rng), target)["score"])
    return float(np.mean(values))


def config_only(settings: dict[str, dict], job: Job) -> dict[str, float]:
    """Collection -> validation score of the config-only baseline trained with the same settings."""
    runs = (job.runs or job.output) / "config_only"
    baseline = Job(job.root, job.output, job.cache, runs=runs, trainer_extras=pipeline_records(runs))
    scores = {}
    for collection, values in settings.items():
        values = layered(values, CONFIG_ONLY)
        checkpoint = pipeline.train(collection, values, None, baseline)
        scores[collection] = pipeline.evaluate(collection, checkpoint, values, baseline, predict=False)["score"]
    return scores


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
    parser.add_argument("--out", default="submissions", help="where submission.csv, collections/ and scores.md go")
    parser.add_argument("--runs", default="runs/demo", help="where checkpoints and run records go")
    parser.add_argument("--max_epochs", type=int, default=None, help="override configs/demo.yaml")
    args = parser.parse_args(argv)
    os.environ.setdefault("WANDB_SILENT", "true")
    root, out = Path(args.data), Path(args.out)
    if not (root / "npz_all").is_dir():
        print(f"generating {args.size} synthetic data in {root} ...")
        generate(root, args.size, args.seed)

    overrides = {"seed_everything": args.seed}
    if args.max_epochs is not None:
        overrides["trainer"] = {"max_epochs": args.max_epochs}
    configs = configs_folder()
    settings = {c: layered(s, overrides) for c, s in read_settings(configs, [configs / "demo.yaml"]).items()}
    job = Job(root, out, runs=Path(args.runs), trainer_extras=pipeline_records(Path(args.runs)))
    validation = pipeline.run(job, settings)
    baseline = config_only(settings, job)
    test_scores = score(out / "submission.csv", read_answers(root / "answers.csv"))
    rows = {c: {"random (valid)": random_baseline(root, c, args.seed), "config-only (valid)": baseline[c],
                "model (valid)": validation[c]["score"], "model (test)": test_scores[c]["score"]}
            for c in COLLECTIONS}
    report = table(rows)
    with atomic_write(out / "scores.md") as handle:
        handle.write(f"# Demo scores ({args.size} synthetic data, seed {args.seed})\n\n{report}\n")
    print(f"\n{report}\n\nwrote {out / 'submission.csv'} and {out / 'scores.md'}")
    return 0
