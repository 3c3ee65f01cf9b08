"""Fuzzing both file readers: every mutated .npz gives a DataError, every malformed CSV a SubmissionError, each
naming the file and the key (npz) or the line and column (CSV); mutations the spec allows still read correctly.

Seeded (random.Random / numpy), a few hundred mutations of each; `pytest -s tests/test_fuzz.py` prints the tally.
What makes a valid file comes from the spec (format.md, metrics.md), written out here independently of the reader's
own format table.
"""

from __future__ import annotations

import random
import string
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from npz_factory import layout_arrays, tile_arrays, write_npz

from solution.constants import COLLECTIONS
from solution.data.reader import ConfigNodeWarning, DataError, ExtraKeyWarning, list_files, read_graph
from solution.submission.files import SubmissionError, check, collection_of, expected_test_files, read_answers, score

SEED = 20231115
ROUNDS = 5  # draws of each npz mutation kind per base file (8 bases)
CSV_ROUNDS = 24  # draws of each CSV mutation kind

# ---------------------------------------------------------------- the npz format, from the spec

FLOAT_KEYS = {"node_feat", "config_feat", "node_config_feat"}  # float32 on disk; float64 and integers also exact
# Each axis: a length shared between keys (n nodes, c configs, nc configurable nodes), a fixed size, or None (free).
AXES = {
    "node_feat": ("n", 140),
    "node_opcode": ("n",),
    "edge_index": (None, 2),
    "config_runtime": ("c",),
    "config_feat": ("c", 24),
    "config_runtime_normalizers": ("c",),
    "node_config_feat": ("c", "nc", 18),
    "node_config_ids": ("nc",),
    "node_splits": (1, None),
}
OPTIONAL = {"node_splits"}
# values are node indices 0..n-1; node_splits holds node counts: 0 first, non-decreasing, at most n (n last)
NODE_INDEX_KEYS = ("edge_index", "node_config_ids", "node_splits")
WRONG_DTYPES = ("float32", "float64", "bool", "complex64", "str", "bytes", "object")  # for integer keys
WRONG_FLOAT_DTYPES = ("bool", "complex64", "str", "bytes", "object")  # for float keys


@dataclass
class Base:
    name: str
    split: str
    arrays: dict[str, np.ndarray]
    raw: bytes | None = None  # the file as another writer (solution.synth) wrote it


@dataclass
class Mutant:
    kind: str
    what: str  # one line saying what was done, for failure messages
    arrays: dict[str, np.ndarray] | None = None
    data: bytes | None = None
    keys: tuple[str, ...] = ()  # the DataError must be about one of these keys; () = still a valid file
    mention: tuple[str, ...] = ()  # words the message must hold besides the file and the key

    @property
    def valid(self) -> bool:
        return not self.keys


def npz_bases(root: Path) -> list[Base]:
    """Small valid files: the test factory's arrays (real and README dtypes) and four solution.synth files."""
    bases = [
        Base("factory layout", "train", layout_arrays(n=16, c=6, nc=3)),
        Base("factory layout int32", "valid", layout_arrays(n=14, c=5, nc=4, dtypes="readme", split="valid", seed=1)),
        Base("factory tile", "train", tile_arrays(n=8, c=7, seed=2)),
        Base("factory tile test", "test", tile_arrays(n=5, c=6, split="test", seed=3)),
    ]
    for collection, split in [("layout:xla:random", "train"), ("layout:nlp:default", "test"), ("tile:xla", "valid"),
                              ("tile:xla", "test")]:
        path = list_files(root, collection, split)[0]
        with np.load(path) as npz:
            bases.append(Base(f"synth {collection} {split}", split, {k: npz[k] for k in npz.files}, path.read_bytes()))
    return bases


def _lengths(arrays: dict[str, np.ndarray]) -> dict[str, int]:
    return {name: arrays[key].shape[axis] for key, axes in AXES.items() if key in arrays
            for axis, name in enumerate(axes) if isinstance(name, str)}


def _replace(arrays: dict, key: str, value: np.ndarray) -> dict:
    return {**arrays, key: value}


def _set_one(arrays: dict, key: str, value, rng: random.Random, dtype=None) -> dict:
    array = arrays[key].astype(dtype or arrays[key].dtype)  # a copy
    flat = array.reshape(-1)
    flat[rng.randrange(flat.size)] = value
    return _replace(arrays, key, array)


