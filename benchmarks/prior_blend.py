"""The physics-prior blend (`blend_weights`) on test files whose runtimes are known, paired on one fit: per seed
and collection, one fit of the shipped settings, whose test files are ranked by the model alone and by the blend at
the weight the valid files pick, both scored by `solution score`'s code.

    python benchmarks/prior_blend.py --data /tmp/generator-small --seconds 120 --seeds 3
    python benchmarks/prior_blend.py --programs --seconds 480 --collections layout:xla:random layout:nlp:random

Without --programs the data root is built with `solution synth --size SIZE` (the random-graph generator, whose
answers.csv holds the test runtimes) when it is missing, and every seed fits on its train files. With --programs
it is the real-program corpus (default data/programs-small, built as corpus_eval builds it) and seed i holds out
fold i of its families exactly as corpus_eval's replicate i: the held-out families' files are the test split. The
fit is `solution run`'s `pipeline.train_members` within --seconds (its checkpoint selected on the valid files);
`pipeline.evaluate` then ranks the test files twice from the same checkpoints, without and with `blend_weights`
(--weights), so the Δ is the blend's alone, paired by seed.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np
from corpus_eval import build_corpus, replicates
from intervals import t_interval
from reports import measured_code

from solution.atomic import atomic_write
from solution.constants import COLLECTIONS
from solution.submission.files import collection_file_stem, read_answers, score
from solution.synth.files import generate
from solution.tools import pipeline
from solution.tools.settings import read_settings

REPO = Path(__file__).resolve().parent.parent
LAYOUTS = [c for c in COLLECTIONS if c.startswith("layout")]


def blend_pair(collection: str, settings: dict, weights: list[float], root: Path, answers: dict[str, np.ndarray],
               seconds: float, work: Path) -> tuple[float, float, float]:
    """(the model alone's test score, the blend's, the weight the valid files picked) of one fit."""
    job = pipeline.Job(root, work / "fit")
    checkpoints = pipeline.train_members(collection, settings, seconds, job)
    scores = []
    for name, chosen in (("model", []), ("blend", weights)):
        ranked = pipeline.Job(root, work / name)
        metrics = pipeline.evaluate(collection, checkpoints, {**settings, "blend_weights": chosen}, ranked)
        part = ranked.collection_files / f"{collection_file_stem(collection)}.csv"
        scores.append(float(score(part, answers)[collection]["score"]))
    return scores[0], scores[1], metrics["prior_weight"]


def report(rows: list[tuple[str, int, float, float, float]], command: str, minutes: float) -> str:
    lines = [f"# The physics-prior blend on one fit's test files ({date.today()})", "", f"Command: `{command}` "
             f"({minutes:.0f} min). Kendall tau on the test files against their measured runtimes (answers.csv, or "
             "with --programs the held-out files' own); the blend weight is picked on the valid files; Δ paired by "
             "seed.", "",
             "| collection | seed | model alone | blend | weight picked |", "|---|---|---|---|---|"]
    lines += [f"| {c} | {seed} | {alone:.4f} | {blend:.4f} | {w:g} |" for c, seed, alone, blend, w in rows]
    lines += ["", "| collection | model alone | blend | Δ (95 % t interval) |", "|---|---|---|---|"]
    for collection in dict.fromkeys(r[0] for r in rows):
        alone, blend = (np.array([r[i] for r in rows if r[0] == collection]) for i in (2, 3))
        lines.append(f"| {collection} | {alone.mean():.3f} | {blend.mean():.3f} | {t_interval(blend - alone)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, help="a Kaggle-form root with answers.csv (built when missing, by the "
                                                  "random-graph generator), or with --programs the corpus root")
    parser.add_argument("--programs", action="store_true", help="leave-family-out replicates of the corpus")
    parser.add_argument("--folds", type=int, default=3, help="with --programs: folds of families")
    parser.add_argument("--size", default="small", choices=("tiny", "small", "realistic"))
    parser.add_argument("--collections", nargs="+", default=LAYOUTS, choices=LAYOUTS)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=120.0, help="training time per fit")
    parser.add_argument("--weights", type=float, nargs="+", default=[0.25, 0.5, 0.75], help="blend_weights")
    parser.add_argument("--config", type=Path, action="append", default=[],
                        help="a YAML layered over every collection's shipped settings (repeatable)")
    parser.add_argument("--runs", type=Path, default=Path("runs/prior_blend"))
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "prior_blend.md")
    args = parser.parse_args(argv)
    measured_code()  # this checkout's package, before any work
    if args.programs:
        args.data = args.data or Path("data/programs-small")
        if not (args.data / "programs.csv").is_file():
            build_corpus(args.data, "small", 0, args.collections)
    elif args.data is None:
        parser.error("--data is needed without --programs")
    elif not (args.data / "answers.csv").is_file():
        generate(args.data, args.size, 0, args.collections)
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    settings = read_settings(layers=args.config)
    command = shlex.join(["python", "benchmarks/prior_blend.py", *(argv if argv is not None else sys.argv[1:])])
    start, rows = time.monotonic(), []
    for seed in range(args.seeds):
        for collection in args.collections:
            work = args.runs / collection_file_stem(collection) / f"seed{seed}"
            if args.programs:  # corpus_eval's replicate `seed`: its fold of families held out as the test split
                held_out = replicates(args.data, collection, range(seed + 1), args.folds, args.runs)[seed]
                root, answers = held_out.root, held_out.answers
            else:
                root, answers = args.data, read_answers(args.data / "answers.csv")
            seeded = {**settings[collection], "seed_everything": seed}
            rows.append((collection, seed, *blend_pair(collection, seeded, args.weights, root, answers,
                                                       args.seconds, work)))
            print(f"{collection} seed {seed}: model {rows[-1][2]:.4f}, blend {rows[-1][3]:.4f} at w = {rows[-1][4]:g}",
                  flush=True)
            text = report(rows, command, (time.monotonic() - start) / 60)
            with atomic_write(args.out) as handle:
                handle.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
