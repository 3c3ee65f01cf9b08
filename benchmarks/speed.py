"""Speed and memory, like for like: the package's LayoutRanker (graph encoded once, [N, d]; configs broadcast onto
it as config-aware states of the configurable nodes only, [M, C, d]) against EarlyFusionRanker (the public top
solutions' design: each config joined to its configurable nodes' input features before the first layer,
[N, C, d] through every layer).

    python benchmarks/speed.py                     # the full grid (~25 min on 2 CPU cores); benchmarks/results/speed.md
    python benchmarks/speed.py --sizes 15000 --configs 64 128 --out /tmp/speed.md
    python benchmarks/speed.py --smoke             # seconds: checks that the script runs

Like for like: the same pruned graphs (the package's own preprocessing, `Preprocessing()`: k_hop pruning, 1 hop),
batched by the training collate (`Collate(LAYOUT)`, one graph per batch, whole graph, no segments), the ranker
settings of configs/base.yaml: hidden 128, four message-passing layers in all (LayoutRanker graph_layers 2 +
config_layers 2; EarlyFusionRanker layers 4), cross-config attention on, edges both ways; PairwiseHinge loss,
AdamW. Early fusion's every layer is config-aware, at the hidden width; LayoutRanker's config-aware layers run
at its `config_hidden` (the shipped value is in the title). Graphs are the synthetic generator's
realistic xla graphs (`solution.data.layouts.build_layout_graph`, 125 configurable nodes as in its realistic size)
at about 5k, 15k and 40k nodes.

Every cell (ranker, graph, C, mode) runs in two fresh interpreters. Its speed comes from one with the allocator
settings that the package's commands apply (`solution.allocator`; SOLUTION_ALLOCATOR=default leaves glibc's), as
a user runs it: the median of the timed repeats after one warm-up, with their min-max. Its memory comes from one
with MALLOC_MMAP_THRESHOLD_=65536, so that freed large buffers go back to the OS (that setting slows
allocation-heavy code about 2x, so it is not timed): the peak RSS (VmHWM, reset after the warm-up) of one step
after a warm-up, minus the RSS before it, so one-time costs (first-touched library pages, allocator arenas) are
not counted as the step's; training = zero_grad, forward, PairwiseHinge, backward, AdamW step; ranking = forward
under no_grad in eval mode (LayoutRanker at its shipped inference_rows). The two rankers run one after the other
at each C, so that they see the same load. A cell whose memory or seconds per step, extrapolated linearly in C
from the measured smaller C of the same ranker, graph and mode, is over the limit, or that would end past the
run's time budget, is reported as not run with the estimate.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import yaml
from reports import cpu_model, write_report
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils.flop_counter import FlopCounterMode

from solution.allocator import keep_freed_buffers
from solution.data.batch import Batch, Collate, Item
from solution.data.preprocess import Preprocessing, load_graph
from solution.data.tasks import LAYOUT
from solution.models import layers, scatter
from solution.models.baselines import EarlyFusionRanker
from solution.models.losses import PairwiseHinge
from solution.models.rankers import LayoutRanker
from solution.synth import layouts, writing

SHIPPED = yaml.safe_load((Path(__file__).resolve().parent.parent / "configs" / "base.yaml").read_text())[
    "model"]["ranker"]["init_args"]  # LayoutRanker's settings
CONFIGURABLE = 125  # the middle of the synthetic realistic size's 100-150 configurable nodes
SIZES = (5000, 15000, 40000)
CONFIGS = (16, 32, 64, 128, 256, 512, 1024)
RANKERS = {"once": "encode once (LayoutRanker)", "fusion": "early fusion (EarlyFusionRanker)"}
MODES = {"train": "Training step (forward + backward + AdamW step)", "rank": "Ranking (forward, no_grad, eval mode)"}
MEMORY_KEYS = ("peak_mib", "base_mib", "first_call_mib")
MEMORY_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}  # the memory child's allocator: freed large buffers go back


# ---------------------------------------------------------------- data: what training feeds the rankers


def write_graph(folder: Path, nodes: int, configs: int, seed: int = 0) -> Path:
    """A synthetic realistic xla layout file of about `nodes` nodes with `configs` random configs."""
    rng = np.random.default_rng([seed, nodes])
    graph = layouts.build_layout_graph(rng, "xla", nodes, CONFIGURABLE)
    choices, explicit = layouts.sample_choices(graph, rng, configs, "random")
    runtime = layouts.noisy(graph.cost.evaluate(choices), choices, graph.hash_weights, rng)
    path = folder / f"xla_{nodes}.npz"
    features = layouts.config_features(graph, choices, explicit)
    writing.write_npz(path, [*graph.arrays().items(), ("node_config_feat", features), ("config_runtime", runtime)],
                    compress=False)
    return path


def prepare(path: Path, prune: str, configs: int, folder: Path) -> tuple[Path, dict]:
    """The training batch (one graph, its first `configs` configs) saved for a child; and the graph's sizes."""
    graph = load_graph(path, "train", Preprocessing(prune=prune), None)
    if graph.num_configs < configs:
        raise ValueError(f"{path.name} has {graph.num_configs} configs after dedup, fewer than {configs}")
    batch = Collate(LAYOUT)([(graph, Item(0, np.arange(configs)))])
    out = folder / f"{path.stem}_{prune}_{configs}.pt"
    torch.save({k: v for k, v in vars(batch).items() if v is not None}, out)
    sizes = {"raw": graph.meta["nodes_raw"], "nodes": graph.meta["nodes"], "edges": graph.meta["edges"],
             "configurable": len(graph.config_node), "node_feat_dim": int(graph.node_feat.shape[1])}
    return out, sizes


