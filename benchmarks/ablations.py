"""Ablations: what each design choice buys, on small synthetic data, several seeds per collection.

    python benchmarks/ablations.py --data data/synthetic-small --size small --seeds 0 1 2 --out docs/ablations.md
    python benchmarks/ablations.py --report_only   # the report from the fits recorded so far, fitting nothing
    python benchmarks/ablations.py --smoke         # tiny data, one seed, one epoch: checks that the script runs
    solution compare runs/ablations                # the same runs, as W&B-style run comparison

Every variant is the full model with one setting changed. Each fit is a normal `solution fit` (configs/base.yaml,
configs/<collection>.yaml, then configs/demo.yaml layered on top), logged to W&B (offline unless WANDB_MODE says
otherwise) under --runs. A cell is the mean ± sample std over seeds of the best validation score (Kendall tau for
layout, the tile top-5 score for tile); final is the mean of the five collections. Finished fits are recorded in
<runs>/results.jsonl and reused when the script is run again with the same data, epochs and code (a digest of the
solution/ sources and configs/*.yaml: a fit of other code or settings is never reused).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from solution.atomic import atomic_write
from solution.constants import COLLECTIONS
from solution.data.synth import generate
from solution.data.tasks import task_of
from solution.submission.files import collection_file_stem
from solution.tools import compare
from solution.tools.cli import lightning_main
from solution.tools.tracking import SUMMARY, code_version, run_folder

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "configs"
RANKER, LOSSES = "--model.ranker", "solution.models.losses"


@dataclass(frozen=True)
class Variant:
    args: tuple[str, ...]  # command-line overrides of the full model
    layout_only: bool = False  # tile kernels are never pruned nor segmented and TileRanker has no per-node configs
    # to fuse: its parser refuses these flags, so a layout-only variant is never fitted on tile


VARIANTS = {
    "full model": Variant(()),
    "no cross-attention": Variant((f"{RANKER}.init_args.cross_attention", "false")),
    "config-only baseline": Variant((RANKER, "solution.models.baselines.ConfigOnlyRanker")),
    "early fusion": Variant((RANKER, "solution.models.rankers.EarlyFusionRanker"), layout_only=True),
    "0 padding": Variant(("--data.sentinel", "false")),
    "no pruning": Variant(("--data.prune", "none"), layout_only=True),
    "2-hop pruning": Variant(("--data.hops", "2"), layout_only=True),
    "output-path pruning": Variant(("--data.prune", "output_path"), layout_only=True),
    "logistic loss": Variant(("--model.loss", f"{LOSSES}.PairwiseLogistic")),
    "ListMLE loss": Variant(("--model.loss", f"{LOSSES}.ListMLE")),
    "MSE loss": Variant(("--model.loss", f"{LOSSES}.MSE")),
    "segment training": Variant(("--data.segment_nodes", "64"), layout_only=True),
    "segments, GST sampling (1 per step)": Variant(("--data.segment_nodes", "64",
                                                    f"{RANKER}.init_args.segment_sampled", "1"), layout_only=True),
}
QUESTIONS = {  # section title -> the variants it compares; the full model is each section's reference
    "Model: graph, cross-config attention, encode once": ["full model", "no cross-attention",
                                                          "config-only baseline", "early fusion"],
    "Padding: -1 (0 is a valid feature value) vs 0": ["full model", "0 padding"],
    "Pruning (layout; the full model keeps configurable nodes and their 1-hop neighbours)":
        ["full model", "no pruning", "2-hop pruning", "output-path pruning"],
    "Loss (the full model uses the pairwise hinge)": ["full model", "logistic loss", "ListMLE loss", "MSE loss"],
    "Segment training (64-node segments, every one with gradients unless sampled; most pruned graphs here have "
    "2-4 segments; the full model trains whole graphs)":
        ["full model", "segment training", "segments, GST sampling (1 per step)"],
}


def code_digest() -> str:
    """blake2b of the solution/ sources and configs/*.yaml (paths and contents): the code and settings a fit ran."""
    digest = hashlib.blake2b(digest_size=12)
    for path in sorted([*(REPO / "solution").rglob("*.py"), *CONFIGS.glob("*.yaml")]):
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def fit(collection: str, seed: int, variant: Variant, common: list[str]) -> dict:
    """One fit; its best score, training throughput and the share of nodes the pruning kept."""
    if variant.layout_only and not task_of(collection).has_config_nodes:
        raise ValueError(f"a layout-only variant {variant.args} on {collection}: tile reuses the full model's fits")
    cli = lightning_main(["fit", "--config", str(CONFIGS / f"{collection_file_stem(collection)}.yaml"), *common,
                          "--seed_everything", str(seed), *variant.args])
    run = compare.run_from_summary(run_folder(cli.trainer) / SUMMARY)
    meta = cli.datamodule.graphs("train").meta
    return {"best": run.best, "configs_per_s": run.configs_per_s,
            "kept": sum(m["nodes"] for m in meta) / sum(m["nodes_raw"] for m in meta)}


class Results:
    """Fits recorded one JSON line each, keyed by what makes them the same experiment."""

    def __init__(self, path: Path, context: dict) -> None:
        self.path, self.context = path, context
        self.rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def get(self, **key) -> dict | None:
        key = {**self.context, **key}
        return next((r for r in self.rows if all(r.get(k) == v for k, v in key.items())), None)

    def add(self, row: dict) -> None:
        row = {**self.context, **row}
        self.rows.append(row)
        with atomic_write(self.path) as handle:
            handle.write("".join(json.dumps(r) + "\n" for r in self.rows))

    def values(self, variant: str, collection: str, key: str = "best") -> list[float]:
        # tile is never pruned nor fused: a layout-only variant's tile runs are the full model's
        name = "full model" if VARIANTS[variant].layout_only and not task_of(collection).has_config_nodes \
            else variant
        return [r[key] for r in self.rows if r["variant"] == name and r["collection"] == collection
                and all(r.get(k) == v for k, v in self.context.items())]


def cell(values: list[float], seeds: int, digits: int = 3) -> str:
    """mean ± sample std, and how many seeds where fewer than `seeds` were fitted."""
    if not values:
        return "–"
    spread = np.std(values, ddof=1) if len(values) > 1 else 0.0
    fewer = f" (n={len(values)})" if len(values) < seeds else ""
    return f"{np.mean(values):.{digits}f} ± {spread:.{digits}f}{fewer}"


def finals(results: Results, variant: str, collections: list[str]) -> list[float]:
    """Per seed, the mean over collections (only seeds present in every collection)."""
    per_collection = [results.values(variant, c) for c in collections]
    seeds = min(map(len, per_collection))
    return [float(np.mean([v[s] for v in per_collection])) for s in range(seeds)]


def section(title: str, variants: list[str], results: Results, collections: list[str], seeds: int) -> list[str]:
    pruning = title.startswith("Pruning")
    layout = [c for c in collections if c.startswith("layout")]
    extra = ["nodes kept", "train configs/s"] if pruning else []
    lines = [f"## {title}", "", "| variant | " + " | ".join(collections + ["final", "Δ final", *extra]) + " |",
             "|---" * (len(collections) + 3 + len(extra)) + "|"]
    reference = np.mean(finals(results, "full model", collections) or [np.nan])
    for variant in variants:
        final = finals(results, variant, collections)
        delta = f"{np.mean(final) - reference:+.3f}" if final and variant != "full model" else "–"
        row = [cell(results.values(variant, c), seeds) for c in collections] + [cell(final, seeds), delta]
        if pruning:
            row += [f"{100 * np.mean([x for c in layout for x in results.values(variant, c, 'kept')]):.1f} %",
                    f"{np.mean([x for c in layout for x in results.values(variant, c, 'configs_per_s')]):.0f}"]
        lines.append(f"| {variant} | " + " | ".join(row) + " |")
    return lines + [""]


def chart(results: Results, collections: list[str], path: Path) -> None:
    """Final score per variant (mean ± std over seeds), the full model's mean as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [v for v in VARIANTS if finals(results, v, collections)]
    if "full model" not in names:  # nothing to compare yet
        return
    values = [finals(results, v, collections) for v in names]
    figure, axis = plt.subplots(figsize=(7, 0.35 * len(names) + 1.2))
    axis.barh(range(len(names)), [np.mean(v) for v in values],
              xerr=[np.std(v, ddof=1) if len(v) > 1 else 0 for v in values], capsize=3, color="tab:blue")
    axis.axvline(np.mean(values[0]), color="black", linewidth=0.8, linestyle="--")
    axis.set_yticks(range(len(names)), names)
    axis.invert_yaxis()
    axis.set_xlabel("final score (mean of the collections' best validation scores)")
    figure.tight_layout()
    with atomic_write(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=90)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="data/synthetic-small")
    parser.add_argument("--size", default="small", choices=("tiny", "small"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--collections", nargs="+", default=list(COLLECTIONS), choices=list(COLLECTIONS))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--max_epochs", type=int, default=20)
    parser.add_argument("--runs", default="runs/ablations", help="W&B logs, run folders and results.jsonl")
    parser.add_argument("--out", help="the report, its chart beside it (default docs/ablations.md)")
    parser.add_argument("--report_only", action="store_true", help="write the report from the recorded fits only")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        work = Path(tempfile.mkdtemp(prefix="solution-ablations-"))
        args.data, args.size, args.seeds, args.max_epochs = str(work / "data"), "tiny", [0], 1
        args.collections, args.runs = ["tile:xla", "layout:xla:default"], str(work / "runs")
        args.variants = ["early fusion", "0 padding", "no pruning", "MSE loss", "segment training"]
        args.out = args.out or work / "a.md"
    root, runs = Path(args.data), Path(args.runs)
    if not (root / "npz_all").is_dir():
        generate(root, args.size, seed=0)
    if "full model" not in args.variants:
        args.variants.insert(0, "full model")
    common = ["--config", str(CONFIGS / "demo.yaml"), "--data.root", str(root), "--trainer.max_epochs",
              str(args.max_epochs), "--trainer.check_val_every_n_epoch", str(max(1, args.max_epochs // 5)),
              "--trainer.enable_progress_bar", "false", "--trainer.logger.init_args.save_dir", str(runs)]
    results = Results(runs / "results.jsonl", {"data": str(root.resolve()), "epochs": args.max_epochs,
                                               "code": code_digest()})
    commit = code_version()["git"]  # recorded beside each fit, for people; the digest is the key
    start = time.perf_counter()
    for seed in args.seeds:  # seeds outermost: an interrupted run already covers every variant
        for collection in args.collections:
            for name in args.variants:
                if VARIANTS[name].layout_only and not task_of(collection).has_config_nodes:
                    continue
                if results.get(variant=name, collection=collection, seed=seed) is None and not args.report_only:
                    results.add({"variant": name, "collection": collection, "seed": seed, "commit": commit,
                                 **fit(collection, seed, VARIANTS[name], common)})
                row = results.get(variant=name, collection=collection, seed=seed)
                score = f"{row['best']:.4f}" if row else "not fitted"
                print(f"{collection:<20} {name:<22} seed {seed}: {score}", flush=True)
    minutes = (time.perf_counter() - start) / 60
    given = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--report_only"]
    command = " ".join(["python benchmarks/ablations.py", *given])
    record = runs / "results.jsonl"
    how = f"report written with `--report_only` from the fits recorded in {record}" if args.report_only \
        else f"{minutes:.0f} min of fitting on this machine; fits already in {record} of the same code are reused"
    out = Path(args.out or "docs/ablations.md")
    lines = [f"# Ablations on {args.size} synthetic data", "",
             f"Command: `{command}` ({how}). {args.max_epochs} epochs, seeds {args.seeds}; each cell is "
             "the mean ± sample std over seeds of the best validation score, final is the mean over collections "
             "and Δ final its difference from the full model. Tile kernels are never pruned and have no per-node "
             "configs, so layout-only variants reuse the full model's tile runs.", "",
             f"![final score per variant]({out.stem}.png)", ""]
    for title, names in QUESTIONS.items():
        lines += section(title, [n for n in names if n in args.variants], results, args.collections, len(args.seeds))
    report = "\n".join(lines)
    print(report)
    compare.main([str(runs), "--out", str(runs / "compare")])
    with atomic_write(out) as handle:
        handle.write(report)
    chart(results, args.collections, out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
