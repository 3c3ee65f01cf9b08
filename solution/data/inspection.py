"""`solution inspect PATH`: check every file under a data folder and summarise each collection and split."""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

from ..constants import SPLITS
from ..errors import BAD_DATA, OK
from .pruning import STRATEGIES, configurable_nodes, prune_graph
from .reader import DataError, RawGraph, find_collections, read_graph


def file_summary(graph: RawGraph, strategy: str, hops: int) -> dict[str, float]:
    """Sizes, duplicate configs and pruning retention of one checked file."""
    n = len(graph.node_feat)
    pruned = prune_graph(graph, strategy, hops)
    rows = graph.task.stored_configs(graph.config_feat, graph.node_feat)  # [c, ...]
    distinct = len(np.unique(rows.reshape(len(rows), -1), axis=0))
    return {
        "nodes": n,
        "edges": len(graph.edge_index),
        "config_nodes": len(configurable_nodes(graph)),
        "computations": len(graph.computation_bounds()) - 1,
        "configs": graph.num_configs,
        "duplicates": graph.num_configs - distinct,
        "retention": pruned.node_retention,
        "edge_retention": pruned.edge_retention,
    }


def graph_line(path: Path, stats: dict[str, float]) -> str:
    """One file's row for `--per-graph`."""
    return (f"  {path.name:<40} nodes {stats['nodes']:>7} kept {stats['retention']:>6.1%}   computations "
            f"{stats['computations']:>4}   edges "
            f"{stats['edges']:>7} kept {stats['edge_retention']:>6.1%}   configs {stats['configs']:>7} "
            f"duplicates {stats['duplicates']:>6}")


def _spread(values: list[float]) -> str:
    return f"{min(values):.0f}/{np.median(values):.0f}/{max(values):.0f}" if values else "-"


def inspect(root: str | Path, strategy: str = "k_hop", hops: int = 1, per_graph: bool = False
            ) -> tuple[list[str], list[str]]:
    """(table lines, problems) for every collection and split under `root`; with `per_graph` a row for
    every file too."""
    lines = [f"{'collection':<20} {'split':<6} {'graphs':>6} {'nodes min/med/max':>22} {'cfg nodes med':>13} "
             f"{'computations min/med/max':>24} {'configs min/med/max':>22} {'dups':>7} {f'kept ({strategy})':>14}"]
    problems = []
    for collection, folder in find_collections(root).items():
        for split in SPLITS:
            if not (folder / split).is_dir():
                problems.append(f"{folder / split}: split folder missing")
                continue
            files = sorted((folder / split).glob("*.npz"))
            stats, graph_rows = [], []
            for path in files:
                try:
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        stats.append(file_summary(read_graph(path, split), strategy, hops))
                    graph_rows.append(graph_line(path, stats[-1]))
                    problems += [f"warning: {w.message}" for w in caught]
                except DataError as err:
                    problems.append(str(err))
            column = {k: [s[k] for s in stats] for k in ("nodes", "config_nodes", "computations", "configs",
                                                         "duplicates", "retention")}
            retention = f"{np.mean(column['retention']):.1%}" if stats else "-"
            lines.append(
                f"{collection:<20} {split:<6} {len(files):>6} {_spread(column['nodes']):>22} "
                f"{np.median(column['config_nodes']) if stats else 0:>13.0f} {_spread(column['computations']):>24} "
                f"{_spread(column['configs']):>22} "
                f"{int(sum(column['duplicates'])):>7} {retention:>14}"
            )
            lines += graph_rows if per_graph else []
    return lines, problems


def main(argv: list[str] | None = None) -> int:
    """`solution inspect PATH`: the table on stdout, each problem and warning on stderr; BAD_DATA on a bad file."""
    parser = argparse.ArgumentParser(prog="solution inspect", description=__doc__)
    parser.add_argument("path", help="Kaggle root, npz folder or one collection folder")
    parser.add_argument("--prune", default="k_hop", choices=STRATEGIES)
    parser.add_argument("--hops", type=int, default=1)
    parser.add_argument("--per-graph", action="store_true", help="a row per file: node and edge retention")
    args = parser.parse_args(argv)
    lines, problems = inspect(args.path, args.prune, args.hops, args.per_graph)
    print("\n".join(lines))
    errors = [p for p in problems if not p.startswith("warning:")]
    print(f"\n{len(errors)} problem(s), {len(problems) - len(errors)} warning(s)" if problems
          else "\nall files passed the checks")
    for problem in problems:
        print(problem if problem.startswith("warning:") else f"error: {problem}", file=sys.stderr)
    return BAD_DATA if errors else OK
