"""The physics prior alone, fitted with each number of Adam steps, on the families a fit never saw: every layout
collection of a Kaggle-format world (default zoo-law), its train + valid files in 3 folds of whole families (the
file name up to its first `_`, as corpus_eval), the prior fitted as `solution run` fits it (the shipped `prior_fit`
but its steps) to the files of the other folds and scored by Kendall tau on every config of the held-out ones.

    python benchmarks/prior_steps.py                      # 50, 100, 300 steps: benchmarks/results/prior_steps.md
    python benchmarks/prior_steps.py --smoke              # seconds: tiny synthetic data, 5 and 10 steps

Each cell: mean tau over the held-out files (95 % t interval of the Δ against the most steps, paired by file), and
the seconds of the three folds' fits (one thread, as `solution run` fits).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from intervals import t_interval
from processes import REPO
from reports import write_report

from solution.constants import COLLECTIONS
from solution.data.splits import assign_folds
from solution.metrics import kendall_tau
from solution.physics.fit import PriorFit, fit_sample, fit_weights
from solution.physics.prior import graph_prior, graph_work
from solution.tools import pipeline
from solution.tools.settings import read_settings, section

ZOO_LAW = REPO.parent / "shared" / "datasets" / "zoo-law" / "npz"
FAMILY_PATTERN = "_.*$"  # a file's family: its name up to the first '_' (as corpus_eval's default)


def held_out_taus(root: Path, collection: str, steps: list[int], cache: Path,
                  family: str = FAMILY_PATTERN) -> dict[int, tuple[np.ndarray, float]]:
    """Steps -> (tau of each held-out file, seconds of the fits); `family` is removed from a stem to name its family."""
    settings = read_settings()[collection]
    datamodule = pipeline.build_datamodule(settings["data"], pipeline.Job(root, cache, cache=cache))
    files = [(graphs, i) for graphs in (datamodule.graphs("train"), datamodule.graphs("valid"))
             for i in range(len(graphs))]
    stems = [graphs.stems[i] for graphs, i in files]
    folds = assign_folds(stems, 3, family)
    shipped = section(settings, "prior_fit", PriorFit, collection)
    rows = fit_sample([graphs.num_configs(i) for graphs, i in files], dataclasses.replace(shipped, files=len(files)))
    samples = []
    for index, chosen in rows:
        graph = files[index][0].load(files[index][1])
        samples.append((graph_work(graph, chosen), graph.target[chosen]))
    found = {}
    for count in steps:
        fit, taus, seconds = dataclasses.replace(shipped, steps=count), np.zeros(len(files)), 0.0
        for fold in range(3):
            kept = [k for k in range(len(files)) if folds[k] != fold]
            start = time.perf_counter()
            weights, _ = fit_weights([samples[k] for k in kept], fit, [stems[k] for k in kept], family)
            seconds += time.perf_counter() - start
            for k in np.flatnonzero(folds == fold):
                graph = files[k][0].load(files[k][1])
                taus[k] = kendall_tau(graph_prior(graph, weights), graph.target)
        found[count] = (taus, seconds)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=ZOO_LAW)
    parser.add_argument("--steps", type=int, nargs="+", default=[50, 100, 300])
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "prior_steps.md")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="prior_steps-"))
    root, steps, family = args.data, sorted(args.steps), FAMILY_PATTERN
    if args.smoke:
        from solution.synth.files import generate

        root, steps, family = generate(work / "tiny", size="tiny", seed=0), [5, 10], "(?!)"  # each file a family
    lines = ["# The physics prior alone by its fit's steps, families held out", "",
             f"Data: `{os.path.relpath(root, REPO)}`; 3 folds of families over train + valid; "
             f"Δ against {steps[-1]} steps, paired by file.",
             "", "| collection | files | " + " | ".join(f"{s} steps: tau, Δ, fit s" for s in steps) + " |",
             "|---|---:|" + "---|" * len(steps)]
    for collection in [c for c in COLLECTIONS if c.startswith("layout")]:
        found = held_out_taus(root, collection, steps, work / "cache", family)
        most = found[steps[-1]][0]
        cells = [f"{taus.mean():.4f}, {t_interval(taus - most)}, {seconds:.0f}" for taus, seconds in
                 (found[s] for s in steps)]
        lines.append(f"| {collection} | {len(most)} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    write_report(args.out, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
