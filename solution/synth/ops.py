"""The vocabulary of synthetic graphs: opcodes, node-feature columns and minor-to-major permutations."""

from __future__ import annotations

import itertools
import math
from enum import IntEnum
from functools import lru_cache

import numpy as np

from ..constants import (
    CONVOLUTION,
    DOT,
    LAYOUT_GROUP,
    RESHAPE,
)


class Op(IntEnum):
    """HLO opcode ids of the TpuGraphs files (the ones the generator uses)."""

    ADD = 2
    BROADCAST = 13
    COMPARE = 20
    CONCATENATE = 22
    CONSTANT = 24
    CONVERT = 25
    CONVOLUTION = CONVOLUTION
    DIVIDE = 32
    DOT = DOT
    EXPONENTIAL = 37
    GATHER = 42
    IOTA = 48
    LOG = 50
    MAXIMUM = 57
    MULTIPLY = 59
    NEGATE = 60
    PARAMETER = 63
    REDUCE = 70
    REDUCE_WINDOW = 72
    RESHAPE = RESHAPE
    RNG = 77
    RSQRT = 81
    SELECT = 83
    SLICE = 92
    SUBTRACT = 95
    TANH = 96
    TRANSPOSE = 98
    TUPLE = 100


ELEMENTWISE = {Op.ADD, Op.COMPARE, Op.CONVERT, Op.DIVIDE, Op.EXPONENTIAL, Op.LOG, Op.MAXIMUM, Op.MULTIPLY,
               Op.NEGATE, Op.RSQRT, Op.SELECT, Op.SUBTRACT, Op.TANH}
TRANSCENDENTAL = {Op.EXPONENTIAL, Op.LOG, Op.RSQRT, Op.TANH}
SOURCES = {Op.PARAMETER, Op.CONSTANT, Op.IOTA, Op.RNG}
FIXED_LAYOUT = SOURCES | {Op.BROADCAST, Op.GATHER, Op.TUPLE, Op.CONVOLUTION, Op.DOT, Op.RESHAPE}  # unless configurable
SAME_LAYOUT = ELEMENTWISE | {Op.CONCATENATE, Op.SLICE, Op.REDUCE_WINDOW}  # output layout = operand 0's

DTYPE_BYTES = {"pred": 1, "s32": 4, "f32": 4, "bf16": 2}
DTYPE_COLUMN = {"pred": 3, "s32": 6, "f32": 13, "bf16": 15}  # node_feat one-hot element type (cols 2-20)
TUPLE_COLUMN = 18

# node_feat columns beyond constants.py (format.md)
IS_ROOT, TUPLE_SIZE, PARAMETER_NUMBER = 0, 29, 30
DIMENSIONS = 31  # 31-36
WINDOW = 37  # 6 fields (size, stride, pad low, pad high, window dilation, base dilation) x (dims 0..5, sum, product)
WINDOW_REVERSAL = 85  # dims 0..5, true count, false count
CONV_DIMS = 93  # 93-108
SLICE = 109  # start, stride, limit: each dims 0..1, sum, product


# ---------------------------------------------------------------- permutations


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


@lru_cache(maxsize=None)
def perm_index(perm: tuple[int, ...]) -> int:
    """Index of one layout in PERMS[len(perm)]."""
    return int(perm_rank(np.array([perm], np.int64).reshape(1, len(perm)))[0])


@lru_cache(maxsize=None)
def transpose_map(rank: int, permutation: tuple[int, ...]) -> np.ndarray:
    """Operand layout index -> output layout index of a transpose (output dim j = operand dim permutation[j])."""
    inverse = np.argsort(permutation)
    return perm_rank(inverse[PERMS[rank]])


@lru_cache(maxsize=None)
def reduce_map(rank: int, dims: tuple[int, ...]) -> np.ndarray:
    """Operand layout index -> output layout index of a reduce over `dims` (the kept dims keep their order)."""
    perms = PERMS[rank]
    kept = perms[~np.isin(perms, dims)].reshape(len(perms), rank - len(dims))  # [r!, r - |dims|]
    renumber = np.arange(rank) - np.searchsorted(np.sort(dims), np.arange(rank))
    return perm_rank(renumber[kept])