def _cast(array: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "object":
        return array.astype(object)  # needs pickle to load: np.load(allow_pickle=False) must refuse it
    with np.errstate(over="ignore", invalid="ignore"):  # float16 overflow, floats past int32: whatever comes out
        return array.astype({"str": np.str_, "bytes": np.bytes_}.get(dtype, dtype))


def mutate_drop(base: Base, rng: random.Random) -> Mutant:
    key = rng.choice(sorted(base.arrays))
    arrays = {k: v for k, v in base.arrays.items() if k != key}
    if key in OPTIONAL:
        return Mutant("drop key", f"drop optional {key}", arrays)
    return Mutant("drop key", f"drop {key}", arrays, keys=(key,), mention=("missing",))


def mutate_rename(base: Base, rng: random.Random) -> Mutant:
    key = rng.choice(sorted(base.arrays))
    new = rng.choice([key.upper(), key + "s", key[:-1], "arr_0", key.replace("_", "-"), " " + key, key.title()])
    arrays = {(new if k == key else k): v for k, v in base.arrays.items()}
    what = f"rename {key} -> {new!r}"
    if key in OPTIONAL:  # the optional key gone, an unknown one there instead: read past with a warning
        return Mutant("rename key", what, arrays)
    return Mutant("rename key", what, arrays, keys=(key,), mention=("missing", new))


def mutate_dtype(base: Base, rng: random.Random) -> Mutant:
    key = rng.choice(sorted(base.arrays))
    array = base.arrays[key]
    if key in FLOAT_KEYS:
        dtype = rng.choice(WRONG_FLOAT_DTYPES + ("float64", "int64", "int32", "float16"))
    else:
        dtype = rng.choice(WRONG_DTYPES + ("int32", "int64", "uint32"))
    cast = _cast(array, dtype)
    if dtype in ("int32", "uint32") and not np.array_equal(cast.astype(np.int64), array):
        dtype, cast = "int64", array.astype(np.int64)  # values that do not fit: the same numbers in int64
    arrays, what = _replace(base.arrays, key, cast), f"{key} as {dtype}"
    if dtype == "object":  # refused while loading: the message names the array
        return Mutant("wrong dtype", what, arrays, keys=("<file>",), mention=(key, "unreadable"))
    if dtype in (("float64", "int64", "int32") if key in FLOAT_KEYS else ("int32", "int64", "uint32")):
        return Mutant("wrong dtype", what, arrays)  # the README's int32, or the same numbers in another allowed dtype
    if dtype == "float16":  # a float dtype: valid unless values overflowed to inf
        if np.isfinite(cast).all():
            return Mutant("wrong dtype", what, arrays)
        return Mutant("wrong dtype", what, arrays, keys=(key,), mention=("NaN/inf",))
    return Mutant("wrong dtype", what, arrays, keys=(key,), mention=("dtype", str(cast.dtype)))


def mutate_shape(base: Base, rng: random.Random) -> Mutant:
    key = rng.choice(sorted(base.arrays))
    array = base.arrays[key]
    axes = AXES[key]
    how = rng.choice(["extra dim", "missing dim", "fixed size", "length", "free length"])
    if how == "extra dim":
        new = array[None] if rng.random() < 0.5 else array[..., None]
    elif how == "missing dim":
        new = array.reshape(-1) if array.ndim > 1 else array[0]
    elif how == "fixed size" and any(isinstance(a, int) for a in axes):
        axis = next(i for i, a in enumerate(axes) if isinstance(a, int))
        new = np.take(array, np.arange(array.shape[axis] + rng.choice([-1, 1])), axis=axis, mode="wrap")
    elif how in ("length", "fixed size") and any(isinstance(a, str) for a in axes):
        axis = rng.choice([i for i, a in enumerate(axes) if isinstance(a, str)])
        size = max(0, array.shape[axis] + rng.choice([-3, -2, -1, 1, 2, 5]))
        new = np.take(array, np.arange(size), axis=axis, mode="wrap")
        name = axes[axis]  # another length than the keys sharing it: any of them may be blamed, the message names both
        partners = tuple(k for k, a in AXES.items() if name in a and k in base.arrays)
        return Mutant("wrong shape", f"{key} axis {axis} ({name}) {array.shape[axis]} -> {size}",
                      _replace(base.arrays, key, new), keys=partners, mention=(key,))
    else:  # a free axis: fewer edges or computations is still a valid file
        axis = next((i for i, a in enumerate(axes) if a is None), None)
        if axis is None or array.shape[axis] < 2:
            return mutate_shape(base, rng)
        new = np.take(array, np.arange(rng.randrange(1, array.shape[axis])), axis=axis)
        return Mutant("wrong shape", f"{key} free axis {axis} -> {new.shape}", _replace(base.arrays, key, new))
    return Mutant("wrong shape", f"{key} {how}: {array.shape} -> {new.shape}", _replace(base.arrays, key, new),
                  keys=(key,), mention=("shape", str(new.shape)))


def mutate_splits(base: Base, rng: random.Random, n: int) -> Mutant:
    """node_splits as the official encoder writes it: 0, running node counts, n; every other order is refused."""
    splits = base.arrays["node_splits"].astype(np.int64).reshape(-1)
    how = rng.choice(["above n", "negative", "first", "decrease", "no trailing n", "repeat n"])
    if how == "above n":
        value = rng.choice([n + 1, n + rng.randrange(2, 10**6), 2**31 - 1])
        return Mutant("bad index", f"node_splits entry {value} (n={n})",
                      _set_one(base.arrays, "node_splits", value, rng, np.int64), keys=("node_splits",),
                      mention=(str(value), f"[0, {n}]"))
    if how == "negative":
        value = rng.choice([-1, -rng.randrange(2, 10**6)])
        return Mutant("bad index", f"node_splits entry {value}", _set_one(base.arrays, "node_splits", value, rng,
                      np.int64), keys=("node_splits",), mention=(str(value), f"[0, {n}]"))
    if how == "first":
        value = rng.randrange(1, n + 1)
        mutated = np.concatenate([[value], splits[1:]]) if splits.size > 1 else np.array([value])
        return Mutant("bad index", f"node_splits starting at {value}", _replace(base.arrays, "node_splits",
                      np.maximum.accumulate(mutated).reshape(1, -1)), keys=("node_splits",),
                      mention=(f"first value {value}", "0 first"))
    if how == "decrease" and len(np.unique(splits[1:])) > 1:
        i, j = sorted(rng.sample(range(1, len(splits)), 2))
        while splits[i] == splits[j]:
            i, j = sorted(rng.sample(range(1, len(splits)), 2))
        swapped = splits.copy()
        swapped[i], swapped[j] = splits[j], splits[i]
        return Mutant("bad index", f"node_splits {splits.tolist()} -> {swapped.tolist()}",
                      _replace(base.arrays, "node_splits", swapped.reshape(1, -1)), keys=("node_splits",),
                      mention=("decrease", "non-decreasing"))
    if how == "no trailing n":  # the last computation then runs to n
        return Mutant("bad index", "node_splits without its trailing n",
                      _replace(base.arrays, "node_splits", splits[splits < n].reshape(1, -1)))
    return Mutant("bad index", "node_splits with n repeated",
                  _replace(base.arrays, "node_splits", np.r_[splits, n].reshape(1, -1)))


def mutate_index(base: Base, rng: random.Random) -> Mutant:
    n = _lengths(base.arrays)["n"]
    key = rng.choice([k for k in NODE_INDEX_KEYS if k in base.arrays])
    if key == "node_splits":
        return mutate_splits(base, rng, n)
    if key == "node_config_ids" and len(base.arrays[key]) > 1 and rng.random() < 0.3:
        ids = base.arrays[key].copy()
        i, j = rng.sample(range(len(ids)), 2)
        ids[j] = ids[i]
        return Mutant("bad index", f"{key} duplicate {ids[i]}", _replace(base.arrays, key, ids), keys=(key,),
                      mention=("duplicated",))
    value = rng.choice([n, n + rng.randrange(1, 10**6), 2**31 - 1, -1, -rng.randrange(2, 10**6)])
    return Mutant("bad index", f"{key} entry {value} (n={n})", _set_one(base.arrays, key, value, rng, np.int64),
                  keys=(key,), mention=(str(value), str(n - 1)))


def mutate_nonfinite(base: Base, rng: random.Random) -> Mutant:
    key = rng.choice(sorted(FLOAT_KEYS & set(base.arrays)))
    value = rng.choice([np.nan, np.inf, -np.inf, 1e39, -1e300])  # the last two overflow float32
    dtype = np.float64 if abs(value) > 1e38 else None
    return Mutant("NaN/inf", f"{key} entry {value}", _set_one(base.arrays, key, value, rng, dtype), keys=(key,),
                  mention=("NaN/inf", "finite"))


def mutate_value(base: Base, rng: random.Random) -> Mutant:
    """Out-of-range values; runtimes must be positive (test files: zero, never negative)."""
    arrays, test = base.arrays, base.split == "test"
    choices = ["opcode", "opcode", "runtime", "runtime", "uint64", "huge feature", "huge runtime"]
    choices += ["layout config"] * 2 if "node_config_feat" in arrays else ["normalizer"] * 2
    how = rng.choice(choices)
    if how == "opcode":
        value, dtype = rng.choice([(121, None), (255, None), (rng.randrange(256, 10**6), np.int32), (-1, np.int16)])
        return Mutant("bad value", f"node_opcode {value}", _set_one(arrays, "node_opcode", value, rng, dtype),
                      keys=("node_opcode",), mention=(str(value), "120"))
    if how in ("runtime", "normalizer"):
        key = "config_runtime" if how == "runtime" else "config_runtime_normalizers"
        if rng.random() < 0.2 and not test and key == "config_runtime":
            return Mutant("bad value", "config_runtime all zero", _replace(arrays, key, np.zeros_like(arrays[key])),
                          keys=(key,), mention=("all zero", "positive"))
        value = rng.choice([-1, -rng.randrange(2, 10**9)] + ([] if test else [0]))
        return Mutant("bad value", f"{key} {value} in {base.split}", _set_one(arrays, key, value, rng, np.int64),
                      keys=(key,), mention=(f"minimum {value}",))
    if how == "layout config":
        value = rng.choice([-2, 6, 7, 100, -100, 2.5, -0.5, 1e9, 0.001])
        return Mutant("bad value", f"node_config_feat {value}", _set_one(arrays, "node_config_feat", value, rng),
                      keys=("node_config_feat",), mention=("integers in [-1, 5]",))
    if how == "uint64":
        key = rng.choice(sorted(k for k in arrays if k not in FLOAT_KEYS))
        value = 2**63 + rng.randrange(2**62)
        return Mutant("bad value", f"{key} uint64 {value}", _set_one(arrays, key, value, rng, np.uint64),
                      keys=(key,), mention=(str(value), "int64"))
    if how == "huge feature":  # the spec bounds no feature column: large finite values are data
        key = rng.choice(["node_feat", "config_feat" if "config_feat" in arrays else "node_feat"])
        return Mutant("bad value", f"{key} 3e38", _set_one(arrays, key, 3e38, rng))
    value = 2**62 if test else rng.choice([1, 2**62])  # large positive runtimes are runtimes
    key = "config_runtime" if not test else "config_runtime_normalizers"
    if key not in arrays:
        return mutate_value(base, rng)
    return Mutant("bad value", f"{key} {value}", _set_one(arrays, key, value, rng, np.int64))


def _file_bytes(base: Base, tmp: Path, compressed: bool) -> bytes:
    if base.raw is not None and compressed:
        return base.raw
    return write_npz(tmp / "scratch.npz", base.arrays, compressed).read_bytes()


def mutate_truncate(base: Base, rng: random.Random, tmp: Path) -> Mutant:
    data = _file_bytes(base, tmp, rng.random() < 0.5)
    cut = rng.randrange(len(data))
    return Mutant("truncated", f"{cut} of {len(data)} bytes", data=data[:cut], keys=("<file>",),
                  mention=("unreadable", ".npz"))


def mutate_random_bytes(base: Base, rng: random.Random) -> Mutant:
    prefix = rng.choice([b"", b"PK\x03\x04", b"PK\x05\x06", b"\x93NUMPY\x01\x00"])  # zip, empty zip, npy magic
    data = prefix + rng.randbytes(rng.randrange(1, 4096))
    # unreadable; or, should the bytes happen to form an empty zip, a file without node_feat
    return Mutant("random bytes", f"{len(data)} bytes after {prefix!r}", data=data, keys=("<file>", "node_feat"))


def npz_mutants(base: Base, rng: random.Random, tmp: Path) -> list[Mutant]:
    mutants = [Mutant("empty file", "0 bytes", data=b"", keys=("<file>",), mention=("unreadable", ".npz"))]
    for _ in range(ROUNDS):
        mutants += [mutate_drop(base, rng), mutate_rename(base, rng), mutate_dtype(base, rng),
                    mutate_shape(base, rng), mutate_index(base, rng), mutate_nonfinite(base, rng),
                    mutate_value(base, rng), mutate_truncate(base, rng, tmp), mutate_random_bytes(base, rng)]
    return mutants


def _read(path: Path, split: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigNodeWarning)  # warnings, not errors: not what is fuzzed here
        warnings.simplefilter("ignore", ExtraKeyWarning)
        return read_graph(path, split)


def _as_read(graph) -> dict[str, np.ndarray | None]:
    return {"node_feat": graph.node_feat, "node_opcode": graph.node_opcode, "edge_index": graph.edge_index,
            "config_runtime": graph.config_runtime, "config_feat": graph.config_feat,
            "node_config_feat": graph.config_feat, "node_config_ids": graph.config_node_ids,
            "config_runtime_normalizers": graph.normalizers, "node_splits": graph.node_splits}


def _read_as_written(graph, arrays: dict[str, np.ndarray]) -> list[str]:
    """Keys whose values came back different from what was written (floats as float32, node_splits flattened)."""
    got = _as_read(graph)
    return [key for key, value in arrays.items() if key in got  # keys the format does not define are read past
            if not np.array_equal(got[key], value.astype(np.float32) if key in FLOAT_KEYS else value.reshape(-1)
                                  if key == "node_splits" else value)]


def _npz_failure(mutant: Mutant, path: Path, split: str) -> str | None:
    """None when the reader did what the mutant calls for, else what went wrong."""
    try:
        graph = _read(path, split)
    except DataError as err:
        message = str(err)
        if mutant.valid:
            return f"valid file refused: {message}"
        if err.file != str(path) or str(path) not in message:
            return f"message does not name the file: {message}"
        if err.key not in mutant.keys or f"'{err.key}'" not in message:
            return f"key {err.key!r}, expected one of {mutant.keys}: {message}"
        missing = [word for word in mutant.mention if word not in message]
        if missing or not err.found or not err.expected:
            return f"message lacks {missing}: {message}"
        return None
    except Exception as err:  # noqa: BLE001 - the point of the test: nothing else may escape
        return f"raw {type(err).__name__}: {err}"
    if not mutant.valid:
        return "read without error"
    wrong = _read_as_written(graph, mutant.arrays)
    return f"read back wrong values for {wrong}" if wrong else None


@pytest.fixture(scope="module")
def bases(tiny_root) -> list[Base]:
    return npz_bases(tiny_root)


def test_unmutated_npz_files_read_as_written(tmp_path, bases):
    for i, base in enumerate(bases):
        for compressed in (False, True):
            path = write_npz(tmp_path / base.split / f"base_{i}_{int(compressed)}.npz", base.arrays, compressed)
            graph = _read(path, base.split)
            assert graph.task.name == ("tile" if "config_feat" in base.arrays else "layout"), base.name
            assert graph.is_test == (base.split == "test") and not _read_as_written(graph, base.arrays), base.name
        if base.raw is not None:
            path.write_bytes(base.raw)
            assert not _read_as_written(_read(path, base.split), base.arrays), base.name


def test_mutated_npz_files_give_data_errors_naming_file_and_key(tmp_path, bases):
    rng = random.Random(SEED)
    tally: Counter = Counter()
    failures = []
    for b, base in enumerate(bases):
        for m, mutant in enumerate(npz_mutants(base, rng, tmp_path)):
            path = tmp_path / base.split / f"b{b}_m{m}.npz"
            if mutant.arrays is not None:
                write_npz(path, mutant.arrays, compressed=rng.random() < 0.5)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(mutant.data)
            tally[mutant.kind, "valid" if mutant.valid else "error"] += 1
            failure = _npz_failure(mutant, path, base.split)
            if failure:
                failures.append(f"{base.name} / {mutant.kind} / {mutant.what}: {failure}")
    _print_tally("npz", tally)
    assert not failures, f"{len(failures)} mutation(s) mishandled:\n" + "\n".join(failures[:30])
    errors = sum(count for (_, outcome), count in tally.items() if outcome == "error")
    assert errors >= 300 and sum(tally.values()) == len(bases) * (1 + 9 * ROUNDS)
    for kind in ("drop key", "rename key", "wrong dtype", "wrong shape", "bad index", "NaN/inf", "bad value",
                 "truncated", "random bytes", "empty file"):
        assert tally[kind, "error"] >= len(bases), kind
    assert sum(count for (_, outcome), count in tally.items() if outcome == "valid") >= 10  # allowed variants


def _print_tally(name: str, tally: Counter) -> None:
    kinds = sorted({kind for kind, _ in tally})
    print(f"\n{name} mutations: {sum(tally.values())} "
          f"({sum(v for (_, o), v in tally.items() if o == 'error')} invalid, "
          f"{sum(v for (_, o), v in tally.items() if o == 'valid')} still valid)")
    for kind in kinds:
        print(f"  {kind:<22} invalid {tally[kind, 'error']:>4}   still valid {tally[kind, 'valid']:>4}")


# ---------------------------------------------------------------- submission CSVs

HEADER = "ID,TopConfigs"


@dataclass
class CsvMutant:
    kind: str
    what: str
    data: bytes
    phrases: tuple[str, ...] = ()  # all in the error message, which must also name a line and a column
    scored: bool = True  # score() must refuse it too (False: it drops a whole collection, which score allows)
    format_error: bool = False  # check() without config counts must already refuse it
    valid: bool = False  # still a valid submission


@dataclass
class Submission:
    lines: list[str]  # header first
    ids: list[str]  # ID of each data line (lines[i + 1])
    counts: dict[str, int]

    def text(self, lines: list[str] | None = None) -> bytes:
        return "".join(line + "\n" for line in (self.lines if lines is None else lines)).encode()

    def tokens(self, i: int) -> list[str]:
        return self.lines[i + 1].split(",")[1].split(";")

    def with_row(self, i: int, top: list[str] | str | None = None, row_id: str | None = None) -> bytes:
        lines = list(self.lines)
        field = top if isinstance(top, str) else ";".join(self.tokens(i) if top is None else top)
        lines[i + 1] = f"{self.ids[i] if row_id is None else row_id},{field}"
        return self.text(lines)


def valid_submission(expected: dict[str, int], rng: random.Random) -> Submission:
    """Rows in COLLECTIONS order (the last one a layout row): 5 indices for tile, a full permutation for layout."""
    ids = sorted(expected, key=lambda row_id: (COLLECTIONS.index(collection_of(row_id)), row_id))
    lines = [HEADER]
    for row_id in ids:
        order = rng.sample(range(expected[row_id]), expected[row_id])
        lines.append(f"{row_id},{';'.join(map(str, order[:5] if row_id.startswith('tile') else order))}")
    assert not ids[-1].startswith("tile") and all(expected[i] > 5 for i in ids)
    return Submission(lines, ids, expected)


@dataclass
class Pick:
    """One data row of the submission, as a mutation sees it."""

    i: int  # data row index: lines[i + 1]
    id: str
    count: int  # configs in its file
    tokens: list[str]

    @property
    def line(self) -> int:
        return self.i + 2

    @property
    def tile(self) -> bool:
        return self.id.startswith("tile")

    @property
    def where(self) -> str:
        return f"line {self.line} ({self.id})"


def _pick(sub: Submission, rng: random.Random) -> Pick:
    i = rng.randrange(len(sub.ids))
    return Pick(i, sub.ids[i], sub.counts[sub.ids[i]], sub.tokens(i))


def _header(sub: Submission, rng: random.Random, p: Pick) -> list[CsvMutant]:
    header = rng.choice(["ID", "TopConfigs", "Id,TopConfigs", "ID,TopConfig", "id,topconfigs", "ID,Top Configs",
                         "ID,TopConfigs,Extra", "TopConfigs,ID", "ID;TopConfigs", "ID\tTopConfigs", ""])
    other, data = rng.choice([("no header", sub.text(sub.lines[1:])), ("BOM twice", b"\xef\xbb\xbf" * 2 + sub.text())])
    return [CsvMutant("header", f"header {header!r}", sub.text([header, *sub.lines[1:]]),
                      ("line 1: header", f"expected {HEADER}"), format_error=True),
            CsvMutant("header", other, data, ("line 1: header", f"expected {HEADER}"), format_error=True)]


def _separator(sub: Submission, rng: random.Random, p: Pick) -> list[CsvMutant]:
    sep = rng.choice([";", "\t", "|", " "])
    if rng.random() < 0.5:
        return [CsvMutant("separator", f"{sep!r} everywhere", sub.text([line.replace(",", sep) for line in sub.lines]),
                          ("line 1: header", HEADER), format_error=True)]
    lines = list(sub.lines)
    lines[p.i + 1] = lines[p.i + 1].replace(",", sep)
    return [CsvMutant("separator", f"{sep!r} in line {p.line}", sub.text(lines),
                      (f"line {p.line}: 1 fields", f"expected 2 ({HEADER})"), format_error=True)]


def _columns(sub: Submission, rng: random.Random, p: Pick) -> list[CsvMutant]:
    extra = rng.choice([",", ",x", ",0;1", ",,"])
    more, fewer = list(sub.lines), list(sub.lines)
    more[p.i + 1] += extra
    fewer[p.i + 1] = p.id
    return [CsvMutant("columns", f"{extra!r} appended to line {p.line}", sub.text(more),
                      (f"line {p.line}: {2 + extra.count(',')} fields", HEADER), format_error=True),
            CsvMutant("columns", f"no TopConfigs on line {p.line}", sub.text(fewer),
                      (f"line {p.line}: 1 fields", HEADER), format_error=True)]


def _id_format(sub: Submission, rng: random.Random, p: Pick) -> list[CsvMutant]:
    collection = collection_of(p.id)
    stem = p.id[len(collection) + 1:]
    bad = rng.choice([collection, collection + ":", "", f"tile:nlp:{stem}", f"layout:xla:bogus:{stem}",
                      p.id.replace(":", "_"), p.id.replace(":", "/"), p.id.upper(), p.id.capitalize()])
    return [CsvMutant("ID format", f"ID {bad!r} on line {p.line}", sub.with_row(p.i, row_id=bad),
                      (f"line {p.line} ({bad}): unknown ID", f"missing ID {p.id}"), format_error=True)]


def _duplicate_id(sub: Submission, rng: random.Random, p: Pick) -> list[CsvMutant]:
    at = rng.randrange(p.i + 2, len(sub.lines) + 1)  # list position of the copy, after the original
    lines = list(sub.lines)
    lines.insert(at, sub.lines[p.i + 1])
    return [CsvMutant("duplicate ID", f"{p.id} again at line {at + 1}", sub.text(lines),
                      (f"line {at + 1} ({p.id}): duplicate ID, first on line {p.line}",), format_error=True)]


def _missing_id(sub: Submission, rng: random.Random, p: Pick) -> list[CsvMutant]:
    new = f"{p.id}_{rng.randrange(1000)}"
    return [CsvMutant("missing ID", f"no {p.id}", sub.text([x for k, x in enumerate(sub.lines) if k != p.i + 1]),
                      (f"missing ID {p.id}",)),
            CsvMutant("missing ID", f"unknown {new}", sub.text([*sub.lines, f"{new},0;1;2;3;4"]),
                      (f"({new}): unknown ID",))]


def _with_entry(sub: Submission, p: Pick, k: int, value: str) -> bytes:
    return sub.with_row(p.i, p.tokens[:k] + [value] + p.tokens[k + 1:])


def _entries(sub: Submission, rng: random.Random, p: Pick) -> list[CsvMutant]:
    """One TopConfigs entry replaced: not an integer, past the file's configs, past int64, or a repeat."""
    k = rng.randrange(len(p.tokens))
    bad = rng.choice(["x", "1.0", "-1", "1e3", "", " ", "0x1", "+1", "\u0661", "1 2", "NaN", "inf", "\x00", "'3'"])
    big = p.count + rng.choice([0, 1, rng.randrange(2, 10**6), 10**17])  # 10**17 fits int64: no np.arange of it
    huge = rng.choice(["9" * rng.randrange(19, 400), str(2**63), str(2**64 + 5), "1" + "0" * 200_000])
    twin = rng.choice([x for x in range(len(p.tokens)) if x != k])
    return [CsvMutant("TopConfigs entry", f"entry {k + 1} {bad!r} in line {p.line}", _with_entry(sub, p, k, bad),
                      (f"{p.where}: entry {k + 1}", "TopConfigs"), format_error=True),
            CsvMutant("TopConfigs range", f"entry {k + 1} = {big} of {p.count} in line {p.line}",
                      _with_entry(sub, p, k, str(big)), (f"{p.where}: index {big} out of range", "TopConfigs"),
                      format_error=not p.tile),  # a tile row may name any 5 indices when the count is unknown
            CsvMutant("TopConfigs range", f"entry {k + 1} = {huge[:20]}... ({len(huge)} digits)",
                      _with_entry(sub, p, k, huge), (f"{p.where}: entry {k + 1}", "out of range", "TopConfigs"),
                      format_error=True),
            CsvMutant("TopConfigs repeat", f"entry {twin + 1} = entry {k + 1} in line {p.line}",
                      _with_entry(sub, p, twin, p.tokens[k]),
                      (f"{p.where}: index {p.tokens[k]} repeated", "TopConfigs"), format_error=True)]


def _count(sub: Submission, rng: random.Random, p: Pick) -> list[CsvMutant]:
    """Tile: 4 or 6 indices instead of 5; layout: one config left out; either: nothing at all."""
    if p.tile:
        unused = next(str(x) for x in range(p.count) if str(x) not in p.tokens)
        top, phrase = rng.choice([(p.tokens[:4], "4 indices; expected 5"), (p.tokens + [unused], "6 indices")])
        format_error = len(top) > 5
    else:
        drop = rng.randrange(len(p.tokens))
        top, phrase = p.tokens[:drop] + p.tokens[drop + 1:], f"missing {p.tokens[drop]}"
        format_error = int(p.tokens[drop]) != p.count - 1  # else a permutation of 0..count-2: fine without counts
    return [CsvMutant("TopConfigs count", f"{len(top)} of {p.count} in line {p.line}", sub.with_row(p.i, top),
                      (p.where, phrase, "TopConfigs"), format_error=format_error),
            CsvMutant("TopConfigs count", f"empty TopConfigs in line {p.line}", sub.with_row(p.i, ""),
                      (f"{p.where}: empty TopConfigs",), format_error=True)]


def _garbage_char(sub: Submission, rng: random.Random, p: Pick) -> list[CsvMutant]:
    """A character no ID or index may hold, anywhere in a data row: an unknown ID or a non-integer entry."""
    lines = list(sub.lines)
    at, char = rng.randrange(len(lines[p.i + 1]) + 1), rng.choice(["x", "\x00", "#", "-", ".", "\u00e9", "\x7f"])
    lines[p.i + 1] = lines[p.i + 1][:at] + char + lines[p.i + 1][at:]
    in_id = at <= len(p.id)
    return [CsvMutant("garbage character", f"{char!r} at {at} of line {p.line}", sub.text(lines),
                      (f"line {p.line} (", "unknown ID" if in_id else "TopConfigs"),
                      format_error=not in_id or collection_of(lines[p.i + 1].split(",")[0]) is None)]


def _truncated(sub: Submission, rng: random.Random, p: Pick) -> list[CsvMutant]:
    """Cut anywhere before the final newline: rows go missing, or the last (layout) row loses part of its
    permutation (a shortened last index repeats an earlier one). score() skips collections with no row at all."""
    data = sub.text()
    cut = rng.randrange(len(data) - 1)
    first_of_last = next(k for k, row_id in enumerate(sub.ids) if collection_of(row_id) == collection_of(sub.ids[-1]))
    keeps_last_collection = cut >= len(sub.text(sub.lines[:first_of_last + 2]))  # one complete row of it
    return [CsvMutant("truncated", f"{cut} of {len(data)} bytes", data[:cut], scored=keeps_last_collection)]


def _random_content(sub: Submission, rng: random.Random, p: Pick) -> list[CsvMutant]:
    how = rng.choice(["bytes", "text", "after header", "utf-16"])
    if how == "bytes":
        return [CsvMutant("random content", "random bytes", rng.randbytes(rng.randrange(16, 4096)), (HEADER,),
                          format_error=True)]
    if how == "utf-16":
        return [CsvMutant("random content", "UTF-16", sub.text().decode().encode("utf-16"),
                          ("not a text file", HEADER), format_error=True)]
    alphabet = string.ascii_letters + string.digits + ",;:\n\r\t \"'"
    text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 2000))).encode()
    if how == "text":
        return [CsvMutant("random content", "random text", text, (HEADER,), format_error=True)]
    return [CsvMutant("random content", "random text after the header", sub.text(sub.lines[:1]) + text)]


