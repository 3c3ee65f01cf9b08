"""On-disk cache of preprocessed graphs: one folder of .npy arrays per (file content, settings), memory-mapped."""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import shutil
import tempfile
import zlib
from pathlib import Path
from typing import Callable

import numpy as np

from ..atomic import atomic_write
from ..errors import WriteError

log = logging.getLogger(__name__)

META = "meta.json"
_CHUNK = 1 << 22


def default_folder() -> Path:
    """$SOLUTION_CACHE, else ~/.cache/solution: never inside the (possibly read-only) data folder."""
    return Path(os.environ.get("SOLUTION_CACHE") or Path.home() / ".cache" / "solution")


def file_digest(path: Path) -> str:
    """blake2b of a file's bytes."""
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def code_digest(modules: list[str]) -> str:
    """blake2b of the sources of `modules` (dotted names) and of this module: what makes a cache entry, so that
    changing that code makes new entries instead of serving old ones. Read through each module's loader, which
    also serves the sources bundled into the Kaggle kernel."""
    digest = hashlib.blake2b(digest_size=16)
    for name in sorted({*modules, __name__}):
        digest.update(importlib.import_module(name).__spec__.loader.get_source(name).encode())
    return digest.hexdigest()


def _crc(path: Path) -> int:
    crc = 0
    with open(path, "rb") as handle:
        while block := handle.read(_CHUNK):
            crc = zlib.crc32(block, crc)
    return crc


class ArrayCache:
    """Entries keyed by a source file's content, a settings dict and `code` (a digest of the code that builds the
    entries, see code_digest); corrupt or stale entries are rebuilt."""

    def __init__(self, folder: str | Path | None = None, code: str = "") -> None:
        self.folder = Path(folder) if folder else default_folder()
        self.code = code
        self._verified: set[Path] = set()

    def content_digest(self, source: Path) -> str:
        """Digest of `source`, remembered per (path, inode, size, mtime, ctime) so unchanged files are hashed
        once; ctime moves on every write and cannot be set back by tools that restore mtimes."""
        stat = source.stat()
        stamp = f"{source.resolve()}|{stat.st_ino}|{stat.st_size}|{stat.st_mtime_ns}|{stat.st_ctime_ns}"
        memo = self.folder / "digests" / f"{hashlib.blake2b(stamp.encode(), digest_size=16).hexdigest()}.txt"
        try:
            return memo.read_text().strip()
        except OSError:
            pass
        digest = file_digest(source)
        with atomic_write(memo) as handle:
            handle.write(digest)
        return digest

    def key(self, source: Path, settings: dict) -> str:
        blob = json.dumps({"code": self.code, "content": self.content_digest(source), "settings": settings},
                          sort_keys=True)
        return hashlib.blake2b(blob.encode(), digest_size=16).hexdigest()

    def load(self, source: Path, settings: dict, build: Callable[[], tuple[dict[str, np.ndarray], dict]]
             ) -> tuple[dict[str, np.ndarray], dict]:
        """The cached (arrays, meta) for `source` under `settings`, building and storing them on a miss."""
        entry = self.folder / self.key(source, settings)
        hit = self._read(entry)
        if hit is not None:
            return hit
        arrays, meta = build()
        self._write(entry, arrays, meta)
        result = self._read(entry)
        if result is None:
            raise OSError(f"{entry}: cache entry unreadable right after writing it")
        return result

    def _write(self, entry: Path, arrays: dict[str, np.ndarray], meta: dict) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=self.folder, prefix=f".{entry.name}."))
        except OSError as error:
            raise WriteError(error.errno, f"cannot write the preprocessing cache {self.folder}: {error.strerror}; "
                          "choose another folder with SOLUTION_CACHE or --data.cache_dir") from error
        try:
            checks = {}
            for name, array in arrays.items():
                np.save(tmp / f"{name}.npy", np.ascontiguousarray(array))
                checks[name] = {"dtype": array.dtype.str, "shape": list(array.shape),
                                "bytes": (tmp / f"{name}.npy").stat().st_size, "crc32": _crc(tmp / f"{name}.npy")}
            with atomic_write(tmp / META) as handle:
                json.dump({"code": self.code, "arrays": checks, "meta": meta}, handle)
            if entry.exists() and self._read(entry) is not None:
                shutil.rmtree(tmp)  # another process wrote it while this one built: its entry stands (it may
                return  # be being read), not replaced
            if entry.exists():
                shutil.rmtree(entry)  # a corrupt entry being replaced
            os.rename(tmp, entry)  # atomic: readers see the whole entry or none
        except OSError as error:
            shutil.rmtree(tmp, ignore_errors=True)
            if not (entry / META).exists():  # another process may have won the rename race
                raise WriteError(error.errno, f"cannot write cache entry {entry}: {error.strerror or error}; "
                              "free some space or choose another folder with SOLUTION_CACHE or --data.cache_dir"
                              ) from error

    def _read(self, entry: Path) -> tuple[dict[str, np.ndarray], dict] | None:
        """Memory-mapped arrays of a complete, intact entry; None (and a warning) for a missing or bad one."""
        if not entry.is_dir():
            return None
        try:
            info = json.loads((entry / META).read_text())
            if not isinstance(info, dict) or not isinstance(info.get("arrays"), dict):
                raise ValueError(f"{META} is not an object with an 'arrays' object")
            if info.get("code") != self.code:
                raise ValueError(f"made by other code ({info.get('code')})")
            arrays = {}
            for name, check in info["arrays"].items():
                path = entry / f"{name}.npy"
                if path.stat().st_size != check["bytes"]:
                    raise ValueError(f"{path.name} has {path.stat().st_size} bytes, expected {check['bytes']}")
                if entry not in self._verified and _crc(path) != check["crc32"]:
                    raise ValueError(f"{path.name} checksum mismatch")
                empty = 0 in check["shape"]  # numpy cannot memory-map an empty array
                array = np.load(path, mmap_mode=None if empty else "r")
                if array.dtype.str != check["dtype"] or list(array.shape) != check["shape"]:
                    raise ValueError(f"{path.name} is {array.dtype}{array.shape}, expected {check}")
                arrays[name] = array
        except (OSError, ValueError, KeyError, TypeError) as err:
            log.warning("cache entry %s is corrupt (%s); rebuilding it", entry, err)
            return None
        self._verified.add(entry)
        return arrays, info["meta"]
