"""Which files form a split: the collection's own folder, or folds of train + valid that keep each model's files
together; the defaults of these settings, shared by the data module and the trainer-free `solution predict`."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..constants import COLLECTIONS
from ..errors import SettingsError
from .preprocess import Preprocessing, record_cache
from .reader import list_files
from .sets import GraphSet
from .tasks import task_of

# a file's family is its stem less what this matches (family_of); data.family_pattern sets another
FAMILY_PATTERN = r"\..*$|_batch_\d+|_(?:fp|bf)\d+|_\d+x\d+(?:x\d+)?|_-?[0-9a-f]{16}$"

# data settings that choose files and splits, at the data module's defaults
SPLIT_DEFAULTS = {"cache_dir": None, "predict_split": "test", "test_split": "valid", "limit_graphs": None,
                  "skip_bad_files": True, "folds": 0, "fold": 0, "family_pattern": FAMILY_PATTERN, "train_with": ()}


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
    valid are drawn from train + valid pooled: valid is fold `fold` and train the others. Train also holds the files
    of the `train_with` collections that the collection's own train split would hold (joined_files)."""
    data = {**SPLIT_DEFAULTS, **data}
    own = own_files(data, split)
    return own + joined_files(data) if split == "train" else own


def own_files(data: Mapping, split: str) -> list[Path]:
    """The collection's own files of a split (`data` with every split setting)."""
    if data["folds"] <= 1 or split not in ("train", "valid"):
        return list_files(data["root"], data["collection"], split)[:data["limit_graphs"]]
    pool = pooled_files(data)
    fold_of = assign_folds([p.stem for p in pool], data["folds"], data["family_pattern"])
    return [p for p, f in zip(pool, fold_of) if (f == data["fold"]) == (split == "valid")][:data["limit_graphs"]]


def joined_files(data: Mapping) -> list[Path]:
    """The `train_with` collections' train files (with `folds` > 1, their train and valid files of the folds the
    collection trains on): the same programs searched another way never reach the files it validates on."""
    others = [c for c in data["train_with"] if c != data["collection"]]
    if not others:
        return []
    folded = data["folds"] > 1
    key = (lambda p: family_of(p.stem, data["family_pattern"])) if folded else (lambda p: p.stem)
    held_out = {key(p) for p in own_files(data, "valid")}
    files = [path for other in others for path in (pooled_files({**data, "collection": other}) if folded
                                                   else list_files(data["root"], other, "train"))]
    return [p for p in files if key(p) not in held_out]


def check_train_with(collection: str, others: Sequence[str]) -> None:
    """`train_with` names collections of the collection's task (their configs mean the same) whose files join its
    training: the default search's programs for a random search, say. Naming the collection itself is allowed."""
    for other in others:
        if other not in COLLECTIONS or task_of(other) is not task_of(collection):
            raise SettingsError(f"data.train_with names {other!r} for {collection}; expected collections of the "
                                f"{task_of(collection).name} task: "
                                + ", ".join(c for c in COLLECTIONS if task_of(c) is task_of(collection)))


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
