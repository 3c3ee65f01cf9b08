"""Ranking under bfloat16 autocast against float32, on program families the checkpoints never saw: the checkpoints of
a corpus_eval run rank their replicates' held-out files with `solution predict`'s own code, once in float32 and
once with --trainer.precision bf16-mixed, and each ranking is scored against the measured runtimes. The Δ is
paired by checkpoint; the wall time of each ranking is taken side by side (float32 first, then bfloat16).

    python benchmarks/corpus_eval.py --seconds 120 --seeds 6 --collections layout:xla:random layout:nlp:random \\
        --runs runs/corpus_eval                     # trains the checkpoints (or reuse a run's --runs)
    python benchmarks/precision.py --runs runs/corpus_eval --seeds 6 --collections layout:xla:random layout:nlp:random
    python benchmarks/precision.py --smoke          # tiny corpus, one fit of seconds: checks that the script runs
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import corpus_eval
from intervals import t_interval
from reports import write_report

from solution.constants import COLLECTIONS
from solution.submission.files import collection_file_stem, score
from solution.tools.predict import command_line, predict, resolved_command
from solution.tools.settings import configs_folder, read_settings

REPO = Path(__file__).resolve().parent.parent
PRECISIONS = ("32", "bf16-mixed")


def checkpoint_of(runs: Path, variant: str, replicate: corpus_eval.Replicate) -> Path:
    """The checkpoint corpus_eval saved for a replicate (its first member)."""
    stem = collection_file_stem(replicate.collection)
    path = runs / variant / stem / f"seed{replicate.seed}-fold{replicate.fold}" / "checkpoints" / f"{stem}.ckpt"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no checkpoint; expected a corpus_eval run with these --runs, --seeds, "
                                "--folds and --collections")
    return path


def ranked(replicate: corpus_eval.Replicate, checkpoint: Path, precision: str, out: Path) -> tuple[float, float]:
    """(held-out score, wall seconds) of `solution predict` ranking the replicate's held-out files at `precision`."""
    stem = collection_file_stem(replicate.collection)
    args = ["--config", str(configs_folder() / f"{stem}.yaml"), "--data.root", str(replicate.root), "--ckpt_path",
            str(checkpoint), "--trainer.precision", precision, "--submission.out_dir", str(out)]
    start = time.perf_counter()
    csv_path, _ = predict(resolved_command(command_line(args)))
    seconds = time.perf_counter() - start
    return float(score(csv_path, replicate.answers)[replicate.collection]["score"]), seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, default=Path("runs/corpus_eval"), help="a corpus_eval run's --runs")
    parser.add_argument("--variant", default=corpus_eval.SHIPPED, help="whose checkpoints (a corpus_eval setting)")
    parser.add_argument("--data", type=Path, default=Path("data/programs-small"), help="the corpus root")
    parser.add_argument("--collections", nargs="+", default=["layout:xla:random", "layout:nlp:random"],
                        choices=list(COLLECTIONS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--folds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "precision.md")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny corpus, layout:xla:default, 2 folds, one fit of 3 s (demo sizes) to rank with")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="precision-"))
    if args.smoke:
        args.data, args.runs, args.collections, args.seeds, args.folds = (work / "data", work / "runs",
                                                                          ["layout:xla:default"], 1, 2)
        corpus_eval.build_corpus(args.data, "tiny", 0, args.collections)
        settings = read_settings(layers=[configs_folder() / "demo.yaml"])[args.collections[0]]
        for replicate in corpus_eval.replicates(args.data, args.collections[0], [0], args.folds, work):
            corpus_eval.fit(args.variant, settings, replicate, 3.0, args.runs)
    lines = ["| collection | checkpoint (seed, fold) | float32 | bf16-mixed | Δ | wall s float32 | wall s bf16-mixed |",
             "|---|---|---|---|---|---|---|"]
    summary = ["| collection | checkpoints | float32 | bf16-mixed | Δ (paired) | wall ratio bf16 / float32 (median) |",
               "|---|---|---|---|---|---|"]
    for collection in args.collections:
        rows = []
        for replicate in corpus_eval.replicates(args.data, collection, range(args.seeds), args.folds, work):
            checkpoint = checkpoint_of(args.runs, args.variant, replicate)
            got = {p: ranked(replicate, checkpoint, p, work / "predictions" / p) for p in PRECISIONS}
            rows.append(got)
            (full, full_s), (low, low_s) = got["32"], got["bf16-mixed"]
            lines.append(f"| {collection} | {replicate.seed}, {replicate.fold} | {full:.4f} | {low:.4f} | "
                         f"{low - full:+.4f} | {full_s:.1f} | {low_s:.1f} |")
            print(lines[-1], flush=True)
        full, low = ([r[p][0] for r in rows] for p in PRECISIONS)
        ratio = statistics.median(r["bf16-mixed"][1] / r["32"][1] for r in rows)
        summary.append(f"| {collection} | {len(rows)} | {t_interval(full, 4)} | {t_interval(low, 4)} | "
                       f"{t_interval([b - a for a, b in zip(full, low)], 4, '+')} | {ratio:.2f} |")
    command = shlex.join(["python", "benchmarks/precision.py", *(argv if argv is not None else sys.argv[1:])])
    text = "\n".join([f"# Ranking in bfloat16 against float32 on held-out program families ({date.today()})", "",
                      f"Command: `{command}`", "", *summary, "", *lines]) + "\n"
    write_report(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