def build(ranker: str, node_feat_dim: int, seed: int = 0, once_args: dict | None = None) -> torch.nn.Module:
    """The two rankers at the shipped settings (LayoutRanker's changed by `once_args`), seeded; early fusion with as
    many message-passing layers as LayoutRanker has in all."""
    torch.manual_seed(seed)
    if ranker == "once":
        return LayoutRanker(node_feat_dim, LAYOUT.config_width, **{**SHIPPED, **(once_args or {})})
    common = ("hidden", "opcode_dim", "cross_attention", "readout_attention", "heads", "temperature",
              "edge_direction", "dropout")
    return EarlyFusionRanker(node_feat_dim, LAYOUT.config_width, layers=SHIPPED["graph_layers"] +
                             SHIPPED["config_layers"], **{key: SHIPPED[key] for key in common})


# ---------------------------------------------------------------- one cell, in a fresh interpreter


def resident_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_resident_bytes() -> int:
    """The process's peak RSS (VmHWM) since it started or since the last reset_peak()."""
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmHWM"))


def reset_peak() -> None:
    """Restart the peak RSS from the current RSS (Linux: /proc/<pid>/clear_refs)."""
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


def measure(job: dict) -> dict:
    """One cell (run in a child): seconds of each call after a warm-up; the peak RSS of the calls after the warm-up
    above the RSS before them (the step's own memory), and that of the warm-up above the loaded state (one-time
    allocations and first-touched library pages included)."""
    keep_freed_buffers()  # as the package's commands do; not in the memory child, whose MALLOC_* setting stays
    torch.set_num_threads(job["threads"])
    batch = Batch(**torch.load(job["batch"], weights_only=True))
    net = build(job["ranker"], batch.node_feat.size(1), once_args=job.get("once_args"))
    loss_fn = PairwiseHinge()
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=1e-4)  # configs/base.yaml
    configs = batch.config_feat.size(1)
    if job["mode"] == "train":
        net.train()

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            loss_fn(net(batch), batch.target, batch.config_mask).backward()
            optimizer.step()
    else:
        net.eval()

        def step() -> None:
            with torch.no_grad():
                net(batch)
    gc.collect()
    loaded = resident_bytes()
    reset_peak()
    warmup_s = timed_once(step)
    first_call = peak_resident_bytes() - loaded
    gc.collect()
    base = resident_bytes()
    reset_peak()
    seconds = [timed_once(step) for _ in range(job["repeats"])]
    result = {"warmup_s": warmup_s, "seconds": seconds, "configs": configs,
              "peak_mib": max(peak_resident_bytes() - base, 0) / 2**20, "base_mib": base / 2**20,
              "first_call_mib": first_call / 2**20}
    if not job.get("count_flops", True):
        return result
    count = layers.sparse_mean
    layers.sparse_mean = uncounted(count)  # the counter would take a sparse product for a dense one
    try:
        with FlopCounterMode(display=False) as counter, torch.no_grad():  # one forward: its dense matmul FLOPs
            net(batch)
    finally:
        layers.sparse_mean = count
    return {**result, "flops": counter.get_total_flops() * (3 if job["mode"] == "train" else 1)}


