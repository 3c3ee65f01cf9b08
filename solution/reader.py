"""Find TpuGraphs collections on disk and read one .npz file, checking every key against the format."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .constants import (
    COLLECTIONS,
    CONFIGURABLE_OPCODES,
    LAYOUT_CONFIG_DIM,
    LAYOUT_SYMBOLS,
    NODE_FEAT_DIM,
    NUM_OPCODES,
    SPLITS,
    TILE_CONFIG_DIM,
)

COMMON_KEYS = ("node_feat", "node_opcode", "edge_index", "config_runtime")
LAYOUT_KEYS = COMMON_KEYS + ("node_config_feat", "node_config_ids")
OPTIONAL_LAYOUT_KEYS = ("node_splits",)
TILE_KEYS = COMMON_KEYS + ("config_feat", "config_runtime_normalizers")


class DataError(ValueError):
    """A data file or folder that does not match the TpuGraphs format."""

    def __init__(self, file: str | Path, key: str, found: str, expected: str) -> None:
        self.file, self.key, self.found, self.expected = str(file), key, found, expected
        super().__init__(f"{file}: key '{key}': found {found}; expected {expected}")


class ConfigNodeWarning(UserWarning):
    """A configurable node that points at an opcode other than convolution, dot or reshape."""


@dataclass
class RawGraph:
    """One file as read from disk, checked, in the real files' dtypes."""

    path: Path
    kind: str  # "layout" | "tile"
    node_feat: np.ndarray  # [n, 140] float32
    node_opcode: np.ndarray  # [n] int64
    edge_index: np.ndarray  # [m, 2] int64, row [consumer, producer] as on disk
    config_feat: np.ndarray  # layout [c, nc, 18] float32; tile [c, 24] float32
    config_runtime: np.ndarray  # [c] int64 (all zero in test files)
    config_node_ids: np.ndarray | None = None  # [nc] int64, layout only
    node_splits: np.ndarray | None = None  # [k] int64, layout only, optional
    normalizers: np.ndarray | None = None  # [c] int64, tile only

    @property
    def is_test(self) -> bool:
        return not self.config_runtime.any()

    @property
    def num_configs(self) -> int:
        return len(self.config_runtime)

    def target(self) -> np.ndarray:
        """Runtime to rank, lower is faster: runtime / normalizer for tile, runtime (ns) for layout."""
        runtime = self.config_runtime.astype(np.float64)
        if self.kind == "tile" and not self.is_test:  # test files may hold zero normalizers
            return runtime / self.normalizers
        return runtime


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
        raise ValueError(f"unknown collection {collection!r}; expected one of {', '.join(COLLECTIONS)}")
    found = find_collections(root)
    if collection not in found:
        raise DataError(root, collection, f"only {', '.join(found) or 'none'}", f"a folder for {collection}")
    return found[collection]


