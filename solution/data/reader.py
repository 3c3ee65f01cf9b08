"""Find TpuGraphs collections on disk and read one .npz file, checking every key against the format."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..constants import COLLECTIONS, CONFIGURABLE_OPCODES, NUM_OPCODES, SPLITS
from ..errors import SettingsError
from ..format import LAYOUT_CONFIG_DIM, LAYOUT_SYMBOLS, NODE_FEAT_DIM, TILE_CONFIG_DIM
from .tasks import COMMON_KEYS, TASKS, Task


class DataError(ValueError):
    """A data file or folder that does not match the TpuGraphs format."""

    def __init__(self, file: str | Path, key: str, found: str, expected: str) -> None:
        self.file, self.key, self.found, self.expected = str(file), key, found, expected
        super().__init__(f"{file}: key '{key}': found {found}; expected {expected}")


class ConfigNodeWarning(UserWarning):
    """A configurable node that points at an opcode other than convolution, dot or reshape."""


class ExtraKeyWarning(UserWarning):
    """A key the format does not define: read past, not refused (nothing in the format forbids more arrays)."""


@dataclass
class RawGraph:
    """One file as read from disk, checked, in the real files' dtypes."""

    path: Path
    task: Task
    node_feat: np.ndarray  # [n, 140] float32
    node_opcode: np.ndarray  # [n] int64
    edge_index: np.ndarray  # [m, 2] int64, row [consumer, producer] as on disk
    config_feat: np.ndarray  # layout [c, nc, 18] int8 (values -1..5); tile [c, 24] float32
    config_runtime: np.ndarray  # [c] int64 (all zero in test files)
    config_node_ids: np.ndarray | None = None  # [nc] int64, layout only
    node_splits: np.ndarray | None = None  # [k] int64 computation bounds 0, ..., n (layout only, optional)
    normalizers: np.ndarray | None = None  # [c] int64, tile only

    @property
    def is_test(self) -> bool:
        return not self.config_runtime.any()

    @property
    def num_configs(self) -> int:
        return len(self.config_runtime)

    def target(self) -> np.ndarray:
        """Runtime to rank, lower is faster: runtime / normalizer for tile (0 where a test file's normalizer is 0),
        runtime (ns) for layout."""
        return self.task.target(self.config_runtime.astype(np.float64), self.normalizers)

    def computation_bounds(self) -> np.ndarray:
        """[k + 1] node ids 0 = b0 < b1 < ... < bk = n: computation i holds nodes b_i .. b_(i+1) - 1."""
        return computation_bounds(self.node_splits, len(self.node_feat))


def computation_bounds(node_splits: np.ndarray | None, num_nodes: int) -> np.ndarray:
    """node_splits in the official encoder's form (0, the running node count after each major computation, n) as
    strictly increasing bounds from 0 to n: a missing trailing n is implied (the last computation runs to the end)
    and repeated values (empty computations) are dropped. None (no node_splits) is one computation."""
    inner = np.zeros(0, np.int64) if node_splits is None else np.asarray(node_splits, np.int64).reshape(-1)
    inner = inner[(inner > 0) & (inner < num_nodes)]
    return np.unique(np.concatenate([[0, num_nodes], inner])).astype(np.int64)


# ---------------------------------------------------------------- discovery


def collection_name(path: Path) -> str | None:
    """The collection a folder holds ('layout:xla:random', 'tile:xla'), or None."""
    parts = path.resolve().parts
    for name in COLLECTIONS:
        tail = tuple(name.split(":"))
        if parts[-len(tail):] == tail:
            return name
    return None


