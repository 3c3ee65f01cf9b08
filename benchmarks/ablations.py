"""Ablations: what each design choice buys, at the shipped settings, selected on one split and reported on another.

    python benchmarks/ablations.py --data data/synthetic-small --size small --seeds 0 1 2 3 4 --jobs 2
    python benchmarks/ablations.py --report_only   # the report from the fits recorded so far, fitting nothing
    python benchmarks/ablations.py --smoke         # tiny data, one seed, one epoch: checks that the script runs
    solution compare runs/ablations                # the same runs, as W&B-style run comparison

Every variant is the full model with one setting changed. Each fit is a normal `solution fit` of
configs/base.yaml and configs/<collection>.yaml (the shipped settings; `--settings demo` layers configs/demo.yaml
on top) for --max_epochs, validated every --every epochs, logged to W&B (offline unless WANDB_MODE says
otherwise) under --runs. Selection and report use different graphs: the checkpoint with the best score on the
valid split is scored on the test split against answers.csv, which takes no part in training or selection.

A cell is the mean ± sample std over seeds of that test score (Kendall tau for layout, the tile top-5 score for
tile); final is the mean of the collections; every Δ is paired by seed with its 95 % t interval. Each finished
fit is recorded in <runs>/results/ (one JSON file per fit) with the data, settings, epochs and code that made it
(a digest of the solution/ sources and configs/*.yaml): a fit of other code or settings is never reused, and
several runs of this script (other seeds, other machines' copies of the folder) add to the same record.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import numpy as np
from intervals import t_interval
from reports import write_report

from solution.atomic import atomic_write
from solution.constants import COLLECTIONS
from solution.data.tasks import task_of
from solution.submission.files import collection_file_stem, read_answers, score
from solution.synth.files import generate
from solution.tools import compare, pipeline
from solution.tools.lightning_cli import lightning_main
from solution.tools.settings import read_settings
from solution.tools.tracking import SUMMARY, code_version, run_folder

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "configs"
RANKER, LOSSES = "--model.ranker", "solution.models.losses"
PER_NODE, READOUT = f"{RANKER}.init_args.cross_attention", f"{RANKER}.init_args.readout_attention"


@dataclass(frozen=True)
class Variant:
    args: tuple[str, ...]  # command-line overrides of the full model
    tile_args: tuple[str, ...] | None = None  # the same change in TileRanker's terms, where they differ
    layout_only: bool = False  # tile kernels are never pruned nor segmented and have no per-node configs

    def fitted_on(self, collection: str) -> bool:
        """Whether this variant has fits of its own on `collection` (a layout-only one reuses the full model's on
        tile)."""
        return task_of(collection).has_config_nodes or not self.layout_only

    def flags(self, collection: str) -> tuple[str, ...]:
        """The overrides for `collection`."""
        if not self.fitted_on(collection):
            raise ValueError(f"a layout-only variant {self.args} on {collection}: tile reuses the full model's fits")
        if task_of(collection).has_config_nodes or self.tile_args is None:
            return self.args
        return self.tile_args


VARIANTS = {
    "full model": Variant(()),
    "no per-node attention": Variant((PER_NODE, "false"), layout_only=True),
    "no readout attention": Variant((READOUT, "false"), layout_only=True),
    "no cross-attention": Variant((PER_NODE, "false", READOUT, "false"), tile_args=(PER_NODE, "false")),
    "config-only baseline": Variant((RANKER, "solution.models.baselines.ConfigOnlyRanker")),
    "early fusion": Variant((RANKER, "solution.models.baselines.EarlyFusionRanker"), layout_only=True),
    "0 padding": Variant(("--data.sentinel", "false")),
    "config width 96": Variant((f"{RANKER}.init_args.config_hidden", "96"), layout_only=True),
    "config width 64": Variant((f"{RANKER}.init_args.config_hidden", "64"), layout_only=True),
    "no pruning": Variant(("--data.prune", "none"), layout_only=True),
    "2-hop pruning": Variant(("--data.hops", "2"), layout_only=True),
    "output-path pruning": Variant(("--data.prune", "output_path"), layout_only=True),
    "logistic loss": Variant(("--model.loss", f"{LOSSES}.PairwiseLogistic")),
    "ListMLE loss": Variant(("--model.loss", f"{LOSSES}.ListMLE")),
    "MSE loss": Variant(("--model.loss", f"{LOSSES}.MSE")),
    "segment training": Variant(("--data.segment_nodes", "64"), layout_only=True),
    "physical layout": Variant((f"{RANKER}.init_args.physical_layout", "true"), layout_only=True),
    "encoder width 64": Variant((f"{RANKER}.init_args.hidden", "64"), layout_only=True),
}
QUESTIONS = {  # section title -> the variants it compares; the full model is each section's reference
    "Cross-config attention: per configurable node (after each link block), in the readout, both (tile has "
    "only the readout's)": ["full model", "no per-node attention", "no readout attention", "no cross-attention"],
    "Model: the graph, and encoding it once": ["full model", "config-only baseline", "early fusion"],
    "Padding: -1 (0 is a valid feature value) vs 0": ["full model", "0 padding"],
    "Config-aware width: the configurable nodes' per-config states as wide as the encoder's (128) or narrower":
        ["full model", "config width 96", "config width 64"],
    "Pruning (layout; the full model keeps configurable nodes and their 1-hop neighbours)":
        ["full model", "no pruning", "2-hop pruning", "output-path pruning"],
    "Loss (the full model uses the pairwise hinge)": ["full model", "logistic loss", "ListMLE loss", "MSE loss"],
    "Segment training (64-node segments, every one with gradients; the full model trains whole "
    "graphs)": ["full model", "segment training"],
    "Physical layout features (sizes in the chosen minor-to-major order, 8 x 128 tile fill and padding)":
        ["full model", "physical layout"],
    "Encoder and readout width: 128 (full model) or 64, the config-aware width unchanged":
        ["full model", "encoder width 64"],
}


def code_digest() -> str:
    """blake2b of the solution/ sources and configs/*.yaml (paths and contents): the code and settings a fit ran."""
    digest = hashlib.blake2b(digest_size=12)
    for path in sorted([*(REPO / "solution").rglob("*.py"), *CONFIGS.glob("*.yaml")]):
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def test_score(collection: str, checkpoint: Path, root: Path, out: Path) -> float:
    """The checkpoint's score on the test split, against root/answers.csv."""
    job = pipeline.Job(root, out)
    pipeline.evaluate(collection, checkpoint, read_settings(CONFIGS)[collection], job, validate=False)
    part = job.collection_files / f"{collection_file_stem(collection)}.csv"
    return float(score(part, read_answers(root / "answers.csv"))[collection]["score"])


def fit(collection: str, seed: int, variant: Variant, common: list[str]) -> dict:
    """One fit: its best validation score (selection), that checkpoint's test score (report), training throughput
    and the share of nodes the pruning kept."""
    flags = variant.flags(collection)
    cli = lightning_main(["fit", "--config", str(CONFIGS / f"{collection_file_stem(collection)}.yaml"), *common,
                          "--seed_everything", str(seed), *flags])
    folder = run_folder(cli.trainer)
    run = compare.run_from_summary(folder / SUMMARY)
    checkpoint = Path(json.loads((folder / SUMMARY).read_text())["best_checkpoint"])
    meta = cli.datamodule.graphs("train").meta
    return {"select": run.best, "report": test_score(collection, checkpoint, Path(cli.datamodule.hparams.root), folder),
            "configs_per_s": run.configs_per_s,
            "kept": sum(m["nodes"] for m in meta) / sum(m["nodes_raw"] for m in meta)}


class Results:
    """Fits recorded one JSON file each under `folder`, keyed by what makes them the same experiment."""

    def __init__(self, folder: Path, context: dict) -> None:
        self.folder, self.context = folder, context
        self.rows = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []

    def get(self, **key) -> dict | None:
        key = {**self.context, **key}
        return next((r for r in self.rows if all(r.get(k) == v for k, v in key.items())), None)

    def add(self, row: dict) -> None:
        row = {**self.context, **row}
        self.rows.append(row)
        name = hashlib.blake2b(json.dumps({k: row[k] for k in (*self.context, "variant", "collection", "seed")},
                                          sort_keys=True).encode(), digest_size=10).hexdigest()
        self.folder.mkdir(parents=True, exist_ok=True)
        with atomic_write(self.folder / f"{name}.json") as handle:
            handle.write(json.dumps(row))

    def by_seed(self, variant: str, collection: str, key: str = "report") -> dict[int, float]:
        name = variant if VARIANTS[variant].fitted_on(collection) else "full model"
        return {r["seed"]: r[key] for r in self.rows if r["variant"] == name and r["collection"] == collection
                and all(r.get(k) == v for k, v in self.context.items())}

    def finals(self, variant: str, collections: list[str]) -> dict[int, float]:
        """Per seed fitted on every collection, the mean over collections."""
        per_collection = [self.by_seed(variant, c) for c in collections]
        seeds = set.intersection(*(set(v) for v in per_collection))
        return {s: float(np.mean([v[s] for v in per_collection])) for s in sorted(seeds)}


def cell(values: list[float], seeds: int, digits: int = 3) -> str:
    """mean ± sample std, and how many seeds where fewer than `seeds` were fitted."""
    if not values:
        return "–"
    spread = np.std(values, ddof=1) if len(values) > 1 else 0.0
    fewer = f" (n={len(values)})" if len(values) < seeds else ""
    return f"{np.mean(values):.{digits}f} ± {spread:.{digits}f}{fewer}"


def delta(variant: dict[int, float], reference: dict[int, float]) -> str:
    """variant − reference, paired by seed: mean [95 % t interval] (the mean alone for one pair)."""
    seeds = sorted(set(variant) & set(reference))
    if not seeds:
        return "–"
    return t_interval([variant[s] - reference[s] for s in seeds], 3, "+")


def section(title: str, variants: list[str], results: Results, collections: list[str], seeds: int) -> list[str]:
    """Test scores per variant and collection, then every Δ against the full model with its interval."""
    pruning = title.startswith("Pruning")
    layout = [c for c in collections if task_of(c).has_config_nodes]
    extra = ["nodes kept", "train configs/s"] if pruning else []
    lines = [f"## {title}", "", "| variant | " + " | ".join(collections + ["final", "Δ final", *extra]) + " |",
             "|---" * (len(collections) + 3 + len(extra)) + "|"]
    reference = results.finals("full model", collections)
    for variant in variants:
        final = results.finals(variant, collections)
        row = [cell(list(results.by_seed(variant, c).values()), seeds) for c in collections]
        row += [cell(list(final.values()), seeds), delta(final, reference) if variant != "full model" else "–"]
        if pruning:
            kept, speed = ([x for c in layout for x in results.by_seed(variant, c, key).values()]
                           for key in ("kept", "configs_per_s"))
            row += [f"{100 * np.mean(kept):.1f} %", f"{np.mean(speed):.0f}"]
        lines.append(f"| {variant} | " + " | ".join(row) + " |")
    lines += ["", "Δ against the full model per collection (paired by seed, 95 % t interval):", "",
              "| variant | " + " | ".join(collections) + " |", "|---" * (len(collections) + 1) + "|"]
    for variant in variants[1:]:
        lines.append(f"| {variant} | " + " | ".join(
            delta(results.by_seed(variant, c), results.by_seed("full model", c)) for c in collections) + " |")
    return lines + [""]


def chart(results: Results, collections: list[str], path: Path) -> None:
    """Final test score per variant (mean ± std over seeds), the full model's mean as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [v for v in VARIANTS if results.finals(v, collections)]
    if "full model" not in names:  # nothing to compare yet
        return
    values = [list(results.finals(v, collections).values()) for v in names]
    figure, axis = plt.subplots(figsize=(7, 0.35 * len(names) + 1.2))
    axis.barh(range(len(names)), [np.mean(v) for v in values],
              xerr=[np.std(v, ddof=1) if len(v) > 1 else 0 for v in values], capsize=3, color="tab:blue")
    axis.axvline(np.mean(values[0]), color="black", linewidth=0.8, linestyle="--")
    axis.set_yticks(range(len(names)), names)
    axis.invert_yaxis()
    axis.set_xlabel("final score (mean of the collections' test scores at the best validation checkpoint)")
    figure.tight_layout()
    with atomic_write(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=90)
    plt.close(figure)


def use_threads(threads: int) -> None:
    """A worker process's torch threads: the machine's cores shared among the parallel fits."""
    import torch

    torch.set_num_threads(threads)


def fit_all(todo: list[tuple[str, str, int]], common: list[str], results: Results, jobs: int) -> None:
    """Fit every (variant, collection, seed) of `todo`, `jobs` at a time, recording each as it finishes."""
    commit = code_version()["git"]  # recorded beside each fit, for people; the digest is the key

    def record(name: str, collection: str, seed: int, row: dict) -> None:
        results.add({"variant": name, "collection": collection, "seed": seed, "commit": commit, **row})
        print(f"{collection:<20} {name:<24} seed {seed}: select {row['select']:.4f} report {row['report']:.4f}",
              flush=True)

    if jobs == 1:
        for name, collection, seed in todo:
            record(name, collection, seed, fit(collection, seed, VARIANTS[name], common))
        return
    threads = max(1, (os.cpu_count() or 1) // jobs)
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn"), initializer=use_threads,
                             initargs=(threads,)) as pool:
        futures = {pool.submit(fit, collection, seed, VARIANTS[name], common): (name, collection, seed)
                   for name, collection, seed in todo}
        for future in as_completed(futures):
            record(*futures[future], future.result())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="data/synthetic-small")
    parser.add_argument("--size", default="small", choices=("tiny", "small"))
    parser.add_argument("--settings", default="shipped", choices=("shipped", "demo"),
                        help="the collections' YAMLs as shipped, or with configs/demo.yaml on top")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--collections", nargs="+", default=list(COLLECTIONS), choices=list(COLLECTIONS))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--max_epochs", type=int, default=10)
    parser.add_argument("--every", type=int, default=2, help="epochs between validations (the checkpoints to select)")
    parser.add_argument("--jobs", type=int, default=1, help="fits at a time, the cores shared among them")
    parser.add_argument("--runs", default="runs/ablations", help="W&B logs, run folders and results/")
    parser.add_argument("--out", help="the report, its chart beside it (default benchmarks/results/ablations.md)")
    parser.add_argument("--report_only", action="store_true", help="write the report from the recorded fits only")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        work = Path(tempfile.mkdtemp(prefix="solution-ablations-"))
        args.data, args.size, args.seeds, args.max_epochs, args.every = str(work / "data"), "tiny", [0, 1], 1, 1
        args.collections, args.runs, args.settings = ["tile:xla", "layout:xla:default"], str(work / "runs"), "demo"
        args.variants = ["no readout attention", "no cross-attention", "early fusion", "no pruning", "MSE loss"]
        args.out = args.out or work / "a.md"
    root, runs = Path(args.data), Path(args.runs)
    if not (root / "npz_all").is_dir():
        generate(root, args.size, seed=0)
    if "full model" not in args.variants:
        args.variants.insert(0, "full model")
    demo = ["--config", str(CONFIGS / "demo.yaml")] if args.settings == "demo" else []
    common = [*demo, "--data.root", str(root), "--data.num_workers", "0", "--trainer.max_epochs",
              str(args.max_epochs), "--trainer.check_val_every_n_epoch", str(args.every),
              "--trainer.enable_progress_bar", "false", "--trainer.logger.init_args.save_dir", str(runs)]
    results = Results(runs / "results", {"data": str(root.resolve()), "settings": args.settings,
                                         "epochs": args.max_epochs, "every": args.every, "code": code_digest()})
    todo = [(name, collection, seed) for seed in args.seeds for collection in args.collections
            for name in args.variants  # seeds outermost: an interrupted run has every variant at the same seeds
            if VARIANTS[name].fitted_on(collection)
            and results.get(variant=name, collection=collection, seed=seed) is None]
    start = time.perf_counter()
    if not args.report_only:
        fit_all(todo, common, results, args.jobs)
    minutes = (time.perf_counter() - start) / 60
    given = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--report_only"]
    command = shlex.join(["python", "benchmarks/ablations.py", *given])
    how = f"report written with `--report_only` from the fits recorded in {runs / 'results'}" if args.report_only \
        else f"{minutes:.0f} min of fitting on this machine; fits already recorded for the same code are reused"
    out = Path(args.out or "benchmarks/results/ablations.md")
    lines = [f"# Ablations on {args.size} synthetic data, {args.settings} settings", "",
             f"Command: `{command}` ({how}). {args.max_epochs} epochs, validated every {args.every}; seeds "
             f"{args.seeds}. Each fit's checkpoint with the best validation score is scored on the test split "
             "(answers.csv), which takes no part in training or selection. A cell is the mean ± sample std over "
             "seeds of that test score, final is the mean over collections, and every Δ is paired by seed with "
             "its 95 % t interval. Tile kernels are never pruned and have no per-node configs, so layout-only "
             "variants reuse the full model's tile runs.", "",
             f"![final score per variant]({out.stem}.png)", ""]
    for title, names in QUESTIONS.items():
        chosen = [n for n in names if n in args.variants]
        if len(chosen) > 1:
            lines += section(title, chosen, results, args.collections, len(args.seeds))
    write_report(out, "\n".join(lines))
    compare.main([str(runs), "--out", str(runs / "compare")])
    chart(results, args.collections, out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
