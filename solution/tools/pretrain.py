"""`solution pretrain`: the starts a collection's fits begin from (`model.init_from`): each collection's shipped
settings fitted on every file with runtimes of a corpus (e.g. `solution synth --programs`), its valid files also
picking the checkpoint; each start is saved as its weights and settings alone (<out>/<collection>.ckpt)."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import __version__
from ..atomic import atomic_write
from ..constants import COLLECTIONS
from ..data.reader import collection_dir
from ..submission.files import collection_file_stem
from ..training.checkpoints import read_checkpoint
from ..training.ranker_file import MEMBER_KEYS
from . import pipeline
from .settings import layered, read_settings


def has_runtimes(path: Path) -> bool:
    """Whether a Kaggle-form file holds its configs' runtimes (a test file holds zeros: its answers are kept
    apart)."""
    with np.load(path) as archive:
        return "config_runtime" in archive.files and bool(np.any(archive["config_runtime"] > 0))


def pooled_root(corpus: Path, collection: str, root: Path) -> Path:
    """A data root of links under `root`: every file of the corpus with runtimes (train, valid, and test files that
    hold them) as train, its valid files also as valid."""
    source = collection_dir(corpus, collection)
    valid = sorted((source / "valid").glob("*.npz"))
    return linked_root({"train": [*sorted((source / "train").glob("*.npz")), *valid,
                                  *(p for p in sorted((source / "test").glob("*.npz")) if has_runtimes(p))],
                        "valid": valid}, collection, root)


def linked_root(files: Mapping[str, Sequence[Path]], collection: str, root: Path) -> Path:
    """A data root under `root` whose `collection` split folders link `files` (split -> paths)."""
    target = root.joinpath("npz", *collection.split(":"))
    for split, paths in files.items():
        (target / split).mkdir(parents=True)
        for path in paths:
            (target / split / path.name).symlink_to(path.resolve())
    return root


def slim(checkpoint: Path, out: Path, provenance: Mapping[str, Any]) -> Path:
    """Save a checkpoint's weights and settings alone (no optimizer state) with how it was made (its data root: the
    corpus, `provenance["corpus"]`), atomically."""
    saved = read_checkpoint(checkpoint)
    start = {key: saved[key] for key in MEMBER_KEYS if key in saved}
    start["datamodule_hyper_parameters"] = {**saved["datamodule_hyper_parameters"], "root": provenance["corpus"]}
    start["start"] = {**provenance, "package_version": __version__}
    with atomic_write(out, "wb") as handle:
        torch.save(start, handle)
    return out


def pretrain(corpus: Path, collection: str, out: Path, seconds: float, settings: Mapping) -> Path:
    """Fit a collection's `settings` on the corpus from random weights (so at `model.lr`: `model.start_lr` is for
    fits from a start), for at most `seconds` (preprocessing included); its start is <out>/<collection>.ckpt."""
    fresh = {"model": {"init_from": None}}
    with tempfile.TemporaryDirectory(prefix="solution-pretrain-") as work:
        job = pipeline.Job(pooled_root(corpus, collection, Path(work) / "data"), Path(work))
        checkpoint = pipeline.train(collection, layered(settings, fresh), seconds, job)
        return slim(checkpoint, out / f"{collection_file_stem(collection)}.ckpt",
                    {"corpus": str(corpus), "seconds": seconds, "seed": settings.get("seed_everything", 0)})


def main(argv: list[str] | None = None) -> int:
    """`solution pretrain --data.root CORPUS --out DIR`."""
    parser = argparse.ArgumentParser(prog="solution pretrain", description=__doc__)
    parser.add_argument("--data.root", dest="root", type=Path, required=True,
                        help="the corpus: a Kaggle-form root whose train and valid files hold runtimes")
    parser.add_argument("--out", type=Path, default=Path("starts"),
                        help="<collection>.ckpt go here; `solution run --init_from` takes the folder")
    parser.add_argument("--collections", nargs="+", choices=COLLECTIONS, default=list(COLLECTIONS))
    parser.add_argument("--seconds", type=float, default=480.0,
                        help="each collection's training time, preprocessing included (it stops sooner at its "
                             "max_epochs)")
    parser.add_argument("--seed", type=int, default=0, help="seed_everything of every fit")
    parser.add_argument("--config", action="append", default=[], type=Path,
                        help="a YAML layered over each collection's settings (repeatable)")
    args = parser.parse_args(argv)
    settings = read_settings(layers=args.config)
    for collection in args.collections:
        path = pretrain(args.root, collection, args.out, args.seconds,
                        {**settings[collection], "seed_everything": args.seed})
        pipeline.say(f"[{collection}] start written to {path}")
    return 0
