"""`solution rank`: a trained layout model ranks candidate layouts of one program (HLO text or a layout npz)."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from ..atomic import atomic_files
from ..constants import COLLECTIONS
from ..errors import OK, SettingsError
from ..programs.candidates import BLOCK, BLOCKS, SEARCHES, describe_block, searched, user_candidates
from ..programs.encode import LAYOUT_KEYS, Program, encode_program
from ..submission.ensemble import read_run
from ..training.checkpoints import read_checkpoint, saved_settings
from . import pipeline
from .settings import read_settings


def program_from_npz(path: Path) -> Program:
    """A layout file: its configurable nodes named by index, their ranks read off its own configurations."""
    with np.load(path, allow_pickle=False) as npz:
        arrays = {key: npz[key] for key in npz.files}
    missing = [key for key in (*LAYOUT_KEYS, "node_config_feat") if key not in arrays]
    if missing:
        raise SettingsError(f"{path}: keys {', '.join(missing)} missing; expected a layout .npz (or HLO text)")
    feat = arrays["node_config_feat"]  # [C, NC, 18]
    blocks = feat.reshape(*feat.shape[:2], len(BLOCKS), BLOCK)  # [C, NC, 3, 6]
    ranks = (blocks >= 0).sum(-1).max(0) if len(feat) else np.zeros((feat.shape[1], len(BLOCKS)), np.int64)
    names = [f"node {int(i)}" for i in arrays["node_config_ids"]]
    return Program(path.stem, arrays, names, ranks.astype(np.int64))


def read_program(path: Path) -> Program:
    """A layout .npz, or HLO text encoded by the official rules (`solution encode`)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such program file; expected HLO text or a layout .npz")
    return program_from_npz(path) if path.suffix == ".npz" else encode_program(path)


def candidates_of(program: Program, args: argparse.Namespace) -> np.ndarray:
    """[C, NC, 18]: the user's candidates, a layout file's own configurations, or a search's."""
    if args.candidates is not None:
        return user_candidates(args.candidates, program.names, program.ranks)
    if "node_config_feat" in program.arrays and args.configs is None:
        return program.arrays["node_config_feat"].astype(np.float32)
    search = args.search or ("default" if args.collection.endswith(":default") else "random")
    return searched(program.ranks, 1000 if args.configs is None else args.configs, search,
                    np.random.default_rng(args.seed))


def score(checkpoint: Path, collection: str, program: Program, configs: np.ndarray) -> np.ndarray:
    """[C] the model's scores (lower = predicted faster), through the same path as `solution run --checkpoints`:
    the program is written as the one test file of a scratch data root and predicted there."""
    with tempfile.TemporaryDirectory(prefix="solution-rank-") as scratch:
        root = Path(scratch) / "data"
        task, source, search = collection.split(":")
        folder = root / "npz_all" / "npz" / task / source / search / "test"
        folder.mkdir(parents=True)
        arrays = {key: program.arrays[key] for key in LAYOUT_KEYS}
        np.savez(folder / f"{program.name}.npz", **arrays, node_config_feat=configs.astype(np.float32),
                 config_runtime=np.zeros(len(configs), np.int64))
        job = pipeline.Job(root, Path(scratch) / "out")
        pipeline.evaluate(collection, checkpoint, read_settings()[collection], job, validate=False)
        run = read_run(job.parts / f"{collection.replace(':', '_')}.scores.npz")
        return run.scores[program.name]


def ranking(program: Program, configs: np.ndarray, scores: np.ndarray) -> list[dict]:
    """Every candidate from the predicted fastest: its rank, index, score against the default's, and layouts."""
    default = [c for c in range(len(configs)) if (configs[c] == -1).all()]
    base = float(scores[default[0]]) if default else float(np.median(scores))
    rows = []
    for rank, c in enumerate(np.argsort(scores, kind="stable"), start=1):
        layouts = {name: {block: describe_block(configs[c, k, b * BLOCK:(b + 1) * BLOCK])
                          for b, block in enumerate(BLOCKS) if program.ranks[k, b] > 0}
                   for k, name in enumerate(program.names)}
        rows.append({"rank": rank, "candidate": int(c), "score": float(scores[c]),
                     "vs_default": float(scores[c]) - base, "layouts": layouts})
    return rows


