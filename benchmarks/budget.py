"""Quality at a budget: the validation score that a fit of the shipped settings reaches after 2, 4 and 8 minutes of
training, for two source trees side by side (before / after a change), on realistic synthetic layout data.

    git worktree add /tmp/before <commit>                         # the version to compare against
    python benchmarks/budget.py --before /tmp/before               # benchmarks/results/budget.md and budget.svg
    python benchmarks/budget.py --smoke                            # seconds: checks that the script runs

Each collection's fits of the two trees run at the same time, one torch thread each (OMP_NUM_THREADS=1), so that
they share the machine's load; each runs `solution fit` with its tree's configs/<collection>.yaml, no validation
during training, and a callback that saves the weights when the training wall-clock (from the first training
batch; preprocessing is cached and not counted) passes each mark. Every saved checkpoint is then scored with its
own tree's `solution validate` on the validation files cut to a fixed random subset of `--eval_configs` configs
each (the same subset for both trees): Kendall tau on a random subset estimates the file's tau without ranking
tens of thousands of configs per point.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
from reports import write_report

from solution.atomic import atomic_write
from solution.data.reader import collection_dir
from solution.submission.files import collection_file_stem
from solution.synth.files import generate
from solution.synth.writing import write_npz

HERE = Path(__file__).resolve().parent
AFTER = HERE.parent


class Marks(pl.Callback):
    """Saves `<folder>/<minutes>.ckpt` when the training wall-clock passes each of `minutes`; stops after the last."""

    def __init__(self, folder: str, minutes: list[float]) -> None:
        self.folder, self.minutes, self.start, self.epochs = Path(folder), sorted(minutes), None, {}

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        self.start = self.start or time.monotonic()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        elapsed = (time.monotonic() - self.start) / 60
        while self.minutes and elapsed >= self.minutes[0]:
            mark = self.minutes.pop(0)
            trainer.save_checkpoint(self.folder / f"{mark:g}.ckpt")
            self.epochs[f"{mark:g}"] = {"epoch": trainer.current_epoch, "steps": trainer.global_step}
        if not self.minutes:
            trainer.should_stop = True

    def on_train_end(self, trainer, module) -> None:
        """A fit whose schedule ends (max_epochs) before a mark: its final weights are what every later mark gets."""
        for mark in self.minutes:
            trainer.save_checkpoint(self.folder / f"{mark:g}.ckpt")
            self.epochs[f"{mark:g}"] = {"epoch": trainer.current_epoch, "steps": trainer.global_step, "ended": True}
        self.minutes = []

    def on_fit_end(self, trainer, module) -> None:
        (self.folder / "marks.json").write_text(json.dumps(self.epochs))


def subsampled(root: Path, out: Path, collection: str, configs: int, seed: int = 0) -> Path:
    """A data root holding `collection`'s train files (linked) and its valid files cut to `configs` random configs."""
    source = collection_dir(root, collection)
    target = out / source.relative_to(root)
    (target / "train").mkdir(parents=True, exist_ok=True)
    (target / "valid").mkdir(parents=True, exist_ok=True)
    for path in sorted((source / "train").glob("*.npz")):
        link = target / "train" / path.name
        if not link.exists():
            link.symlink_to(path)
    for path in sorted((source / "valid").glob("*.npz")):
        with np.load(path) as loaded:
            arrays = dict(loaded)
        keep = np.sort(np.random.default_rng(seed).permutation(len(arrays["config_runtime"]))[:configs])
        for key in ("node_config_feat", "config_runtime"):
            arrays[key] = arrays[key][keep]
        write_npz(target / "valid" / path.name, list(arrays.items()), compress=False)
    return out


def child(tree: Path, code: str, log: Path) -> subprocess.Popen:
    """`python -c code` with `tree`'s package first on the path, one torch thread, output to `log`."""
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{HERE}", "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
    return subprocess.Popen([sys.executable, "-c", code], cwd=tree, env=env, stdout=log.open("w"),
                            stderr=subprocess.STDOUT)


def finish(process: subprocess.Popen) -> tuple[int, float]:
    """Wait for a child: its exit code and its peak RSS in MiB."""
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, usage.ru_maxrss / 1024  # KiB on Linux


