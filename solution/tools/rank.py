"""`solution rank`: a trained layout ranker ranks candidate layouts of one program (HLO text or a layout npz)."""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..allocator import keep_freed_buffers
from ..atomic import atomic_files
from ..data.preprocess import Preprocessing
from ..data.reader import read_graph
from ..data.sets import GraphSet
from ..errors import OK, SettingsError
from ..programs.candidates import BLOCK, BLOCKS, SEARCHES, describe_block, searched, user_candidates
from ..programs.encode import LAYOUT_KEYS, Program, encode_program
from ..training.ranker_file import SavedRanker, describe, read_ranker
from .ranking import ranked_split, resolved
from .settings import read_settings


def program_from_npz(path: Path) -> Program:
    """A layout file, read and checked by the package's reader: its configurable nodes named by index, their ranks
    read off its own configurations."""
    raw = read_graph(path, "test")  # any runtimes are accepted: only the configs are ranked
    if raw.config_node_ids is None:
        raise SettingsError(f"{path}: a {raw.task.name} file; expected a layout .npz (or HLO text)")
    feat = raw.config_feat.astype(np.float32)  # [C, NC, 18]
    blocks = feat.reshape(*feat.shape[:2], len(BLOCKS), BLOCK)  # [C, NC, 3, 6]
    ranks = (blocks >= 0).sum(-1).max(0) if len(feat) else np.zeros((feat.shape[1], len(BLOCKS)), np.int64)
    arrays = {"node_feat": raw.node_feat, "node_opcode": raw.node_opcode, "edge_index": raw.edge_index,
              "node_splits": raw.computation_bounds()[None], "node_config_ids": raw.config_node_ids,
              "node_config_feat": feat}
    return Program(path.stem, arrays, [f"node {int(i)}" for i in raw.config_node_ids], ranks.astype(np.int64))


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


def score(source: Path, ranker: SavedRanker, program: Program, configs: np.ndarray,
          precision: str | None = None) -> np.ndarray:
    """[C] the ranker's scores (lower = predicted faster), as `solution predict` and `solution run` score a test
    file: the program goes through the reader's checks and the ranker's preprocessing, its configs through the same
    chunks, members and blend with the physics prior (without Lightning: settings resolved as every command
    resolves them), at a trainer `precision`."""
    defaults = read_settings()[ranker.collection]
    settings = {**resolved(ranker, defaults, str(source)), "trainer": {**defaults.get("trainer", {}),
                                                                    "precision": precision}}
    with tempfile.TemporaryDirectory(prefix="solution-rank-") as scratch:
        path = Path(scratch) / f"{program.name}.npz"
        np.savez(path, **{key: program.arrays[key] for key in LAYOUT_KEYS}, node_config_feat=configs,
                 config_runtime=np.zeros(len(configs), np.int64))
        graphs = GraphSet([path], "test", Preprocessing.of(settings["data"]), cache=None)
        return ranked_split(ranker, settings, "test", str(source), graphs)[1][0]


@dataclass
class Ranking:
    """Every candidate of a program by its score, from the predicted fastest; the layouts of only the candidates
    shown or written are spelled out (a random search sets every block of every node)."""

    program: Program
    configs: np.ndarray  # [C, NC, 18]
    scores: np.ndarray  # [C]

    def __post_init__(self) -> None:
        self.order = np.argsort(self.scores, kind="stable")  # [C] candidates, predicted fastest first
        default = np.flatnonzero((self.configs == -1).all((1, 2)))
        self.base = float(self.scores[default[0]]) if len(default) else float(np.median(self.scores))
        self.present = self.program.ranks > 0  # [NC, 3] the tensors each node has

    def spelled(self, candidates: np.ndarray) -> np.ndarray:
        """[K, NC, 3] each block of the K given candidates as '{1,0}' or 'default' (each distinct block spelled
        once)."""
        configs = self.configs[candidates]  # [K, NC, 18]
        blocks = configs.reshape(*configs.shape[:2], len(BLOCKS), BLOCK)  # [K, NC, 3, 6] in -1..5
        codes = ((blocks + 1).astype(np.int64) * 7 ** np.arange(BLOCK)).sum(-1)  # [K, NC, 3] a block in base 7
        used, inverse = np.unique(codes, return_inverse=True)
        digits = used[:, None] // 7 ** np.arange(BLOCK) % 7 - 1  # [U, 6] the blocks back
        words = np.array([describe_block(block) for block in digits], dtype=object)
        return words[inverse.reshape(codes.shape)]

    def row(self, rank: int, orders: np.ndarray) -> dict:
        """The candidate at `rank` (1 = predicted fastest), whose blocks are spelled `orders` [NC, 3]: its index,
        score, score against the default's, and per node the minor-to-major of each of its tensors."""
        c = int(self.order[rank - 1])
        layouts = {name: {block: orders[k, b] for b, block in enumerate(BLOCKS) if self.present[k, b]}
                   for k, name in enumerate(self.program.names)}
        return {"rank": rank, "candidate": c, "score": float(self.scores[c]),
                "vs_default": float(self.scores[c]) - self.base, "layouts": layouts}

    def changed(self, orders: np.ndarray) -> list[str]:
        """'dot.12 output={1,0} input={0,1}' for each node that a candidate whose blocks are spelled `orders`
        [NC, 3] sets away from the default."""
        set_here = (orders != "default") & self.present  # [NC, 3]
        return [f"{name} " + " ".join(f"{block}={orders[k, b]}" for b, block in enumerate(BLOCKS) if set_here[k, b])
                for k, name in enumerate(self.program.names) if set_here[k].any()]


