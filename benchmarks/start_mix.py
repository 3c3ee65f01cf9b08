"""Weight-space interpolation with the start (WiSE-FT): each fit that `corpus_eval.py` saved under --runs becomes
(1 - a) x its weights + a x the weights of the shipped start it was fine-tuned from (weights the start lacks count
as their zero initialisation), written where `corpus_eval.py --trained` reads fits, so that they rank its held-out
files again under the shipped settings:

    python benchmarks/start_mix.py --runs RUNS --mix 0.3 --out /tmp/mix0.3
    python benchmarks/corpus_eval.py --data ../shared/datasets/zoo-law/npz --collections layout:xla:random \
        --budget 600 --seeds 9 --trained /tmp/mix0.3
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from solution.atomic import atomic_write
from solution.training.module import SHIPPED, start_checkpoint


def mixed(fit: dict, start: dict, share: float) -> dict:
    """The fit's checkpoint with every floating-point weight moved `share` of the way to the start's."""
    weights = fit["state_dict"]
    for key, value in weights.items():
        if value.is_floating_point():
            begin = start.get(key, torch.zeros_like(value)).to(value.dtype)
            weights[key] = (1 - share) * value + share * begin
    return fit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, nargs="+", required=True, help="corpus_eval.py --runs folders")
    parser.add_argument("--mix", type=float, required=True, help="the start's share a, 0..1")
    parser.add_argument("--out", type=Path, required=True, help="a folder for corpus_eval.py --trained")
    args = parser.parse_args(argv)
    for runs in args.runs:
        for path in sorted(runs.glob(f"{SHIPPED}/*/seed*/checkpoints/*.ckpt")):
            stem = path.parent.parent.parent.name  # <runs>/shipped/<collection stem>/seed<s>-fold<k>/checkpoints
            start = torch.load(start_checkpoint(SHIPPED, stem), map_location="cpu", weights_only=False)["state_dict"]
            fit = mixed(torch.load(path, map_location="cpu", weights_only=False), start, args.mix)
            target = args.out / path.relative_to(runs)
            with atomic_write(target, "wb") as handle:
                torch.save(fit, handle)
            print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
