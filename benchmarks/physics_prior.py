"""An untrained physics prior, alone and blended with a trained model's, on the held-out families of corpus_eval.

    python benchmarks/corpus_eval.py --seconds 120 --seeds 3 --collections layout:xla:random layout:nlp:random \\
        --config benchmarks/variants/single.yaml --runs /tmp/ce/runs
    python benchmarks/physics_prior.py --runs /tmp/ce/runs

The physics prior (`solution/physics/prior.py`) orders a file's configs by the tensor elements their layouts make
the program move in 8 x 128 tiles, the layouts carried through the whole graph as XLA carries them, copies where a
user needs another order: no constant of any runtime law and no training. For each
replicate of the run (seed i, fold i held out), the model's ranking of every held-out file (the submission part
corpus_eval wrote) and the physics prior are blended as (1 - w) x model rank + w x prior rank and scored by
Kendall tau against the measured runtimes, as `solution score` does; w = 0 is the model alone (it repeats
corpus_eval's score), w = 1 the physics prior alone. Deltas are paired by replicate against w = 0.

    python benchmarks/physics_prior.py --out benchmarks/results/physics_prior-alone.md

Without --runs, the physics prior alone on every labelled file of each layout collection, fold by fold of
corpus_eval's families (no training: every fold is held out), beside the noise ceiling of the same files.

    python benchmarks/physics_prior.py --corpus /tmp/gen-small --out benchmarks/results/physics_prior-generator.md

A --corpus without programs.csv (the random-graph generator's `solution synth` output): the physics prior alone,
mean Kendall tau over the train and valid files of each layout collection.

    python benchmarks/physics_prior.py --fit --out benchmarks/results/physics_prior-fit.md
    python benchmarks/physics_prior.py --fit --corpus /tmp/gen-small \\
        --out benchmarks/results/physics_prior-fit-generator.md

With --fit, beside the plain count of elements, the prior with its weights fitted as `solution run` fits them
(`prior_fit` of the shipped YAMLs): on the corpus to the labelled files of the other folds' families, on the
generator to its train files (then scored on its valid and test files); the Δ is paired by file. With --taus FILE,
each file's tau under the fitted weights is also written (JSON), to pair the runs of two commits file by file.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
from datetime import date
from pathlib import Path

import numpy as np
from corpus_eval import CorpusFile, family_folds, measured, noise_ceiling, read_manifest
from intervals import t_interval
from reports import write_report
from scipy import stats

from solution.atomic import atomic_write
from solution.constants import COLLECTIONS
from solution.data.reader import collection_dir, read_graph
from solution.data.splits import FAMILY_PATTERN
from solution.physics.fit import PriorFit, fit_sample, fit_weights
from solution.physics.prior import UNIT, prior_work
from solution.physics.propagation import ConfigWork, Propagation
from solution.submission.files import collection_file_stem, read_answers, score, write_collection
from solution.tools.settings import read_settings

REPO = Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=None)
def file_work(path: Path) -> ConfigWork:
    """The physics prior's work of every config of a layout file, in its row order."""
    raw = read_graph(path)
    return Propagation.of_file(raw).work(raw.config_feat)


def file_prior(path: Path, weights: np.ndarray = UNIT) -> np.ndarray:
    """[C] the physics prior's work (weights `weights`) of every config of a layout file, in its row order."""
    return prior_work(file_work(path), weights)


def fitted(files: list[tuple[Path, np.ndarray]], collection: str) -> tuple[np.ndarray, float]:
    """[len(WEIGHTS)] weights fitted as `solution run` fits them (the collection's shipped `prior_fit`) to the
    runtimes of (file, runtimes) pairs, and the penalty its held-out families picked."""
    settings = read_settings()[collection]
    fit = PriorFit(**settings["prior_fit"])
    chosen = fit_sample([len(runtimes) for _, runtimes in files], fit)
    samples = [(file_work(files[i][0])[rows], files[i][1][rows]) for i, rows in chosen]
    family_pattern = settings["data"].get("family_pattern", FAMILY_PATTERN)
    return fit_weights(samples, fit, [files[i][0].stem for i, _ in chosen], family_pattern)


def replicate_scores(part: Path, held_out: Path, answers: dict[str, np.ndarray], weights: list[float]) -> list[float]:
    """Mean Kendall tau over the held-out files of one replicate, per blend weight."""
    taus: list[list[float]] = [[] for _ in weights]
    for line in part.read_text().splitlines()[1:]:
        file_id, top = line.split(",")
        path = held_out / f"{file_id.rsplit(':', 1)[1]}.npz"
        with np.load(path) as z:
            runtime = z["config_runtime"].astype(np.float64)
        if not runtime.any():  # a corpus test file: its runtimes are in answers.csv, as in Kaggle
            runtime = answers[file_id]
        count = len(runtime)
        model = np.empty(count)
        model[np.array(top.split(";"), dtype=np.int64)] = np.arange(count)
        physics = stats.rankdata(file_prior(path))
        for i, w in enumerate(weights):
            taus[i].append(stats.kendalltau((1 - w) * model + w * physics, runtime)[0])
    return [float(np.mean(t)) for t in taus]