def _empty(sub: Submission, rng: random.Random, p: Pick) -> list[CsvMutant]:
    data = rng.choice([b"", b"\n", b" \r\n\t", b"\xef\xbb\xbf", sub.text(sub.lines[:1]), sub.text([HEADER, ""])])
    phrase = "no rows" if HEADER.encode() in data else "empty file"
    return [CsvMutant("empty file", repr(data), data, (phrase,), format_error=True)]


def _still_valid(sub: Submission, rng: random.Random, p: Pick) -> list[CsvMutant]:
    """What the format allows: BOM, CRLF or CR line ends, no final newline, blank lines, quoting, any row order,
    spaces around indices."""
    how = rng.choice(["BOM", "CRLF", "CR", "no final newline", "blank lines", "quoted", "shuffled", "spaces"])
    data = sub.text()
    if how == "BOM":
        data = b"\xef\xbb\xbf" + data
    elif how in ("CRLF", "CR"):
        data = data.replace(b"\n", b"\r\n" if how == "CRLF" else b"\r")
    elif how == "no final newline":
        data = data[:-1]
    elif how == "blank lines":
        lines = list(sub.lines)
        for _ in range(3):
            lines.insert(rng.randrange(1, len(lines) + 1), rng.choice(["", "  "]))
        data = sub.text(lines)
    elif how == "quoted":
        data = sub.text([HEADER] + [",".join(f'"{cell}"' for cell in line.split(",")) for line in sub.lines[1:]])
    elif how == "shuffled":
        data = sub.text([HEADER] + rng.sample(sub.lines[1:], len(sub.lines) - 1))
    else:
        data = sub.text([HEADER] + [line.replace(";", " ; ") for line in sub.lines[1:]])
    return [CsvMutant("still valid", how, data, valid=True)]