def list_files(root: str | Path, collection: str, split: str) -> list[Path]:
    """Sorted .npz files of one collection and split."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    folder = collection_dir(root, collection) / split
    if not folder.is_dir():
        raise DataError(folder.parent, split, "no such split folder", f"{folder} holding .npz files")
    return sorted(folder.glob("*.npz"))


def submission_id(collection: str, path: Path) -> str:
    """The submission ID of a test file: '<collection>:<stem>'."""
    return f"{collection}:{path.stem}"


# ---------------------------------------------------------------- reading


def read_graph(path: str | Path, split: str | None = None) -> RawGraph:
    """Read and check one layout or tile file; `split` ('train'/'valid'/'test') defaults to its folder name."""
    path = Path(path)
    split = split or path.parent.name
    arrays = _load_npz(path)
    tile_only = {"config_feat", "config_runtime_normalizers"}
    layout_only = {"node_config_feat", "node_config_ids", "node_splits"}
    kind = "tile" if len(tile_only & set(arrays)) > len(layout_only & set(arrays)) else "layout"
    required = TILE_KEYS if kind == "tile" else LAYOUT_KEYS
    allowed = required + (OPTIONAL_LAYOUT_KEYS if kind == "layout" else ())
    missing = [k for k in required if k not in arrays]
    if missing:
        raise DataError(path, missing[0], "key missing", f"a {kind} file with keys {', '.join(required)}")
    extra = sorted(set(arrays) - set(allowed))
    if extra:
        raise DataError(path, extra[0], "unexpected key", f"only {', '.join(allowed)}")

    node_feat = _float(path, arrays, "node_feat", (None, NODE_FEAT_DIM))
    n = len(node_feat)
    node_opcode = _int(path, arrays, "node_opcode", (n,))
    _check_range(path, "node_opcode", node_opcode, 0, NUM_OPCODES - 1)
    edge_index = _int(path, arrays, "edge_index", (None, 2))
    _check_range(path, "edge_index", edge_index, 0, n - 1)
    runtime = _int(path, arrays, "config_runtime", (None,))
    c = len(runtime)
    if c == 0:
        raise DataError(path, "config_runtime", "0 configs", "at least one config")

    graph = RawGraph(path, kind, node_feat, node_opcode, edge_index, np.empty(0), runtime)
    if kind == "tile":
        graph.config_feat = _float(path, arrays, "config_feat", (c, TILE_CONFIG_DIM))
        graph.normalizers = _int(path, arrays, "config_runtime_normalizers", (c,))
    else:
        graph.config_feat = _float(path, arrays, "node_config_feat", (c, None, LAYOUT_CONFIG_DIM))
        nc = graph.config_feat.shape[1]
        graph.config_node_ids = _int(path, arrays, "node_config_ids", (nc,))
        _check_config_nodes(path, graph.config_node_ids, node_opcode)
        _check_layout_values(path, graph.config_feat)
        if "node_splits" in arrays:
            graph.node_splits = _int(path, arrays, "node_splits", None).reshape(-1)  # [1, k] -> [k]
    _check_runtimes(path, graph, split)
    return graph


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise DataError(path, "<file>", "no such file", "a readable .npz file")
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):  # a plain .npy array under an .npz name
            raise ValueError(f"a single {type(loaded).__name__}, not an archive")
        with loaded as npz:
            return {key: npz[key] for key in npz.files}
    except Exception as err:  # zipfile, zlib, numpy header parsing (tokenize), unsupported compression...
        raise DataError(path, "<file>", f"unreadable archive ({type(err).__name__}: {err})",
                        "a complete .npz (zip) file") from err


def _shape_ok(shape: tuple[int, ...], expected: tuple[int | None, ...] | None) -> bool:
    if expected is None:
        return True
    return len(shape) == len(expected) and all(e is None or s == e for s, e in zip(shape, expected))


def _shape_text(expected: tuple[int | None, ...]) -> str:
    return "(" + ", ".join("*" if e is None else str(e) for e in expected) + ("," if len(expected) == 1 else "") + ")"


def _array(path: Path, arrays: dict, key: str, expected: tuple | None, kinds: str) -> np.ndarray:
    value = arrays[key]
    if value.dtype.kind not in kinds:
        raise DataError(path, key, f"dtype {value.dtype}", f"a {'float' if 'f' in kinds else 'integer'} dtype")
    if not _shape_ok(value.shape, expected):
        raise DataError(path, key, f"shape {value.shape}", f"shape {_shape_text(expected)}")
    return value


def _float(path: Path, arrays: dict, key: str, expected: tuple) -> np.ndarray:
    value = _array(path, arrays, key, expected, "fiu")
    value = value.astype(np.float32, copy=False)
    if not np.isfinite(value).all():
        raise DataError(path, key, f"{int((~np.isfinite(value)).sum())} NaN/inf values", "finite values")
    return value


def _int(path: Path, arrays: dict, key: str, expected: tuple | None) -> np.ndarray:
    return _array(path, arrays, key, expected, "iu").astype(np.int64, copy=False)


def _check_range(path: Path, key: str, value: np.ndarray, low: int, high: int) -> None:
    if value.size and (value.min() < low or value.max() > high):
        raise DataError(path, key, f"values in [{value.min()}, {value.max()}]", f"values in [{low}, {high}]")


def _check_config_nodes(path: Path, ids: np.ndarray, opcode: np.ndarray) -> None:
    _check_range(path, "node_config_ids", ids, 0, len(opcode) - 1)
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


def _check_layout_values(path: Path, config_feat: np.ndarray) -> None:
    low, high = config_feat.min(initial=-1), config_feat.max(initial=-1)
    integral = np.array_equal(config_feat, np.round(config_feat))
    if low < -1 or high > LAYOUT_SYMBOLS - 2 or not integral:
        raise DataError(path, "node_config_feat", f"values in [{low}, {high}]{'' if integral else ', not integers'}",
                        f"integers in [-1, {LAYOUT_SYMBOLS - 2}]")


def _check_runtimes(path: Path, graph: RawGraph, split: str) -> None:
    if graph.is_test:
        if split != "test":
            raise DataError(path, "config_runtime", f"all zero in a {split} file",
                            "positive runtimes (only test files hold zeros)")
        return
    if split != "test" and graph.config_runtime.min() <= 0:
        raise DataError(path, "config_runtime", f"minimum {graph.config_runtime.min()}", "positive runtimes")
    if graph.normalizers is not None and split != "test" and graph.normalizers.min() <= 0:
        raise DataError(path, "config_runtime_normalizers", f"minimum {graph.normalizers.min()}",
                        "positive normalizers")
