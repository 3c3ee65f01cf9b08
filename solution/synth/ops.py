"""The vocabulary of synthetic graphs: opcodes, node-feature columns and minor-to-major permutations."""

from __future__ import annotations

from enum import IntEnum

from ..constants import (
    CONVOLUTION,
    DOT,
    RESHAPE,
)
from ..format import (
    CONV,
    ELEMENT_BYTES,
    ELEMENT_TYPE,
    ELEMENT_TYPES,
    PARAMETER,
    REVERSAL,
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

DTYPES = ("pred", "s32", "f32", "bf16")  # the element types the generator uses
DTYPE_BYTES = {name: ELEMENT_BYTES[name] for name in DTYPES}
DTYPE_COLUMN = {name: ELEMENT_TYPE + ELEMENT_TYPES.index(name) for name in DTYPES}  # node_feat one-hot element type
TUPLE_COLUMN = ELEMENT_TYPE + ELEMENT_TYPES.index("tuple")

# node_feat columns (solution/format.py) under the generator's names
PARAMETER_NUMBER, WINDOW_REVERSAL, CONV_DIMS = PARAMETER, REVERSAL, CONV