def uncounted(fn):
    """`fn` run outside the active dispatch modes (so outside a FlopCounterMode)."""
    def call(*args, **kwargs):
        with _disable_current_modes():
            return fn(*args, **kwargs)
    return call


def matmul_peak(threads: int, size: int = 2048, repeats: int = 5) -> float:
    """FLOP/s of this machine's best float32 matmul of two size x size matrices on `threads` threads."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    best = min(timed_once(lambda: a @ b) for _ in range(repeats))
    torch.set_num_threads(previous)
    return 2 * size**3 / best


def timed_once(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def in_child(job: dict, timeout: float, env: dict[str, str] | None = None) -> dict:
    """`measure(job)` in a fresh interpreter, `env` added; a failure (killed, time-out) is reported, not raised."""
    try:
        done = subprocess.run([sys.executable, __file__, "--child", json.dumps(job)], capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        return {"error": f"not run: over the {timeout:.0f} s time-out"}
    if done.returncode != 0:
        return {"error": "failed: " + ((done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:80])}
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- ladders over C, with the not-run rule


def extrapolate(points: list[tuple[int, float]], configs: int) -> float:
    """Linear in C through the two largest measured points (through the origin with only one)."""
    if len(points) == 1:
        (c0, v0), = points
        return v0 * configs / c0
    (c0, v0), (c1, v1) = points[-2:]
    slope = max((v1 - v0) / (c1 - c0), 0.0)
    return v1 + slope * (configs - c1)


class Runner:
    """Runs cells in children, side by side, and decides from the measured smaller C which larger ones would not
    fit (memory), take too long per step, or overrun the run's time budget."""

    def __init__(self, args: argparse.Namespace, in_process: bool = False) -> None:
        self.args, self.started = args, time.time()
        self.in_process = in_process  # smoke: the first cell in a child, the rest here (memory then meaningless)
        self.children = 0

    def skip(self, gib: float, step_s: float, cell_s: float, max_step_s: float) -> str | None:
        """Why a cell is not run, from its estimates; None to run it."""
        args = self.args
        if gib > args.limit_gib:
            return f"not run: estimated {gib:.1f} GiB > {args.limit_gib:.1f} GiB limit ({step_s:.0f} s per step)"
        if step_s > max_step_s:
            return f"not run: estimated {step_s:.0f} s per step > {max_step_s:.0f} s ({gib:.1f} GiB)"
        if args.budget_min and time.time() - self.started + cell_s > 60 * args.budget_min:
            return (f"not run: estimated {step_s:.0f} s per step ({gib:.1f} GiB), past the run's "
                    f"{args.budget_min:.0f}-minute budget")
        return None

    def ladder(self, variants: dict[tuple, tuple[str, str, dict[int, Path]]],
               max_step_s: float | None = None) -> dict[tuple, dict[int, dict]]:
        """For C ascending, every variant (key -> (ranker, mode, batch file per C)) one after the other, so that
        they run under the same load and a time budget cuts the largest C of all of them; a variant's estimates
        come from its own measured smaller C."""
        args, max_step_s = self.args, max_step_s or self.args.max_step_s
        results = {key: {} for key in variants}
        memory = {key: [] for key in variants}
        speed = {key: [] for key in variants}
        for configs in sorted({c for *_, batches in variants.values() for c in batches}):
            for key, (ranker, mode, batches) in variants.items():
                if configs not in batches:
                    continue
                label = f"  {' '.join(map(str, key)):<28} C={configs:<5}"
                step_s, repeats = 0.0, args.repeats
                if memory[key]:
                    step_s = extrapolate(speed[key], configs)
                    if step_s * (1 + repeats) > args.cell_s:
                        repeats = max(args.min_repeats, int(args.cell_s / max(step_s, 1e-9)) - 1)
                    why = self.skip(extrapolate(memory[key], configs) / 1024, step_s,
                                    step_s * (5 + repeats) + 6, max_step_s)  # + the memory child
                    if why:
                        results[key][configs] = {"error": why}
                        print(f"{label} {why}", flush=True)
                        continue
                job = {"ranker": ranker, "mode": mode, "batch": str(batches[configs]), "repeats": repeats,
                       "threads": args.threads, "once_args": args.once_args}
                if self.in_process and self.children:
                    threads = torch.get_num_threads()
                    result = measure(job)
                    torch.set_num_threads(threads)
                else:
                    result = in_child(job, timeout=max(120.0, 3 * step_s * (1 + repeats) + 60))
                    if "error" not in result:
                        once = {**job, "repeats": 1, "count_flops": False}
                        held = in_child(once, timeout=max(120.0, 6 * step_s + 60), env=MEMORY_ENV)
                        result = {**result, **{k: held[k] for k in MEMORY_KEYS}} if "error" not in held else held
                    self.children += 1
                results[key][configs] = result
                if "error" in result:
                    print(f"{label} {result['error']}", flush=True)
                    continue
                result.update(repeats=repeats, load=os.getloadavg()[0])
                memory[key].append((configs, max(result["peak_mib"], 1.0)))
                speed[key].append((configs, statistics.median(result["seconds"])))
                print(f"{label} {rate(result):>22} configs/s {result['peak_mib']:8,.0f} MiB (first call "
                      f"{result['first_call_mib']:,.0f})  x{repeats}  load {result['load']:.1f}  "
                      f"[{time.time() - self.started:5.0f} s]", flush=True)
        return results


