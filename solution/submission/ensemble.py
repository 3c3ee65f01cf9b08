"""Raw per-config scores with their provenance, and `solution ensemble`: combine runs' scores into one submission."""

from __future__ import annotations

import argparse
import json
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..atomic import atomic_files
from ..constants import COLLECTIONS
from ..data.cache import ArrayCache, file_digest
from ..errors import OK, SettingsError
from .files import collection_file_stem, csv_text, merge, rows_from_scores

if TYPE_CHECKING:
    from ..data.sets import GraphSet

META_KEY = "__meta__"  # the .scores.npz entry holding the provenance JSON; every other key is a file's stem
FORMAT_VERSION = 1
METHODS = ("rank", "score")
SUFFIX = ".scores.npz"


class EnsembleError(SettingsError):
    """Runs that cannot be combined; the message names the runs, the collection and the file."""


@dataclass
class Run:
    """One `.scores.npz`: the scores of every file of one collection split, and the files they were made on."""

    path: Path
    collection: str
    split: str
    files: dict[str, dict]  # stem -> {"digest": blake2b hex of the .npz file, "configs": c}
    scores: dict[str, np.ndarray]  # stem -> (c,) lower = faster
    extra: dict = field(default_factory=dict)  # how an ensemble was made

    @property
    def label(self) -> str:
        return self.collection if self.split == "test" else f"{self.collection} ({self.split})"


# ---------------------------------------------------------------- writing and reading


def output_name(collection: str, split: str) -> str:
    """'layout_xla_random' for the test split, 'layout_xla_random.valid' for another."""
    return collection_file_stem(collection) + ("" if split == "test" else f".{split}")


def file_record(path: Path, configs: int, cache: ArrayCache | None = None) -> dict:
    """What identifies a data file: its content digest (the cache's remembered one when given) and config count."""
    return {"digest": cache.content_digest(path) if cache else file_digest(path), "configs": int(configs)}


def write_run(out_dir: str | Path, collection: str, split: str, scores: dict[str, np.ndarray],
              files: dict[str, dict], extra: dict | None = None) -> tuple[Path, Path]:
    """Write `<out_dir>/<name>.csv` and `<name>.scores.npz` (scores plus the provenance JSON) as a pair: both
    or neither."""
    out_dir, name = Path(out_dir), output_name(collection, split)
    if META_KEY in scores or set(scores) != set(files):
        raise ValueError(f"{collection}: scores for {sorted(scores)[:3]}... and file records for "
                         f"{sorted(files)[:3]}...; expected one record per scored file (and no stem {META_KEY})")
    meta = {"format": FORMAT_VERSION, "collection": collection, "split": split,
            "files": {stem: files[stem] for stem in sorted(files)}, **(extra or {})}
    csv_path, npz_path = out_dir / f"{name}.csv", out_dir / f"{name}{SUFFIX}"
    with atomic_files([csv_path, npz_path], "wb") as (csv_handle, npz_handle):
        csv_handle.write(csv_text(rows_from_scores(collection, scores)).encode())
        np.savez(npz_handle, **{META_KEY: np.array(json.dumps(meta, sort_keys=True))}, **scores)
    return csv_path, npz_path


def write_scores(graphs: GraphSet, scores: Mapping[int, np.ndarray], out_dir: str | Path, collection: str,
                 split: str) -> tuple[Path, Path]:
    """Write a split's scores (graph index of `graphs` -> one score per config row) as `write_run` does."""
    paths = {index: graphs.paths[index] for index in scores}
    files = {path.stem: file_record(path, len(scores[index]), graphs.cache) for index, path in paths.items()}
    return write_run(out_dir, collection, split, {path.stem: scores[index] for index, path in paths.items()}, files)