CSV_KINDS = (_header, _separator, _columns, _id_format, _duplicate_id, _missing_id, _entries, _count, _garbage_char,
             _truncated, _random_content, _empty, _still_valid)


def csv_mutants(sub: Submission, rng: random.Random) -> list[CsvMutant]:
    """CSV_ROUNDS draws of each kind of damage, and of variants that keep the submission valid."""
    return [mutant for _ in range(CSV_ROUNDS) for kind in CSV_KINDS for mutant in kind(sub, rng, _pick(sub, rng))]


def _csv_failure(mutant: CsvMutant, path: Path, expected: dict[str, int], answers: dict, reference: dict) -> str | None:
    """None when check() (with and without config counts) and score() did what the mutant calls for."""
    try:
        report = check(path, expected=expected)
        blind = check(path)  # format only
        try:
            scores = score(path, answers)
        except SubmissionError as err:
            scores = err
    except Exception as err:  # noqa: BLE001 - the point of the test: nothing but a report or SubmissionError
        return f"raw {type(err).__name__}: {str(err)[:300]}"
    if mutant.valid:
        if not report.ok or not blind.ok:
            return f"valid submission refused: {(report.problems or blind.problems)[:3]}"
        if not isinstance(scores, dict) or scores != reference:  # the same orders: the same numbers
            return f"scored {scores}, expected {reference}"
        return None
    if report.ok:
        return "check() found no problem"
    if mutant.format_error and blind.ok:
        return "check() without config counts found no problem"
    messages = [_raised(report)] + ([str(scores) if isinstance(scores, SubmissionError) else None]
                                    if mutant.scored else [])
    for message in messages:
        if message is None:
            return f"score() accepted it: {scores}"
        if not message.startswith(f"{path}: "):
            return f"message does not start with the file: {message[:300]}"
        missing = [phrase for phrase in mutant.phrases if phrase not in message]
        if missing:
            return f"message lacks {missing}: {message[:600]}"
        if not any(place in message for place in ("line ", "missing ID", "empty file", "not a text file", "no rows")):
            return f"message names no line: {message[:300]}"
        if "ID" not in message and "TopConfigs" not in message:
            return f"message names no column: {message[:300]}"
    return None


