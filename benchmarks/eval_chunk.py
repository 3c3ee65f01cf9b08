"""How many configs to score together (`data.eval_chunk`), decided on saved rankers: every ranker that
`corpus_eval.py` left in its --runs folders ranks its held-out (test) files again with each chunk size, so the sizes
compare on the same models, paired. The cross-config attention compares the configs of a chunk, so a ranker's
scores depend on the chunk it ranks in.

    python benchmarks/eval_chunk.py --runs /tmp/runs-a /tmp/runs-b --chunks 256 512 1024 \\
        --out benchmarks/results/eval_chunk-zoo.md

The runs folders are read as `blend_floor.py` reads them (fits at --seconds or --budget shares, whole jobs); each
ranker ranks as `solution run` ranked with it, its physics prior blended in at its own weight. The report gives,
per collection, each size's held-out mean and each size against the first, ranker by ranker.
"""

from __future__ import annotations

import sys
from pathlib import Path

from blend_floor import saved_rankers, saved_rankers_parser
from intervals import t_interval
from reports import write_titled_report

from solution.constants import COLLECTIONS
from solution.tools.ranking import ranked_split, split_metrics
from solution.tools.settings import layered, read_settings
from solution.training.checkpoints import CheckpointError
from solution.training.ranker_file import read_ranker


def held_out_scores(runs: list[Path], collection: str, chunks: list[int], folds: int
                    ) -> tuple[list[tuple[str, int, list[float]]], int]:
    """(source, fold, held-out score at each chunk size) of every readable ranker of `collection` in `runs`; and how
    many could not be read."""
    settings = read_settings()[collection]
    stem = collection.replace(":", "_")
    scored, unreadable = [], 0
    for folder in runs:
        for path, source, root, fold in saved_rankers(folder, stem, folds):
            try:
                ranker = read_ranker(path)
            except CheckpointError:  # written by an older version of the package
                unreadable += 1
                continue
            means = []
            for chunk in chunks:
                rooted = layered(settings, {"data": {"root": str(root), "eval_chunk": chunk}})
                graphs, scores = ranked_split(ranker, rooted, "test", "eval_chunk")
                means.append(split_metrics(graphs, scores, collection)["score"])
            scored.append((source, fold, means))
            print(f"{collection} fold {fold}: {path} " + " ".join(f"{m:.4f}" for m in means), flush=True)
    return scored, unreadable


def collection_section(collection: str, chunks: list[int], scored: list[tuple[str, int, list[float]]],
                       unreadable: int) -> list[str]:
    """The report's part for one collection: each size's mean and each size against the first, then every ranker."""
    lines = [f"## {collection}", "", f"{len(scored)} rankers; {unreadable} unreadable by this code.", "",
             f"| eval_chunk | held-out mean | against {chunks[0]}, ranker by ranker | up / down |", "|---|---|---|---|"]
    for j, chunk in enumerate(chunks):
        diffs = [means[j] - means[0] for _, _, means in scored]
        up, down = sum(d > 1e-9 for d in diffs), sum(d < -1e-9 for d in diffs)
        mean = sum(means[j] for _, _, means in scored) / len(scored)
        lines.append(f"| {chunk} | {mean:.4f} | {t_interval(diffs, 4, sign='+') if j else '-'} | "
                     f"{f'{up} / {down}' if j else '-'} |")
    lines += ["", "| runs folder, settings | fold | " + " | ".join(map(str, chunks)) + " |",
              "|---|---|" + "---|" * len(chunks)]
    lines += [f"| {source} | {fold} | " + " | ".join(f"{m:.4f}" for m in means) + " |"
              for source, fold, means in scored]
    return [*lines, ""]


def main(argv: list[str] | None = None) -> int:
    parser = saved_rankers_parser(__doc__, list(COLLECTIONS), "eval_chunk.md")
    parser.add_argument("--chunks", type=int, nargs="+", default=[256, 1024], help="sizes; the first is the base")
    args = parser.parse_args(argv)
    sections = []
    for collection in args.collections:
        scored, unreadable = held_out_scores(args.runs, collection, args.chunks, args.folds)
        sections += collection_section(collection, args.chunks, scored, unreadable) if scored else []
    write_titled_report(args.out, "benchmarks/eval_chunk.py", "Configs scored together (`data.eval_chunk`) on saved "
                        "rankers", "Each ranker ranks its fold's held-out (test) files again at each chunk size, its "
                        "prior blended in at its own weight, as `solution run` ranked them; a file's configs in the "
                        "fewest chunks of at most the size, of near-equal sizes. Layout: Kendall tau; tile: top-5 "
                        "score. Intervals 95 % t over rankers.", argv, sections)
    return 0


if __name__ == "__main__":
    sys.exit(main())
