"""Candidate layouts for a program's configurable nodes: the compiler default, searched ones, or a user's own."""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..errors import SettingsError
from ..format import LAYOUT_CONFIG_DIM

BLOCKS = ("output", "input", "kernel")  # the 6-wide blocks of a layout config row, in the official order
BLOCK = LAYOUT_CONFIG_DIM // len(BLOCKS)  # 6: minor-to-major of up to six dimensions
SEARCHES = ("random", "default")


def default_row(nodes: int) -> np.ndarray:
    """[NC, 18] of -1: every block left to the compiler."""
    return np.full((nodes, LAYOUT_CONFIG_DIM), -1, dtype=np.float32)


def permutation_block(order: Sequence[int]) -> np.ndarray:
    """[6] one block: a minor-to-major order, then -1s."""
    block = np.full(BLOCK, -1, dtype=np.float32)
    block[: len(order)] = order
    return block


def random_orders(ranks: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """[count, *ranks.shape, 6] int8: each block a uniformly random minor-to-major order of its tensor's rank, then
    -1s (all -1 where the tensor is absent, rank 0)."""
    out = np.full((count, *ranks.shape, BLOCK), -1, dtype=np.int8)
    for rank in np.unique(ranks[ranks > 0]):
        orders = np.array(list(itertools.permutations(range(rank))), dtype=np.int8)  # [rank!, rank]
        where = ranks == rank
        out[:, where, :rank] = orders[rng.integers(len(orders), size=(count, int(where.sum())))]
    return out


def searched(ranks: np.ndarray, count: int, search: str, rng: np.random.Generator,
             changed: int = 3) -> np.ndarray:
    """[1 + n, NC, 18]: the compiler default, then up to `count` distinct other candidates. `ranks` [NC, 3] is the
    rank of each node's output, input and kernel tensor (0 where the node has none). `random` gives every block a
    random minor-to-major order; `default` changes the blocks of 1 to `changed` nodes and leaves the rest to the
    compiler, as the `default` collections' search does. Drawn a batch at a time; fewer than `count` when the
    node's layouts run out."""
    if search not in SEARCHES:
        raise SettingsError(f"--search {search!r}; expected one of {', '.join(SEARCHES)}")
    ranks = np.asarray(ranks, dtype=np.int64)
    tunable = np.flatnonzero(ranks.max(1, initial=0) > 0)  # [T] nodes with any layout to set
    default = default_row(len(ranks)).astype(np.int8)  # rows as int8 while drawing: cheap to compare
    rows, seen = [default], {default.tobytes()}
    for _ in range(20):  # batches of draws; duplicates are dropped, so a small space runs out
        if len(rows) > count or not len(tunable):
            break
        draws = random_orders(ranks[tunable], max(count + 1 - len(rows), 16), rng)  # [n, T, 3, 6]
        if search == "default":  # keep the blocks of 1..changed random nodes of each draw
            most = min(changed, len(tunable))
            picked = np.argpartition(rng.random((len(draws), len(tunable))), most - 1, 1)[:, :most]  # [n, most]
            few = rng.integers(1, most + 1, len(draws))  # [n]
            kept = np.zeros((len(draws), len(tunable)), dtype=bool)  # [n, T]
            np.put_along_axis(kept, picked, np.arange(most) < few[:, None], 1)
            draws[~kept] = -1
        full = np.repeat(default[None], len(draws), 0)  # [n, NC, 18]
        full[:, tunable] = draws.reshape(len(draws), len(tunable), LAYOUT_CONFIG_DIM)
        for row in full:
            key = row.tobytes()
            if key not in seen and len(rows) <= count:
                seen.add(key)
                rows.append(row)
    return np.stack(rows).astype(np.float32)  # [C, NC, 18]


def parse_order(text: object, rank: int, where: str) -> np.ndarray:
    """One block from a user's minor-to-major (`[1, 0]`, `"1,0"`, `"1 0"`, or null/"default" for the compiler's)."""
    if text is None or (isinstance(text, str) and text.strip().lower() in ("", "default", "-1")):
        return permutation_block([])
    values = text if isinstance(text, list) else str(text).replace(",", " ").split()
    try:
        order = [int(v) for v in values]
    except (TypeError, ValueError):
        order = None
    if order is None or sorted(order) != list(range(rank)):
        raise SettingsError(f"{where}: minor-to-major {text!r}; expected a permutation of 0..{rank - 1}, or "
                            "'default'")
    return permutation_block(order)


def user_candidates(path: str | Path, names: Sequence[str], ranks: np.ndarray) -> np.ndarray:
    """[1 + n, NC, 18]: the compiler default, then a user's candidates from JSON (a list of {node name: {output,
    input, kernel}}) or CSV (columns candidate, node, output, input, kernel); a node left out keeps its default."""
    path, index = Path(path), {name: k for k, name in enumerate(names)}
    if path.suffix.lower() == ".json":
        try:
            listed = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise SettingsError(f"{path} line {error.lineno}: not JSON ({error.msg}); expected a list of "
                                "{node name: {output, input, kernel}}") from error
        if not isinstance(listed, list) or not all(isinstance(c, Mapping) for c in listed):
            raise SettingsError(f"{path}: expected a list of {{node name: {{output, input, kernel}}}}")
        entries = [(i, name, blocks, f"{path} candidate {i}") for i, c in enumerate(listed)
                   for name, blocks in c.items()]
    else:
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            missing = {"candidate", "node"} - set(reader.fieldnames or ())
            if missing:
                raise SettingsError(f"{path}: columns {', '.join(sorted(missing))} missing; expected candidate, node, "
                                    "output, input, kernel")
            entries = [(row["candidate"], row["node"], row, f"{path} line {line}") for line, row in
                       enumerate(reader, start=2)]
    order: dict[object, np.ndarray] = {}
    for candidate, name, blocks, where in entries:
        if name not in index:
            raise SettingsError(f"{where}: node {name!r} is not a configurable node of the program; expected one of "
                                f"{', '.join(names[:8])}{' ...' if len(names) > 8 else ''}")
        if not isinstance(blocks, Mapping):
            raise SettingsError(f"{where}: node {name!r} holds {blocks!r}; expected {{output, input, kernel}}")
        row = order.setdefault(candidate, default_row(len(names)))
        k = index[name]
        for b, block in enumerate(BLOCKS):
            if ranks[k][b] > 0:
                row[k, b * BLOCK:(b + 1) * BLOCK] = parse_order(blocks.get(block), int(ranks[k][b]),
                                                                f"{where}, node {name}, {block}")
    return np.stack([default_row(len(names)), *order.values()])


def describe_block(values: np.ndarray) -> str:
    """'{1,0}' for a block (as HLO prints a layout), 'default' for one left to the compiler."""
    order = [int(v) for v in values if v >= 0]
    return "{" + ",".join(map(str, order)) + "}" if order else "default"
