"""Writing datasets in the Kaggle format, the same bytes for the same seed: npz archives with fixed timestamps,
written atomically and streamed in chunks; the rows of sample_submission.csv and answers.csv; generators seeded
by name; a root that holds no older files of the collections written."""

from __future__ import annotations

import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from ..atomic import atomic_write
from ..constants import COLLECTIONS

_EPOCH = (1980, 1, 1, 0, 0, 0)


@dataclass
class Chunked:
    """An array written piece by piece along axis 0."""

    shape: tuple[int, ...]
    dtype: np.dtype
    chunks: Iterable[np.ndarray]


def write_npz(path: Path, arrays: Iterable[tuple[str, np.ndarray | Chunked | Callable[[], np.ndarray]]],
              compress: bool) -> None:
    """A deterministic .npz (fixed timestamps, keys in the given order), written atomically.

    Values may be arrays, Chunked streams, or callables evaluated when their turn comes (after earlier streams).
    """
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with atomic_write(path, "wb") as handle, zipfile.ZipFile(handle, "w", method) as archive:
        for name, value in arrays:
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_EPOCH)
            info.compress_type = method
            info.external_attr = 0o644 << 16
            value = value() if callable(value) else value
            with archive.open(info, "w", force_zip64=True) as entry:
                if isinstance(value, Chunked):
                    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(value.dtype)), "fortran_order": False,
                              "shape": value.shape}
                    np.lib.format.write_array_header_1_0(entry, header)
                    written = 0
                    for chunk in value.chunks:
                        entry.write(memoryview(np.ascontiguousarray(chunk, value.dtype)).cast("B"))
                        written += len(chunk)
                    assert written == value.shape[0], (name, written, value.shape)
                else:
                    np.lib.format.write_array(entry, np.ascontiguousarray(value), allow_pickle=False)


def named_rng(seed: int, *names: object) -> np.random.Generator:
    """A generator seeded by `seed` and the names of what it draws for (the same names, the same draws)."""
    words = [zlib.crc32(str(n).encode()) for n in names]
    return np.random.default_rng(np.random.SeedSequence([seed, *words]))


@dataclass
class AnswerRows:
    """sample_submission.csv and answers.csv rows per collection."""

    submission: dict[str, list[str]] = field(default_factory=dict)
    answers: dict[str, list[str]] = field(default_factory=dict)

    def add(self, collection: str, stem: str, count: int, top: int | None, truth: Sequence[str]) -> None:
        row_id = f"{collection}:{stem}"
        ranking = ";".join(map(str, range(min(count, top or count))))
        self.submission.setdefault(collection, []).append(f"{row_id},{ranking}")
        self.answers.setdefault(collection, []).append(f"{row_id},{';'.join(truth)}")


def fresh_npz_folder(out: Path, collections: Sequence[str]) -> Path:
    """<out>/npz_all/npz, once `collections` are known names that hold no files there yet (a fresh dataset must not
    mix with an older one)."""
    unknown = [c for c in collections if c not in COLLECTIONS]
    if unknown:
        raise ValueError(f"unknown collections {unknown}; expected some of {', '.join(COLLECTIONS)}")
    npz = out / "npz_all" / "npz"
    stale = [c for c in collections if any(npz.joinpath(*c.split(":")).rglob("*.npz"))]
    if stale:
        raise FileExistsError(f"{npz} already holds {', '.join(stale)} files; remove them or pick an empty folder")
    return npz