def find_collections(root: str | Path) -> dict[str, Path]:
    """Map each collection found under a Kaggle root, an `npz` folder or one collection folder to its folder."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(root, "<folder>", "no such folder", "a Kaggle root, an npz folder or a collection folder")
    own = collection_name(root)
    if own is not None:
        return {own: root}
    for npz in (root / "npz_all" / "npz", root / "npz", root):
        found = {c: npz.joinpath(*c.split(":")) for c in COLLECTIONS if npz.joinpath(*c.split(":")).is_dir()}
        if found:
            return found
    raise DataError(
        root, "<folder>", "no layout/ or tile/ collections",
        "<root>/npz_all/npz/{layout/{xla,nlp}/{default,random},tile/xla}/{train,valid,test}",
    )


def collection_dir(root: str | Path, collection: str) -> Path:
    """The folder of one collection under any accepted root."""
    if collection not in COLLECTIONS:
        raise SettingsError(f"unknown collection {collection!r}; expected one of {', '.join(COLLECTIONS)}")
    found = find_collections(root)
    if collection not in found:
        raise DataError(root, collection, f"only {', '.join(found) or 'none'}", f"a folder for {collection}")
    return found[collection]


def list_files(root: str | Path, collection: str, split: str) -> list[Path]:
    """Sorted .npz files of one collection and split."""
    if split not in SPLITS:
        raise SettingsError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    folder = collection_dir(root, collection) / split
    if not folder.is_dir():
        raise DataError(folder.parent, split, "no such split folder", f"{folder} holding .npz files")
    files = sorted(folder.glob("*.npz"))
    if not files:
        raise DataError(folder, split, "no .npz files", "one .npz file per graph")
    return files


def submission_id(collection: str, path: Path) -> str:
    """The submission ID of a test file: '<collection>:<stem>'."""
    return f"{collection}:{path.stem}"


# ---------------------------------------------------------------- reading


@dataclass(frozen=True)
class KeyFormat:
    """How one key must look. `shape`: an int is a fixed size, a letter a length shared between keys (fixed by the
    first key in FORMAT that has it), None any size. `bounds`: inclusive value range."""

    dtype: str  # "float" (float dtypes, and integer ones: exact values) | "int" (integer dtypes only)
    shape: tuple[int | str | None, ...]
    bounds: tuple[int, int | str] | None = None  # "node": a node id (n - 1 at most); "count": a node count (n)
    integral: bool = False  # float values that must be whole numbers
    compact: bool = False  # read a block at a time into int8, which its bounds fit (see _read_compact)


# Checked in this order: node_feat fixes n, config_runtime fixes c, node_config_feat fixes nc.
FORMAT = {
    "node_feat": KeyFormat("float", ("n", NODE_FEAT_DIM)),
    "node_opcode": KeyFormat("int", ("n",), (0, NUM_OPCODES - 1)),
    "edge_index": KeyFormat("int", (None, 2), (0, "node")),
    "config_runtime": KeyFormat("int", ("c",)),  # its values depend on the split: _check_runtimes
    "config_feat": KeyFormat("float", ("c", TILE_CONFIG_DIM)),
    "config_runtime_normalizers": KeyFormat("int", ("c",)),
    "node_config_feat": KeyFormat("float", ("c", "nc", LAYOUT_CONFIG_DIM), (-1, LAYOUT_SYMBOLS - 2), integral=True,
                                  compact=True),
    "node_config_ids": KeyFormat("int", ("nc",), (0, "node")),
    # cumulative node counts (the official encoder): 0, the count after each major computation, n; ordered below
    "node_splits": KeyFormat("int", (1, None), (0, "count")),
}
LENGTHS = {"n": "nodes", "c": "configs", "nc": "configurable nodes"}
NONEMPTY = ("n", "c")  # a graph has nodes and a file at least one config
_INT64_MAX = np.iinfo(np.int64).max
NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}  # by version
_BLOCK = 1 << 22  # elements per chunk of the element-wise checks: bounded temporaries on 0.86 GB config blocks


def read_graph(path: str | Path, split: str | None = None) -> RawGraph:
    """Read and check one layout or tile file; `split` ('train'/'valid'/'test') defaults to its folder name."""
    path = Path(path)
    split = split or path.parent.name
    arrays = _load_npz(path)
    task = max(TASKS.values(), key=lambda t: len((set(t.keys + t.optional_keys) - set(COMMON_KEYS)) & set(arrays)))
    required = task.keys
    allowed = required + task.optional_keys
    missing = [k for k in required if k not in arrays]
    if missing:
        raise DataError(path, missing[0], f"key missing (the file holds {', '.join(sorted(arrays)) or 'no arrays'})",
                        f"a {task.name} file with keys {', '.join(required)}")
    extra = sorted(set(arrays) - set(allowed))
    if extra:
        warnings.warn(f"{path}: key(s) {', '.join(extra)}: unexpected in a {task.name} file; read past (the format "
                      f"defines {', '.join(allowed)})", ExtraKeyWarning, stacklevel=2)

    checked = _check_keys(path, {key: arrays[key] for key in allowed if key in arrays})
    graph = RawGraph(path, task, checked["node_feat"], checked["node_opcode"], checked["edge_index"],
                     checked[task.config_key], checked["config_runtime"],
                     config_node_ids=checked.get("node_config_ids"),
                     normalizers=checked.get("config_runtime_normalizers"))
    if "node_splits" in checked:
        graph.node_splits = checked["node_splits"].reshape(-1)  # [1, k] -> [k]
        _check_splits(path, graph.node_splits)
    if graph.config_node_ids is not None:
        _check_config_nodes(path, graph.config_node_ids, graph.node_opcode)
    _check_runtimes(path, graph, split)
    return graph


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of an npz; any failure to decode it is a DataError naming the file (and the array, if one)."""
    if not path.is_file():
        raise DataError(path, "<file>", "no such file", "a readable .npz file")
    expected = "a complete .npz (zip) file of numeric arrays"
    try:
        loaded = np.load(path, allow_pickle=False)
    except Exception as err:  # zipfile, zlib, numpy header parsing (tokenize), pickled data, empty file...
        raise DataError(path, "<file>", f"unreadable archive ({type(err).__name__}: {err})", expected) from err
    if not isinstance(loaded, np.lib.npyio.NpzFile):  # a plain .npy array under an .npz name
        raise DataError(path, "<file>", f"unreadable archive: a single {type(loaded).__name__}, not a zip", expected)
    arrays = {}
    with loaded as npz:
        for key in npz.files:
            try:
                compact = _read_compact(npz, key) if key in FORMAT and FORMAT[key].compact else None
                arrays[key] = npz[key] if compact is None else compact
            except Exception as err:  # truncated or corrupt member, object (pickled) arrays, bad CRC...
                raise DataError(path, "<file>", f"unreadable array '{key}' ({type(err).__name__}: {err})",
                                expected) from err
    return arrays