def fit_code(collection: str, root: Path, folder: Path, minutes: list[float], extra: list[str]) -> str:
    args = ["fit", "--config", f"configs/{collection_file_stem(collection)}.yaml", "--data.root", str(root),
            "--trainer.limit_val_batches", "0", "--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
            "--trainer.default_root_dir", str(folder),
            "--trainer.callbacks+=budget.Marks", "--trainer.callbacks.folder", str(folder),
            "--trainer.callbacks.minutes", json.dumps(minutes), *extra]
    return f"from solution.tools.lightning_cli import lightning_main; lightning_main({args!r})"


def validate_code(collection: str, root: Path, checkpoint: Path, extra: list[str]) -> str:
    args = ["validate", "--config", f"configs/{collection_file_stem(collection)}.yaml", "--data.root", str(root),
            "--trainer.logger", "false", "--trainer.enable_progress_bar", "false", "--ckpt_path", str(checkpoint),
            *extra]
    return (f"import json; from solution.tools.lightning_cli import lightning_main; cli = lightning_main({args!r}); "
            "print('SCORE', json.dumps(float(cli.trainer.callback_metrics['val/score'])))")


def run_pair(trees: dict[str, Path], collection: str, train_root: Path, eval_root: Path, minutes: list[float],
             work: Path, extra: list[str]) -> dict[str, dict]:
    """Both trees' fits at once, then each checkpoint scored; {tree: {minutes: {score, epoch, steps}}}."""
    folders = {name: work / collection_file_stem(collection) / name for name in trees}
    fits = {}
    for name, tree in trees.items():
        folders[name].mkdir(parents=True, exist_ok=True)
        code = fit_code(collection, train_root, folders[name], minutes, extra)
        fits[name] = child(tree, code, folders[name] / "fit.log")
    peaks = {}
    for name, process in fits.items():
        code, peaks[name] = finish(process)
        if code != 0:
            raise RuntimeError(f"{name} fit of {collection} failed: see {folders[name] / 'fit.log'}")
    results = {}
    for name, tree in trees.items():
        marks = json.loads((folders[name] / "marks.json").read_text())
        for mark in marks:
            log = folders[name] / f"validate_{mark}.log"
            code, rss = finish(child(tree, validate_code(collection, eval_root, folders[name] / f"{mark}.ckpt", extra),
                                     log))
            if code != 0:
                raise RuntimeError(f"{name} validate of {collection} at {mark} min failed: see {log}")
            line = next(x for x in log.read_text().splitlines() if x.startswith("SCORE "))
            marks[mark].update(score=json.loads(line.split(" ", 1)[1]), validate_rss_mib=rss, fit_rss_mib=peaks[name])
        results[name] = marks
        print(collection, name, json.dumps(marks), flush=True)
    return results


def svg(results: dict[str, dict[str, dict]], minutes: list[float]) -> str:
    """A small line chart: score against minutes, one panel per collection, one line per tree."""
    width, height, pad = 320, 220, 40
    colours = {"before": "#999999", "after": "#1f77b4"}
    panels = []
    for i, (collection, trees) in enumerate(results.items()):
        scores = [m["score"] for marks in trees.values() for m in marks.values()]
        low, high = min(scores + [0.0]), max(scores + [0.1])
        x = lambda t: i * width + pad + (width - 2 * pad) * t / max(minutes)  # noqa: E731
        y = lambda s: height - pad - (height - 2 * pad) * (s - low) / (high - low)  # noqa: E731
        parts = [f'<text x="{i * width + pad}" y="20" font-size="12">{collection}</text>',
                 f'<line x1="{x(0)}" y1="{y(low)}" x2="{x(max(minutes))}" y2="{y(low)}" stroke="black"/>',
                 f'<line x1="{x(0)}" y1="{y(low)}" x2="{x(0)}" y2="{y(high)}" stroke="black"/>',
                 f'<text x="{x(0) - 35}" y="{y(high) + 4}" font-size="10">{high:.2f}</text>',
                 f'<text x="{x(0) - 35}" y="{y(low) + 4}" font-size="10">{low:.2f}</text>']
        parts += [f'<text x="{x(t) - 4}" y="{height - pad + 14}" font-size="10">{t:g}</text>' for t in minutes]
        for k, (name, marks) in enumerate(trees.items()):
            points = " ".join(f"{x(float(t)):.1f},{y(m['score']):.1f}" for t, m in marks.items())
            parts += [f'<polyline points="{points}" fill="none" stroke="{colours.get(name, "red")}" stroke-width="2"/>',
                      f'<text x="{i * width + width - 90}" y="{40 + 14 * k}" font-size="11" '
                      f'fill="{colours.get(name, "red")}">{name}</text>']
        panels += parts
    label = f'<text x="{len(results) * width / 2 - 60}" y="{height - 5}" font-size="11">training minutes</text>'
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{len(results) * width}" height="{height}">'
            + "".join(panels) + label + "</svg>\n")


