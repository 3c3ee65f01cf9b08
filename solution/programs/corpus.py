"""`solution synth --programs`: the five collections from the zoo's real JAX programs, timed by the runtime law."""

from __future__ import annotations

import hashlib
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..atomic import atomic_write
from ..constants import COLLECTIONS
from ..synth.writing import AnswerRows, fresh_npz_folder, named_rng, write_npz
from . import encode, hlo, law, zoo
from .candidates import searched
from .encode import InlinedModule
from .kernels import fused_members, kernel_arrays, tiled_kernel, users_of

SPLIT_PATTERN = ("train", "valid", "test", "train", "train", "train", "train", "valid", "train", "test")
FLEXIBLE_INPUTS = frozenset({"broadcast", "constant", "iota"})


@dataclass(frozen=True)
class CorpusSize:
    """How many programs of what size, and how many configs each file gets."""

    families: dict[str, int]  # programs per family
    scale: tuple[float, float]  # zoo scale range (size of the programs)
    configs: tuple[int, int]  # layout configs per train file; per valid / test file
    kernels: int  # tile kernels per xla program at most
    tile_configs: tuple[int, int]  # tile configs per kernel (range)


_ALL = tuple(zoo.FAMILIES)
CORPUS_SIZES = {
    "tiny": CorpusSize({"mlp": 1, "rnn": 1, "cnn": 1, "encoder": 1, "decoder": 1, "generate": 1}, (0.05, 0.15),
                       (24, 16), 3, (6, 12)),
    "small": CorpusSize({f: 4 if zoo.FAMILIES[f][0] == "xla" else 5 for f in _ALL}, (0.1, 0.6), (1000, 500), 6,
                        (10, 60)),
    "full": CorpusSize({f: 9 if zoo.FAMILIES[f][0] == "xla" else 12 for f in _ALL}, (0.1, 1.0), (2000, 1000), 8,
                       (10, 100)),
}


@dataclass
class Lowered:
    """One zoo program, parsed and encoded, with its law and its place in the corpus."""

    program: zoo.LoweredProgram
    stem: str  # <family>_<variant>_<index>
    split: str
    graph: InlinedModule
    arrays: dict[str, np.ndarray]  # encode's layout arrays
    ranks: np.ndarray  # [NC, 3] output / input / kernel tensor rank of each configurable node
    law: law.LayoutLaw


