"""Speed and memory on layout files of the sizes Kaggle's test files have (5k-18k nodes, 116-472 configurable,
1k-4k configs: `solution synth --size medium`), with the shipped layout:xla:random settings, against an earlier
commit's code in the same run.

    python benchmarks/real_size.py                      # against 28cff30, 2 rounds; benchmarks/results/real_size.md
    python benchmarks/real_size.py --against HEAD~5 --rounds 3 --epochs 3
    python benchmarks/real_size.py --smoke              # tiny files, one round: checks that the script runs

Each round runs both codes in turn (the earlier first), as a user runs them, each in fresh processes with the
settings files of its own tree (`configs/layout_xla_random.yaml`), float32, on the CPU:
- training: `solution fit` for --epochs epochs, validating as its settings say; configs/s of the steps is the real
  configs of the timed steps (all but each fit's first 3) over their seconds (benchmarks/step_meter.py), configs/s
  of the fit is every step's configs over the fit's wall time (start-up, preprocessing and validation included),
  and the peak memory is the fit process's (VmHWM) and its tree's (RssAnon summed over the loader workers),
  sampled from /proc;
- ranking: `solution predict` of the test files with the fit's last checkpoint, with an empty preprocessing cache:
  wall seconds from start-up to the written CSV, and test configs over them.
The earlier code is checked out with `git worktree` into a scratch folder and run by this interpreter (its
dependencies are the current ones). Ratios are current / earlier per round; the table shows their median.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

from predict_scale import configs_in
from processes import REPO, measured
from reports import write_report

from solution.data.reader import list_files

COLLECTION = "layout:xla:random"
BENCHMARKS = REPO / "benchmarks"


def test_configs(root: Path) -> int:
    """The configs of every test file of the collection."""
    return sum(configs_in(path) for path in list_files(root, COLLECTION, "test"))


def checkout(commit: str, work: Path) -> Path:
    """A detached worktree of `commit` under `work` (main removes it when the rounds end)."""
    tree = work / f"tree-{commit.replace('/', '_')}"
    subprocess.run(["git", "worktree", "add", "--detach", "--force", str(tree), commit], cwd=REPO, check=True,
                   capture_output=True)
    return tree


def run_code(tree: Path, data: Path, epochs: int, scratch: Path, smoke: bool) -> dict[str, float]:
    """Fit and predict with the code of `tree` (`smoke`: its demo settings too): training configs/s and peak
    memory, ranking seconds."""
    scratch.mkdir(parents=True)
    env = {"PYTHONPATH": f"{tree}:{BENCHMARKS}", "SOLUTION_CACHE": str(scratch / "cache"),
           "STEP_METER_OUT": str(scratch / "steps.json")}
    layers = ["layout_xla_random.yaml", *(["demo.yaml"] if smoke else [])]
    settings = [*(f"--config={tree / 'configs' / layer}" for layer in layers), "--data.root", str(data)]
    fit = measured([sys.executable, "-m", "solution", "fit", *settings, "--trainer.max_epochs", str(epochs),
                    "--trainer.logger", "false",
                    "--trainer.default_root_dir", str(scratch / "fit"),
                    "--trainer.callbacks+=step_meter.StepMeter"], scratch / "fit.log", env=env, cwd=tree)
    steps = json.loads((scratch / "steps.json").read_text())
    env["SOLUTION_CACHE"] = str(scratch / "predict-cache")
    predict = measured([sys.executable, "-m", "solution", "predict", *settings, "--ckpt_path",
                        str(scratch / "fit" / "checkpoints" / "last.ckpt"), "--submission.out_dir",
                        str(scratch / "predict")], scratch / "predict.log", env=env, cwd=tree)
    return {"train_configs_per_s": steps["configs"] / steps["seconds"],
            "configs_per_step": steps["configs"] / steps["steps"],
            "fit_configs_per_s": steps["all_configs"] / fit["seconds"],
            "fit_peak_mib": fit["main_mib"], "fit_tree_mib": fit["tree_mib"],
            "predict_s": predict["seconds"], "predict_peak_mib": predict["main_mib"]}


def report(rows: dict[str, list[dict[str, float]]], labels: dict[str, str], configs: int, command: str) -> str:
    """The markdown report: per code, the median (min-max) of each figure, and the ratios current / earlier."""
    earlier, current = rows
    for r in (*rows[earlier], *rows[current]):
        r["predict_configs_per_s"] = configs / r["predict_s"]
    names = {"train_configs_per_s": "training configs/s of the steps", "configs_per_step": "configs a training step",
             "fit_configs_per_s": "training configs/s of the whole fit (start-up, validation included)",
             "fit_peak_mib": "fit peak RSS (MiB)", "fit_tree_mib": "fit tree RssAnon (MiB)",
             "predict_s": f"`solution predict` of {configs} test configs, start-up included (s)",
             "predict_configs_per_s": "predict configs/s, start-up included",
             "predict_peak_mib": "predict peak RSS (MiB)"}
    lines = [f"# Real-size layout files: {labels[current]} against {labels[earlier]}", "",
             f"Command: `{command}`  ", f"Written by benchmarks/real_size.py on {date.today()}; "
             f"{len(rows[current])} rounds, each running {labels[earlier]} first.", "",
             f"| figure | {labels[earlier]} | {labels[current]} | ratio (current / earlier, median) |",
             "|---|---|---|---|"]

    def cell(values: list[float]) -> str:
        return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"

    for key, name in names.items():
        a, b = [r[key] for r in rows[earlier]], [r[key] for r in rows[current]]
        lines.append(f"| {name} | {cell(a)} | {cell(b)} | {statistics.median(y / x for x, y in zip(a, b)):.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=REPO / "data" / "medium", help="built there when missing")
    parser.add_argument("--against", default="28cff30", help="the earlier commit")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=5, help="training epochs per fit (4 train files each)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "real_size.md")
    parser.add_argument("--smoke", action="store_true", help="tiny files, one round, one epoch")
    args = parser.parse_args(argv)
    command = shlex.join(["python", "benchmarks/real_size.py", *(argv if argv is not None else sys.argv[1:])])
    work = Path(tempfile.mkdtemp(prefix="real-size-"))
    if args.smoke:
        args.data, args.rounds, args.epochs = work / "data", 1, 1
    if not args.data.exists():
        size = "tiny" if args.smoke else "medium"
        subprocess.run([sys.executable, "-m", "solution", "synth", "--size", size, "--collections", COLLECTION,
                        "--out", str(args.data)], check=True)
    trees = {args.against: checkout(args.against, work), "current": REPO}
    labels = {args.against: args.against, "current": "this checkout"}
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    try:
        for round_ in range(args.rounds):
            for name, tree in trees.items():
                rows[name].append(run_code(tree, args.data.resolve(), args.epochs, work / f"{name}-{round_}",
                                           args.smoke))
                print(f"round {round_} {labels[name]}: {rows[name][-1]}", flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(trees[args.against])], cwd=REPO,
                       capture_output=True)
    write_report(args.out, report(rows, labels, test_configs(args.data), command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
