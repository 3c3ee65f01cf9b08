"""Speed and memory of the layout model: encode once vs early fusion, the two scatter backends, and ranking
1,000 vs 100,000 configs of one graph in fixed-size chunks.

    python benchmarks/speed.py                                   # full grid; on the GPU when there is one
    python benchmarks/speed.py --nodes 5000 15000 --configs 16 64 128
    python benchmarks/speed.py --smoke                           # seconds: checks that the script runs

Graphs are random XLA-like DAGs (each node reads one or two of the 50 nodes before it; 1 % of nodes
configurable). Three ways to score the same configs: early fusion, the way the public top solutions do it
(the whole graph encoded again for every config, [C, N, d] through every layer); encode once on the whole
graph (same predictions as early fusion, checked); and the package's default, encode once on the graph cut
to the configurable nodes and their 1-hop neighbourhood (pruning is cached preprocessing, not timed).
Every measurement runs in a child process of its own, so that its peak memory is its own: GPU memory
allocated, or on the CPU resident memory (sampled every millisecond), both above the level after building the
model and batch. The variants are measured in the same run, side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

from solution.atomic import atomic_write
from solution.constants import LAYOUT_CONFIG_DIM, NODE_FEAT_DIM
from solution.data import pruning
from solution.data.batch import Batch
from solution.data.tasks import LAYOUT
from solution.models import scatter
from solution.models.rankers import LayoutRanker
from solution.models.scatter import use_backend

HIDDEN = 128
FEATURES = NODE_FEAT_DIM


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


def model(encode_once: bool, device: str, seed: int = 0, **settings) -> LayoutRanker:
    """The layout ranker at hidden HIDDEN, seeded; `settings` are further LayoutRanker arguments."""
    torch.manual_seed(seed)
    return LayoutRanker(FEATURES, LAYOUT.config_width, hidden=HIDDEN, encode_once=encode_once, **settings).to(device)


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


def measure(job: dict) -> dict:
    """One measurement (run in a child process): configs/s and peak memory of a train step or an inference."""
    device, kind = job["device"], job["kind"]
    torch.set_num_threads(job["threads"])
    net = model(job.get("encode_once", True), device)
    batch = layout_batch(job["nodes"], job["chunk" if kind == "rank" else "configs"], device=device,
                         prune=job.get("prune", False))
    if kind == "train":
        def step():
            net.zero_grad(set_to_none=True)
            net(batch).sum().backward()
    else:
        net.eval()
        calls = -(-job["configs"] // job["chunk"]) if kind == "rank" else 1  # rank: every config, in chunks

        def step():
            with torch.no_grad():
                for _ in range(calls):
                    net(batch)
    with use_backend(job["backend"]), PeakMemory(device) as memory:
        seconds = timed(step, device, 1 if kind == "rank" else job["repeats"])
    return {"seconds": seconds, "configs_per_s": job["configs"] / seconds, "peak_mib": memory.peak}


def in_child(job: dict, timeout: float, script: str = __file__, env: dict[str, str] | None = None) -> dict:
    """`script --child job` (its `measure(job)`) in a fresh interpreter, with `env` added to the environment; a
    failure (out of memory, time-out) is reported, not raised."""
    try:
        done = subprocess.run([sys.executable, script, "--child", json.dumps(job)], capture_output=True,
                              text=True, timeout=timeout, env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout:.0f} s"}
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["killed"])[-1][:80]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def same_predictions(device: str) -> float:
    """Largest |difference| between encode-once and early-fusion scores, same weights, small graph."""
    batch = layout_batch(2000, 16, device=device)
    once, fused = model(True, device).eval(), model(False, device).eval()
    with torch.no_grad():
        return float((once(batch) - fused(batch)).abs().max())


def fits(nodes: int, configs: int, limit_gib: float) -> bool:
    """Whether a whole-graph run's activations ([N, C, d] floats, ~40 kept for backward) fit the limit."""
    return nodes * configs * HIDDEN * 4 * 40 / 2**30 <= limit_gib


def cell(result: dict, key: str, digits: int = 0) -> str:
    return result["error"] if "error" in result else f"{result[key]:,.{digits}f}"


def machine() -> tuple[str, int, str]:
    """(device, its memory in bytes, a description) of where the benchmark runs: the GPU when there is one."""
    if torch.cuda.is_available():
        return "cuda", torch.cuda.get_device_properties(0).total_memory, torch.cuda.get_device_name(0)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return "cpu", memory, f"CPU, {torch.get_num_threads()} threads"


