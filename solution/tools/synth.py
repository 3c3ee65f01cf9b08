"""`solution synth`: a dataset in the exact Kaggle format, from the random-graph generator (solution/synth) or,
with --programs, from the zoo of real JAX programs (solution/programs/corpus.py)."""

from __future__ import annotations

import argparse
import time

from ..constants import COLLECTIONS
from ..errors import OK, USAGE, fail
from ..synth.files import SIZES, generate


def main(argv: list[str] | None = None) -> int:
    """Write the dataset and say what was written."""
    parser = argparse.ArgumentParser(prog="solution synth", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="data/synthetic", help="dataset folder (the Kaggle root)")
    parser.add_argument("--size", default="tiny", choices=(*SIZES, "full"),
                        help="tiny | small | medium (layout files of Kaggle's test sizes) | realistic; "
                             "with --programs: tiny | small | full")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--collections", nargs="+", default=list(COLLECTIONS), choices=COLLECTIONS)
    parser.add_argument("--programs", action="store_true",
                        help="real JAX programs of the package's zoo, timed by its runtime law (docs/corpus.md); "
                             "needs jax: pip install '.[programs]'")
    args = parser.parse_args(argv)
    if not args.programs and args.size == "full":
        parser.error("--size full needs --programs; expected tiny, small or realistic")
    start = time.perf_counter()
    if args.programs:
        try:
            from ..programs import corpus  # the one place jax is imported
        except ImportError as error:
            return fail(error, USAGE)
        root = corpus.build(args.out, args.size, args.seed, args.collections)
    else:
        root = generate(args.out, args.size, args.seed, args.collections)
    files = sum(1 for _ in (root / "npz_all").rglob("*.npz"))
    kind = f"programs, {args.size}" if args.programs else args.size
    print(f"wrote {files} files ({kind}, seed {args.seed}) under {root} in {time.perf_counter() - start:.1f}s")
    return OK