def read_run(path: str | Path) -> Run:
    """A `.scores.npz` written by `write_run`; an older one (no provenance) is refused: predict it again."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise EnsembleError(f"{path}: unreadable ({type(err).__name__}: {err}); expected a .scores.npz "
                            "written by `solution predict` or `solution ensemble`") from err
    if META_KEY not in arrays:
        raise EnsembleError(f"{path}: no record of the data files it was made on (written before scores carried "
                            "one); run `solution predict` again for this run to ensemble it")
    try:
        meta = json.loads(str(arrays.pop(META_KEY)))
        collection, split, files, version = (meta.pop(key) for key in ("collection", "split", "files", "format"))
        counts = {stem: int(record["configs"]) for stem, record in files.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise EnsembleError(f"{path}: unreadable provenance record ({type(err).__name__}: {err})") from err
    if version != FORMAT_VERSION or collection not in COLLECTIONS:
        raise EnsembleError(f"{path}: provenance of format {version} for {collection!r}; expected format "
                            f"{FORMAT_VERSION} and one of {', '.join(COLLECTIONS)}")
    if set(arrays) != set(files):
        raise EnsembleError(f"{path}: scores for {len(arrays)} files, provenance for {len(files)}; expected the same "
                            f"stems (differing: {sorted(set(arrays) ^ set(files))[:3]})")
    for stem, count in counts.items():
        if arrays[stem].shape != (count,):
            raise EnsembleError(f"{path}: {stem}: scores of shape {arrays[stem].shape} for {count} configs")
    return Run(path, collection, split, files, arrays, meta)


def run_files(run: str | Path) -> list[Path]:
    """The `.scores.npz` files of a RUN argument: the file itself, or those in the folder."""
    run = Path(run)
    found = sorted(run.glob(f"*{SUFFIX}")) if run.is_dir() else [run] if run.is_file() else []
    if not found:
        raise EnsembleError(f"{run}: no {SUFFIX} files; expected a `solution predict` output folder or one "
                            f"{SUFFIX} file")
    return found


# ---------------------------------------------------------------- combining


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties sharing their mean rank (scipy.stats.rankdata's 'average'): (c,) -> (c,) float64."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    first = np.r_[True, ordered[1:] != ordered[:-1]]  # (c,) starts a run of equal values
    starts = np.flatnonzero(first)
    ends = np.r_[starts[1:], len(values)]  # runs cover sorted positions starts..ends-1
    ranks = np.empty(len(values))
    ranks[order] = ((starts + 1 + ends) / 2)[np.cumsum(first) - 1]
    return ranks


def normalised_ranks(values: np.ndarray) -> np.ndarray:
    """Average ranks mapped onto [0, 1] (fastest 0, slowest 1) so graphs of any config count weigh alike."""
    return (average_ranks(values) - 1) / max(len(values) - 1, 1)


def standardised(values: np.ndarray) -> np.ndarray:
    """(x - mean) / std over one graph's configs; all zeros for a constant graph."""
    values = values.astype(np.float64)
    std = values.std()
    return (values - values.mean()) / std if std > 0 else np.zeros_like(values)


def combine(scores: list[np.ndarray], weights: np.ndarray, method: str) -> np.ndarray:
    """Weighted mean over runs of one graph's transformed scores: R arrays of (c,), (R,) weights -> (c,).

    A ranking loss fixes only the order of a graph's scores: their offset and spread differ from run to run (and
    seed to seed), so raw scores are not on one scale and one run could outvote the others. `rank` replaces them
    by ranks (blind to any monotone rescaling); `score` standardises them per graph, which keeps how decisively a
    run separates two configs."""
    transform = normalised_ranks if method == "rank" else standardised
    stacked = np.stack([transform(np.asarray(s)) for s in scores])  # (R, c)
    return (weights / weights.sum()) @ stacked  # (c,)


def check_same_files(first: Run, other: Run) -> None:
    """Refuse runs of one collection split made on different data files."""
    where = f"{first.label}: runs {first.path} and {other.path}"
    if set(first.files) != set(other.files):
        only = [", ".join(sorted(set(a.files) - set(b.files))[:3]) or "-" for a, b in ((first, other), (other, first))]
        raise EnsembleError(f"{where} cover different files: only in the first {only[0]}; only in the second {only[1]}")
    for stem in sorted(first.files):
        a, b = first.files[stem], other.files[stem]
        if a["configs"] != b["configs"]:
            raise EnsembleError(f"{where} differ on file {stem}: {a['configs']} configs vs {b['configs']}")
        if a["digest"] != b["digest"]:
            raise EnsembleError(f"{where} differ on file {stem}: content digest {a['digest'][:12]}... vs "
                                f"{b['digest'][:12]}...; predict both on the same data")