def fold_scores(corpus: Path, files: list[CorpusFile], collection: str, work: Path,
                weights: np.ndarray = UNIT) -> tuple[float, float]:
    """The physics prior's collection score on `files` (one collection), and their noise ceiling."""
    answers = measured(corpus, files)
    priors = {f.stem: file_prior(npz_path(corpus, f), weights) for f in files}
    part = write_collection(work / f"{collection_file_stem(collection)}.csv", collection, priors)
    return float(score(part, answers)[collection]["score"]), noise_ceiling(corpus, files, answers, work)


def npz_path(corpus: Path, f: CorpusFile) -> Path:
    """Where a corpus file lies."""
    return collection_dir(corpus, f.collection) / f.split / f"{f.stem}.npz"


def file_gains(scored: list[tuple[str, Path, np.ndarray]], weights: np.ndarray, taus: dict[str, float]) -> list[float]:
    """Per (ID, file, runtimes): Kendall tau of the prior with weights `weights` less that of the plain count; the
    former goes into `taus` under the file's ID."""
    gains = []
    for name, path, runtimes in scored:
        taus[name] = stats.kendalltau(file_prior(path, weights), runtimes)[0]
        gains.append(taus[name] - stats.kendalltau(file_prior(path), runtimes)[0])
    return gains


def prior_alone(corpus: Path, folds: int, fit: bool, taus: dict[str, float]) -> list[str]:
    """Report rows: per layout collection and fold of families, the physics prior's score and the noise ceiling
    of the fold's files, and their means over the folds; with `fit`, also the score with the weights fitted
    to the other folds' labelled files, and its gain per file (each file's tau into `taus`)."""
    files = read_manifest(corpus)
    extra = " fitted parts | % of the ceiling | Δ per file |" if fit else ""
    rows = [f"| collection | fold (families) | physics alone | noise ceiling | % of the ceiling |{extra}",
            "|---|---|---|---|---|" + ("---|---|---|" if fit else "")]
    layouts = [c for c in COLLECTIONS if c.startswith("layout:") and any(f.collection == c for f in files)]
    with tempfile.TemporaryDirectory(prefix="physics-prior-") as work:
        for collection in layouts:
            fold_of = family_folds(files, collection, folds)
            scores, gains = [], []
            runtimes = measured(corpus, [f for f in files if f.collection == collection])
            for fold in range(folds):
                held = [f for f in files if f.collection == collection and fold_of.get(f.family) == fold]
                scores.append(fold_scores(corpus, held, collection, Path(work)))
                families = ", ".join(sorted({f.family for f in held}))
                row = (f"| {collection} | {fold} ({families}) | {scores[-1][0]:.3f} | {scores[-1][1]:.3f} | "
                       f"{100 * scores[-1][0] / scores[-1][1]:.1f} |")
                if fit:
                    labelled = [(npz_path(corpus, f), runtimes[f.id]) for f in files if f.collection == collection
                                and f.split != "test" and fold_of.get(f.family) != fold]
                    weights, penalty = fitted(labelled, collection)
                    scores[-1] += (fold_scores(corpus, held, collection, Path(work), weights)[0],)
                    gains += file_gains([(f.id, npz_path(corpus, f), runtimes[f.id]) for f in held], weights, taus)
                    row += f" {scores[-1][2]:.3f} (penalty {penalty:g}) | {100 * scores[-1][2] / scores[-1][1]:.1f} | |"
                rows.append(row)
            means = np.mean(scores, 0)
            row = f"| {collection} | mean | **{means[0]:.3f}** | {means[1]:.3f} | {100 * means[0] / means[1]:.1f} |"
            if fit:
                row += (f" **{means[2]:.3f}** | {100 * means[2] / means[1]:.1f} | {t_interval(gains, sign='+')} over "
                        f"{len(gains)} files |")
            rows.append(row)
    return rows


def generator_alone(root: Path, fit: bool, taus: dict[str, float]) -> list[str]:
    """Report rows: per layout collection of a folder without families, the physics prior's mean Kendall tau
    over its labelled (train and valid) files; with `fit`, over its valid and test files (runtimes of answers.csv),
    the plain count's and that with the weights fitted to its train files, with the gain per file (each file's tau
    into `taus`)."""
    answers = read_answers(root / "answers.csv") if fit else {}
    rows = ["| collection | files | physics alone |" + (" fitted parts | Δ per file |" if fit else ""),
            "|---|---|---|" + ("---|---|" if fit else "")]
    for collection in (c for c in COLLECTIONS if c.startswith("layout:")):
        scored = {split: [(path, labelled(path, answers, collection)) for path in
                          sorted((collection_dir(root, collection) / split).glob("*.npz"))]
                  for split in ("train", "valid", "test")}
        judged = scored["valid"] + scored["test"] if fit else scored["train"] + scored["valid"]
        count = np.mean([stats.kendalltau(file_prior(path), runtimes)[0] for path, runtimes in judged])
        row = f"| {collection} | {len(judged)} | **{count:.3f}** |"
        if fit:
            weights, penalty = fitted(scored["train"], collection)
            gains = file_gains([(f"{collection}:{path.parent.name}:{path.stem}", path, runtimes)
                                for path, runtimes in judged], weights, taus)
            row += f" **{count + np.mean(gains):.3f}** (penalty {penalty:g}) | {t_interval(gains, sign='+')} |"
        rows.append(row)
    return rows


