"""Writing the synthetic dataset: all five collections in the exact on-disk format, and `solution synth`.

Run: `solution synth --out data/synthetic --size tiny` (solution/tools/synth.py); `--programs` writes the
real-program corpus instead (solution/programs/corpus.py).

Files (solution/synth/writing.py): deflated for tiny/small, stored for medium and realistic (1 GB config blocks deflate
slowly and load faster raw). Config blocks stream in chunks of 8192, so a 100,040 x 150 x 18 block needs ~0.1 GB of
memory. Same (size, seed, collections) -> same bytes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from ..atomic import atomic_write
from ..constants import COLLECTIONS, SPLITS
from ..format import LAYOUT_CONFIG_DIM
from ..layouts import row_major
from .graphs import edge_index, node_features
from .layouts import LayoutGraph, build_layout_graph, config_features, hash_weights, noisy, sample_choices
from .tiles import NORMALIZER_NOISE, sample_tiles, tile_features, tile_kernel
from .writing import AnswerRows, Chunked, fresh_npz_folder, named_rng, write_npz

SIZES = ("tiny", "small", "medium", "realistic")

CHUNK = 8192  # configs per streamed block
BIG_CONFIGS = 100_040


# ---------------------------------------------------------------- sizes


@dataclass(frozen=True)
class SizeSpec:
    """How many files of what size each collection gets."""

    layout_files: tuple[int, int, int]  # train, valid, test graphs per layout collection
    nodes: tuple[int, int]  # target node count range
    configs: tuple[int, int]  # configs per train / valid file
    test_configs: tuple[int, int]
    configurable: tuple[int, int]  # nc range (all conv/dot/reshape nodes when fewer)
    big_train_files: int  # nlp train files holding BIG_CONFIGS configs
    tile_files: tuple[int, int, int]
    tile_configs: tuple[int, int]
    compress: bool


SIZE_SPECS = {
    "tiny": SizeSpec((6, 3, 3), (150, 400), (30, 120), (30, 120), (5, 20), 0, (30, 8, 8), (10, 40), True),
    "small": SizeSpec((30, 8, 8), (500, 3000), (300, 2000), (300, 1000), (15, 60), 0, (400, 60, 60), (10, 100),
                      True),
    # layout files of the sizes Kaggle's test files have: 5k-18k nodes, 116-472 configurable, 1k-4k configs
    "medium": SizeSpec((4, 1, 2), (5_000, 18_000), (1_000, 4_000), (1_000, 1_000), (116, 472), 0, (30, 8, 8),
                       (10, 40), False),
    "realistic": SizeSpec((4, 2, 2), (10_000, 40_000), (2_000, 20_000), (1_000, 1_000), (100, 150), 1,
                          (1500, 200, 200), (10, 500), False),
}


def _test_stem(seed: int, collection: str, index: int) -> str:
    return hashlib.sha256(f"{seed}/{collection}/{index}".encode()).hexdigest()[:16]


def _write_layout_file(path: Path, graph: LayoutGraph, search: str, count: int, test: bool,
                       rng: np.random.Generator, compress: bool) -> np.ndarray:
    """Write one layout file, streaming the config block; return its true runtimes [c]."""
    runtimes: list[np.ndarray] = []

    def chunks() -> Iterator[np.ndarray]:
        for start in range(0, count, CHUNK):
            choices, explicit = sample_choices(graph, rng, min(CHUNK, count - start), search)
            runtimes.append(noisy(graph.cost.evaluate(choices), choices, graph.hash_weights, rng))
            yield config_features(graph, choices, explicit)

    def stored() -> np.ndarray:  # called after the config block has streamed
        return np.zeros(count, np.int64) if test else np.concatenate(runtimes)

    block = Chunked((count, len(graph.config_ids), LAYOUT_CONFIG_DIM), np.dtype(np.float32), chunks())
    write_npz(path, [*graph.arrays().items(), ("node_config_feat", block), ("config_runtime", stored)], compress)
    return np.concatenate(runtimes)


def _layout_collections(out: Path, spec: SizeSpec, seed: int, family: str, searches: Sequence[str],
                        rows: AnswerRows) -> None:
    """Both searches of one family share each graph (as in the real data) but draw their own configs."""
    offset = 0
    for split, files in zip(SPLITS, spec.layout_files):
        for i in range(files):
            grng = named_rng(seed, "layout", family, split, i)
            graph = build_layout_graph(grng, family, int(grng.integers(*spec.nodes)),
                                       int(grng.integers(spec.configurable[0], spec.configurable[1] + 1)))
            for search in searches:
                collection = f"layout:{family}:{search}"
                crng = named_rng(seed, collection, split, i)
                count = int(crng.integers(*(spec.test_configs if split == "test" else spec.configs), endpoint=True))
                if split == "train" and family == "nlp" and i < spec.big_train_files:
                    count = BIG_CONFIGS
                stem = _test_stem(seed, collection, i) if split == "test" else f"{graph.name}_{offset + i}"
                path = out.joinpath(*collection.split(":"), split, f"{stem}.npz")
                truth = _write_layout_file(path, graph, search, count, split == "test", crng, spec.compress)
                if split == "test":
                    rows.add(collection, stem, count, None, [str(int(t)) for t in truth])
        offset += files


def _tile_collection(out: Path, spec: SizeSpec, seed: int, rows: AnswerRows) -> None:
    offset = 0
    for split, files in zip(SPLITS, spec.tile_files):
        for i in range(files):
            rng = named_rng(seed, "tile", split, i)
            family, kernel = tile_kernel(rng)
            tiles = sample_tiles(kernel, rng, int(rng.integers(*spec.tile_configs, endpoint=True)))
            weights = hash_weights(rng, tiles.shape[1])
            runtime = noisy(kernel.runtime(tiles), tiles, weights, rng)
            default = kernel.default_tile()[None]
            base = float(noisy(kernel.runtime(default), default, weights, rng)[0])
            normalizer = np.round(base * (1 + rng.uniform(-NORMALIZER_NOISE, NORMALIZER_NOISE, len(tiles))))
            normalizer = np.maximum(normalizer, 1).astype(np.int64)
            stem = _test_stem(seed, "tile:xla", i) if split == "test" else f"{family}_fusion_{offset + i}"
            layouts = [row_major(n.rank) for n in kernel.nodes]
            arrays = {"node_feat": node_features(kernel.nodes, layouts),
                      "node_opcode": np.array([n.op for n in kernel.nodes], np.uint8),
                      "edge_index": edge_index(kernel.nodes), "config_feat": tile_features(kernel, tiles),
                      "config_runtime": np.zeros_like(runtime) if split == "test" else runtime,
                      "config_runtime_normalizers": normalizer}
            write_npz(out / "tile" / "xla" / split / f"{stem}.npz", arrays.items(), spec.compress)
            if split == "test":
                rows.add("tile:xla", stem, len(tiles), 5, [f"{r / q:.10g}" for r, q in zip(runtime, normalizer)])
        offset += files


def generate(out: str | Path, size: str = "tiny", seed: int = 0, collections: Sequence[str] = COLLECTIONS) -> Path:
    """Write a Kaggle-shaped dataset under `out` and return `out`.

    The requested collections must not exist there yet; sample_submission.csv and answers.csv cover exactly them.
    """
    if size not in SIZE_SPECS:
        raise ValueError(f"unknown size {size!r}; expected one of {', '.join(SIZES)}")
    out, spec = Path(out), SIZE_SPECS[size]
    npz, rows = fresh_npz_folder(out, collections), AnswerRows()
    if "tile:xla" in collections:
        _tile_collection(npz, spec, seed, rows)
    for family in ("xla", "nlp"):
        searches = [s for s in ("random", "default") if f"layout:{family}:{s}" in collections]
        if searches:
            _layout_collections(npz, spec, seed, family, searches, rows)
    ordered = [c for c in COLLECTIONS if c in rows.submission]
    with atomic_write(out / "sample_submission.csv") as handle:
        handle.write("ID,TopConfigs\n" + "".join(line + "\n" for c in ordered for line in rows.submission[c]))
    with atomic_write(out / "answers.csv") as handle:
        handle.write("ID,Runtimes\n" + "".join(line + "\n" for c in ordered for line in rows.answers[c]))
    return out
