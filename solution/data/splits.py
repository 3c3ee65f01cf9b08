"""Which files form a split: the collection's own folder, or folds of train + valid that keep each model's files
together; the defaults of these settings, shared by the data module and the trainer-free `solution predict`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ..errors import SettingsError
from .preprocess import Preprocessing, record_cache
from .reader import list_files
from .sets import GraphSet

# a file's family is its stem less what this matches (family_of); data.family_pattern sets another
FAMILY_PATTERN = r"\..*$|_batch_\d+|_(?:fp|bf)\d+|_\d+x\d+(?:x\d+)?|_-?[0-9a-f]{16}$"

# data settings that choose files and splits, at the data module's defaults
SPLIT_DEFAULTS = {"cache_dir": None, "predict_split": "test", "test_split": "valid", "limit_graphs": None,
                  "skip_bad_files": True, "folds": 0, "fold": 0, "family_pattern": FAMILY_PATTERN}


def family_of(stem: str, family_pattern: str = FAMILY_PATTERN) -> str:
    """A file's family, the model it belongs to: its stem without what `family_pattern` matches, the parts that name
    a variant of one model (the default drops '.4x4.fp16'-style suffixes, batch sizes, precisions, topologies and a
    tile kernel's hash)."""
    return re.sub(family_pattern, "", stem) or stem


def assign_folds(stems: list[str], folds: int, family_pattern: str = FAMILY_PATTERN) -> np.ndarray:
    """[F] fold of each file: whole families, in a fixed shuffled order, each to the fold with the fewest
    files so far."""
    groups: dict[str, list[int]] = {}
    for i, stem in enumerate(stems):
        groups.setdefault(family_of(stem, family_pattern), []).append(i)
    if len(groups) < folds:
        raise SettingsError(f"data.folds={folds} but the files form only {len(groups)} families "
                            f"(data.family_pattern={family_pattern!r}); use fewer folds")
    names = sorted(groups)
    order = np.random.default_rng(0).permutation(len(names))
    fold_of, sizes = np.zeros(len(stems), dtype=np.int64), np.zeros(folds, dtype=np.int64)
    for g in order:
        target = int(np.argmin(sizes))
        fold_of[groups[names[g]]] = target
        sizes[target] += len(groups[names[g]])
    return fold_of


def split_files(data: Mapping, split: str) -> list[Path]:
    """The .npz files of a split under `data` settings (root, collection, folds, ...); with `folds` > 1, train and
    valid are drawn from train + valid pooled: valid is fold `fold` and train the others."""
    data = {**SPLIT_DEFAULTS, **data}
    if data["folds"] <= 1 or split not in ("train", "valid"):
        return list_files(data["root"], data["collection"], split)[:data["limit_graphs"]]
    pool = pooled_files(data)
    fold_of = assign_folds([p.stem for p in pool], data["folds"], data["family_pattern"])
    return [p for p, f in zip(pool, fold_of) if (f == data["fold"]) == (split == "valid")][:data["limit_graphs"]]


def pooled_files(data: Mapping) -> list[Path]:
    """The train files of `data` settings, then its valid files: the pool that folds split."""
    return list_files(data["root"], data["collection"], "train") + list_files(data["root"], data["collection"], "valid")


def pooled_models(data: Mapping) -> int:
    """How many models (stems alike but for `family_pattern`) the train and valid files hold together."""
    data = {**SPLIT_DEFAULTS, **data}
    return len({family_of(p.stem, data["family_pattern"]) for p in pooled_files(data)})


def split_graphs(data: Mapping, split: str) -> GraphSet:
    """The preprocessed files of a split (built on first use, then read from the cache); with `skip_bad_files`,
    train and valid files that fail their checks are left out, never test files."""
    data = {**SPLIT_DEFAULTS, **data}
    skip = data["skip_bad_files"] and split in ("train", "valid")
    return GraphSet(split_files(data, split), split, Preprocessing.of(data), record_cache(data["cache_dir"]), skip)
