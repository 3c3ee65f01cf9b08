"""Data-layer benchmark: pruning retention, packed config size, cold vs cached reads, memory over an epoch.

    python benchmarks/data_bench.py --size realistic --out benchmarks/results/data_benchmark.md
    python benchmarks/data_bench.py --size tiny --smoke          # seconds, checks that the script still runs

Prints every figure and writes them as markdown to --out.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from reports import write_report

from solution.constants import COLLECTIONS
from solution.data.batch import Collate
from solution.data.packing import pack
from solution.data.preprocess import Preprocessing, load_graph, record_cache
from solution.data.pruning import STRATEGIES, keep_nodes, output_node
from solution.data.reader import list_files, read_graph
from solution.data.sets import GraphSet, TrainSet
from solution.data.tasks import LAYOUT
from solution.synth.files import generate


def rss_mib() -> tuple[float, float]:
    """(current, peak) resident memory of this process in MiB, from /proc."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def retention(root: Path, collections: list[str]) -> list[str]:
    """Mean node retention of each pruning strategy over the train graphs of the layout collections."""
    lines = ["| collection | graphs | nodes (mean) | " + " | ".join(STRATEGIES) + " | k_hop k=2 |",
             "|---" * (len(STRATEGIES) + 4) + "|"]
    for collection in collections:
        kept = {s: [] for s in (*STRATEGIES, "k2")}
        files = list_files(root, collection, "train")
        nodes = []
        for path in files:
            g = read_graph(path, "train")
            n, root_node = len(g.node_feat), output_node(g.node_feat)
            nodes.append(n)
            for strategy in STRATEGIES:
                kept[strategy].append(keep_nodes(g.edge_index, n, g.config_node_ids, root_node, strategy).mean())
            kept["k2"].append(keep_nodes(g.edge_index, n, g.config_node_ids, root_node, "k_hop", 2).mean())
        lines.append(f"| {collection} | {len(files)} | {np.mean(nodes):.0f} | "
                     + " | ".join(f"{np.mean(kept[s]):.1%}" for s in (*STRATEGIES, "k2")) + " |")
    return lines


def packed_size(root: Path, collection: str) -> list[str]:
    """Bytes per config of the layout config block, raw float32 vs packed int64."""
    path = max(list_files(root, collection, "train"), key=lambda p: p.stat().st_size)
    g = read_graph(path, "train")
    raw = g.config_feat.nbytes / g.num_configs
    packed = pack(g.config_feat).nbytes / g.num_configs
    return [f"- bytes per config ({path.name}, {g.config_feat.shape[1]} configurable nodes): raw float32 "
            f"{raw:.0f}, packed {packed:.0f} -> **{raw / packed:.1f}x smaller**"]


def read_speed(root: Path, collection: str, cache_dir: Path) -> list[str]:
    """Files/s preprocessing from the .npz files (cold) vs reading the cache (warm, a fresh process-like cache)."""
    files = list_files(root, collection, "train") + list_files(root, collection, "valid")
    settings = Preprocessing()
    start = time.perf_counter()
    for path in files:
        load_graph(path, path.parent.name, settings, record_cache(cache_dir))
    cold = len(files) / (time.perf_counter() - start)
    start = time.perf_counter()
    for path in files:
        g = load_graph(path, path.parent.name, settings, record_cache(cache_dir))  # new instance: checksums verified
        np.asarray(g.node_feat).sum()
    warm = len(files) / (time.perf_counter() - start)
    return [f"- {collection}: {len(files)} files, cold {cold:.2f} files/s, cached {warm:.2f} files/s -> "
            f"**{warm / cold:.1f}x**"]


def epoch_memory(root: str, collection: str, cache_dir: str, loads: int = 200) -> dict:
    """Draw `loads` training samples (about an nlp collection's 200 graphs; the collection's graphs repeat
    when it has fewer) with a warm cache, and record RSS after each."""
    graphs = GraphSet(list_files(root, collection, "train"), "train", Preprocessing(), record_cache(cache_dir))
    train, collate = TrainSet(graphs, 128, "uniform"), Collate(LAYOUT)
    trace = []
    for step in range(loads):
        batch = collate([train[step % len(train), (0, step)]])
        trace.append(rss_mib()[0])
        del batch
    return {"graphs": len(train), "loads": loads, "rss_trace_mib": trace, "peak_mib": rss_mib()[1]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=None, help="dataset root (generated when missing)")
    parser.add_argument("--size", default="realistic", choices=("tiny", "small", "realistic"))
    parser.add_argument("--out", default="benchmarks/results/data_benchmark.md")
    parser.add_argument("--smoke", action="store_true", help="tiny data, temporary folders")
    parser.add_argument("--epoch-child", nargs=3, metavar=("ROOT", "COLLECTION", "CACHE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.epoch_child:
        print(json.dumps(epoch_memory(*args.epoch_child)))
        return 0

    work = Path(tempfile.mkdtemp(prefix="solution-bench-"))
    root = Path(args.data) if args.data else (work / "data" if args.smoke else Path(f"data/synthetic-{args.size}"))
    if not (root / "npz_all").is_dir():
        size = "tiny" if args.smoke else args.size
        print(f"generating {size} data in {root} ...", flush=True)
        generate(root, size, seed=0)
    cache_dir = work / "cache"
    layout = [c for c in COLLECTIONS if c.startswith("layout")]
    lines = [f"# Data-layer benchmark ({'tiny, smoke' if args.smoke else args.size} synthetic data)", "",
             f"Command: `python benchmarks/data_bench.py --size {args.size}"
             f"{f' --data {args.data}' if args.data else ''}`", "",
             "## Node retention after pruning", ""]
    lines += retention(root, layout)
    lines += ["", "## Packed layout configs", ""] + packed_size(root, "layout:nlp:random")
    lines += ["", "## Cold vs cached reads", ""] + read_speed(root, "layout:nlp:random", cache_dir)
    child = subprocess.run([sys.executable, __file__, "--epoch-child", str(root), "layout:nlp:random", str(cache_dir)],
                           capture_output=True, text=True, check=True)
    epoch = json.loads(child.stdout.strip().splitlines()[-1])
    trace = epoch["rss_trace_mib"]
    lines += ["", "## Memory while iterating (layout:nlp:random, 128 configs per graph, warm cache)", "",
              f"- {epoch['loads']} graph loads over the collection's {epoch['graphs']} train graphs: peak RSS "
              f"{epoch['peak_mib']:.0f} MiB; RSS after the first load {trace[0]:.0f} MiB, after load "
              f"{len(trace) // 10} {trace[len(trace) // 10]:.0f} MiB, after the last {trace[-1]:.0f} MiB"]
    report = "\n".join(lines) + "\n"
    if args.smoke:
        print(report)
    else:
        write_report(Path(args.out), report)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
