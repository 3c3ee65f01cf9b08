"""Quality comparison: train model variants over several seeds per collection and tabulate validation scores.

    python benchmarks/quality.py --data data/synthetic-small --size small --seeds 0 1 2 --out docs/quality.md
    python benchmarks/quality.py --smoke      # tiny data, one seed, one epoch: checks that the script runs

Each cell is the mean +/- standard deviation over seeds of the best validation score (Kendall tau for
layout, the tile top-5 score for tile); the last row is the final score (mean of the five collections).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from solution.atomic import atomic_write
from solution.cli import lightning_main
from solution.constants import COLLECTIONS
from solution.submission import collection_file_stem
from solution.synth import generate

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
VARIANTS = {
    "model": [],
    "no cross-attention": ["--model.cross_attention", "false"],
    "config-only baseline": ["--model.variant", "config_only"],
}


def best_score(collection: str, seed: int, extra: list[str], common: list[str]) -> float:
    """Fit once and return the best validation score."""
    name = collection_file_stem(collection)
    cli = lightning_main(["fit", "--config", str(CONFIGS / f"{name}.yaml"), *common, "--seed_everything",
                          str(seed), *extra])
    return float(cli.trainer.checkpoint_callback.best_model_score)


def table(results: dict[str, dict[str, list[float]]], variants: list[str]) -> list[str]:
    lines = ["| collection | " + " | ".join(variants) + " |", "|---" * (len(variants) + 1) + "|"]
    rows = {c: results[c] for c in COLLECTIONS if c in results}
    for collection, cells in rows.items():
        lines.append(f"| {collection} | " + " | ".join(
            f"{np.mean(cells[v]):.3f} ± {np.std(cells[v]):.3f}" for v in variants) + " |")
    if len(rows) == len(COLLECTIONS):
        finals = {v: np.mean([rows[c][v] for c in rows], axis=0) for v in variants}  # per seed
        lines.append("| **final** | " + " | ".join(f"**{finals[v].mean():.3f} ± {finals[v].std():.3f}**"
                                                  for v in variants) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="data/synthetic-small")
    parser.add_argument("--size", default="small", choices=("tiny", "small"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--collections", nargs="+", default=list(COLLECTIONS))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--max_epochs", type=int, default=30)
    parser.add_argument("--out", default="docs/quality.md")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="solution-quality-"))
    if args.smoke:
        args.data, args.size, args.seeds, args.max_epochs = str(work / "data"), "tiny", [0], 1
        args.collections = ["tile:xla", "layout:xla:default"]
    root = Path(args.data)
    if not (root / "npz_all").is_dir():
        generate(root, args.size, seed=0)
    common = ["--config", str(CONFIGS / "demo.yaml"), "--data.root", str(root), "--trainer.max_epochs",
              str(args.max_epochs), "--trainer.check_val_every_n_epoch", str(max(1, args.max_epochs // 5)),
              "--trainer.enable_progress_bar", "false", "--trainer.logger.init_args.save_dir", str(work / "runs")]
    results: dict[str, dict[str, list[float]]] = {}
    start = time.perf_counter()
    for collection in args.collections:
        for variant in args.variants:
            for seed in args.seeds:
                score = best_score(collection, seed, VARIANTS[variant], common)
                results.setdefault(collection, {}).setdefault(variant, []).append(score)
                print(f"{collection:<20} {variant:<22} seed {seed}: {score:.4f}", flush=True)
    minutes = (time.perf_counter() - start) / 60
    command = " ".join(["python benchmarks/quality.py", *(argv if argv is not None else sys.argv[1:])])
    report = "\n".join([f"# Validation scores on {args.size} synthetic data", "",
                        f"Command: `{command}` ({minutes:.0f} min on this machine). configs/<collection>.yaml "
                        f"with configs/demo.yaml layered on top, {args.max_epochs} epochs, seeds {args.seeds}; "
                        "mean ± std over seeds of the best validation score.", "",
                        *table(results, args.variants)]) + "\n"
    print(report)
    if not args.smoke:
        with atomic_write(args.out) as handle:
            handle.write(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