# ---------------------------------------------------------------- report


def flops_per_s(result: dict) -> float:
    return result["flops"] / statistics.median(result["seconds"])


def rates(result: dict) -> list[float]:
    return [result["configs"] / s for s in result["seconds"]]


def rate(result: dict) -> str:
    """Median configs/s (min-max)."""
    if "error" in result:
        return result["error"]
    values = rates(result)
    digits = 0 if min(values) >= 10 else 1 if min(values) >= 1 else 2
    return f"{statistics.median(values):,.{digits}f} ({min(values):,.{digits}f}-{max(values):,.{digits}f})"


def memory(result: dict) -> str:
    """The step's peak MiB."""
    return "–" if "error" in result else f"{result['peak_mib']:,.0f}"


def speed_ratio(a: dict, b: dict) -> str:
    """Median a / median b configs/s, and the range from their min-max (a's worst over b's best, and back)."""
    if "error" in a or "error" in b:
        return "–"
    ra, rb = rates(a), rates(b)
    return f"{statistics.median(ra) / statistics.median(rb):.2f}x ({min(ra) / max(rb):.2f}-{max(ra) / min(rb):.2f})"


def memory_ratio(a: dict, b: dict) -> str:
    if "error" in a or "error" in b or b["peak_mib"] < 1:
        return "–"
    return f"{a['peak_mib'] / b['peak_mib']:.2f}x"


