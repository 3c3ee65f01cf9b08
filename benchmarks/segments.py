"""Segment training vs whole-graph training: peak memory of a training step as the graph grows, and the time
of a training epoch on realistic synthetic graphs.

    python benchmarks/segments.py                       # both parts; on the GPU when there is one
    python benchmarks/segments.py --nodes 10000 50000 200000 --budget 2048 --configs 16
    python benchmarks/segments.py --smoke               # seconds: checks that the script runs

Memory: random XLA-like DAGs (each node reads one or two of the 50 nodes before it; 1 % configurable nodes,
processed whole: no pruning)
of growing size, one training step (forward + backward) of the layout model on `--configs` configs, each
measurement in a child process of its own (GPU memory allocated, or resident memory on the CPU, above the
level after building the model and batch). Whole-graph training is skipped where its estimated activations
exceed half the memory. Segment training cuts the graph into `--budget`-node segments and computes one at a
time, every segment with gradients (checkpointed).

Epoch time: `--epochs` epochs of `solution`'s own training loop (configs/base.yaml, configs/<collection>.yaml,
then configs/demo.yaml) on the train split of a realistic synthetic collection, unpruned (`--data.prune none`:
1-hop pruning leaves these graphs a few hundred nodes, one segment), whole (`--data.segment_nodes 0`) and in
in segments; the mean time of the epochs after the first, side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import torch
import yaml
from reports import write_report

from solution.data import pruning
from solution.data.batch import Batch
from solution.data.partition import partition
from solution.data.tasks import LAYOUT
from solution.format import LAYOUT_CONFIG_DIM, NODE_FEAT_DIM
from solution.models.rankers import LayoutRanker
from solution.submission.files import collection_file_stem
from solution.synth.files import generate
from solution.tools.lightning_cli import lightning_main

FEATURES = NODE_FEAT_DIM
CONFIGS = Path(__file__).resolve().parent.parent / "configs"
SHIPPED = yaml.safe_load((CONFIGS / "base.yaml").read_text())["model"]["ranker"]["init_args"]  # LayoutRanker's
HIDDEN = SHIPPED["hidden"]
# large blocks straight from mmap, so that freed tensors leave resident memory as they leave allocated memory on
# a GPU; glibc's default keeps them in its heap, and resident memory then grows with the number of tensors made
CPU_HEAP = {"MALLOC_MMAP_THRESHOLD_": "65536"}


def layout_batch(nodes: int, configs: int, seed: int = 0, device: str = "cpu", prune: bool = False) -> Batch:
    """One random layout graph with `configs` random configs, in the data module's batch format; with `prune`,
    cut to the configurable nodes and their 1-hop neighbourhood first (the package's default)."""
    rng = np.random.default_rng(seed)
    consumers = np.repeat(np.arange(1, nodes), 2)
    producers = consumers - rng.integers(1, 51, consumers.size)
    keep = (producers >= 0) & (rng.random(consumers.size) < 0.75)  # one or two inputs each
    edges = np.stack([consumers[keep], producers[keep]], 1)  # [E, 2] as on disk: [consumer, producer]
    configurable = np.sort(rng.choice(nodes, max(nodes // 100, 1), replace=False))
    feat = rng.standard_normal((nodes, FEATURES)).astype(np.float32)
    opcode = rng.integers(0, 120, nodes)
    if prune:
        cut = pruning.prune(edges, nodes, configurable, nodes - 1, "k_hop", 1)
        edges, configurable = cut.new_id[edges[cut.edge_keep]], cut.new_id[configurable]
        feat, opcode, nodes = feat[cut.keep], opcode[cut.keep], int(cut.keep.sum())
    batch = {
        "node_feat": feat, "node_opcode": opcode, "edge_index": edges[:, ::-1].T,  # [2, E] producer -> consumer
        "node_graph": np.zeros(nodes, np.int64), "config_mask": np.ones((1, configs), bool),
        "config_node": configurable[None],  # [1, K]
        "config_feat": rng.integers(-1, 6, (1, configs, configurable.size, LAYOUT_CONFIG_DIM)).astype(np.float32),
    }
    return Batch(**{k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in batch.items()})


def model(device: str, seed: int = 0, **settings) -> LayoutRanker:
    """The layout ranker at the settings of configs/base.yaml, seeded; `settings` change them."""
    torch.manual_seed(seed)
    return LayoutRanker(FEATURES, LAYOUT.config_width, **{**SHIPPED, **settings}).to(device)


def resident_mib() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class PeakMemory:
    """Peak memory inside a `with` block, in MiB above its start: CUDA memory allocated, or on the CPU the
    resident memory sampled every millisecond by a thread."""

    def __init__(self, device: str) -> None:
        self.device, self.peak = device, 0.0

    def __enter__(self) -> PeakMemory:
        if self.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
            self.start = torch.cuda.memory_allocated() / 2**20
        else:
            self.start, self.running = resident_mib(), True
            self.thread = threading.Thread(target=self._sample, daemon=True)
            self.thread.start()
        return self

    def _sample(self) -> None:
        while self.running:
            self.peak = max(self.peak, resident_mib() - self.start)
            time.sleep(0.001)

    def __exit__(self, *exc) -> None:
        if self.device == "cuda":
            self.peak = torch.cuda.max_memory_allocated() / 2**20 - self.start
        else:
            self.running = False
            self.thread.join()


def timed(step, device: str, repeats: int) -> float:
    """Seconds per call of `step`, after one warm-up call."""
    step()
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats


def in_child(job: dict, timeout: float) -> dict:
    """`measure(job)` in a fresh interpreter with CPU_HEAP; a failure (out of memory, time-out) is reported, not
    raised."""
    try:
        done = subprocess.run([sys.executable, __file__, "--child", json.dumps(job)], capture_output=True,
                              text=True, timeout=timeout, env={**os.environ, **CPU_HEAP})
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout:.0f} s"}
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["killed"])[-1][:80]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def machine() -> tuple[str, int, str]:
    """(device, its memory in bytes, a description) of where the benchmark runs: the GPU when there is one."""
    if torch.cuda.is_available():
        return "cuda", torch.cuda.get_device_properties(0).total_memory, torch.cuda.get_device_name(0)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return "cpu", memory, f"CPU, {torch.get_num_threads()} threads"


def measure(job: dict) -> dict:
    """One training step's time and peak memory (run in a child process)."""
    device = job["device"]
    torch.set_num_threads(job["threads"])
    net = model(device)  # in training mode: a segmented batch trains by segment
    batch = layout_batch(job["nodes"], job["configs"], device=device)
    if job["segmented"]:  # the ranker scores a batch with node segments segment by segment
        cut = partition(job["nodes"], np.zeros(0, np.int64), job["budget"])
        batch = batch.replace(node_segment=torch.from_numpy(cut).to(device),
                              graph_id=torch.zeros(1, dtype=torch.long, device=device))

    def step():
        net.zero_grad(set_to_none=True)
        net(batch).sum().backward()

    with PeakMemory(device) as memory:
        seconds = timed(step, device, job["repeats"])
    return {"seconds": seconds, "peak_mib": memory.peak}


class EpochTimer(pl.Callback):
    """Wall time of each training epoch."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def on_train_epoch_start(self, trainer, module) -> None:
        self.start = time.perf_counter()

    def on_train_epoch_end(self, trainer, module) -> None:
        self.seconds.append(time.perf_counter() - self.start)


def epoch_seconds(root: str, collection: str, epochs: int, extra: list[str], scratch: str) -> tuple[float, int]:
    """Mean seconds of the training epochs after the first, and the number of training graphs."""
    stem = collection_file_stem(collection)
    cli = lightning_main(["fit", "--config", str(CONFIGS / f"{stem}.yaml"), "--config", str(CONFIGS / "demo.yaml"),
                          "--data.root", root, "--trainer.max_epochs", str(epochs), "--trainer.limit_val_batches",
                          "0", "--trainer.logger", "false", "--trainer.default_root_dir", scratch,
                          "--trainer.enable_progress_bar", "false", "--data.prune", "none",
                          f"--trainer.callbacks+={EpochTimer.__module__}.EpochTimer", *extra])
    timer = next(c for c in cli.trainer.callbacks if isinstance(c, EpochTimer))
    return float(np.mean(timer.seconds[1:] or timer.seconds)), len(cli.datamodule.graphs("train"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[10_000, 20_000, 50_000, 100_000, 200_000])
    parser.add_argument("--configs", type=int, default=16)
    parser.add_argument("--budget", type=int, default=2048, help="nodes per segment")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--data", default="data/synthetic-realistic", help="realistic data for the epoch times")
    parser.add_argument("--collections", nargs="+", default=["layout:nlp:random", "layout:xla:random"])
    parser.add_argument("--epoch_budget", type=int, default=2048, help="segment budget of the epoch-time runs")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--out", default=None, help="default benchmarks/results/segments-<cpu|gpu>.md")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(json.loads(args.child))))
        return 0
    scratch = tempfile.mkdtemp(prefix="segments-")  # the fits' checkpoints (and the smoke data), not kept
    if args.smoke:
        args.nodes, args.configs, args.budget, args.repeats, args.epochs = [400, 800], 4, 200, 1, 2
        args.collections, args.epoch_budget = args.collections[:1], 64
        args.data = str(generate(Path(scratch) / "data", "tiny", collections=args.collections))
    device, memory, where = machine()
    base = {"device": device, "threads": torch.get_num_threads(), "configs": args.configs, "repeats": args.repeats,
            "budget": args.budget}
    modes = {"whole graph": False, "segments": True}
    lines = [f"# Segment training ({where})", "",
             f"Command: `python benchmarks/segments.py {' '.join(argv if argv is not None else sys.argv[1:])}`", "",
             f"## Peak memory of a training step ({args.configs} configs, hidden {HIDDEN}, config_hidden "
             f"{SHIPPED.get('config_hidden') or HIDDEN}, whole graphs, "
             f"{args.budget:,}-node segments)", "",
             "Peak MiB (seconds per step); memory ratios against the whole graph.", "",
             "| nodes | segments | " + " | ".join(modes) + " | memory ratios |", "|---" * (len(modes) + 3) + "|"]
    peaks: dict[str, list[float]] = {name: [] for name in modes}
    for nodes in args.nodes:
        estimate = nodes * args.configs * HIDDEN * 4 * 40  # bytes: [N, C, d] floats, ~40 kept for backward
        results = {name: in_child({**base, "nodes": nodes, "segmented": segmented}, args.timeout)
                   if segmented or estimate <= memory / 2
                   else {"error": f"skipped (~{estimate / 2**30:.0f} GiB est.)"} for name, segmented in modes.items()}
        whole = results["whole graph"]
        ratios = [f"{r['peak_mib'] / whole['peak_mib']:.3f}x" for name, r in results.items()
                  if name != "whole graph" and "error" not in r and "error" not in whole]
        lines.append(f"| {nodes:,} | {-(-nodes // args.budget)} | " + " | ".join(
            r["error"] if "error" in r else f"{r['peak_mib']:,.0f} ({r['seconds']:.2f} s)" for r in results.values())
            + f" | {', '.join(ratios) or '–'} |")
        for name, r in results.items():
            peaks[name] += [r["peak_mib"]] if "error" not in r else []
        print(lines[-1], flush=True)
    lines.append("")
    for name, values in peaks.items():
        if len(values) > 1 and name != "whole graph":
            lines.append(f"- {name}: peak memory of the largest graph / the smallest = {values[-1] / values[0]:.2f}x")
    lines += ["", f"## Training epoch time on `{args.data}`, unpruned (configs/base.yaml, <collection>.yaml "
              f"+ demo.yaml, mean of epochs 2..{args.epochs}, {args.epoch_budget:,}-node segments)", "",
              "Seconds per epoch (speed-up against whole graphs).", "",
              "| collection | train graphs | " + " | ".join(modes) + " |", "|---" * (len(modes) + 2) + "|"]
    for collection in args.collections:
        seconds = {}
        for name, segmented in modes.items():
            extra = ["--data.segment_nodes", str(args.epoch_budget) if segmented else "0"]  # base: 4096
            seconds[name], graphs = epoch_seconds(args.data, collection, args.epochs, extra, scratch)
        lines.append(f"| {collection} | {graphs} | " + " | ".join(
            f"{t:.1f} ({seconds['whole graph'] / t:.2f}x)" for t in seconds.values()) + " |")
        print(lines[-1], flush=True)
    shutil.rmtree(scratch)
    path = Path(args.out or f"benchmarks/results/segments-{'gpu' if device == 'cuda' else 'cpu'}.md")
    write_report(path, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
