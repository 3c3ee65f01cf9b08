"""Minimal valid TpuGraphs layout and tile arrays, and helpers to write them into a Kaggle-style tree.

`dtypes="real"` gives the dtypes of the files on Kaggle (uint8 opcodes, int64 ids and runtimes);
`dtypes="readme"` gives the int32 the official README states for the integer keys.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

CONFIGURABLE = (26, 34, 75)
OTHER_OPCODES = np.array([o for o in range(1, 121) if o not in CONFIGURABLE])
INT_KEYS = ("node_opcode", "edge_index", "node_config_ids", "node_splits", "config_runtime",
            "config_runtime_normalizers")


def collection_dir(root: Path, collection: str) -> Path:
    """<root>/npz_all/npz/<kind>/<source>[/<search>] for a collection name like 'layout:xla:random'."""
    return Path(root, "npz_all", "npz", *collection.split(":"))


def _graph(rng: np.random.Generator, n: int, m: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """node_feat, node_opcode and edge_index of a random DAG in topological order (last node = root)."""
    node_feat = np.zeros((n, 140), np.float32)
    node_feat[:, 1:140] = rng.integers(0, 4, size=(n, 139))  # integer-valued like the real features
    node_feat[:, 0] = 0
    node_feat[-1, 0] = 1  # is_root
    rank = rng.integers(0, 5, size=n)
    dims = rng.integers(1, 300, size=(n, 6)) * (np.arange(6)[None, :] < rank[:, None])
    node_feat[:, 21:27] = dims
    node_feat[:, 27] = dims.sum(1)
    node_feat[:, 28] = np.where(rank > 0, np.prod(np.where(dims > 0, dims, 1), axis=1), 0)
    layout = np.zeros((n, 6), np.float32)
    for i, r in enumerate(rank):
        layout[i, :r] = rng.permutation(r)
    node_feat[:, 134:140] = layout
    node_opcode = rng.choice(OTHER_OPCODES, size=n).astype(np.uint8)
    m = 2 * n if m is None else m
    consumer = rng.integers(1, n, size=m)
    producer = (rng.random(m) * consumer).astype(np.int64)  # producer < consumer: topological order
    edge_index = np.stack([consumer, producer], axis=1).astype(np.int64)
    return node_feat, node_opcode, edge_index


def _runtimes(rng: np.random.Generator, c: int, split: str) -> np.ndarray:
    if split == "test":
        return np.zeros(c, np.int64)
    return rng.integers(1_000, 10_000_000, size=c).astype(np.int64)


def _cast(arrays: dict[str, np.ndarray], dtypes: str) -> dict[str, np.ndarray]:
    if dtypes == "real":
        return arrays
    if dtypes != "readme":
        raise ValueError(dtypes)
    return {k: v.astype(np.int32) if k in INT_KEYS else v for k, v in arrays.items()}


def layout_arrays(n: int = 12, c: int = 5, nc: int = 3, m: int | None = None, split: str = "train",
                  seed: int = 0, dtypes: str = "real", computations: int = 2) -> dict[str, np.ndarray]:
    """A valid layout file's arrays: n nodes, c configs over nc configurable nodes, `computations` HLO
    computations (node_splits in the official encoder's form: 0, the end of each computation, n last)."""
    rng = np.random.default_rng(seed)
    node_feat, node_opcode, edge_index = _graph(rng, n, m)
    ids = np.sort(rng.choice(n, size=nc, replace=False)).astype(np.int64)
    node_opcode[ids] = rng.choice(CONFIGURABLE, size=nc)
    config = rng.integers(-1, 6, size=(c, nc, 18)).astype(np.float32)
    arrays = {
        "node_feat": node_feat,
        "node_opcode": node_opcode,
        "edge_index": edge_index,
        "node_config_feat": config,
        "node_config_ids": ids,
        "node_splits": np.concatenate([[0], np.sort(rng.choice(np.arange(1, n), size=computations - 1, replace=False)),
                                       [n]]).reshape(1, -1).astype(np.int64),
        "config_runtime": _runtimes(rng, c, split),
    }
    return _cast(arrays, dtypes)


def tile_arrays(n: int = 6, c: int = 5, m: int | None = None, split: str = "train", seed: int = 0,
                dtypes: str = "real") -> dict[str, np.ndarray]:
    """A valid tile file's arrays: a small kernel graph and c tile configs."""
    rng = np.random.default_rng(seed)
    node_feat, node_opcode, edge_index = _graph(rng, n, m)
    bounds = rng.integers(0, 64, size=(c, 3, 6)).astype(np.float32)
    bounds[:, 2] = 0  # input bounds are usually 0
    config = np.concatenate([bounds, bounds.sum(2, keepdims=True), bounds.prod(2, keepdims=True)], axis=2)
    arrays = {
        "node_feat": node_feat,
        "node_opcode": node_opcode,
        "edge_index": edge_index,
        "config_feat": config.reshape(c, 24).astype(np.float32),
        "config_runtime": _runtimes(rng, c, split),
        "config_runtime_normalizers": rng.integers(1_000, 10_000_000, size=c).astype(np.int64),
    }
    return _cast(arrays, dtypes)


def write_npz(path: str | Path, arrays: dict[str, np.ndarray], compressed: bool = False) -> Path:
    """Write `arrays` to `path` (folders created) with np.savez or np.savez_compressed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:  # a handle: np.savez would append .npz to a name without it
        (np.savez_compressed if compressed else np.savez)(handle, **arrays)
    return path


def split_file(root: Path, collection: str, split: str, name: str, arrays: dict[str, np.ndarray],
               compressed: bool = False) -> Path:
    """Write one file as <root>/npz_all/npz/<collection>/<split>/<name>.npz."""
    return write_npz(collection_dir(root, collection) / split / f"{name}.npz", arrays, compressed)


def make_tree(root: Path, seed: int = 0) -> dict[tuple[str, str], list[Path]]:
    """A tiny dataset: layout:xla:random and tile:xla, two files per split, some compressed."""
    files: dict[tuple[str, str], list[Path]] = {}
    for s, split in enumerate(("train", "valid", "test")):
        for i in range(2):
            k = seed + 10 * s + i
            lay = layout_arrays(n=20 + i, c=6, nc=3, split=split, seed=k)
            til = tile_arrays(n=7 + i, c=5, split=split, seed=k)
            files.setdefault(("layout:xla:random", split), []).append(
                split_file(root, "layout:xla:random", split, f"graph_{i}", lay, compressed=bool(i)))
            files.setdefault(("tile:xla", split), []).append(
                split_file(root, "tile:xla", split, f"kernel_{i}", til, compressed=not i))
    return files
