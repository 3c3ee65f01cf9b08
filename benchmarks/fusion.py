"""Quality, like for like: encode-once (LayoutRanker) vs early fusion (EarlyFusionRanker) vs the config-only
baseline on the synthetic layout collections, at equal epochs or at equal wall-clock training time.

Every fit runs through the package's pipeline with configs/demo.yaml layered on the collection's settings;
the two graph rankers share width, opcode embedding, edge direction, cross-config attention and the total number
of message-passing layers (2 + 2 vs 4). Each fit is scored on the collection's held-out graphs: the mean of the
validation score and of the test score against answers.csv. Differences are paired by seed; intervals are
95 % t intervals over seeds.

    .venv/bin/python benchmarks/fusion.py --size tiny --epochs 30 --seeds 0 1 2 3 4
    .venv/bin/python benchmarks/fusion.py --size tiny --budget 20 --seeds 0 1 2 3 4     # seconds per fit
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from intervals import t_interval
from reports import write_report

from solution.constants import COLLECTIONS
from solution.submission.files import collection_file_stem, read_answers, score
from solution.synth.files import generate
from solution.tools import pipeline
from solution.tools.demo import CONFIG_ONLY
from solution.tools.settings import configs_folder, layered, read_settings

LAYOUT = [c for c in COLLECTIONS if c.startswith("layout")]
VARIANTS = {
    "encode once": {},
    "early fusion": {"model": {"ranker": {"class_path": "solution.models.baselines.EarlyFusionRanker",
                                          "init_args": {"hidden": 48, "opcode_dim": 16, "edge_direction": "both",
                                                        "layers": 4}}}},  # configs/demo.yaml's model, fused
    "config-only": CONFIG_ONLY,
}


def held_out(collection: str, settings: dict, seconds: float | None, root: Path, out: Path) -> dict[str, float]:
    """Train one fit; its validation and test scores, the held-out mean, and its training seconds."""
    job = pipeline.Job(root, out, cache=out.parent / "cache")
    start = time.monotonic()
    checkpoint = pipeline.train(collection, settings, seconds, job)
    seconds_used = time.monotonic() - start
    valid = pipeline.evaluate(collection, checkpoint, settings, job)["score"]
    part = job.collection_files / f"{collection_file_stem(collection)}.csv"
    test = score(part, read_answers(root / "answers.csv"))[collection]["score"]
    return {"valid": valid, "test": test, "held_out": (valid + test) / 2, "seconds": seconds_used}


def report(rows: list[dict], seeds: list[int], collections: list[str]) -> list[str]:
    """Mean held-out score per variant and collection, and encode-once minus each other variant, by seed pairs."""
    def value(variant: str, collection: str) -> np.ndarray:
        by_seed = {r["seed"]: r["held_out"] for r in rows if r["variant"] == variant and r["collection"] == collection}
        return np.array([by_seed[s] for s in seeds])

    lines = ["| collection | " + " | ".join(VARIANTS) + " | encode once − early fusion | encode once − config-only |",
             "|---" * (len(VARIANTS) + 3) + "|"]
    gaps = {other: [] for other in ("early fusion", "config-only")}
    for collection in collections:
        means = [f"{value(v, collection).mean():.3f}" for v in VARIANTS]
        deltas = []
        for other in gaps:
            gap = value("encode once", collection) - value(other, collection)
            gaps[other].append(gap)
            deltas.append(t_interval(gap, 3, "+"))
        lines.append(f"| {collection} | " + " | ".join(means + deltas) + " |")
    mean_gaps = [t_interval(np.mean(gaps[other], axis=0), 3, "+") for other in gaps]
    lines.append(f"| **mean of the {len(collections)}** | " + " | ".join(["–"] * len(VARIANTS) + mean_gaps) + " |")
    seconds = {v: np.mean([r["seconds"] for r in rows if r["variant"] == v]) for v in VARIANTS}
    lines += ["", "Training seconds per fit (mean): " + ", ".join(f"{v} {s:.1f}" for v, s in seconds.items())]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="tiny", choices=("tiny", "small"))
    parser.add_argument("--data", type=Path, default=None, help="a synthetic data root (generated when absent)")
    parser.add_argument("--epochs", type=int, default=30, help="epochs per fit (equal-epoch comparison)")
    parser.add_argument("--budget", type=float, default=None, help="seconds of training per fit instead of epochs")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--collections", nargs="+", default=LAYOUT, choices=LAYOUT)
    parser.add_argument("--smoke", action="store_true", help="tiny data, one collection, 1 epoch, 1 seed")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/fusion.md"))
    args = parser.parse_args(argv)
    if args.smoke:
        args.epochs, args.seeds, args.collections, args.size = 1, [0], LAYOUT[:1], "tiny"
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    os.environ.setdefault("WANDB_MODE", "disabled")
    work = Path(tempfile.mkdtemp(prefix="fusion-"))
    root = args.data or work / "data"
    if not (root / "npz_all").is_dir():
        generate(root, args.size, 0)
    configs = configs_folder()
    base = read_settings(configs, [configs / "demo.yaml"])
    epochs = args.epochs if args.budget is None else 10_000
    rows = []
    for seed in args.seeds:
        for collection in args.collections:
            for variant, layer in VARIANTS.items():
                trainer = {"max_epochs": epochs, "check_val_every_n_epoch": min(epochs, 5)}
                settings = layered(base[collection], {**layer, "seed_everything": seed, "trainer": trainer})
                out = work / f"{variant.replace(' ', '_')}{seed}"
                rows.append({"seed": seed, "collection": collection, "variant": variant,
                             **held_out(collection, settings, args.budget, root, out)})
                print(json.dumps(rows[-1]), flush=True)
    condition = f"{args.budget:.0f} s of training per fit" if args.budget else f"{args.epochs} epochs per fit"
    given = argv if argv is not None else sys.argv[1:]
    lines = [f"# Encode once vs early fusion: quality ({args.size} synthetic data, {condition})", "",
             "    " + " ".join([".venv/bin/python", "benchmarks/fusion.py", *given]),
             "", f"Seeds {args.seeds}; held-out score = mean of validation and test (answers.csv) Kendall tau; "
             "differences paired by seed, 95 % t intervals.", ""]
    lines += report(rows, args.seeds, args.collections)
    write_report(args.out, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