def table(ranking: Ranking, top: int, shown: int = 3) -> str:
    """The top candidates for a compiler engineer: rank, score against the default's, how many nodes each sets
    away from the compiler default and the first `shown` of them with their minor-to-major per tensor."""
    lines = ["| rank | candidate | score - default's | nodes set | layouts set (minor-to-major; others: compiler "
             "default) |", "|---|---|---|---|---|"]
    shown_rows = ranking.order[:top]
    for rank, (c, orders) in enumerate(zip(shown_rows.tolist(), ranking.spelled(shown_rows)), start=1):
        changed = ranking.changed(orders)
        more = f"; ... {len(changed) - shown} more (--out lists every node)" if len(changed) > shown else ""
        lines.append(f"| {rank} | {c}{' (default)' if not changed else ''} | "
                     f"{ranking.scores[c] - ranking.base:+.4f} | {len(changed)} | "
                     f"{'; '.join(changed[:shown]) or '-'}{more} |")
    return "\n".join(lines)


def write(prefix: Path, ranking: Ranking) -> tuple[Path, Path]:
    """<prefix>.csv (one line per candidate and configurable node) and <prefix>.json (one entry per candidate), as
    a pair."""
    csv_path, json_path = prefix.with_name(prefix.name + ".csv"), prefix.with_name(prefix.name + ".json")
    orders = ranking.spelled(ranking.order)  # [C, NC, 3] in rank order
    cells = np.where(ranking.present, orders, "")  # [C, NC, 3]
    lines = ["rank,candidate,score,vs_default,node,output,input,kernel"]
    for rank, c in enumerate(ranking.order.tolist(), start=1):
        head = f"{rank},{c},{ranking.scores[c]:.6g},{ranking.scores[c] - ranking.base:.6g},"
        lines += [head + f'{name},"{o}","{i}","{k}"' for name, (o, i, k) in zip(ranking.program.names, cells[rank - 1])]
    with atomic_files([csv_path, json_path], "w") as (csv_handle, json_handle):
        csv_handle.write("\n".join(lines) + "\n")
        json.dump([ranking.row(rank, orders[rank - 1]) for rank in range(1, len(ranking.order) + 1)], json_handle,
                  indent=1)
    return csv_path, json_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="solution rank", description=__doc__)
    parser.add_argument("program", type=Path, help="HLO text (jax's .as_text(), an XLA dump file) or a layout .npz")
    given = parser.add_mutually_exclusive_group(required=True)
    given.add_argument("--ranker", type=Path, help="a layout ranker file (<out>/rankers/<collection>.ranker of "
                                                   "solution run / demo): its members blended with the physics prior")
    given.add_argument("--ckpt", type=Path, help="a layout checkpoint: a ranker of one network and no prior")
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
    parser.add_argument("--precision", choices=("32", "bf16-mixed"), default="32",
                        help="bf16-mixed: the model under bfloat16 autocast, scores in float32 (faster on CPUs "
                             "with AVX512-BF16 or AMX)")
    args = parser.parse_args(argv)
    if args.configs is not None and args.configs < 0:
        parser.error(f"--configs {args.configs}: expected a count >= 0")
    keep_freed_buffers()
    source = args.ranker or args.ckpt
    ranker = read_ranker(source)
    args.collection = ranker.collection
    if not args.collection.startswith("layout:"):
        raise SettingsError(f"{source}: a ranker of {args.collection!r}; expected a layout collection "
                            "(layout:xla:random, ...)")
    program = read_program(args.program)
    configs = candidates_of(program, args)
    ranking = Ranking(program, configs, score(source, ranker, program, configs, args.precision))
    print(f"\n{program.name}: {len(configs)} candidates over {len(program.names)} configurable nodes, ranked by "
          f"{source} ({args.collection}, {describe(ranker)}); lower score = predicted faster (a ranking score, "
          "not a time)\n")
    print(table(ranking, args.top))
    if args.out is not None:
        print("\nwrote " + " and ".join(map(str, write(args.out, ranking))))
    return OK