def lower_programs(size: CorpusSize, seed: int) -> list[Lowered]:
    """Every program of the corpus, lowered, encoded and given a split; families interleaved so that each kind's
    k-th program takes SPLIT_PATTERN[k % 10]."""
    order = [(family, i) for i in range(max(size.families.values())) for family in size.families
             if i < size.families[family]]
    lowered, seen = [], {"xla": 0, "nlp": 0}
    for family, i in order:
        rng = named_rng(seed, "programs", family, i)
        program = zoo.lower(family, rng, float(rng.uniform(*size.scale)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", encode.UnknownOpcodeWarning)
            module = hlo.parse_module(program.hlo, f"{family}_{i}.hlo")
            graph = encode.flatten(module)
            arrays = encode.arrays(module, graph)
        ids = arrays["node_config_ids"]
        if not len(ids):
            continue
        ranks = np.array([encode.tensor_ranks(graph, int(k)) for k in ids], dtype=np.int64).reshape(-1, 3)
        split = SPLIT_PATTERN[seen[program.kind] % len(SPLIT_PATTERN)]
        seen[program.kind] += 1
        lowered.append(Lowered(program, f"{family}_{program.variant}_{i}", split, graph, arrays, ranks,
                               law.LayoutLaw(module, graph, ids, program.hlo)))
    return lowered


def _test_stem(seed: int, collection: str, stem: str) -> str:
    """A test file's name: a hash, as in Kaggle's test split."""
    return hashlib.sha256(f"programs/{seed}/{collection}/{stem}".encode()).hexdigest()[:16]


@dataclass
class _Records:
    """What the corpus writes beside the npz files: submission rows, answers, noise-free runtimes, a manifest."""

    rows: AnswerRows
    noiseless: list[str]
    manifest: list[str]

    def add(self, collection: str, split: str, stem: str, lowered: Lowered, clean: np.ndarray, truth: Sequence[str],
            top: int | None) -> None:
        nodes = len(lowered.graph.nodes)
        self.manifest.append(f"{collection},{split},{stem},{lowered.program.family},{lowered.stem},{nodes},"
                             f"{len(clean)}")
        self.noiseless.append(f"{collection}:{split}:{stem}," + ";".join(f"{v:.6g}" for v in clean))
        if split == "test":
            self.rows.add(collection, stem, len(clean), top, truth)


def _layout_collection(npz: Path, programs: list[Lowered], collection: str, size: CorpusSize, seed: int,
                       records: _Records) -> int:
    """One layout collection: every program of its kind, configs from its search, runtimes from the law."""
    _, kind, search = collection.split(":")
    written = 0
    for lowered in (p for p in programs if p.program.kind == kind):
        rng = named_rng(seed, collection, lowered.stem)
        count = size.configs[0] if lowered.split == "train" else size.configs[1]
        configs = searched(lowered.ranks, count, search, rng)  # [C, NC, 18], the default first
        configs = configs[rng.permutation(len(configs))]
        clean = lowered.law.runtime(configs)
        measured = law.noisy(clean, rng)
        test = lowered.split == "test"
        stem = _test_stem(seed, collection, lowered.stem) if test else lowered.stem
        arrays = lowered.arrays
        write_npz(npz.joinpath("layout", kind, search, lowered.split, f"{stem}.npz"), [
            ("node_feat", arrays["node_feat"]), ("node_opcode", arrays["node_opcode"]),
            ("edge_index", arrays["edge_index"]), ("node_config_feat", configs.astype(np.float32)),
            ("node_config_ids", arrays["node_config_ids"]), ("node_splits", arrays["node_splits"]),
            ("config_runtime", np.zeros_like(measured) if test else measured)], compress=True)
        records.add(collection, lowered.split, stem, lowered, clean, [str(int(t)) for t in measured], None)
        written += 1
    return written


# ---------------------------------------------------------------- tile kernels


def _tile_collection(npz: Path, programs: list[Lowered], size: CorpusSize, seed: int, records: _Records) -> int:
    """tile:xla: up to `size.kernels` fused kernels of each xla program, tile configs and their runtimes."""
    written = 0
    for lowered in (p for p in programs if p.program.kind == "xla"):
        graph, rng = lowered.graph, named_rng(seed, "tile:xla", lowered.stem)
        users = users_of(graph)
        anchors = [i for i, n in enumerate(graph.nodes) if n.opcode in ("dot", "convolution", "reduce")
                   and lowered.law.runs[i] > 0 and len(n.shape.dims) > 0]
        kernels = {}
        for anchor in rng.permutation(anchors):
            members = fused_members(graph, users, int(anchor))
            kernel = tiled_kernel(graph, members)
            if kernel is not None and kernel.dims not in kernels:
                kernels[kernel.dims] = (members, kernel)
            if len(kernels) == size.kernels:
                break
        for members, kernel in kernels.values():
            tiles = kernel.candidates(int(rng.integers(*size.tile_configs, endpoint=True)), rng)
            clean = kernel.runtime(tiles)
            measured = law.noisy(clean, rng)
            default = kernel.runtime(kernel.default_tile()[None])
            normalizers = law.noisy(np.repeat(default, len(tiles)), rng)
            name = hashlib.sha256(f"{lowered.stem}/{members}".encode()).hexdigest()[:16]
            test = lowered.split == "test"
            stem = _test_stem(seed, "tile:xla", f"{lowered.stem}_{name}") if test else f"{lowered.stem}_{name}"
            arrays = kernel_arrays(graph, lowered.arrays, members)
            write_npz(npz.joinpath("tile", "xla", lowered.split, f"{stem}.npz"), [
                *arrays.items(), ("config_feat", kernel.config_feat(tiles)),
                ("config_runtime", np.zeros_like(measured) if test else measured),
                ("config_runtime_normalizers", normalizers)], compress=True)
            truth = [f"{r / q:.10g}" for r, q in zip(measured, normalizers)]
            records.add("tile:xla", lowered.split, stem, lowered, clean / default[0], truth, 5)
            written += 1
    return written


# ---------------------------------------------------------------- the corpus


def build(out: str | Path, size: str = "small", seed: int = 0, collections: Sequence[str] = COLLECTIONS) -> Path:
    """Write the corpus under `out` (a Kaggle root): npz_all/npz/..., sample_submission.csv, answers.csv (the test
    files' runtimes), noiseless.csv (every file's noise-free runtimes), programs.csv (file -> family) and hlo/
    (each program's HLO text). Same (size, seed, collections) -> same files."""
    if size not in CORPUS_SIZES:
        raise ValueError(f"--size {size!r}; expected one of {', '.join(CORPUS_SIZES)} with --programs")
    out, spec = Path(out), CORPUS_SIZES[size]
    npz = fresh_npz_folder(out, collections)
    start = time.perf_counter()
    programs = lower_programs(spec, seed)
    for kind in ("xla", "nlp"):
        group = [p for p in programs if p.program.kind == kind]
        nodes = [len(p.graph.nodes) for p in group]
        print(f"lowered {len(group)} {kind} programs of {len({p.program.family for p in group})} families "
              f"({min(nodes, default=0)}-{max(nodes, default=0)} nodes) in {time.perf_counter() - start:.1f}s",
              flush=True)
    records = _Records(AnswerRows(), [], [])
    for collection in (c for c in COLLECTIONS if c in collections):
        began = time.perf_counter()
        if collection == "tile:xla":
            files = _tile_collection(npz, programs, spec, seed, records)
        else:
            files = _layout_collection(npz, programs, collection, spec, seed, records)
        print(f"{collection}: {files} files in {time.perf_counter() - began:.1f}s", flush=True)
    _write_tables(out, programs, records, collections)
    return out


def _write_tables(out: Path, programs: list[Lowered], records: _Records, collections: Sequence[str]) -> None:
    ordered = [c for c in COLLECTIONS if c in records.rows.submission and c in collections]
    tables = {
        "sample_submission.csv": "ID,TopConfigs\n" + "".join(
            line + "\n" for c in ordered for line in records.rows.submission[c]),
        "answers.csv": "ID,Runtimes\n" + "".join(line + "\n" for c in ordered for line in records.rows.answers[c]),
        "noiseless.csv": "ID,Runtimes\n" + "".join(line + "\n" for line in records.noiseless),
        "programs.csv": "collection,split,file,family,program,nodes,configs\n" + "".join(
            line + "\n" for line in records.manifest),
    }
    for name, text in tables.items():
        with atomic_write(out / name) as handle:
            handle.write(text)
    for lowered in programs:
        with atomic_write(out / "hlo" / f"{lowered.stem}.hlo") as handle:
            handle.write(lowered.program.hlo)
