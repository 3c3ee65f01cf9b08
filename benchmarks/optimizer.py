"""The optimizer's step alone: AdamW over the parameters of the shipped rankers, the per-tensor loop (torch's default
on the CPU) against the fused kernel the training module uses, side by side in one run.

    python benchmarks/optimizer.py                      # benchmarks/results/optimizer.md
    python benchmarks/optimizer.py --steps 50 --rounds 1

Each round times --steps steps of each implementation in turn (CPU time of this process, so that other work on the
machine does not count), on the same parameters and gradients; the table gives the median over rounds and the
ratio. After the rounds, the largest difference of any parameter between the two after the same steps shows that
the updates are the same.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from datetime import date
from pathlib import Path

import torch
from processes import REPO
from reports import cpu_model, write_report

from solution.data.datamodule import TpuGraphsDataModule
from solution.tools.settings import read_settings
from solution.training.inference import Scorer, with_widths

COLLECTIONS = ("layout:xla:random", "tile:xla")


def parameters(collection: str) -> list[torch.Tensor]:
    """The shipped ranker's parameters for `collection` (input widths as its data module gives them; it reads no file
    for them), each with a fixed random gradient."""
    settings = read_settings()[collection]
    data = TpuGraphsDataModule(**settings["data"])
    torch.manual_seed(0)
    scorer = Scorer(with_widths(settings["model"]["ranker"], data.node_feat_dim, data.config_width), data.task.name)
    params = [p.detach().clone() for p in scorer.parameters()]
    for p in params:
        p.grad = torch.randn_like(p)
    return params


def stepped(params: list[torch.Tensor], fused: bool, steps: int) -> tuple[float, list[torch.Tensor]]:
    """Milliseconds of CPU time per step of AdamW (fused or the per-tensor loop) over copies of `params`, and the
    copies after the steps."""
    copies = [p.clone() for p in params]
    for copy, p in zip(copies, params):
        copy.grad = p.grad.clone()
    optimizer = torch.optim.AdamW(copies, lr=1e-3, weight_decay=1e-4, fused=fused)
    optimizer.step()  # state allocated outside the timing
    start = time.process_time()
    for _ in range(steps):
        optimizer.step()
    return (time.process_time() - start) / steps * 1e3, copies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "optimizer.md")
    args = parser.parse_args(argv)
    command = shlex.join(["python", "benchmarks/optimizer.py", *(argv if argv is not None else sys.argv[1:])])
    lines = ["# The optimizer's step: AdamW's per-tensor loop against its fused kernel", "",
             f"Command: `{command}`  ", f"Written on {date.today()}, {torch.get_num_threads()} threads, "
             f"{cpu_model()}, torch {torch.__version__}; CPU ms per step, median of {args.rounds} rounds of "
             f"{args.steps} steps.", "",
             "| ranker (shipped settings) | parameters | tensors | per-tensor loop ms | fused ms | fused / loop | "
             "largest difference |", "|---|---|---|---|---|---|---|"]
    for collection in COLLECTIONS:
        params = parameters(collection)
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.rounds):
            for fused in (False, True):
                times[fused].append(stepped(params, fused, args.steps)[0])
        loop, fused = (statistics.median(times[f]) for f in (False, True))
        apart = max(float((a - b).abs().max()) for a, b in zip(stepped(params, False, args.steps)[1],
                                                                 stepped(params, True, args.steps)[1]))
        lines.append(f"| {collection} | {sum(p.numel() for p in params):,} | {len(params)} | {loop:.2f} | "
                     f"{fused:.2f} | {fused / loop:.2f}x | {apart:.1e} |")
    write_report(args.out, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
