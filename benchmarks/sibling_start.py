"""A start fitted on a sibling collection's graphs: one collection's shipped settings (from its own start, or fresh
with `--fresh`) trained on another collection's train and valid files of the same world (e.g. layout:xla:random's
settings on layout:nlp:random's programs, timed by the same machine), saved as <out>/<collection>.ckpt for a
`corpus_eval.py` variant to start from (`model.init_from: <out>`).

    python benchmarks/sibling_start.py --data ../shared/datasets/zoo-law/npz --collection layout:xla:random \
        --sibling layout:nlp:random --seconds 300 --out starts-nlp
    python benchmarks/corpus_eval.py --data ../shared/datasets/zoo-law/npz ... --variant sibling=LAYER

LAYER holding `model: {init_from: starts-nlp}`. The sibling's families must be none of those the evaluation holds
out (zoo-law's xla and nlp programs share no family).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from solution.constants import COLLECTIONS
from solution.data.reader import collection_dir
from solution.submission.files import collection_file_stem
from solution.tools import pipeline
from solution.tools.pretrain import linked_root, slim
from solution.tools.settings import layered, read_settings


def sibling_root(data: Path, collection: str, sibling: str, root: Path) -> Path:
    """A data root under `root` whose `collection` folders link the sibling's train and valid files."""
    source = collection_dir(data, sibling)
    files = {split: sorted((source / split).glob("*.npz")) for split in ("train", "valid")}
    return linked_root(files, collection, root)


def sibling_start(data: Path, collection: str, sibling: str, seconds: float, out: Path, fresh: bool,
                  seed: int) -> Path:
    """Fit `collection`'s first-fit settings on the sibling's files for `seconds`; its start is <out>/<stem>.ckpt."""
    settings = {**pipeline.first_fits(read_settings()[collection], collection), "seed_everything": seed}
    if fresh:
        settings = layered(settings, {"model": {"init_from": None}})
    with tempfile.TemporaryDirectory(prefix="sibling-start-") as work:
        job = pipeline.Job(sibling_root(data, collection, sibling, Path(work) / "data"), Path(work))
        checkpoint = pipeline.train(collection, settings, seconds, job)
        return slim(checkpoint, out / f"{collection_file_stem(collection)}.ckpt",
                    {"corpus": f"{data} ({sibling})", "seconds": seconds, "seed": seed})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    layouts = [c for c in COLLECTIONS if c.startswith("layout:")]
    parser.add_argument("--data", type=Path, required=True, help="a Kaggle-format root (npz/...)")
    parser.add_argument("--collection", default="layout:xla:random", choices=layouts, help="whose settings")
    parser.add_argument("--sibling", default="layout:nlp:random", choices=layouts, help="whose files")
    parser.add_argument("--seconds", type=float, default=300.0, help="training time, preprocessing included")
    parser.add_argument("--fresh", action="store_true", help="from random weights, not the collection's start")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True, help="<collection>.ckpt goes here")
    args = parser.parse_args(argv)
    if args.sibling == args.collection:
        parser.error("--sibling: another collection than --collection")
    print(sibling_start(args.data, args.collection, args.sibling, args.seconds, args.out, args.fresh, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