def ensemble(runs: list[Path], out: Path, method: str = "rank", weights: list[float] | None = None,
             root: Path | None = None) -> tuple[list[tuple[str, int, str]], Path | None]:
    """Combine every collection split the runs cover; write its CSV and scores under `out`, and `submission.csv`
    (checked against `root` when given) when the five test collections are all there.
    Returns (collection, runs combined, method) rows and the merged submission or None."""
    out = Path(out)
    if method not in METHODS:
        raise EnsembleError(f"--method {method}; expected one of {', '.join(METHODS)}")
    weights = np.ones(len(runs)) if weights is None else np.asarray(weights, dtype=np.float64)
    if len(weights) != len(runs):
        raise EnsembleError(f"--weights: {len(weights)} value(s) for {len(runs)} run(s); expected one per run")
    if not (np.isfinite(weights).all() and (weights > 0).all()):
        raise EnsembleError(f"--weights {weights.tolist()}; expected positive numbers")
    groups: dict[tuple[str, str], list[tuple[Run, float]]] = {}
    for run, weight in zip(runs, weights):
        seen = set()
        for path in run_files(run):
            loaded = read_run(path)
            key = (loaded.collection, loaded.split)
            if key in seen:
                raise EnsembleError(f"{run}: holds {loaded.label} twice; expected one file per collection")
            seen.add(key)
            groups.setdefault(key, []).append((loaded, weight))
    for members in groups.values():  # check everything before writing anything
        for other, _ in members[1:]:
            check_same_files(members[0][0], other)
    table = []
    for (collection, split), members in sorted(groups.items(), key=lambda g: (COLLECTIONS.index(g[0][0]), g[0][1])):
        first, w = members[0][0], np.array([weight for _, weight in members])  # (R,)
        scores = {stem: combine([run.scores[stem] for run, _ in members], w, method) for stem in first.files}
        extra = {"ensemble": {"method": method, "runs": [str(run.path) for run, _ in members], "weights": w.tolist()}}
        write_run(out, collection, split, scores, first.files, extra)
        table.append((first.label, len(members), method))
    if any((c, "test") not in groups for c in COLLECTIONS):
        return table, None
    return table, merge([out / f"{output_name(c, 'test')}.csv" for c in COLLECTIONS], out / "submission.csv", root)


def main(argv: list[str] | None = None) -> int:
    """`solution ensemble RUN ...`: combine the runs and print what was combined."""
    parser = argparse.ArgumentParser(prog="solution ensemble", description="Combine runs' raw scores into one "
                                     "submission: per collection, per graph, a weighted mean of ranks or z-scores.")
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN",
                        help=f"a `solution predict` output folder (its *{SUFFIX}) or one {SUFFIX} file")
    parser.add_argument("--method", choices=METHODS, default="rank",
                        help="rank: mean of per-graph ranks (default); score: mean of per-graph z-scores")
    parser.add_argument("--weights", type=float, nargs="+", default=None, metavar="W",
                        help="one positive weight per run (default: equal)")
    parser.add_argument("--out", type=Path, default=Path("submissions/ensemble"))
    parser.add_argument("--data.root", "--root", dest="root", type=Path, default=None,
                        help="dataset whose test files the merged submission must cover")
    args = parser.parse_args(argv)
    table, merged = ensemble(args.runs, args.out, args.method, args.weights, args.root)
    print(f"{'collection':<32}{'runs':>6}  method")
    for label, count, method in table:
        print(f"{label:<32}{count:>6}  {method}")
    print(f"wrote {args.out}: <collection>.csv and <collection>{SUFFIX}" + (
        f", merged into {merged}" + (f" (checked against {args.root})" if args.root else "") if merged else
        "; submission.csv not merged (not all five test collections)"))
    return OK