def _raised(report) -> str:
    with pytest.raises(SubmissionError) as info:
        report.raise_if_bad()
    return str(info.value)


@pytest.fixture(scope="module")
def test_set(tiny_root) -> tuple[dict[str, int], dict[str, np.ndarray]]:
    return expected_test_files(tiny_root), read_answers(tiny_root / "answers.csv")


def test_unmutated_submission_checks_and_scores(tmp_path, test_set):
    expected, answers = test_set
    sub = valid_submission(expected, random.Random(SEED))
    path = tmp_path / "submission.csv"
    path.write_bytes(sub.text())
    assert check(path, expected=expected).ok and check(path).ok
    result = score(path, answers)
    assert set(result) == {*COLLECTIONS, "final"} and -1 <= result["final"] <= 1


def test_malformed_csvs_give_submission_errors_naming_file_line_and_column(tmp_path, test_set):
    expected, answers = test_set
    rng = random.Random(SEED)
    sub = valid_submission(expected, rng)
    path = tmp_path / "submission.csv"
    path.write_bytes(sub.text())
    reference = score(path, answers)
    tally: Counter = Counter()
    failures = []
    for m, mutant in enumerate(csv_mutants(sub, rng)):
        path = tmp_path / f"m{m}.csv"
        path.write_bytes(mutant.data)
        tally[mutant.kind, "valid" if mutant.valid else "error"] += 1
        failure = _csv_failure(mutant, path, expected, answers, reference)
        if failure:
            failures.append(f"{mutant.kind} / {mutant.what!r}: {failure}")
    _print_tally("CSV", tally)
    assert not failures, f"{len(failures)} mutation(s) mishandled:\n" + "\n".join(failures[:30])
    assert sum(tally.values()) >= 300
    assert tally["still valid", "valid"] == CSV_ROUNDS and tally["still valid", "error"] == 0
    assert all(tally[kind, "error"] >= CSV_ROUNDS for kind, _ in tally if kind != "still valid")