def table(rows: list[dict], top: int) -> str:
    """The top candidates for a compiler engineer: rank, score against the default, and each node the candidate
    sets away from the default with its minor-to-major per tensor."""
    lines = ["| rank | candidate | score - default's | layouts set (minor-to-major; others: compiler default) |",
             "|---|---|---|---|"]
    for row in rows[:top]:
        changed = [f"{name} " + " ".join(f"{block}={order}" for block, order in blocks.items() if order != "default")
                   for name, blocks in row["layouts"].items() if any(o != "default" for o in blocks.values())]
        lines.append(f"| {row['rank']} | {row['candidate']}{' (default)' if not changed else ''} | "
                     f"{row['vs_default']:+.4f} | {'; '.join(changed) or '-'} |")
    return "\n".join(lines)


def write(prefix: Path, rows: list[dict]) -> tuple[Path, Path]:
    """<prefix>.csv (one line per candidate and configurable node) and <prefix>.json, as a pair."""
    csv_path, json_path = prefix.with_name(prefix.name + ".csv"), prefix.with_name(prefix.name + ".json")
    lines = ["rank,candidate,score,vs_default,node,output,input,kernel"]
    for row in rows:
        for name, blocks in row["layouts"].items():
            lines.append(",".join([str(row["rank"]), str(row["candidate"]), f"{row['score']:.6g}",
                                   f"{row['vs_default']:.6g}", name,
                                   *(f'"{blocks.get(block, "")}"' for block in BLOCKS)]))
    with atomic_files([csv_path, json_path], "w") as (csv_handle, json_handle):
        csv_handle.write("\n".join(lines) + "\n")
        json.dump(rows, json_handle, indent=1)
    return csv_path, json_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="solution rank", description=__doc__)
    parser.add_argument("program", type=Path, help="HLO text (jax's .as_text(), an XLA dump file) or a layout .npz")
    parser.add_argument("--ckpt", type=Path, required=True, help="a layout checkpoint (solution fit / run / demo)")
    parser.add_argument("--configs", type=int, default=None,
                        help="candidates besides the compiler default (default 1000; a layout .npz: its own)")
    parser.add_argument("--search", choices=SEARCHES, default=None,
                        help="random: every block of every node; default: a few nodes away from the compiler's "
                             "(default: the checkpoint's collection's)")
    parser.add_argument("--candidates", type=Path, default=None,
                        help="your own candidates: JSON [{node: {output, input, kernel}}] or CSV "
                             "(candidate,node,output,input,kernel), minor-to-major such as '1 0'")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top", type=int, default=10, help="candidates shown")
    parser.add_argument("--out", type=Path, default=None, help="write the full ranking to OUT.csv and OUT.json")
    args = parser.parse_args(argv)
    if args.configs is not None and args.configs < 0:
        parser.error(f"--configs {args.configs}: expected a count >= 0")
    stored = saved_settings(read_checkpoint(args.ckpt))
    args.collection = stored["data"].get("collection")
    if args.collection not in COLLECTIONS or not args.collection.startswith("layout:"):
        raise SettingsError(f"--ckpt {args.ckpt}: a checkpoint of {args.collection!r}; expected a layout "
                            "collection (layout:xla:random, ...)")
    program = read_program(args.program)
    configs = candidates_of(program, args)
    rows = ranking(program, configs, score(args.ckpt, args.collection, program, configs))
    print(f"\n{program.name}: {len(configs)} candidates over {len(program.names)} configurable nodes, ranked by "
          f"{args.ckpt} ({args.collection}); lower score = predicted faster (a ranking score, not a time)\n")
    print(table(rows, args.top))
    if args.out is not None:
        print("\nwrote " + " and ".join(map(str, write(args.out, rows))))
    return OK
