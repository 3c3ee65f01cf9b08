"""`solution encode`: HLO text to the official layout arrays, or to tile files of its fused computations."""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..atomic import atomic_files
from ..errors import BAD_DATA, OK, USAGE, WRITE_FAILED, SettingsError, WriteError, fail
from ..programs import hlo, kernels
from ..programs.encode import LAYOUT_KEYS, encode_file, save_arrays
from ..programs.hlo import HloError

TILE_KEYS = {"node_feat": np.float32, "node_opcode": np.uint8, "edge_index": np.int64, "config_feat": np.float32,
             "config_runtime": np.int64, "config_runtime_normalizers": np.int64}  # format.md's tile file
MODULE_SUFFIXES = (".hlo", ".txt")


def _jobs(program: Path, out: Path) -> list[tuple[Path, Path]]:
    """(module file, npz file) pairs: one file to FILE.npz (or into a folder), a folder's modules into a folder."""
    if program.is_dir():
        sources = sorted(p for p in program.iterdir() if p.suffix in MODULE_SUFFIXES and p.is_file())
        if not sources:
            raise FileNotFoundError(f"{program}: no *.hlo or *.txt module files in this folder")
        if out.suffix == ".npz":
            raise SettingsError(f"--out {out}: a folder input writes one .npz per module; expected a folder")
        return [(source, out / f"{source.stem}.npz") for source in sources]
    if not program.is_file():
        raise FileNotFoundError(f"{program}: no such file or folder; expected HLO text or a folder of it")
    return [(program, out if out.suffix == ".npz" else out / f"{program.stem}.npz")]


def _summary(target: Path, encoded: dict[str, np.ndarray]) -> str:
    if "config_feat" in encoded:
        return (f"{target}: a tile kernel of {len(encoded['node_opcode'])} nodes, {len(encoded['config_feat'])} "
                "candidate tiles (the first: the compiler-like default)")
    return (f"{target}: {len(encoded['node_opcode'])} nodes, {len(encoded['edge_index'])} edges, "
            f"{len(encoded['node_config_ids'])} configurable, "
            f"major computations: {encoded['node_splits'].shape[1] - 1}")


def tile_files(source: Path, out: Path, fusions: Sequence[str], configs: int, seed: int
               ) -> list[tuple[Path, dict[str, np.ndarray]]]:
    """(path, tile arrays) per fused computation of an optimised module (or per one named in `fusions`): its graph,
    the compiler-like default tile first, then up to `configs` - 1 other candidates (per iteration axis a power of
    two or the whole dimension: the official candidate rules are not public), runtimes 0 as in a test file. The
    files are <out>/<module file>_<computation>.npz, or `out` itself when it names one .npz."""
    module = hlo.read_module(source)
    available = kernels.fused_computations(module)
    if not available:
        raise SettingsError(f"{source}: no fused computation in this module; expected a module after XLA's fusion "
                            "pass (a '*after_optimizations*.txt' dump, or jax's `.compile().as_text()`)")
    unknown = [name for name in fusions if name not in available]
    if unknown:
        raise SettingsError(f"--fusion {unknown[0]}: not a fused computation of {source}; expected one of "
                            f"{', '.join(available[:6])}{' ...' if len(available) > 6 else ''}")
    names = list(fusions) or available
    if out.suffix == ".npz" and len(names) != 1:
        raise SettingsError(f"--out {out}: {len(names)} fused computations, one file each; expected a folder "
                            "(or one --fusion NAME)")
    rng, files = np.random.default_rng(seed), []
    for name in names:
        arrays, kernel = kernels.fusion_kernel(module, name)
        if kernel is None:
            warnings.warn(f"{source}: fused computation '{name}' has no array output of at most six dimensions to "
                          "tile; skipped", UserWarning, stacklevel=2)
            continue
        tiles = kernel.candidates(configs, rng)
        default = np.flatnonzero((tiles == kernel.default_tile()).all(1))
        tiles = np.concatenate([tiles[default], np.delete(tiles, default, 0)])  # [C, S] the default first
        zeros = np.zeros(len(tiles), np.int64)
        path = out if out.suffix == ".npz" else out / f"{source.stem}_{name}.npz"
        files.append((path, {**arrays, "config_feat": kernel.config_feat(tiles), "config_runtime": zeros,
                             "config_runtime_normalizers": zeros}))
    return files


def main(argv: list[str] | None = None) -> int:
    """`solution encode PROGRAM.hlo|FOLDER --out FILE.npz|FOLDER` (a folder: every *.hlo and *.txt in it, one .npz
    each; with --collection tile, one .npz per fused computation): every module is encoded before anything is
    written, and the files are written together or not at all."""
    parser = argparse.ArgumentParser(prog="solution encode", description=__doc__.splitlines()[0])
    parser.add_argument("program", type=Path, help="an HLO text file (.hlo, or an XLA dump .txt), or a folder")
    parser.add_argument("--out", type=Path, required=True,
                        help="FILE.npz, or a folder that receives <name>.npz per module (tile: per fused computation)")
    parser.add_argument("--collection", choices=("layout", "tile"), default="layout",
                        help="layout: the whole module (default); tile: each fused computation of an optimised "
                             "module, with candidate tile sizes")
    parser.add_argument("--fusion", action="append", default=[],
                        help="tile: only this fused computation (repeatable), e.g. fused_computation.12")
    parser.add_argument("--configs", type=int, default=100, help="tile: candidate tiles per kernel at most")
    parser.add_argument("--seed", type=int, default=0, help="tile: the candidates' draw")
    args = parser.parse_args(argv)
    if args.configs < 1:
        parser.error(f"--configs {args.configs}: expected a count >= 1")
    try:
        jobs = _jobs(args.program, args.out)
        if args.collection == "tile":
            encoded = [f for source, _ in jobs for f in tile_files(source, args.out, args.fusion, args.configs,
                                                                   args.seed)]
        else:
            encoded = [(target, encode_file(source)) for source, target in jobs]
        keys = TILE_KEYS if args.collection == "tile" else LAYOUT_KEYS
        with atomic_files([target for target, _ in encoded], "wb") as handles:
            for handle, (_, result) in zip(handles, encoded):
                save_arrays(handle, result, keys)
    except HloError as error:
        return fail(error, BAD_DATA)
    except WriteError as error:
        return fail(error, WRITE_FAILED)
    except (FileNotFoundError, SettingsError) as error:
        return fail(error, USAGE)
    for target, result in encoded:
        print(_summary(target, result))
    return OK
