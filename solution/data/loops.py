"""How often each node of a file runs per program run: a while loop's body once per trip, read from its shapes."""

from __future__ import annotations

import numpy as np

from ..format import ELEMENT_TYPE, ELEMENT_TYPES, OPCODE_NAMES, SHAPE_DIMS
from .reader import RawGraph

TUPLE_COLUMN = ELEMENT_TYPE + ELEMENT_TYPES.index("tuple")


def node_runs(raw: RawGraph) -> np.ndarray:
    """[n] how often each node runs per program run: a while loop's body and condition (the computations of the
    roots the while node has edges to) its trip count times the while node's own runs, a conditional's branches an
    equal share of its runs, nested calls multiplied; 1 elsewhere."""
    names = [OPCODE_NAMES[o] if o < len(OPCODE_NAMES) else "" for o in raw.node_opcode.tolist()]
    dims = raw.node_feat[:, SHAPE_DIMS].astype(np.int64)  # [n, 6], 0 beyond the rank
    ranks = np.where(raw.node_feat[:, TUPLE_COLUMN] > 0, -1, (dims > 0).sum(1))  # [n]
    operands: list[set[int]] = [set() for _ in names]
    for consumer, producer in raw.edge_index.tolist():
        operands[consumer].add(producer)
    bounds = raw.computation_bounds()
    computation = np.searchsorted(bounds, np.arange(len(names)), side="right") - 1  # [n]
    shapes = [dims[k, :max(r, 0)] for k, r in enumerate(ranks.tolist())]
    runs = np.ones(len(names))
    for i in reversed(range(len(names))):  # a call's computations come before it: outer calls first
        if names[i] not in ("while", "conditional"):
            continue
        spans = [(bounds[c], bounds[c + 1]) for c in {computation[o] for o in operands[i]} - {computation[i]}]
        if not spans:  # no edge to a computation of its own
            continue
        if names[i] == "while":
            body = [k for start, end in spans for k in range(start, end)]
            share = trip_count(names, shapes, ranks, operands, body)
        else:
            share = 1 / len(spans)
        for start, end in spans:
            runs[start:end] = runs[i] * share
    return runs


def trip_count(names: list[str], shapes: list[np.ndarray], ranks: np.ndarray, operands: list[set[int]],
               body: list[int]) -> int:
    """A loop's trip count as its body's dynamic slices imply it (the files keep no constants): a scan or a decode
    loop reads or writes one slice of a stacked tensor per trip along one dim (the most slices any of its dims
    holds), and walks past the end of none, so the fewest of those over the dynamic slices and
    dynamic-update-slices among the loop's `body` nodes; 1 where there is none."""
    counts = []
    for k in body:
        if names[k] not in ("dynamic-slice", "dynamic-update-slice"):
            continue
        for o in (o for o in operands[k] if ranks[o] == ranks[k] > 0):
            whole, piece = (shapes[o], shapes[k]) if names[k] == "dynamic-slice" else (shapes[k], shapes[o])
            counts.append(max((w // p for w, p in zip(whole, piece) if p > 0), default=1))
    return min([c for c in counts if c > 1], default=1)