def array_shapes(path: str | Path) -> dict[str, tuple[int, ...]]:
    """Each array's shape in an .npz, read from its header alone (no array is decompressed past it); a file that
    is not a readable archive of .npy arrays is a DataError naming it."""
    path = Path(path)
    shapes = {}
    try:
        with np.load(path, allow_pickle=False) as npz:
            for key in npz.files:
                with npz.zip.open(f"{key}.npy") as member:
                    shapes[key] = NPY_HEADERS[np.lib.format.read_magic(member)](member)[0]
    except Exception as err:  # no such file, not a zip, a cut member, an unknown .npy version
        raise DataError(path, "<file>", f"unreadable archive ({type(err).__name__}: {err})",
                        "a complete .npz (zip) file of numeric arrays") from err
    return shapes


def _read_compact(npz: np.lib.npyio.NpzFile, key: str) -> np.ndarray | None:
    """The member `key` read _BLOCK elements at a time into int8, each block checked to hold only whole numbers
    within the key's bounds: the array never sits in memory at its stored width (a 100k-config float32
    node_config_feat is 1 GB, 4x its int8). None where it is not a plain C-order array of numbers that all pass:
    the caller reads it whole, and the checks report what is wrong with it."""
    low, high = FORMAT[key].bounds
    try:
        with npz.zip.open(f"{key}.npy") as member:
            read_header = NPY_HEADERS.get(np.lib.format.read_magic(member))
            if read_header is None:
                return None
            shape, fortran_order, dtype = read_header(member)
            if fortran_order or dtype.kind not in "fiu" or len(shape) < 2:
                return None
            out = np.empty(shape, np.int8)
            rows = max(1, _BLOCK // max(1, out[:1].size))  # first-axis rows per block
            for start in range(0, len(out), rows):
                part = out[start:start + rows]
                data = member.read(part.size * dtype.itemsize)
                if len(data) != part.size * dtype.itemsize:
                    return None
                block = np.frombuffer(data, dtype).reshape(part.shape)
                # NaN fails both comparisons
                if not (block.min(initial=low) >= low and block.max(initial=high) <= high) or \
                        (dtype.kind == "f" and (block != np.round(block)).any()):
                    return None
                part[...] = block
            if member.read():  # also reaching the end checks the member's CRC
                return None
    except Exception:  # a truncated or corrupt member: read whole, it is reported
        return None
    return out


def _check_keys(path: Path, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Check each array against FORMAT, in FORMAT's order; floats come back as float32, integers as int64, compact
    keys as int8."""
    lengths: dict[str, tuple[int, str]] = {}  # length name -> (its value, the key that fixed it)
    checked = {}
    for key in (key for key in FORMAT if key in arrays):
        checked[key] = _check_array(path, key, arrays[key], FORMAT[key], lengths)
    return checked


def _check_array(path: Path, key: str, value: np.ndarray, spec: KeyFormat, lengths: dict) -> np.ndarray:
    """Dtype, then shape (recording the lengths it fixes), then values: finite, int64-sized, within bounds."""
    if value.dtype.kind not in ("fiu" if spec.dtype == "float" else "iu"):
        expected = "a float dtype (float32 in the real files)" if spec.dtype == "float" else "an integer dtype"
        raise DataError(path, key, f"dtype {value.dtype}", expected)
    _check_shape(path, key, value.shape, spec.shape, lengths)
    if value.dtype == np.uint64 and value.size and value.max() > _INT64_MAX:  # would wrap round to negatives
        raise DataError(path, key, f"value {value.max()}", f"values that fit in int64 (at most {_INT64_MAX})")
    if spec.dtype == "int":
        value = value.astype(np.int64, copy=False)
    elif not (spec.compact and value.dtype == np.int8):  # a compact read is whole numbers already
        with np.errstate(over="ignore"):  # float64 beyond float32's range becomes inf: reported just below
            value = value.astype(np.float32, copy=False)
        low, high = value.min(initial=0), value.max(initial=0)  # min/max propagate NaN and reach any inf
        if not (np.isfinite(low) and np.isfinite(high)):
            bad = sum(int((~np.isfinite(block)).sum()) for block in _blocks(value))
            raise DataError(path, key, f"{bad} NaN/inf values", "finite values")
    if spec.bounds is not None and value.size:
        n = lengths["n"][0]
        low, high = spec.bounds[0], {"node": n - 1, "count": n}.get(spec.bounds[1], spec.bounds[1])
        found_low, found_high = value.min(), value.max()
        fraction = spec.integral and value.dtype.kind == "f" and any(  # integers are whole already
            (block != np.round(block)).any() for block in _blocks(value))
        if found_low < low or found_high > high or fraction:
            raise DataError(path, key, f"values in [{_num(found_low)}, {_num(found_high)}]"
                            + (", not integers" if fraction else ""), f"integers in [{low}, {high}]")
    return value.astype(np.int8, copy=False) if spec.compact else value


def _check_shape(path: Path, key: str, shape: tuple[int, ...], expected: tuple, lengths: dict) -> None:
    sizes = [lengths.get(e, (None,))[0] if isinstance(e, str) else e for e in expected]
    if len(shape) != len(expected) or any(want is not None and got != want for got, want in zip(shape, sizes)):
        text = "(" + ", ".join("*" if s is None else str(s) for s in sizes) + ("," if len(sizes) == 1 else "") + ")"
        named = [f"{lengths[e][0]} {LENGTHS[e]} as in '{lengths[e][1]}'" for e in expected if e in lengths]
        raise DataError(path, key, f"shape {shape}", f"shape {text}" + (f" ({'; '.join(named)})" if named else ""))
    for name, size in zip(expected, shape):
        if isinstance(name, str) and name not in lengths:
            if name in NONEMPTY and size == 0:
                raise DataError(path, key, f"0 {LENGTHS[name]}", f"at least one {LENGTHS[name][:-1]}")
            lengths[name] = (size, key)


def _blocks(value: np.ndarray):
    """Views of `value` along its first axis of about _BLOCK elements each."""
    step = max(1, _BLOCK // max(1, value[:1].size))
    return (value[i:i + step] for i in range(0, len(value), step))


def _num(value: np.number) -> str:
    """-1, 6, 1000000000 for whole numbers; 2.5, 1e+30 otherwise."""
    return str(int(value)) if value == np.round(value) and abs(value) < 1e18 else f"{value:g}"


def _check_splits(path: Path, splits: np.ndarray) -> None:
    """The official encoder's order: 0 first, then non-decreasing (the values were bounded by n above)."""
    if splits.size and splits[0] != 0:
        raise DataError(path, "node_splits", f"first value {splits[0]}", "0 first (cumulative node counts)")
    drops = np.flatnonzero(np.diff(splits) < 0)
    if drops.size:
        i = int(drops[0])
        raise DataError(path, "node_splits", f"a decrease at position {i + 1} ({splits[i]} -> {splits[i + 1]})",
                        "non-decreasing values (cumulative node counts ending with n)")


def _check_config_nodes(path: Path, ids: np.ndarray, opcode: np.ndarray) -> None:
    """Each configurable node once (an error); opcodes other than conv/dot/reshape only warn."""
    if len(np.unique(ids)) != len(ids):
        raise DataError(path, "node_config_ids", "duplicated node ids", "each configurable node listed once")
    odd = ~np.isin(opcode[ids], CONFIGURABLE_OPCODES)
    if odd.any():
        warnings.warn(
            f"{path}: key 'node_config_ids': {int(odd.sum())} node(s) with opcodes "
            f"{sorted(set(opcode[ids][odd].tolist()))}; expected opcodes {CONFIGURABLE_OPCODES} "
            "(convolution, dot, reshape)",
            ConfigNodeWarning,
            stacklevel=3,
        )


def _check_runtimes(path: Path, graph: RawGraph, split: str) -> None:
    """Positive runtimes and normalizers; test files hold zeros (and may hold zero normalizers), never negatives."""
    if graph.is_test and split != "test":
        raise DataError(path, "config_runtime", f"all zero in a {split} file",
                        "positive runtimes (only test files hold zeros)")
    expected = "non-negative values (a test file)" if split == "test" else "positive values"
    for key, values in (("config_runtime", graph.config_runtime), ("config_runtime_normalizers", graph.normalizers)):
        if values is not None and (values.min() < 0 or (split != "test" and values.min() == 0)):
            raise DataError(path, key, f"minimum {values.min()}", expected)
