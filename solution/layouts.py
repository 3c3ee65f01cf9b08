"""Tensor layouts: minor-to-major orders as permutations, what each order of a shape stores in 8 x 128 tiles, and
how XLA's ops pass their operands' layouts on."""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np

from .constants import LANES, SUBLANES
from .format import LAYOUT_GROUP, LAYOUT_SYMBOLS

PERMS = tuple(np.array(list(itertools.permutations(range(r))), np.int64).reshape(math.factorial(r), r)
              for r in range(LAYOUT_GROUP + 1))  # PERMS[r]: [r!, r], lexicographic


def perm_rank(perms: np.ndarray) -> np.ndarray:
    """Index of each row of `perms` [k, r] in PERMS[r] (lexicographic rank)."""
    k, r = perms.shape
    rank = np.zeros(k, np.int64)
    for i in range(r):
        rank += (perms[:, i + 1:] < perms[:, i:i + 1]).sum(axis=1) * math.factorial(r - 1 - i)
    return rank


def row_major(rank: int) -> tuple[int, ...]:
    """XLA's default minor-to-major layout: the last dim minor."""
    return tuple(range(rank - 1, -1, -1))


@functools.lru_cache(maxsize=None)
def perm_index(perm: tuple[int, ...]) -> int:
    """Index of one layout in PERMS[len(perm)]."""
    return int(perm_rank(np.array([perm], np.int64).reshape(1, len(perm)))[0])


@functools.lru_cache(maxsize=None)
def transpose_map(rank: int, permutation: tuple[int, ...]) -> np.ndarray:
    """Operand layout index -> output layout index of a transpose (output dim j = operand dim permutation[j])."""
    inverse = np.argsort(permutation)
    return perm_rank(inverse[PERMS[rank]])


@functools.lru_cache(maxsize=None)
def reduce_map(rank: int, dims: tuple[int, ...]) -> np.ndarray:
    """Operand layout index -> output layout index of a reduce over `dims` (the kept dims keep their order)."""
    perms = PERMS[rank]
    kept = perms[~np.isin(perms, dims)].reshape(len(perms), rank - len(dims))  # [r!, r - |dims|]
    renumber = np.arange(rank) - np.searchsorted(np.sort(dims), np.arange(rank))
    return perm_rank(renumber[kept])


# how an op's output takes its layout (HLO opcode names)
ELEMENTWISE = frozenset({  # the first laid-out operand's of the same rank
    "abs", "add", "and", "atan2", "bitcast-convert", "cbrt", "ceil", "clamp", "compare", "convert", "cosine", "divide",
    "exponential", "exponential-minus-one", "floor", "is-finite", "log", "log-plus-one", "logistic", "maximum",
    "minimum", "multiply", "negate", "not", "or", "popcnt", "power", "reduce-precision", "remainder",
    "round-nearest-afz", "round-nearest-even", "rsqrt", "select", "shift-left", "shift-right-arithmetic",
    "shift-right-logical", "sign", "sine", "sqrt", "subtract", "tan", "tanh", "xor"})
MOVEMENT = frozenset({"pad", "slice", "dynamic-slice", "dynamic-update-slice", "concatenate", "reverse", "copy",
                      "reduce-window", "select-and-scatter", "sort", "cumsum"})  # same rank: operand 0's layout
FLEXIBLE = frozenset({"broadcast", "constant", "iota", "rng", "rng-bit-generator"})  # made in any layout for free
PINNED = frozenset({"tuple", "while", "conditional", "call", "custom-call", "outfeed", "after-all", "opt-barrier"})


@dataclass(frozen=True)
class ShapeTables:
    """Per minor-to-major order (an index into PERMS[rank]) of one shape: what it costs to store."""

    padded: np.ndarray  # [rank!] bytes stored in (8, 128) tiles
    canonical: np.ndarray  # [rank!] one id per physically distinct order (size-1 dims do not count)
    minor: np.ndarray  # [rank!] the effective minor dim (-1 for a scalar)
    second: np.ndarray  # [rank!] the effective second-minor dim (-1 where there is none)


@functools.lru_cache(maxsize=8192)
def shape_tables(dims: tuple[int, ...], element_bytes: int) -> ShapeTables:
    """Stored bytes and effective order of every minor-to-major order of a tensor of `dims`."""
    if not dims:
        return ShapeTables(np.array([float(element_bytes)]), np.zeros(1, np.int64), np.full(1, -1), np.full(1, -1))
    perms = PERMS[len(dims)]  # [r!, r]
    sizes = np.array(dims, dtype=np.float64)
    big = sizes[perms] > 1  # [r!, r] dims that matter, in minor-to-major order
    first = np.argsort(~big, axis=1, kind="stable")  # [r!, r] the big dims first, in their order
    kept = np.where(np.take_along_axis(big, first, axis=1), np.take_along_axis(perms, first, axis=1), -1)
    minor = kept[:, 0]
    second = kept[:, 1] if len(dims) > 1 else np.full(len(perms), -1)
    lane = np.where(minor >= 0, sizes[np.maximum(minor, 0)], 1.0)
    sublane = np.where(second >= 0, sizes[np.maximum(second, 0)], 1.0)
    padded = sizes.prod() / (lane * sublane) * np.ceil(lane / LANES) * LANES * np.ceil(sublane / SUBLANES) * SUBLANES
    canonical = ((kept + 1) * (LAYOUT_GROUP + 2) ** np.arange(len(dims))).sum(axis=1)
    return ShapeTables(padded * element_bytes, canonical.astype(np.int64), minor.astype(np.int64),
                       second.astype(np.int64))


def block_keys(configs: np.ndarray) -> np.ndarray:
    """[..., k] the key of each layout block of configs [..., 6k] (values -1..5): its values + 1 read in base 7, by
    Horner's rule in float32 (exact: the keys are below 2^24; 3x faster than an integer product)."""
    blocks = configs.reshape(*configs.shape[:-1], -1, LAYOUT_GROUP)  # [..., k, 6]
    keys = np.zeros(blocks.shape[:-1], np.float32)
    for digit in range(LAYOUT_GROUP):
        keys = keys * LAYOUT_SYMBOLS + (blocks[..., digit] + 1)
    return keys.astype(np.int64)


def block_layout(keys: np.ndarray, rank: int) -> np.ndarray:
    """[C] index into PERMS[rank] of each config's block (`block_keys`: minor-to-major, then -1s); -1 where the
    block is all -1 (the compiler's default). A lookup by key: configs repeat few blocks."""
    return _block_table(rank)[keys]


@functools.lru_cache(maxsize=None)
def _block_table(rank: int) -> np.ndarray:
    """[7^6] `block_layout` of every block, by its key: the blocks in key order, each read as an order of `rank`
    dims where its first `rank` values are all set."""
    blocks = np.indices((LAYOUT_SYMBOLS,) * LAYOUT_GROUP).reshape(LAYOUT_GROUP, -1).T - 1  # [7^6, 6] in key order
    if rank == 0:
        return np.where(blocks[:, 0] >= 0, 0, -1)
    orders = blocks[:, :rank]
    valid = (orders >= 0).all(axis=1)
    ranks = perm_rank(np.where(valid[:, None], orders, np.arange(rank)[::-1]))
    return np.where(valid, ranks, -1)


def chosen_layout(keys: np.ndarray, rank: int, default) -> np.ndarray:
    """[C] index into PERMS[rank] of each config's block (`block_keys` [C]), where the block is all -1 (left to the
    compiler) the default (one index or [C])."""
    layout = block_layout(keys, rank)
    return np.where(layout >= 0, layout, default)