def labelled(path: Path, answers: dict[str, np.ndarray], collection: str) -> np.ndarray:
    """A generator file's runtimes: its own, or for a test file those of answers.csv."""
    with np.load(path) as z:
        runtime = z["config_runtime"].astype(np.float64)
    return answers[f"{collection}:{path.stem}"] if not runtime.any() and answers else runtime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, help="a corpus_eval --runs folder (without it: the physics alone)")
    parser.add_argument("--folds", type=int, default=3, help="folds of families (without --runs)")
    parser.add_argument("--fit", action="store_true", help="also the prior with its parts fitted (without --runs)")
    parser.add_argument("--setting", default="shipped", help="the corpus_eval setting whose rankings are blended")
    parser.add_argument("--corpus", type=Path, default=REPO / "data" / "programs-small")
    parser.add_argument("--weights", type=float, nargs="+", default=[0.0, 0.25, 0.5, 0.75, 1.0])
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "physics_prior.md")
    parser.add_argument("--taus", type=Path, help="with --fit: also write each file's tau with the fitted weights "
                        "(JSON, file ID -> tau), to pair two commits' runs file by file")
    args = parser.parse_args(argv)
    taus: dict[str, float] = {}
    command = f"python benchmarks/physics_prior.py {' '.join(argv if argv is not None else sys.argv[1:])}"
    if args.runs is None and not (args.corpus / "programs.csv").is_file():
        lines = [f"# The untrained physics prior on the random-graph generator ({date.today()})", "",
                 f"Command: `{command}`. Mean Kendall tau over the "
                 f"{'valid and test files (parts fitted on the train files)' if args.fit else 'train and valid files'}"
                 " of each collection.", "",
                 *generator_alone(args.corpus, args.fit, taus)]
        return write_results(lines, args.out, args.taus, taus)
    if args.runs is None:
        lines = [f"# The untrained physics prior on every fold of families ({date.today()})", "",
                 f"Command: `{command}`. Mean Kendall tau over the files of each fold's families (train, valid and "
                 "test), scored as `solution score` does.", "", *prior_alone(args.corpus, args.folds, args.fit, taus)]
        return write_results(lines, args.out, args.taus, taus)
    answers = read_answers(args.corpus / "answers.csv")
    lines = [f"# An untrained physics prior blended with the model's ({date.today()})", "",
             f"Command: `{command}`."
             " Blend: (1 - w) x model rank + w x prior rank; Kendall tau on every held-out file, mean per "
             "replicate; Δ paired by replicate against the model alone (w = 0).", "",
             "| collection | replicate | " + " | ".join(f"w = {w:g}" for w in args.weights) + " |",
             "|---|---|" + "---|" * len(args.weights)]
    summary = []
    for folder in sorted((args.runs / args.setting).iterdir()):
        collection = folder.name
        rows = []
        for replicate in sorted(folder.iterdir()):
            fold = replicate.name.split("-fold")[1]
            part = replicate / "ranked" / args.setting / "collections" / f"{collection}.csv"
            held_out = next((args.runs / "folds" / collection / f"fold{fold}").glob("npz_all/npz/layout/*/*/test"))
            rows.append(replicate_scores(part, held_out, answers, args.weights))
            lines.append(f"| {collection} | {replicate.name} | " + " | ".join(f"{s:.4f}" for s in rows[-1]) + " |")
        scores = np.array(rows)  # [replicates, weights]
        gains = [t_interval(scores[:, i] - scores[:, 0], sign="+") for i in range(1, len(args.weights))]
        cells = [f"{scores[:, 0].mean():.3f}"] + [f"{scores[:, i + 1].mean():.3f} ({g})" for i, g in enumerate(gains)]
        summary.append(f"| {collection} | " + " | ".join(cells) + " |")
    lines += ["", "Mean over replicates (Δ against the model alone):", "",
              "| collection | " + " | ".join(f"w = {w:g}" for w in args.weights) + " |",
              "|---|" + "---|" * len(args.weights), *summary]
    return write_results(lines, args.out)


def write_results(lines: list[str], out: Path, taus_out: Path | None = None,
                  taus: dict[str, float] | None = None) -> int:
    """Write the report to `out` and print it (and `taus` as JSON to `taus_out`, when given)."""
    write_report(out, "\n".join(lines) + "\n")
    if taus_out is not None:
        with atomic_write(taus_out) as handle:
            json.dump(taus, handle, indent=0, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
