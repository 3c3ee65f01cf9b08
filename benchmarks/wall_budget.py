"""Wall-clock against budget: `solution run --budget S` as a new user runs it (its own process, a cold cache) at
several budgets on a data root: wall seconds, wall / budget (the target is at most 1.05) and the validation scores
the run prints (Kendall tau of each layout collection's valid files, tile's top-5 score, the final mean of five).
With --before CHECKOUT, that tree's `solution run` runs at each budget too (one after the other, never at once),
for the score at equal wall time.

    python benchmarks/wall_budget.py                                   # 300, 600, 2400 s on zoo-law
    git worktree add /tmp/before 28cff30
    python benchmarks/wall_budget.py --budgets 600 --before /tmp/before
    python benchmarks/wall_budget.py --smoke                           # seconds: tiny synthetic data, demo.yaml

Writes benchmarks/results/wall_budget.md (--out) and keeps each run's log beside it in a temporary folder.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

from processes import REPO, measured
from reports import write_report

from solution.constants import COLLECTIONS

ZOO_LAW = REPO.parent / "shared" / "datasets" / "zoo-law" / "npz"
SCORE_LINE = re.compile(r"^(\S+)\s+\d+\s+(-?\d+\.\d+)", re.MULTILINE)  # collection, files, score, ...
FINAL_LINE = re.compile(r"^final \(mean of 5\)\s+(-?\d+\.\d+)", re.MULTILINE)
ALONE_LINE = re.compile(r"^\[(\S+)\] physics prior weight .* against (-?\d+\.\d+) for the model alone", re.MULTILINE)


def scores_in(log: str) -> dict[str, float]:
    """Collection -> validation score, `final`, and `alone`: the final score of the models alone (where the physics
    prior's blend picked its weight on the same valid files, the score it was picked against), from the log."""
    table = log[log.rindex("validation scores of the checkpoints used:"):]
    found = {name: float(value) for name, value in SCORE_LINE.findall(table) if name in COLLECTIONS}
    final = FINAL_LINE.search(table)
    alone = {**found, **{name: float(value) for name, value in ALONE_LINE.findall(log)}}
    return {**found, **({"final": float(final.group(1)), "alone": sum(alone.values()) / len(alone)} if final else {})}


def run_once(tree: Path, root: Path, budget: float, work: Path, layers: list[str]) -> dict:
    """One `solution run` of `tree` (its own interpreter and package) at `budget`, from an empty cache."""
    out = work / f"{tree.name}-{budget:g}"
    command = [sys.executable, "-m", "solution", "run", "--data.root", str(root), "--budget", f"{budget:g}",
               "--out", str(out), "--cache", str(out / "cache"), *[f"--config={layer}" for layer in layers]]
    log = work / f"{tree.name}-{budget:g}.log"
    figures = measured(command, log, env={"PYTHONPATH": str(tree)}, cwd=tree)
    return {"tree": tree, "budget": budget, "seconds": figures["seconds"], "peak_mib": figures["main_mib"],
            "scores": scores_in(log.read_text()), "log": log}


def commit_of(tree: Path) -> str:
    return subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip() or tree.name


def report(runs: list[dict], root: Path) -> str:
    """The markdown table of every run."""
    lines = [f"# `solution run --budget S`: wall-clock against budget ({date.today()})", "",
             f"Data: `{os.path.relpath(root, REPO)}`; each run in its own process from an empty cache; scores are "
             "the run's own validation "
             "scores (valid files; the physics prior's blend weight is picked on them, so `final` carries that "
             "choice's optimism: `models alone` does not). Target: wall / budget <= 1.05.", "",
             "| tree | budget s | wall s | wall / budget | final | models alone | " + " | ".join(COLLECTIONS)
             + " | peak RSS MiB |",
             "|---|---:|---:|---:|---:|---:|" + "---:|" * len(COLLECTIONS) + "---:|"]
    for run in runs:
        cells = [f"{run['scores'].get(c, float('nan')):.4f}" for c in ("final", "alone", *COLLECTIONS)]
        lines.append(f"| {commit_of(run['tree'])} | {run['budget']:g} | {run['seconds']:.0f} | "
                     f"{run['seconds'] / run['budget']:.3f} | " + " | ".join(cells) + f" | {run['peak_mib']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=ZOO_LAW, help="a data root (Kaggle layout)")
    parser.add_argument("--budgets", type=float, nargs="+", default=[300.0, 600.0, 2400.0])
    parser.add_argument("--before", type=Path, default=None, help="another checkout, run at the same budgets")
    parser.add_argument("--config", action="append", default=[], help="YAML layered over the settings (both trees)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "wall_budget.md")
    parser.add_argument("--smoke", action="store_true", help="tiny synthetic data, demo.yaml, one short budget")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="wall_budget-"))
    root, budgets, layers = args.data, args.budgets, list(args.config)
    if args.smoke:
        from solution.synth.files import generate

        root, budgets = generate(work / "tiny", size="tiny", seed=0), [240.0]
        layers.append(str(REPO / "configs" / "demo.yaml"))
    runs = []
    for budget in budgets:
        for tree in [REPO] + ([args.before.resolve()] if args.before else []):
            runs.append(run_once(tree, root, budget, work, layers))
            write_report(args.out, report(runs, root))
    print(f"logs: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
