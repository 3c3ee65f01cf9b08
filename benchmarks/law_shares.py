"""Where a layout collection's runtime differences live in the real-program corpus: the share of each file's
variance across its configs that the configurable nodes carry (their own work and the copies into their operands),
the share of their neighbours (the nodes 1-hop pruning keeps) and of every other node (the ones it drops), by the
law's per-node costs; and how well each part alone ranks the configs (Kendall tau against the noise-free total).

    python benchmarks/law_shares.py                     # data/programs-small, layout:xla:random
    python benchmarks/law_shares.py --collection layout:nlp:random --out benchmarks/results/law_shares-nlp.md

Reads the corpus's HLO text and the configs of its labelled (train and valid) files; no training, no jax.
"""

from __future__ import annotations

import argparse
import csv
import warnings
from collections import defaultdict
from datetime import date
from pathlib import Path

import numpy as np
from reports import measured_code
from scipy.stats import kendalltau

from solution.atomic import atomic_write
from solution.data.pruning import keep_nodes
from solution.data.reader import collection_dir, read_graph
from solution.programs import encode, hlo
from solution.programs.law import LayoutLaw

PARTS = ("configurable", "neighbours", "rest")


def file_shares(hlo_path: Path, config_feat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per part: its covariance with the total over the total's variance (the shares add up to 1), and the Kendall
    tau of its own sum against the total (0 where the part does not vary, to rounding)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", encode.UnknownOpcodeWarning)
        module = hlo.read_module(hlo_path)
        graph = encode.flatten(module)
        arrays = encode.arrays(module, graph)
    ids = arrays["node_config_ids"].astype(np.int64)
    law = LayoutLaw(module, graph, ids, hlo_path.read_text())
    costs = law.node_costs(config_feat.astype(np.int64))  # [C, N]
    kept = keep_nodes(arrays["edge_index"], len(graph.nodes), ids, 0, "k_hop", hops=1)  # what the ranker sees
    part = np.where(kept, 1, 2)
    part[ids] = 0
    total = costs.sum(axis=1)
    sums = [costs[:, part == k].sum(axis=1) for k in range(len(PARTS))]
    shares = np.array([np.cov(s, total, bias=True)[0, 1] / total.var() for s in sums])
    taus = np.array([kendalltau(s, total)[0] if s.std() > 1e-9 * total.std() else 0.0 for s in sums])
    return shares, taus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/programs-small"))
    parser.add_argument("--collection", default="layout:xla:random")
    parser.add_argument("--configs", type=int, default=300, help="configs per file (its first ones)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/law_shares.md"))
    args = parser.parse_args(argv)
    measured_code()  # this checkout's package, before any work
    with open(args.data / "programs.csv", newline="") as handle:
        manifest = [row for row in csv.DictReader(handle) if row["collection"] == args.collection
                    and row["split"] != "test"]
    by_family: dict[str, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    for row in manifest:
        npz = collection_dir(args.data / "npz_all", args.collection) / row["split"] / f"{row['file']}.npz"
        configs = read_graph(npz).config_feat[:args.configs]  # [C, NC, 18]
        by_family[row["family"]].append(file_shares(args.data / "hlo" / f"{row['program']}.hlo", configs))
        print(f"{row['file']}: shares {np.round(by_family[row['family']][-1][0], 2)}", flush=True)
    header = " | ".join(f"{p} share" for p in PARTS) + " | " + " | ".join(f"tau of {p}" for p in PARTS)
    lines = [f"| family | files | {header} |", "|---|---|" + "---|" * 2 * len(PARTS)]
    every = [result for results in by_family.values() for result in results]
    for family, results in [*sorted(by_family.items()), ("**all**", every)]:
        shares, taus = (np.mean([r[i] for r in results], axis=0) for i in (0, 1))
        cells = [f"{v:.2f}" for v in (*shares, *taus)]
        lines.append(f"| {family} | {len(results)} | " + " | ".join(cells) + " |")
    report = [f"# Where {args.collection}'s runtime differences live", "",
              f"Command: `python benchmarks/law_shares.py --data {args.data} --collection {args.collection} "
              f"--configs {args.configs}`, {date.today()}: the labelled files of the corpus, each with its first "
              f"{args.configs} configs, by the law's per-node costs. Share: the part's covariance with the total over "
              "the total's variance across configs (a row's shares add up to 1); tau: Kendall tau of the part's own "
              "sum against the noise-free total. Neighbours: the producers and users of configurable nodes (what "
              "1-hop pruning keeps); rest: every other node.", "", *lines]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(args.out, "w") as handle:
        handle.write("\n".join(report) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