def repeats(*results: dict) -> str:
    counts = sorted({r["repeats"] for r in results if "error" not in r})
    return "/".join(map(str, counts)) or "–"


def machine(threads: int) -> str:
    cpu = cpu_model()
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{cpu}, {os.cpu_count()} cores, {memory_gib:.0f} GiB RAM; {threads} torch thread(s); torch "
            f"{torch.__version__}, Python {platform.python_version()}; scatter backend {scatter.BACKEND} "
            f"(torch_scatter installed: {scatter.AVAILABLE}; \"auto\" runs plain torch on CPU tensors)")


def cells(results: dict) -> list[dict]:
    """Every measured cell under a nested results dict."""
    if "seconds" in results or "error" in results:
        return [results] if "seconds" in results else []
    return [c for value in results.values() for c in cells(value)]


def table(rows: list[tuple[str, dict, dict]], first: str, a: str, b: str) -> list[str]:
    """Markdown rows (label, result a, result b) with speed and memory side by side; ratio = a / b."""
    lines = [f"| {first} | {a} configs/s | {b} configs/s | speed ratio | {a} MiB | {b} MiB | memory ratio | "
             "repeats |"]
    lines.append("|---" * (lines[0].count("|") - 1) + "|")
    for label, x, y in rows:
        lines.append(f"| {label} | {rate(x)} | {rate(y)} | {speed_ratio(x, y)} | {memory(x)} | {memory(y)} | "
                     f"{memory_ratio(x, y)} | {repeats(x, y)} |")
    return lines


def setting(text: str) -> tuple[str, object]:
    """KEY=VALUE, the value read as JSON where it parses (true, 4, 0.5), else kept as text."""
    key, _, value = text.partition("=")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


