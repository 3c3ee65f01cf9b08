"""torch_scatter against plain torch, side by side in one process: each scatter reduction (sum, mean, max) at the
shapes the rankers use, forward and forward + backward, then whole steps of the two layout rankers (training and
ranking) on a realistic pruned graph. What the "auto" backend (solution/models/scatter.py) is chosen from.

    python benchmarks/scatter.py                 # benchmarks/results/scatter.md (about 3 minutes on 2 CPU cores)
    python benchmarks/scatter.py --smoke         # seconds: checks that the script runs

Each measurement alternates the two backends repeat by repeat (so that both see the same machine load) after
one warm-up each; a cell is the median of the repeats, with their min-max, and the ratio is torch_scatter's
median time over plain torch's (above 1: plain torch is faster).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from reports import write_report

from solution.data.batch import Batch, Collate, Item
from solution.data.preprocess import Preprocessing, load_graph
from solution.data.tasks import LAYOUT
from solution.models import scatter
from solution.models.baselines import EarlyFusionRanker
from solution.models.losses import PairwiseHinge
from solution.models.rankers import LayoutRanker
from solution.synth import layouts, writing

BACKENDS = ("torch_scatter", "torch")
REDUCTIONS = {"sum": scatter.scatter_sum, "mean": scatter.scatter_mean, "max": scatter.scatter_max}


def timed(fn: Callable[[], object], repeats: int) -> dict[str, list[float]]:
    """Seconds per call of `fn` under each backend, the backends alternating repeat by repeat."""
    seconds: dict[str, list[float]] = {b: [] for b in BACKENDS}
    for backend in BACKENDS:  # warm-up
        with scatter.use_backend(backend):
            fn()
    for _ in range(repeats):
        for backend in BACKENDS:
            with scatter.use_backend(backend):
                start = time.perf_counter()
                fn()
                seconds[backend].append(time.perf_counter() - start)
    return seconds


def cell(seconds: list[float]) -> str:
    ms = [s * 1e3 for s in seconds]
    return f"{statistics.median(ms):.2f} ({min(ms):.2f}-{max(ms):.2f})"


def row(name: str, seconds: dict[str, list[float]]) -> str:
    ratio = statistics.median(seconds["torch_scatter"]) / statistics.median(seconds["torch"])
    return f"| {name} | {cell(seconds['torch_scatter'])} | {cell(seconds['torch'])} | {ratio:.2f}x |"


def reductions(shapes: dict[str, tuple[tuple[int, ...], int, int]], repeats: int) -> list[str]:
    """One row per (shape, reduction, pass): src of `shape` reduced along dim 0 into `slots` slots."""
    rows = []
    for name, (shape, slots, seed) in shapes.items():
        generator = torch.Generator().manual_seed(seed)
        src = torch.randn(shape, generator=generator, requires_grad=True)
        index = torch.randint(0, slots, (shape[0],), generator=generator).sort().values
        for reduce, fn in REDUCTIONS.items():
            rows.append(row(f"{name}, {reduce}, forward", timed(lambda: fn(src.detach(), index, 0, slots), repeats)))
            rows.append(row(f"{name}, {reduce}, forward + backward",
                            timed(lambda: fn(src, index, 0, slots).sum().backward(), repeats)))
    return rows


def layout_batch(nodes: int, configurable: int, configs: int, folder: Path) -> Batch:
    """One synthetic realistic xla graph through the package's preprocessing (1-hop pruning) and training collate."""
    rng = np.random.default_rng([0, nodes])
    graph = layouts.build_layout_graph(rng, "xla", nodes, configurable)
    choices, explicit = layouts.sample_choices(graph, rng, 2 * configs, "random")  # spare rows: dedup drops some
    runtime = layouts.noisy(graph.cost.evaluate(choices), choices, graph.hash_weights, rng)
    path = folder / "graph.npz"
    features = layouts.config_features(graph, choices, explicit)
    writing.write_npz(path, [*graph.arrays().items(), ("node_config_feat", features), ("config_runtime", runtime)],
                    compress=False)
    loaded = load_graph(path, "train", Preprocessing(), None)
    return Collate(LAYOUT)([(loaded, Item(0, np.arange(configs)))])


def steps(batch: Batch, hidden: int, repeats: int) -> list[str]:
    """One row per (ranker, mode): a training step (forward, loss, backward, AdamW) or a ranking pass."""
    rows = []
    width = batch.node_feat.size(1)
    rankers = {"LayoutRanker": lambda: LayoutRanker(width, LAYOUT.config_width, hidden=hidden, edge_direction="both"),
               "EarlyFusionRanker": lambda: EarlyFusionRanker(width, LAYOUT.config_width, hidden=hidden,
                                                               edge_direction="both")}
    loss = PairwiseHinge()
    for name, make in rankers.items():
        torch.manual_seed(0)
        net = make()
        optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)

        def train() -> None:
            net.train()
            optimizer.zero_grad()
            loss(net(batch), batch.target, batch.config_mask).backward()
            optimizer.step()

        def rank() -> None:
            net.eval()
            with torch.no_grad():
                net(batch)

        rows.append(row(f"{name}, training step", timed(train, repeats)))
        rows.append(row(f"{name}, ranking pass", timed(rank, repeats)))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=15000, help="raw nodes of the step graph (before pruning)")
    parser.add_argument("--configs", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "scatter.md")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, 2 repeats: checks that the script runs")
    args = parser.parse_args(argv)
    if not scatter.AVAILABLE:
        print("torch_scatter is not installed: there is nothing to compare (`make scatter` builds it)")
        return 0
    if args.smoke:
        args.nodes, args.configs, args.hidden, args.repeats = 600, 8, 16, 2
    torch.set_num_threads(args.threads)
    c, d = args.configs, args.hidden
    with tempfile.TemporaryDirectory() as folder:
        batch = layout_batch(args.nodes, 25 if args.smoke else 125, c, Path(folder))
    n, e = batch.node_feat.size(0), batch.edge_index.size(1)
    m = int((batch.config_node >= 0).sum())
    shapes = {f"encoder messages [E={e}, d] into N={n}": ((e, d), n, 0),
              f"pool of the configurable nodes [M={m}, C, d] into 1 graph": ((m, c, d), 1, 1),
              f"early fusion messages [E={e}, C, d] into N={n}": ((e, c, d), n, 2)}
    header = ["| what | torch_scatter ms | plain torch ms | torch_scatter / torch |", "|---|---|---|---|"]
    lines = ["# torch_scatter against plain torch (CPU)", "",
             f"`python benchmarks/scatter.py{' --smoke' if args.smoke else ''}`; torch {torch.__version__}, "
             f"{args.threads} thread(s); C = {c}, d = {d}; the step graph: {args.nodes:,} raw nodes, {n} after 1-hop "
             f"pruning, {m} configurable, {e} edges. Medians of {args.repeats} repeats (min-max), the two backends "
             "alternating repeat by repeat; the ratio is torch_scatter's median time over plain torch's.", "",
             "## Reductions along dim 0", "", *header, *reductions(shapes, args.repeats), "",
             "## Whole steps (hidden d, edges both ways, cross-config attention on)", "", *header,
             *steps(batch, d, args.repeats), ""]
    write_report(args.out, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
