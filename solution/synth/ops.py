"""The vocabulary of synthetic graphs: opcodes, node-feature columns and minor-to-major permutations."""

from __future__ import annotations

from enum import IntEnum

from ..constants import (
    CONVOLUTION,
    DOT,
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