class Settings(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, dict(values))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="graph node counts before pruning")
    parser.add_argument("--configs", type=int, nargs="+", default=list(CONFIGS), help="configs per batch")
    parser.add_argument("--headline", type=int, default=128, help="C of the headline ratios")
    parser.add_argument("--prune_configs", type=int, nargs="+", default=[8, 16, 128],
                        help="C of the pruned-vs-unpruned comparison; its largest is the target, the smaller ones "
                        "the ladder its estimates come from")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per cell, after one warm-up")
    parser.add_argument("--min_repeats", type=int, default=3, help="fewest repeats, for the slowest cells")
    parser.add_argument("--cell_s", type=float, default=15.0, help="fewer repeats where a cell would take longer")
    parser.add_argument("--max_step_s", type=float, default=12.0, help="not run above this estimate per step")
    parser.add_argument("--prune_max_step_s", type=float, default=60.0, help="the same for the unpruned graph")
    parser.add_argument("--budget_min", type=float, default=25.0, help="not run when the run would go past this "
                        "(0: no budget); the headline graph and the pruning comparison run first")
    parser.add_argument("--limit_gib", type=float, default=None, help="not run above this estimate (default: "
                        "half of the machine's memory)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per cell (default 1: on a shared "
                        "2-core machine two threads stall each other whenever another process runs)")
    parser.add_argument("--once_args", nargs="*", default={}, type=setting, action=Settings, metavar="KEY=VALUE",
                        help="LayoutRanker arguments other than the shipped ones, e.g. config_hidden=64")
    parser.add_argument("--out", default="benchmarks/results/speed.md")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(json.loads(args.child))))
        return 0
    if args.smoke:
        args.sizes, args.configs, args.prune_configs, args.repeats, args.min_repeats = [300], [8, 16], [8, 16], 1, 1
        args.headline = 16
    if args.limit_gib is None:
        args.limit_gib = 0.5 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    runner = Runner(args, in_process=args.smoke)
    command = " ".join(["python benchmarks/speed.py", *(argv if argv is not None else sys.argv[1:])])
    middle = sorted(args.sizes)[len(args.sizes) // 2]  # the headline graph (~15k nodes in the full grid)
    with tempfile.TemporaryDirectory(prefix="speed-") as work:
        work = Path(work)
        count = int(max(args.configs + args.prune_configs) * 1.1) + 8  # dedup drops 1-3 % duplicates
        paths = {n: write_graph(work, n, count) for n in args.sizes}
        sizes, batches = {}, {}
        for n, path in paths.items():
            for configs in sorted(set(args.configs + args.prune_configs)):
                batches[n, configs], sizes[n] = prepare(path, "k_hop", configs, work)
        unpruned, unpruned_sizes = {}, None
        for configs in args.prune_configs:
            unpruned[configs], unpruned_sizes = prepare(paths[middle], "none", configs, work)
        print(f"graphs: {json.dumps(sizes)}; unpruned {json.dumps(unpruned_sizes)}", flush=True)
        # the headline graph's whole ladder, then pruning, then the other graphs side by side (a budget cut
        # then falls on their largest C)
        grid = runner.ladder({(n, r, m): (r, m, {c: batches[n, c] for c in args.configs})
                              for n in [middle] for m in MODES for r in RANKERS})
        pruning = runner.ladder({(p, m): ("once", m, {c: batches[middle, c] for c in args.prune_configs}
                                          if p == "pruned" else unpruned)
                                 for m in MODES for p in ("pruned", "unpruned")}, args.prune_max_step_s)
        grid.update(runner.ladder({(n, r, m): (r, m, {c: batches[n, c] for c in args.configs})
                                   for n in args.sizes if n != middle for m in MODES for r in RANKERS}))
    elapsed = time.time() - runner.started
    loads = [c["load"] for c in cells({str(k): v for k, v in {**grid, **pruning}.items()})]

    changed = "".join(f", {k}={v!r}" for k, v in {"config_hidden": SHIPPED.get("config_hidden"),
                                                   **args.once_args}.items())
    lines = [f"# Speed and memory: encode once (LayoutRanker{changed}) vs early fusion (EarlyFusionRanker)", "",
             f"Command: `{command}` ({elapsed / 60:.0f} minutes)", "",
             f"Machine: {machine(args.threads)}. The machine was shared with other work: 1-minute load average "
             f"{min(loads, default=0):.1f}-{max(loads, default=0):.1f} over the cells (on {os.cpu_count()} cores).",
             ""]
    if args.smoke:
        lines += ["Smoke run: one cell in a child process, the rest in this one, so the memory figures mean "
                  "nothing.", ""]
    h = args.headline
    head = {m: (grid[middle, "once", m].get(h), grid[middle, "fusion", m].get(h)) for m in MODES}
    if all(a is not None and b is not None for a, b in head.values()):
        (ta, tb), (ra, rb) = head["train"], head["rank"]
        lines += [f"**Headline (C = {h}, the {sizes[middle]['raw']:,}-node graph, {sizes[middle]['nodes']:,} nodes "
                  f"after pruning), encode once / early fusion: training {speed_ratio(ta, tb)} the configs/s, "
                  f"ranking {speed_ratio(ra, rb)} the configs/s, peak memory {memory_ratio(ta, tb)} in training "
                  f"and {memory_ratio(ra, rb)} in ranking.** Ratios of medians; in brackets the range from the "
                  "repeats' min-max (the worst of one over the best of the other, and back).", ""]
        peak = matmul_peak(args.threads)
        use = [f"{name} {flops_per_s(cell) / 1e9:.1f} GFLOP/s = {flops_per_s(cell) / peak:.0%}"
               for name, cell in (("encode once", ta), ("early fusion", tb)) if "error" not in cell]
        lines += [f"Training model FLOP/s at the headline cell (dense matmul FLOPs of one step: 3 x those of a "
                  f"forward pass, counted by `torch.utils.flop_counter` without the sparse products; over the step's "
                  f"median time), as a fraction of this machine's float32 matmul "
                  f"peak ({peak / 1e9:.1f} GFLOP/s: 2048 x 2048 matmul, {args.threads} thread(s)): {'; '.join(use)}. "
                  f"FLOPs per training step: encode once {ta.get('flops', 0) / 1e9:.1f} G, early fusion "
                  f"{tb.get('flops', 0) / 1e9:.1f} G.", ""]
    spans = []
    for mode in MODES:
        pairs = [(grid[n, "once", mode][c], grid[n, "fusion", mode][c]) for n in args.sizes for c in args.configs]
        pairs = [(a, b) for a, b in pairs if "error" not in a and "error" not in b]
        if pairs:
            speeds = [statistics.median(rates(a)) / statistics.median(rates(b)) for a, b in pairs]
            memories = [a["peak_mib"] / b["peak_mib"] for a, b in pairs if memory_ratio(a, b) != "–"]
            spans.append(f"{mode}: speed {min(speeds):.2f}-{max(speeds):.2f}x"
                         + (f", memory {min(memories):.2f}-{max(memories):.2f}x" if memories else "")
                         + f" ({len(pairs)} pairs)")
    if spans:
        lines += ["Across every pair measured (all graphs and C), encode once / early fusion: " + "; ".join(spans)
                  + ".", ""]
    for paragraph in __doc__.split("\n\n")[2:4]:
        lines += [" ".join(line.strip() for line in paragraph.splitlines()), ""]
    lines += ["## Graphs", "",
              "| graph | nodes before pruning | nodes after k_hop 1 | edges after | configurable nodes |",
              "|---|---|---|---|---|"]
    for n in sorted(args.sizes):
        s = sizes[n]
        lines.append(f"| ~{n:,} | {s['raw']:,} | {s['nodes']:,} | {s['edges']:,} | {s['configurable']} |")
    lines += ["", f"Pruning keeps the configurable nodes and their 1-hop neighbourhood, so the pruned size follows the "
              f"number of configurable nodes ({CONFIGURABLE} at most here), not the raw size.", ""]
    for mode, title in MODES.items():
        lines += [f"## {title}", "",
                  "configs/s: median (min-max) of the timed repeats after one warm-up. MiB: peak RSS of one step "
                  "after the warm-up above the RSS before it, one fresh process per cell. Ratios: encode once / "
                  "early fusion.", ""]
        rows = [(f"{sizes[n]['raw']:,} ({sizes[n]['nodes']}) | {c}", grid[n, "once", mode][c],
                 grid[n, "fusion", mode][c]) for n in sorted(args.sizes) for c in args.configs]
        lines += table(rows, "graph (pruned nodes) | C", "encode once", "early fusion")
        lines.append("")
    prune_at = max(args.prune_configs)
    lines += [f"## What pruning buys (LayoutRanker, the {unpruned_sizes['raw']:,}-node graph)", "",
              "The same graph and model, preprocessed with `Preprocessing()` "
              f"(k_hop, 1 hop: {sizes[middle]['nodes']:,} "
              f"nodes) and `Preprocessing(prune=\"none\")` ({unpruned_sizes['nodes']:,} nodes). The target is C = "
              f"{prune_at}; the smaller C are the ladder its estimates come from (up to "
              f"{args.prune_max_step_s:.0f} s per step here). Ratios: pruned / unpruned.", ""]
    rows = [(f"{mode} | {c}", pruning["pruned", mode][c], pruning["unpruned", mode][c])
            for mode in MODES for c in args.prune_configs]
    lines += table(rows, "mode | C", "pruned", "unpruned")
    lines += ["", f"Limits: a cell is not run when its estimate is over {args.limit_gib:.1f} GiB or "
              f"{args.max_step_s:.0f} s per step, or when it would end past the run's {args.budget_min:.0f}-minute "
              f"budget; {args.repeats} timed repeats per cell after one warm-up, fewer (at least {args.min_repeats}) "
              f"where a cell would take over {args.cell_s:.0f} s (the repeats column)."]
    write_report(Path(args.out), "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
