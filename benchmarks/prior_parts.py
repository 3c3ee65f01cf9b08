"""What each part of the physics prior is worth on a world: the prior alone, fitted as `solution run` fits it, with
one piece of its structure taken out against the whole, on the families a fit never saw.

    python benchmarks/prior_parts.py                           # zoo-law: benchmarks/results/prior_parts-zoo-law.md
    python benchmarks/prior_parts.py --data /tmp/programs-small/npz_all --out OUT.md           # the program corpus
    python benchmarks/prior_parts.py --data /tmp/gen-small/npz_all --family '_like.*$' --out OUT.md   # the generator
    python benchmarks/prior_parts.py --smoke                   # seconds: tiny synthetic data

A world is a Kaggle-format root: each layout collection's train + valid files (with runtimes) in 3 folds of whole
families (the file name up to its first `_`; each file its own where that leaves fewer than 3). For each fold, the
prior's weights are fitted (the collection's shipped `prior_fit`) to the other folds' files and every config of the
held-out files is ranked by Kendall tau. A variant removes one piece of the prior's structure from the work the fit
and the ranking see: one of the parts it weighs (its column zeroed), its feed slowdown (no operand counted as badly
fed), or the per-dot records altogether (the dots' multiply-adds and bytes gone, their other work still in the
parts). Cells: mean tau over held-out files, and the variant's Δ against the whole prior, paired by file (95 % t
interval). A part the runtimes do not pay for is level or better without it.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from intervals import t_interval
from processes import REPO
from reports import write_report

from solution.constants import COLLECTIONS
from solution.data.reader import collection_dir, read_graph
from solution.data.splits import assign_folds, family_of
from solution.metrics import kendall_tau
from solution.physics.fit import PriorFit, fit_sample, fit_weights
from solution.physics.prior import FEEDS, prior_work
from solution.physics.propagation import BYTE_PARTS, PARTS, ConfigWork, Propagation
from solution.tools.settings import read_settings, section

ZOO_LAW = REPO.parent / "shared" / "datasets" / "zoo-law" / "npz"
FAMILY_PATTERN = "_.*$"
EACH_FILE = "(?!)"  # a family pattern that removes nothing: each file is its own family


def without_part(part: str) -> Callable[[ConfigWork], ConfigWork]:
    """The work with one of PARTS zeroed."""
    def remove(work: ConfigWork) -> ConfigWork:
        parts = work.parts.copy()
        parts[:, PARTS.index(part)] = 0.0
        return ConfigWork(parts, work.matmuls)
    return remove


def no_feeds(work: ConfigWork) -> ConfigWork:
    """The work with no operand counted as badly fed."""
    matmuls = work.matmuls.copy()
    matmuls[..., FEEDS] = 0.0
    return ConfigWork(work.parts, matmuls)


def no_dots(work: ConfigWork) -> ConfigWork:
    """The work without the dots' and convolutions' own records."""
    return ConfigWork(work.parts, np.zeros_like(work.matmuls))


VARIANTS: dict[str, Callable[[ConfigWork], ConfigWork]] = {
    **{f"without {part}": without_part(part) for part in PARTS[:BYTE_PARTS]},
    "no feed slowdown": no_feeds, "no dot records": no_dots}


def pool(root: Path, collection: str) -> list[tuple[str, ConfigWork, np.ndarray]]:
    """(stem, work of every config, runtimes) of each train and valid file of a layout collection."""
    files = []
    for split in ("train", "valid"):
        for path in sorted((collection_dir(root, collection) / split).glob("*.npz")):
            raw = read_graph(path)
            files.append((path.stem, Propagation.of_file(raw).work(raw.config_feat),
                          np.asarray(raw.config_runtime, np.float64)))
    return files


def family_or_file(stems: list[str], family: str) -> str:
    """`family`, or where the stems form fewer than 3 families under it, a pattern that makes each file its own."""
    return family if len({family_of(stem, family) for stem in stems}) >= 3 else EACH_FILE


def held_out_taus(files: list[tuple[str, ConfigWork, np.ndarray]], collection: str, family: str, held_out: str,
                  variant: Callable[[ConfigWork], ConfigWork] | None) -> np.ndarray:
    """[files] Kendall tau of each file under the prior fitted (with `variant` applied) to the other folds' files,
    the folds made of the groups the `held_out` pattern names (`family` names the fit's own)."""
    fit = section(read_settings()[collection], "prior_fit", PriorFit, collection)
    stems = [stem for stem, _, _ in files]
    folds = assign_folds(stems, 3, held_out)
    works = [work if variant is None else variant(work) for _, work, _ in files]
    taus = np.zeros(len(files))
    for fold in range(3):
        kept = [k for k in range(len(files)) if folds[k] != fold]
        chosen = fit_sample([len(works[k]) for k in kept], dataclasses.replace(fit, files=len(kept)))
        samples = [(works[kept[i]][rows], files[kept[i]][2][rows]) for i, rows in chosen]
        weights, _ = fit_weights(samples, fit, [stems[kept[i]] for i, _ in chosen], family)
        for k in np.flatnonzero(folds == fold):
            taus[k] = kendall_tau(prior_work(works[k], weights), files[k][2])
    return taus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=ZOO_LAW, help="a Kaggle-format root")
    parser.add_argument("--family", default=FAMILY_PATTERN, help="removed from a stem to name its family")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--collections", nargs="+", default=[c for c in COLLECTIONS if c.startswith("layout")])
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "prior_parts-zoo-law.md")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    root, family = args.data, args.family
    if args.smoke:
        from solution.synth.files import generate

        root = generate(Path(tempfile.mkdtemp(prefix="prior_parts-")) / "tiny", size="tiny", seed=0)
        family = EACH_FILE
    lines = ["# The physics prior alone, one piece of its structure out, families held out", "",
             f"Data: `{root}`; family pattern `{family}`; 3 folds over train + valid; Δ against the whole prior, "
             "paired by file.", "",
             "| collection | files | whole | " + " | ".join(args.variants) + " |",
             "|---|---:|---:|" + "---|" * len(args.variants)]
    for collection in args.collections:
        files = pool(root, collection)
        held_out = family_or_file([stem for stem, _, _ in files], family)
        whole = held_out_taus(files, collection, family, held_out, None)
        cells = [f"{(taus := held_out_taus(files, collection, family, held_out, VARIANTS[name])).mean():.3f}, "
                 f"{t_interval(taus - whole, sign='+')}" for name in args.variants]
        each_file = " (each a family)" if held_out == EACH_FILE else ""
        lines.append(f"| {collection} | {len(files)}{each_file} | {whole.mean():.3f} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    write_report(args.out, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