def write_report(lines: list[str], out: str | None, name: str, device: str) -> None:
    """The report's lines to `out` (default docs/<name>-<cpu|gpu>.md), atomically, and to the terminal."""
    text = "\n".join(lines) + "\n"
    path = Path(out or f"docs/{name}-{'gpu' if device == 'cuda' else 'cpu'}.md")
    with atomic_write(path) as handle:
        handle.write(text)
    print(f"\n{text}\nwrote {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[5000, 15000, 40000])
    parser.add_argument("--configs", type=int, nargs="+", default=[16, 64, 128, 256, 1024])
    parser.add_argument("--rank", type=int, nargs="+", default=[1000, 100000], help="configs ranked in chunks")
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit_gib", type=float, default=None, help="skip early fusion above this estimate")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--out", default=None, help="default docs/benchmarks-<cpu|gpu>.md")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(json.loads(args.child))))
        return 0
    if args.smoke:
        args.nodes, args.configs, args.rank, args.chunk, args.repeats = [300], [4, 8], [64, 256], 32, 1
    device, memory, where = machine()
    limit = args.limit_gib or 0.5 * memory / 2**30
    base = {"device": device, "threads": torch.get_num_threads(), "repeats": args.repeats, "backend": scatter.BACKEND}
    lines = [f"# Speed and memory ({where})", "",
             f"Command: `python benchmarks/speed.py {' '.join(argv if argv is not None else sys.argv[1:])}`", "",
             f"Layout model, hidden {HIDDEN}, random XLA-like graphs processed whole (1 % configurable nodes). "
             "Early fusion = the same model with the graph re-encoded per config ([C, N, d] through every layer).",
             "", f"Same predictions: max |encode once - early fusion| = {same_predictions(device):.1e}", ""]
    variants = {"early fusion": {"encode_once": False}, "encode once": {"encode_once": True},
                "encode once, 1-hop pruned": {"encode_once": True, "prune": True}}
    for kind, title in (("train", "Training step (forward + backward)"), ("infer", "Inference pass")):
        lines += [f"## {title}", "", "configs/s (peak MiB); ratios against early fusion on the whole graph.", "",
                  "| nodes | configs | " + " | ".join(variants) + " | speed-up | memory ratio |", "|---" * 7 + "|"]
        for nodes in args.nodes:
            for configs in args.configs:
                job = {**base, "kind": kind, "nodes": nodes, "configs": configs}
                results = {name: in_child({**job, **v}, args.timeout) if v.get("prune") or fits(nodes, configs, limit)
                           else {"error": f"skipped (> {limit:.0f} GiB est.)"} for name, v in variants.items()}
                fused, ours = results["early fusion"], results["encode once, 1-hop pruned"]
                both = "error" not in fused and "error" not in ours
                lines.append(
                    f"| {nodes:,} | {configs} | " + " | ".join(
                        r["error"] if "error" in r else f"{r['configs_per_s']:,.1f} ({r['peak_mib']:,.0f})"
                        for r in results.values()) + " | "
                    + (f"{ours['configs_per_s'] / fused['configs_per_s']:.1f}x | "
                       f"{ours['peak_mib'] / max(fused['peak_mib'], 1e-9):.3f}x" if both else "– | –") + " |")
                print(lines[-1], flush=True)
        lines.append("")
    nodes, configs = args.nodes[min(1, len(args.nodes) - 1)], args.configs[min(1, len(args.configs) - 1)]
    lines += [f"## Scatter backends (training step, {nodes:,} nodes 1-hop pruned, {configs} configs)", "",
              "| backend | configs/s | seconds per step |", "|---|---|---|"]
    results = {b: in_child({**base, "kind": "train", "nodes": nodes, "configs": configs, "prune": True,
                            "backend": b}, args.timeout)
               for b in scatter.BACKENDS if b != "torch_scatter" or scatter.AVAILABLE}
    for backend, result in results.items():
        lines.append(f"| {backend} | {cell(result, 'configs_per_s')} | {cell(result, 'seconds', 3)} |")
    if len(results) == 2 and not any("error" in r for r in results.values()):
        lines += ["", f"torch_scatter / torch speed ratio: "
                  f"{results['torch_scatter']['configs_per_s'] / results['torch']['configs_per_s']:.2f}x"]
    lines += ["", f"## Ranking every config of one {nodes:,}-node graph, 1-hop pruned (chunks of {args.chunk})", "",
              "| configs | seconds | configs/s | peak MiB |", "|---|---|---|---|"]
    for total in args.rank:
        result = in_child({**base, "kind": "rank", "nodes": nodes, "configs": total, "chunk": args.chunk,
                           "prune": True}, args.timeout)
        lines.append(f"| {total:,} | {cell(result, 'seconds', 2)} | {cell(result, 'configs_per_s')} | "
                     f"{cell(result, 'peak_mib')} |")
        print(lines[-1], flush=True)
    write_report(lines, args.out, "benchmarks", device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