def report(results: dict[str, dict[str, dict]], minutes: list[float], command: str, before: str,
           chart: str) -> list[str]:
    lines = ["# Quality at a budget: validation score after minutes of CPU training", "", f"    {command}", "",
             f"`before` is the tree at `{before}`; `after` this one. Kendall tau on the validation files (a fixed "
             "random subset of configs each); epochs and optimizer steps reached at each mark in brackets, "
             "\"ended\" where the fit's schedule (max_epochs) ended before the mark: its final weights.", "",
             "| collection | minutes | before | after | after − before |", "|---|---|---|---|---|"]
    for collection, trees in results.items():
        for t in minutes:
            cells = [trees[name].get(f"{t:g}") for name in ("before", "after")]
            text = [f"{c['score']:.4f} ({c['epoch']} ep, {c['steps']} steps{', ended' * c.get('ended', False)})"
                    if c else "–" for c in cells]
            delta = f"{cells[1]['score'] - cells[0]['score']:+.4f}" if all(cells) else "–"
            lines.append(f"| {collection} | {t:g} | {text[0]} | {text[1]} | {delta} |")
    lines += ["", "Peak RSS (MiB) of each whole `fit` process (to the last mark) and of the largest `validate`:", "",
              "| collection | before fit | after fit | before validate | after validate |", "|---|---|---|---|---|"]
    for collection, trees in results.items():
        cells = []
        for key in ("fit_rss_mib", "validate_rss_mib"):
            cells += [f"{max((m[key] for m in trees[name].values()), default=0):,.0f}" for name in ("before", "after")]
        lines.append(f"| {collection} | " + " | ".join(cells) + " |")
    return lines + ["", f"![score against training minutes]({chart})"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=False, help="a checkout of the version to compare against")
    parser.add_argument("--data", type=Path, default=Path("data/synthetic-realistic"))
    parser.add_argument("--collections", nargs="+", default=["layout:xla:random", "layout:nlp:random"])
    parser.add_argument("--minutes", type=float, nargs="+", default=[2, 4, 8])
    parser.add_argument("--eval_configs", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/budget.md"))
    parser.add_argument("--smoke", action="store_true", help="tiny data, one collection, seconds, this tree twice")
    args = parser.parse_args(argv)
    command = " ".join(["python benchmarks/budget.py", *(argv if argv is not None else sys.argv[1:])])
    work = Path(tempfile.mkdtemp(prefix="budget-"))
    extra: list[str] = []
    if args.smoke:
        args.collections, args.minutes, args.eval_configs = args.collections[:1], [0.05, 0.1], 20
        args.data, args.before = work / "data", args.before or AFTER
        generate(args.data, "tiny", 0, collections=args.collections)
        extra = ["--config", "configs/demo.yaml", "--trainer.max_epochs", "100000"]  # the marks end the fits
    elif not (args.data / "npz_all").is_dir():
        generate(args.data, "realistic", 0, collections=args.collections)
    if args.before is None:
        parser.error("--before is required (a checkout of the version to compare against)")
    trees = {"before": args.before.resolve(), "after": AFTER}
    results = {}
    for collection in args.collections:
        eval_root = subsampled(args.data.resolve(), work / "eval", collection, args.eval_configs)
        results[collection] = run_pair(trees, collection, args.data.resolve(), eval_root, args.minutes, work, extra)
    before = subprocess.run(["git", "-C", str(trees["before"]), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or str(trees["before"])
    lines = report(results, args.minutes, command, before, args.out.with_suffix(".svg").name)
    with atomic_write(args.out.with_suffix(".svg")) as handle:
        handle.write(svg(results, args.minutes))
    write_report(args.out, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
