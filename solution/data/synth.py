"""Synthetic TpuGraphs: all five collections in the exact on-disk format, timed by cost laws that need the graph.

Run: `solution synth --out data/synthetic --size tiny` (or `python -m solution.synth ...`).

Layout law (ns before noise), for one configuration:
  * Every tensor has a physical layout, a minor-to-major permutation of its dims (size-1 dims ignored). A
    configurable conv/dot/reshape takes its output, input and (conv) kernel layouts from the config, an all -1
    group meaning its default (conv: feature dims minor; else row-major); non-configurable ones use their defaults.
    Parameters, gathers and tuples are row-major; broadcasts, constants, iotas, random bits and masks built from
    them adapt to their consumer for free. Every other node inherits the layout of its first non-flexible operand
    (transposes and reduces map it), so a choice travels down element-wise chains.
  * runtime = sum over nodes of their cost under those layouts: padded bytes / bandwidth (minor dim padded to 128
    lanes, at most 4x; second-minor to 8 sublanes), a quarter pass per element-wise op (they fuse), a full pass
    for reduces and slices; conv/dot flops x operand factors (feature / contraction dims away from the minor end
    cost up to 2.4x each, and 1.6x more unless the contraction dim is minor in one operand and second-minor in
    the other)
    + their operands' and output's bytes; a reshape is a free bitcast only between row-major layouts
    + per edge whose consumer wants another layout than the producer's (what a conv/dot/reshape asks for, or an
      element-wise op's own layout for its other operands): a copy, 2 x max(padded bytes of both layouts) x
      0.25 (same (8, 128) tiling dims), 1 (same minor dim) or 3 (the minor dim moves).
  * x (1 + 0.1% deterministic per-config noise, for effects no model sees) x (1 +- 0.05% measurement noise):
    duplicated configs stay within 0.1% of each other. (Config-driven spreads are 0.2-2% in default
    collections of large graphs, so percent-level noise would leave nothing to rank.)
  The sum is const + sum_v unary_v[c_v] + sum_(a,b) pair_ab[c_a, c_b] over layout variables (LayoutCost), so a
  40k-node graph times 100,040 configs in about a second. In `random` collections 15-50% of the runtime variance
  is in the pair (interaction) terms; `default` configs move 1-3 nodes, mostly keeping the default's minor dim.

Tile law: grid steps x (max(compute, memory of one tile) + per-tile overhead) + launch, tile dims rounded up to
the (8, 128) vector shape; waste where tiles do not divide the dims, partial-sum traffic (or a second softmax
pass) when a reduced dim is split, a cliff past a fast-memory budget; work per point comes from the kernel's
ops. Normalizer = the default tile's runtime (+-0.3% run to run), so y = runtime / normalizer is near 1.

Files: .npz archives with fixed timestamps, written atomically: deflated for tiny/small, stored for
realistic (1 GB config blocks deflate slowly and load faster raw). Config blocks stream in chunks of 8192, so a
100,040 x 150 x 18 block needs ~0.1 GB of memory. Same (size, seed, collections) -> same bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import math
import time
import zipfile
import zlib
from dataclasses import dataclass, field
from enum import IntEnum
from functools import lru_cache, partial
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from ..atomic import atomic_write
from ..constants import (
    COLLECTIONS,
    CONVOLUTION,
    DOT,
    LAYOUT_CONFIG_DIM,
    LAYOUT_GROUP,
    LAYOUT_MINOR_TO_MAJOR,
    NODE_FEAT_DIM,
    PAD,
    RESHAPE,
    SHAPE_DIMS,
    SHAPE_PRODUCT,
    SHAPE_SUM,
    SPLITS,
    TILE_CONFIG_DIM,
)
from ..errors import OK, USAGE, fail

SIZES = ("tiny", "small", "realistic")


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
    TRANSPOSE = 97
    TUPLE = 99


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

# layout cost law (ns, bytes)
BANDWIDTH = 1200.0  # bytes / ns
PEAK_FLOPS = 1.0e5  # flops / ns
OP_OVERHEAD = 150.0
FUSED_PASS = 0.25  # element-wise ops fuse into their neighbours: a fraction of a pass over the tensor each
COPY_OVERHEAD = 600.0
COPY_LEVELS = (0.25, 1.0, 3.0)  # same (8, 128) tiling dims / same minor dim / minor dim moves
MISALIGNED = 1.6  # conv/dot slowdown unless the contraction dim is minor in one operand, second-minor in the other
LANES, SUBLANES = 128, 8
MAX_LANE_WASTE = 4.0
CONFIG_NOISE, MEASURE_NOISE = 0.001, 0.0005

# tile cost law
TILE_BANDWIDTH = 1200.0
TILE_PEAK_FLOPS = 5.0e4
VECTOR_OPS = 2000.0  # element-wise ops / ns
TRANSCENDENTAL_COST = 4.0  # in element-wise ops
TILE_OVERHEAD = 350.0
LAUNCH_OVERHEAD = 2000.0
FAST_MEMORY = 4 * 2**20
NORMALIZER_NOISE = 0.003

CHUNK = 8192  # configs per streamed block
BIG_CONFIGS = 100_040
_EPOCH = (1980, 1, 1, 0, 0, 0)


# ---------------------------------------------------------------- sizes


@dataclass(frozen=True)
class SizeSpec:
    """How many files of what size each collection gets."""

    layout_files: tuple[int, int, int]  # train, valid, test graphs per layout collection
    nodes: tuple[int, int]  # target node count range
    configs: tuple[int, int]  # configs per train / valid file
    test_configs: tuple[int, int]
    configurable: tuple[int, int]  # nc range (all conv/dot/reshape nodes when fewer)
    big_train_files: int  # nlp train files holding BIG_CONFIGS configs
    tile_files: tuple[int, int, int]
    tile_configs: tuple[int, int]
    compress: bool


SIZE_SPECS = {
    "tiny": SizeSpec((6, 3, 3), (150, 400), (30, 120), (30, 120), (5, 20), 0, (30, 8, 8), (10, 40), True),
    "small": SizeSpec((30, 8, 8), (500, 3000), (300, 2000), (300, 1000), (15, 60), 0, (400, 60, 60), (10, 100),
                      True),
    "realistic": SizeSpec((4, 2, 2), (10_000, 40_000), (2_000, 20_000), (1_000, 1_000), (100, 150), 1,
                          (1500, 200, 200), (10, 500), False),
}


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


# ---------------------------------------------------------------- graphs


@dataclass(frozen=True)
class Window:
    """A window over some dims: conv spatial dims, or every dim of a reduce-window."""

    size: tuple[int, ...]
    stride: tuple[int, ...]
    pad_low: tuple[int, ...]
    pad_high: tuple[int, ...]
    base_dilation: tuple[int, ...]


@dataclass(frozen=True)
class ConvDims:
    """Convolution dimension numbers: positions of batch/feature/spatial dims in input, kernel and output."""

    in_batch: int
    in_feat: int
    in_spatial: tuple[int, ...]
    k_in: int
    k_out: int
    k_spatial: tuple[int, ...]
    out_batch: int
    out_feat: int
    out_spatial: tuple[int, ...]


@dataclass
class Node:
    """One HLO instruction."""

    op: int
    shape: tuple[int, ...]
    dtype: str
    inputs: tuple[int, ...] = ()
    dims: tuple[int, ...] = ()  # the `dimensions` attribute: reduce/broadcast/transpose/concatenate
    window: Window | None = None
    conv: ConvDims | None = None
    param: int = 0
    slice_: tuple[tuple[int, ...], tuple[int, ...]] | None = None  # starts, limits

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> float:
        return float(math.prod(self.shape)) * DTYPE_BYTES.get(self.dtype, 0)


class GraphBuilder:
    """Appends HLO nodes in topological order, deriving every output shape."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.nodes: list[Node] = []
        self.splits = [0]
        self.rng = rng
        self._params = 0

    def __len__(self) -> int:
        return len(self.nodes)

    def add(self, op: int, shape: Sequence[int], dtype: str, inputs: Sequence[int] = (), **attrs) -> int:
        self.nodes.append(Node(int(op), tuple(int(d) for d in shape), dtype, tuple(inputs), **attrs))
        return len(self.nodes) - 1

    def shape(self, x: int) -> tuple[int, ...]:
        return self.nodes[x].shape

    def split(self) -> None:
        """Start a new HLO computation at the next node (`splits`: the first node of each computation)."""
        if self.splits[-1] != len(self.nodes):
            self.splits.append(len(self.nodes))

    def param(self, shape: Sequence[int], dtype: str = "f32") -> int:
        self._params += 1
        return self.add(Op.PARAMETER, shape, dtype, param=self._params - 1)

    def full(self, shape: Sequence[int], dtype: str = "f32") -> int:
        """A scalar constant broadcast to `shape`."""
        return self.broadcast(self.add(Op.CONSTANT, (), dtype), shape, ())

    def unary(self, op: int, x: int, dtype: str | None = None) -> int:
        return self.add(op, self.shape(x), dtype or self.nodes[x].dtype, (x,))

    def binary(self, op: int, x: int, y: int, dtype: str | None = None) -> int:
        assert self.shape(x) == self.shape(y), (op, self.shape(x), self.shape(y))
        return self.add(op, self.shape(x), dtype or self.nodes[x].dtype, (x, y))

    def select(self, predicate: int, x: int, y: int) -> int:
        return self.add(Op.SELECT, self.shape(x), self.nodes[x].dtype, (predicate, x, y))

    def broadcast(self, x: int, shape: Sequence[int], dims: Sequence[int]) -> int:
        assert tuple(shape[d] for d in dims) == self.shape(x)
        return self.add(Op.BROADCAST, shape, self.nodes[x].dtype, (x,), dims=tuple(dims))

    def reduce(self, x: int, dims: Sequence[int]) -> int:
        dims = tuple(sorted(dims))
        shape = [d for i, d in enumerate(self.shape(x)) if i not in dims]
        init = self.add(Op.CONSTANT, (), self.nodes[x].dtype)
        return self.add(Op.REDUCE, shape, self.nodes[x].dtype, (x, init), dims=dims)

    def transpose(self, x: int, permutation: Sequence[int]) -> int:
        shape = [self.shape(x)[p] for p in permutation]
        return self.add(Op.TRANSPOSE, shape, self.nodes[x].dtype, (x,), dims=tuple(permutation))

    def reshape(self, x: int, shape: Sequence[int]) -> int:
        assert math.prod(shape) == math.prod(self.shape(x))
        return self.add(Op.RESHAPE, shape, self.nodes[x].dtype, (x,))

    def convert(self, x: int, dtype: str) -> int:
        return x if self.nodes[x].dtype == dtype else self.unary(Op.CONVERT, x, dtype)

    def conv(self, x: int, w: int, shape: Sequence[int], dims: ConvDims, window: Window) -> int:
        return self.add(Op.CONVOLUTION, shape, self.nodes[x].dtype, (x, w), conv=dims, window=window)

    def dot(self, a: int, b: int) -> int:
        """lhs [..., M, K] x rhs [..., K, N] (same batch dims) or x rhs [K, N] -> [..., M, N]."""
        sa, sb = self.shape(a), self.shape(b)
        assert sa[-1] == sb[-2] and (len(sb) == 2 or sa[:-2] == sb[:-2]), (sa, sb)
        return self.add(Op.DOT, sa[:-1] + sb[-1:], self.nodes[a].dtype, (a, b))

    def concat(self, xs: Sequence[int], dim: int) -> int:
        shape = list(self.shape(xs[0]))
        shape[dim] = sum(self.shape(x)[dim] for x in xs)
        return self.add(Op.CONCATENATE, shape, self.nodes[xs[0]].dtype, xs, dims=(dim,))

    def reduce_window(self, x: int, size: Sequence[int], stride: Sequence[int]) -> int:
        shape = [math.ceil(d / s) for d, s in zip(self.shape(x), stride)]
        low, high = zip(*(_same_padding(d, k, s) for d, k, s in zip(self.shape(x), size, stride)))
        window = Window(tuple(size), tuple(stride), low, high, (1,) * len(size))
        init = self.add(Op.CONSTANT, (), self.nodes[x].dtype)
        return self.add(Op.REDUCE_WINDOW, shape, self.nodes[x].dtype, (x, init), window=window)

    def slice(self, x: int, starts: Sequence[int], limits: Sequence[int]) -> int:
        shape = [b - a for a, b in zip(starts, limits)]
        return self.add(Op.SLICE, shape, self.nodes[x].dtype, (x,), slice_=(tuple(starts), tuple(limits)))

    def root(self, xs: Sequence[int]) -> int:
        """The output tuple, last node of the graph."""
        return self.add(Op.TUPLE, (), "tuple", xs)

    # compound ops
    def scale(self, x: int) -> int:
        return self.binary(Op.MULTIPLY, x, self.full(self.shape(x), self.nodes[x].dtype))

    def relu(self, x: int) -> int:
        return self.binary(Op.MAXIMUM, x, self.full(self.shape(x), self.nodes[x].dtype))

    def bias(self, x: int, dim: int) -> int:
        shape = self.shape(x)
        b = self.param((shape[dim],), self.nodes[x].dtype)
        return self.binary(Op.ADD, x, self.broadcast(b, shape, (dim,)))


def _same_padding(size: int, window: int, stride: int) -> tuple[int, int]:
    total = max((math.ceil(size / stride) - 1) * stride + window - size, 0)
    return total // 2, total - total // 2


# ---------------------------------------------------------------- xla-like graphs: convnets


@dataclass
class _ConvLayer:
    """What the backward pass needs of one forward conv."""

    x: int
    w: int
    out: int  # after batch norm and activation
    relu: bool


class _ConvNet:
    """ResNet / Inception / 3-D conv nets, inference or a training step (forward, backward, weight update)."""

    def __init__(self, b: GraphBuilder, spatial: int, channels_last: bool, train: bool, dtype: str) -> None:
        self.b, self.spatial, self.train, self.dtype = b, spatial, train, dtype
        self.rank = spatial + 2
        self.feat = self.rank - 1 if channels_last else 1
        self.space = tuple(i for i in range(1, self.rank) if i != self.feat)
        self.layers: list[_ConvLayer] = []
        self.updates: list[int] = []
        self.classifier = -1  # the classifier weight, set by head()

    def act_shape(self, batch: int, space: Sequence[int], channels: int) -> tuple[int, ...]:
        shape = [0] * self.rank
        shape[0], shape[self.feat] = batch, channels
        for i, d in zip(self.space, space):
            shape[i] = d
        return tuple(shape)

    def conv_dims(self) -> ConvDims:
        kernel_space = tuple(range(self.spatial))
        return ConvDims(0, self.feat, self.space, self.spatial, self.spatial + 1, kernel_space, 0, self.feat,
                        self.space)

    def conv(self, x: int, channels: int, k: int, stride: int, relu: bool = True) -> int:
        b = self.b
        shape = b.shape(x)
        w = b.param((k,) * self.spatial + (shape[self.feat], channels), self.dtype)
        space = [shape[i] for i in self.space]
        out_space = [math.ceil(d / stride) for d in space]
        low, high = zip(*(_same_padding(d, k, stride) for d in space))
        window = Window((k,) * self.spatial, (stride,) * self.spatial, low, high, (1,) * self.spatial)
        y = b.conv(x, w, self.act_shape(shape[0], out_space, channels), self.conv_dims(), window)
        y = self.batch_norm(y)
        y = b.relu(y) if relu else y
        self.layers.append(_ConvLayer(x, w, y, relu))
        return y

    def batch_norm(self, y: int) -> int:
        b = self.b
        shape = b.shape(y)
        others = tuple(i for i in range(self.rank) if i != self.feat)
        if self.train:
            mean = b.scale(b.reduce(y, others))  # [C]
            centered = b.binary(Op.SUBTRACT, y, b.broadcast(mean, shape, (self.feat,)))
            var = b.scale(b.reduce(b.binary(Op.MULTIPLY, centered, centered), others))
            inv = b.unary(Op.RSQRT, b.binary(Op.ADD, var, b.full(b.shape(var))))
            gamma = b.binary(Op.MULTIPLY, inv, b.param(b.shape(inv), self.dtype))
            y = b.binary(Op.MULTIPLY, centered, b.broadcast(gamma, shape, (self.feat,)))
        else:
            y = b.binary(Op.MULTIPLY, y, b.broadcast(b.param((shape[self.feat],), self.dtype), shape, (self.feat,)))
        return b.bias(y, self.feat)

    def stem(self, x: int, channels: int) -> int:
        y = self.conv(x, channels, 7 if self.spatial == 2 else 3, 2)
        size = [3 if i in self.space else 1 for i in range(self.rank)]
        stride = [2 if i in self.space else 1 for i in range(self.rank)]
        return self.b.reduce_window(y, size, stride)

    def residual(self, x: int, channels: int, stride: int) -> int:
        b = self.b
        shortcut = x
        if stride != 1 or b.shape(x)[self.feat] != channels:
            shortcut = self.conv(x, channels, 1, stride, relu=False)
        h = self.conv(x, max(channels // 4, 16), 1, 1)
        h = self.conv(h, max(channels // 4, 16), 3, stride)
        h = self.conv(h, channels, 1, 1, relu=False)
        return b.relu(b.binary(Op.ADD, h, shortcut))

    def inception(self, x: int, channels: int, stride: int) -> int:
        b = self.b
        parts = _split_channels(channels, b.rng)
        one = self.conv(x, parts[0], 1, stride)
        three = self.conv(self.conv(x, parts[1] // 2 + 8, 1, 1), parts[1], 3, stride)
        size = [3 if i in self.space else 1 for i in range(self.rank)]
        steps = [stride if i in self.space else 1 for i in range(self.rank)]
        pool = self.conv(b.reduce_window(x, size, steps), parts[2], 1, 1)
        return b.concat([one, three, pool], self.feat)

    def head(self, x: int, classes: int) -> tuple[int, int, int]:
        """Global pool, flatten (a reshape), classifier, softmax cross-entropy; returns (loss, dloss/dlogits, flat)."""
        b = self.b
        shape = b.shape(x)
        size = [shape[i] if i in self.space else 1 for i in range(self.rank)]
        pooled = b.scale(b.reduce_window(x, size, size))  # [N, 1.., C]
        flat = b.reshape(pooled, (shape[0], shape[self.feat]))
        self.classifier = b.param((shape[self.feat], classes), self.dtype)
        logits = b.bias(b.dot(flat, self.classifier), 1)
        probs = softmax(b, logits)
        labels = b.param(b.shape(probs), self.dtype)
        loss = b.unary(Op.NEGATE, b.reduce(b.binary(Op.MULTIPLY, b.unary(Op.LOG, probs), labels), (0, 1)))
        return loss, b.binary(Op.SUBTRACT, probs, labels), flat

    def backward(self, grad_logits: int, flat: int, last: int) -> None:
        """Gradients of every conv (data and weights) in reverse order, and SGD updates of the weights."""
        b = self.b
        b.split()
        shape = b.shape(last)
        grad_flat = b.dot(grad_logits, b.transpose(self.classifier, (1, 0)))  # [N, C]
        self.updates.append(b.dot(b.transpose(flat, (1, 0)), grad_logits))
        g = b.scale(b.broadcast(grad_flat, shape, (0, self.feat)))
        for layer in reversed(self.layers):
            out_shape = b.shape(layer.out)
            if b.shape(g) != out_shape:
                g = self.route(g, out_shape)
            if layer.relu:
                positive = b.binary(Op.COMPARE, layer.out, b.full(out_shape), "pred")
                g = b.select(positive, g, b.full(out_shape))
            channel = b.reduce(b.binary(Op.MULTIPLY, g, layer.out), tuple(i for i in self.space) + (0,))
            g = b.binary(Op.SUBTRACT, g, b.broadcast(b.scale(channel), out_shape, (self.feat,)))
            self.updates.append(self.weight_update(layer, g))
            if layer is not self.layers[0]:  # no gradient for the input image
                g = self.data_grad(layer, g)

    def route(self, g: int, shape: tuple[int, ...]) -> int:
        """A 1x1 conv carrying a gradient to a differently shaped activation (shortcut and concat branches)."""
        b = self.b
        channels = b.shape(g)[self.feat]
        w = b.param((1,) * self.spatial + (channels, shape[self.feat]), self.dtype)
        stride = tuple(max(b.shape(g)[i] // shape[i], 1) for i in self.space)
        window = Window((1,) * self.spatial, stride, (0,) * self.spatial, (0,) * self.spatial, (1,) * self.spatial)
        return b.conv(g, w, shape, self.conv_dims(), window)

    def data_grad(self, layer: _ConvLayer, g: int) -> int:
        b = self.b
        x_shape, k = b.shape(layer.x), b.shape(layer.w)
        d = self.conv_dims()
        dims = ConvDims(d.in_batch, d.in_feat, d.in_spatial, d.k_out, d.k_in, d.k_spatial, d.out_batch, d.out_feat,
                        d.out_spatial)
        dilation = tuple(max(x_shape[i] // b.shape(g)[i], 1) for i in self.space)
        window = Window(k[:self.spatial], (1,) * self.spatial, tuple(s // 2 for s in k[:self.spatial]),
                        tuple(s // 2 for s in k[:self.spatial]), dilation)
        return b.conv(g, layer.w, x_shape, dims, window)

    def weight_update(self, layer: _ConvLayer, g: int) -> int:
        """dW = conv(x, g) with batch as the contracted feature; W - lr * dW."""
        b = self.b
        k = b.shape(layer.w)
        kernel_space = tuple(range(self.spatial))
        dims = ConvDims(self.feat, 0, self.space, 0, self.feat, self.space, self.spatial, self.spatial + 1,
                        kernel_space)
        g_space = tuple(b.shape(g)[i] for i in self.space)
        window = Window(g_space, (1,) * self.spatial, (0,) * self.spatial, (0,) * self.spatial, (1,) * self.spatial)
        grad_w = b.conv(layer.x, g, k, dims, window)
        return b.binary(Op.SUBTRACT, layer.w, b.scale(grad_w))


def _split_channels(channels: int, rng: np.random.Generator) -> list[int]:
    return [max(int(channels * w) // 16 * 16, 16) for w in rng.dirichlet([3.0, 4.0, 2.0])]


def convnet_graph(rng: np.random.Generator, n_target: int, kind: str) -> GraphBuilder:
    """An xla-like conv net of about n_target nodes; kind in XLA_MODELS."""
    b = GraphBuilder(rng)
    train = kind.endswith("_train")
    spatial = 3 if kind.startswith("c3d") else 2
    net = _ConvNet(b, spatial, bool(rng.random() < 0.75), train, "bf16" if rng.random() < 0.3 else "f32")
    batch = int(rng.choice([1, 4, 8, 16, 32]))
    image = [16, 112, 112] if spatial == 3 else [int(rng.choice([96, 128, 224, 299]))] * 2
    x = b.param(net.act_shape(batch, image[-spatial:], 3), net.dtype)
    width = int(rng.choice([32, 48, 64, 96]))
    x = net.stem(x, width)
    per_block = (150 if train else 70) if kind.startswith("resnet") or spatial == 3 else (120 if train else 55)
    budget = n_target * (0.6 if train else 0.92) - 40
    per_stage = max(math.ceil(budget / per_block / 4), 1)  # blocks per stage if the estimate holds
    channels, block = width * 4, 0
    while len(b) < budget:
        new_stage = block % per_stage == 0 and 0 < block < 4 * per_stage
        if new_stage:
            b.split()
            channels *= 2
        space = [b.shape(x)[i] for i in net.space]
        stride = 2 if new_stage and min(space) > 7 else 1
        x = net.inception(x, channels, stride) if kind.startswith("inception") else net.residual(x, channels, stride)
        block += 1
    loss, grad_logits, flat = net.head(x, int(rng.choice([10, 100, 1000, 1001])))
    if train:
        net.backward(grad_logits, flat, x)
    b.root([loss] + net.updates)
    return b


# ---------------------------------------------------------------- nlp-like graphs: transformers


def softmax(b: GraphBuilder, x: int) -> int:
    """Softmax over the last dim: max, subtract, exp, sum, divide."""
    shape = b.shape(x)
    keep = tuple(range(len(shape) - 1))
    top = b.broadcast(b.reduce(x, (len(shape) - 1,)), shape, keep)
    e = b.unary(Op.EXPONENTIAL, b.binary(Op.SUBTRACT, x, top))
    return b.binary(Op.DIVIDE, e, b.broadcast(b.reduce(e, (len(shape) - 1,)), shape, keep))


def layer_norm(b: GraphBuilder, x: int) -> int:
    shape = b.shape(x)
    last, keep = len(shape) - 1, tuple(range(len(shape) - 1))
    mean = b.broadcast(b.scale(b.reduce(x, (last,))), shape, keep)
    centered = b.binary(Op.SUBTRACT, x, mean)
    var = b.scale(b.reduce(b.binary(Op.MULTIPLY, centered, centered), (last,)))
    inv = b.unary(Op.RSQRT, b.binary(Op.ADD, var, b.full(b.shape(var))))
    y = b.binary(Op.MULTIPLY, centered, b.broadcast(inv, shape, keep))
    y = b.binary(Op.MULTIPLY, y, b.broadcast(b.param((shape[last],)), shape, (last,)))
    return b.bias(y, last)


def gelu(b: GraphBuilder, x: int) -> int:
    cube = b.binary(Op.MULTIPLY, b.binary(Op.MULTIPLY, x, x), x)
    inner = b.scale(b.binary(Op.ADD, x, b.scale(cube)))
    gate = b.scale(b.binary(Op.ADD, b.unary(Op.TANH, inner), b.full(b.shape(x), b.nodes[x].dtype)))
    return b.binary(Op.MULTIPLY, x, gate)


def dropout(b: GraphBuilder, x: int) -> int:
    keep = b.binary(Op.COMPARE, b.add(Op.RNG, b.shape(x), "f32"), b.full(b.shape(x)), "pred")
    return b.scale(b.select(keep, x, b.full(b.shape(x), b.nodes[x].dtype)))


class _Transformer:
    """BERT/GPT-like encoder stacks: projections as dots, head splits as reshape + transpose."""

    def __init__(self, b: GraphBuilder, batch: int, seq: int, width: int, heads: int, dtype: str, train: bool):
        self.b, self.batch, self.seq, self.width, self.heads = b, batch, seq, width, heads
        self.dtype, self.train = dtype, train

    def linear(self, x: int, out: int) -> int:
        b = self.b
        w = b.param((b.shape(x)[-1], out), self.dtype)
        y = b.convert(b.dot(b.convert(x, self.dtype), w), "f32")
        return b.bias(y, len(b.shape(y)) - 1)

    def split_heads(self, x: int, permutation: tuple[int, ...]) -> int:
        b = self.b
        x = b.reshape(x, (self.batch, self.seq, self.heads, self.width // self.heads))
        return b.transpose(x, permutation)

    def attention(self, x: int, mask: int) -> int:
        b = self.b
        q = self.split_heads(self.linear(x, self.width), (0, 2, 1, 3))  # [B, H, S, Dh]
        k = self.split_heads(self.linear(x, self.width), (0, 2, 3, 1))  # [B, H, Dh, S]
        v = self.split_heads(self.linear(x, self.width), (0, 2, 1, 3))
        scores = b.binary(Op.ADD, b.scale(b.dot(q, k)), mask)  # [B, H, S, S]
        probs = softmax(b, scores)
        if self.train:
            probs = dropout(b, probs)
        ctx = b.transpose(b.dot(probs, v), (0, 2, 1, 3))  # [B, S, H, Dh]
        ctx = b.reshape(ctx, (self.batch, self.seq, self.width))
        return self.linear(ctx, self.width)

    def layer(self, x: int, mask: int) -> int:
        b = self.b
        h = self.attention(x, mask)
        x = layer_norm(b, b.binary(Op.ADD, dropout(b, h) if self.train else h, x))
        h = self.linear(gelu(b, self.linear(x, 4 * self.width)), self.width)
        return layer_norm(b, b.binary(Op.ADD, dropout(b, h) if self.train else h, x))


def transformer_graph(rng: np.random.Generator, n_target: int, kind: str) -> GraphBuilder:
    """An nlp-like transformer of about n_target nodes; kind in NLP_MODELS."""
    b = GraphBuilder(rng)
    batch = int(rng.choice([1, 4, 8, 16, 32]))
    seq = int(rng.choice([128, 256, 384, 512]))
    width = int(rng.choice([256, 384, 512, 768, 1024]))
    t = _Transformer(b, batch, seq, width, width // 64, "bf16" if rng.random() < 0.5 else "f32",
                     kind.endswith("_train"))
    ids = b.param((batch, seq), "s32")
    x = b.add(Op.GATHER, (batch, seq, width), "f32", (b.param((30522, width)), ids))
    x = layer_norm(b, b.binary(Op.ADD, x, b.broadcast(b.param((seq, width)), (batch, seq, width), (1, 2))))
    scores_shape = (batch, t.heads, seq, seq)
    if kind.startswith("gpt"):
        rows, cols = b.add(Op.IOTA, (seq, seq), "s32"), b.add(Op.IOTA, (seq, seq), "s32")
        causal = b.select(b.binary(Op.COMPARE, rows, cols, "pred"), b.full((seq, seq)), b.full((seq, seq)))
        mask = b.broadcast(causal, scores_shape, (2, 3))
    else:
        mask = b.broadcast(b.param((batch, seq)), scores_shape, (0, 3))
    layer = 0
    while len(b) < n_target - 60:
        if layer % 2 == 0:
            b.split()
        x = t.layer(x, mask)
        layer += 1
    b.split()
    cls = b.reshape(b.slice(x, (0, 0, 0), (batch, 1, width)), (batch, width))
    pooled = b.unary(Op.TANH, t.linear(cls, width))
    probs = softmax(b, t.linear(pooled, 2))
    loss = b.unary(Op.NEGATE, b.reduce(b.binary(Op.MULTIPLY, b.unary(Op.LOG, probs), b.param((batch, 2))), (0, 1)))
    b.root([loss, x])
    return b


XLA_MODELS = ("resnet_like", "resnet_like_train", "inception_like", "inception_like_train", "c3d_like")
NLP_MODELS = ("bert_like", "bert_like_train", "gpt_like", "gpt_like_train")


# ---------------------------------------------------------------- node features


def node_features(nodes: Sequence[Node], layouts: Sequence[Sequence[int]]) -> np.ndarray:
    """The [n, 140] node_feat block; `layouts` are the nodes' default minor-to-major layouts."""
    feat = np.zeros((len(nodes), NODE_FEAT_DIM), np.float32)
    for i, (node, layout) in enumerate(zip(nodes, layouts)):
        row = feat[i]
        row[TUPLE_COLUMN if node.op == Op.TUPLE else DTYPE_COLUMN[node.dtype]] = 1
        if node.shape:
            row[SHAPE_DIMS.start:SHAPE_DIMS.start + node.rank] = node.shape
            row[SHAPE_SUM], row[SHAPE_PRODUCT] = sum(node.shape), math.prod(node.shape)
        row[TUPLE_SIZE] = len(node.inputs) if node.op == Op.TUPLE else 0
        row[PARAMETER_NUMBER] = node.param
        row[DIMENSIONS:DIMENSIONS + len(node.dims)] = node.dims
        if node.window is not None:
            _window_features(row, node.window)
        if node.conv is not None:
            _conv_features(row, node.conv)
        if node.slice_ is not None:
            starts, limits = node.slice_
            for base, values in ((SLICE, starts), (SLICE + 4, [1] * len(starts)), (SLICE + 8, limits)):
                row[base:base + 2] = values[:2]
                row[base + 2], row[base + 3] = sum(values), math.prod(values)
        lo = LAYOUT_MINOR_TO_MAJOR.start
        row[lo:lo + len(layout)] = layout
    feat[-1, IS_ROOT] = 1
    return feat


def _window_features(row: np.ndarray, window: Window) -> None:
    ones = (1,) * len(window.size)
    fields = (window.size, window.stride, window.pad_low, window.pad_high, ones, window.base_dilation)
    for f, values in enumerate(fields):
        base = WINDOW + 8 * f
        row[base:base + len(values)] = values
        row[base + 6], row[base + 7] = sum(values), math.prod(values)
    row[WINDOW_REVERSAL + 7] = len(window.size)  # false count


def _conv_features(row: np.ndarray, dims: ConvDims) -> None:
    row[CONV_DIMS], row[CONV_DIMS + 1] = dims.in_batch, dims.in_feat
    row[CONV_DIMS + 2:CONV_DIMS + 2 + len(dims.in_spatial)] = dims.in_spatial
    row[CONV_DIMS + 6], row[CONV_DIMS + 7] = dims.k_in, dims.k_out
    row[CONV_DIMS + 8:CONV_DIMS + 8 + len(dims.k_spatial)] = dims.k_spatial
    row[CONV_DIMS + 12], row[CONV_DIMS + 13] = dims.out_batch, dims.out_feat
    row[CONV_DIMS + 14] = row[CONV_DIMS + 15] = 1  # feature / batch group counts


def edge_index(nodes: Sequence[Node]) -> np.ndarray:
    """[m, 2] rows [consumer, producer], one per operand (repeated operands once)."""
    rows = [(u, p) for u, node in enumerate(nodes) for p in dict.fromkeys(node.inputs)]
    return np.array(rows, np.int64).reshape(-1, 2)


# ---------------------------------------------------------------- layout cost law


def effective(node: Node, perms: np.ndarray) -> np.ndarray:
    """Layouts [k, r] without the size-1 dims [k, r'], which take no room and never force a copy (XLA drops them)."""
    keep = np.asarray(node.shape)[perms] > 1  # [k, r]
    return perms[keep].reshape(len(perms), int(keep[0].sum()) if len(perms) else 0)


def phys_bytes(node: Node, perms: np.ndarray) -> np.ndarray:
    """Bytes of `node`'s tensor in each layout of perms [k, r]: minor dim padded to 128 lanes (small minor dims
    packed, so at most 4x), second-minor to 8 sublanes."""
    size = np.full(len(perms), node.nbytes)
    perms = effective(node, perms)
    if perms.shape[1] == 0:
        return size
    dims = np.asarray(node.shape, np.float64)
    minor = dims[perms[:, 0]]
    size *= np.minimum(np.ceil(minor / LANES) * LANES / minor, MAX_LANE_WASTE)
    if perms.shape[1] > 1:
        second = dims[perms[:, 1]]
        size *= np.ceil(second / SUBLANES) * SUBLANES / second
    return size


def copy_cost(node: Node, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """ns to relayout `node`'s tensor from layouts src [k, r] to dst [k, r] (size-1 dims ignored).

    0 where equal; a strided DMA (0.25 x) when the (8, 128) tiling dims stay; a copy (1 x) when only the minor
    dim stays; a transpose through the vector unit (3 x) when the minor dim moves; x the larger of both sizes.
    """
    a, b = effective(node, src), effective(node, dst)
    if a.shape[1] == 0:
        return np.zeros(len(src))
    same_minor = a[:, 0] == b[:, 0]
    same_tile = same_minor & ((a[:, 1] == b[:, 1]) if a.shape[1] > 1 else True)
    level = np.select([same_tile, same_minor], [COPY_LEVELS[0], COPY_LEVELS[1]], COPY_LEVELS[2])
    cost = 2 * level * np.maximum(phys_bytes(node, src), phys_bytes(node, dst)) / BANDWIDTH + COPY_OVERHEAD
    return np.where((a == b).all(axis=1), 0.0, cost)


def _position(node: Node, perms: np.ndarray, dim: int) -> np.ndarray:
    """Where `dim` of `node`'s tensor sits in each layout of perms [k, r] (0 = minor; size-1 dims skipped)."""
    return np.argmax(effective(node, perms) == dim, axis=1) if node.shape[dim] > 1 else np.zeros(len(perms), int)


def _operand_factor(node: Node, perms: np.ndarray, first: int, second: int) -> np.ndarray:
    """1.0 when dims `first` and `second` are the two minor dims, 1.4 when one is, 2.4 otherwise."""
    inside = (_position(node, perms, first) <= 1).astype(int) + (_position(node, perms, second) <= 1)
    return np.select([inside == 2, inside == 1], [1.0, 1.4], 2.4)


def _feeds_mxu(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Whether the contraction dim is minor in one operand and second-minor in the other (both MXU feed orders)."""
    return ((left == 0) & (right == 1)) | ((left == 1) & (right == 0))


def _conv_compute(node: Node, x: Node, w: Node, flops: float, inputs: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """MXU time [k] of a conv whose input and kernel are consumed in layouts inputs, kernel [k, r]."""
    d = node.conv
    pos = _position(x, inputs, d.in_feat)
    features = x.shape[d.in_feat]
    f_in = np.select([pos == 0, pos == 1], [min(math.ceil(features / LANES) * LANES / features, 4.0), 1.3], 2.0)
    aligned = _feeds_mxu(pos, _position(w, kernel, d.k_in))
    return flops / PEAK_FLOPS * f_in * _operand_factor(w, kernel, d.k_in, d.k_out) * np.where(aligned, 1.0,
                                                                                               MISALIGNED)


def _dot_compute(lhs: Node, rhs: Node, flops: float, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """MXU time [k] of a dot whose operands are consumed in layouts left, right [k, r]."""
    pos = _position(lhs, left, lhs.rank - 1)
    f_left = np.select([pos == 0, pos == 1], [1.0, 1.3], 2.2)
    aligned = _feeds_mxu(pos, _position(rhs, right, rhs.rank - 2))
    return flops / PEAK_FLOPS * f_left * _operand_factor(rhs, right, rhs.rank - 2, rhs.rank - 1) * np.where(
        aligned, 1.0, MISALIGNED)


def _reshape_cost(x: Node, node: Node, inputs: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Free (a bitcast) when operand and output are both row-major, else a physical relayout."""
    standard_in = effective(x, np.array([row_major(x.rank)]))
    standard_out = effective(node, np.array([row_major(node.rank)]))
    bitcast = (effective(x, inputs) == standard_in).all(axis=1) & (effective(node, out) == standard_out).all(axis=1)
    copy = 1.5 * (phys_bytes(x, inputs) + phys_bytes(node, out)) / BANDWIDTH
    return np.where(bitcast, 0.0, copy) + OP_OVERHEAD


def _reduce_cost(x: Node, node: Node, extra: float, inputs: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Read the operand (x(1 + extra) when the minor dim is reduced/windowed), write the output."""
    minor = effective(x, inputs)[:, :1]  # [k, 1], or [k, 0] for a tensor of size-1 dims
    if node.op == Op.REDUCE:
        costly = np.isin(minor, node.dims).any(axis=1)
    else:
        costly = (np.array(node.window.size)[minor] > 1).any(axis=1)
    read = phys_bytes(x, inputs) * np.where(costly, 1.0 + extra, 1.0)
    return (read + phys_bytes(node, out)) / BANDWIDTH + OP_OVERHEAD


Term = tuple[tuple[int, ...], Callable[..., np.ndarray]]


def node_terms(node: Node, operands: Sequence[Node]) -> list[Term]:
    """The node's own cost as (slots, fn): slot 0 = output layout, i + 1 = layout operand i is consumed in.

    fn takes one perms array [k, r] per slot and returns [k] ns. Copies between producer and consumer are not
    here but in copy_cost, added per edge.
    """
    out = partial(phys_bytes, node)
    if node.op in SOURCES or node.op == Op.TUPLE:
        return []
    if node.op in (Op.BROADCAST, Op.GATHER, Op.TRANSPOSE):
        moved = 0.0 if node.op == Op.TRANSPOSE else node.nbytes / BANDWIDTH
        return [((), lambda: moved + OP_OVERHEAD)]
    if node.op in ELEMENTWISE or node.op == Op.CONCATENATE:
        return [((0,), lambda perms: FUSED_PASS * out(perms) / BANDWIDTH + OP_OVERHEAD)]
    if node.op == Op.SLICE:
        return [((1, 0), lambda inputs, perms: (phys_bytes(operands[0], inputs) + out(perms)) / BANDWIDTH
                 + OP_OVERHEAD)]
    if node.op in (Op.REDUCE, Op.REDUCE_WINDOW):
        return [((1, 0), partial(_reduce_cost, operands[0], node, 0.6 if node.op == Op.REDUCE else 0.5))]
    if node.op == Op.RESHAPE:
        return [((1, 0), partial(_reshape_cost, operands[0], node))]
    x, w = operands
    memory = [((1,), lambda perms: phys_bytes(x, perms) / BANDWIDTH),
              ((2,), lambda perms: phys_bytes(w, perms) / BANDWIDTH)]
    if node.op == Op.CONVOLUTION:
        flops = 2.0 * math.prod(node.shape) * math.prod(node.window.size) * x.shape[node.conv.in_feat]
        minor, slow = node.conv.out_feat, 2.0
        compute = partial(_conv_compute, node, x, w, flops)
    else:
        flops = 2.0 * math.prod(node.shape) * x.shape[-1]
        minor, slow = node.rank - 1, 1.5
        compute = partial(_dot_compute, x, w, flops)
    epilogue = ((0,), lambda perms: out(perms) / BANDWIDTH * np.where(_position(node, perms, minor) == 0, 1.0, slow)
                + OP_OVERHEAD)
    return [((1, 2), compute), *memory, epilogue]


def default_layout(node: Node, group: int, rank: int) -> tuple[int, ...]:
    """The compiler default of a layout group (0 output, 1 input, 2 kernel): conv feature dims minor, else row-major."""
    if node.op != Op.CONVOLUTION:
        return row_major(rank)
    d = node.conv
    first = {0: (d.out_feat,), 1: (d.in_feat,), 2: (d.k_out, d.k_in)}[group]
    return first + tuple(i for i in row_major(rank) if i not in first)


def dictates(node: Node, operand: int) -> int | None:
    """The layout group (its config's, or its default) through which a conv/dot/reshape dictates an operand."""
    if node.op in (Op.CONVOLUTION, Op.DOT, Op.RESHAPE) and operand == 0:
        return 1
    if node.op == Op.CONVOLUTION and operand == 1:
        return 2
    return None


def flexible_nodes(nodes: Sequence[Node]) -> list[bool]:
    """Producers that take whatever layout their consumer wants, so never cost a copy: scalars, broadcasts,
    constants, iotas and random bits, and element-wise ops of only such operands (masks)."""
    flex: list[bool] = []
    for node in nodes:
        flex.append(node.rank == 0 or node.op in (Op.BROADCAST, Op.CONSTANT, Op.IOTA, Op.RNG)
                    or (node.op in ELEMENTWISE and all(flex[p] for p in node.inputs)))
    return flex


def layout_source(node: Node, flex: Sequence[bool]) -> int | None:
    """The operand position whose layout a same-layout op inherits: its first non-flexible operand."""
    return next((i for i, p in enumerate(node.inputs) if not flex[p]), None)


@dataclass(frozen=True)
class LayoutVar:
    """One layout group of one configurable node: a choice among PERMS[rank]."""

    node: int
    column: int  # position in node_config_ids
    group: int  # 0 output, 1 input, 2 kernel
    rank: int
    default: int  # index into PERMS[rank] that an all -1 group means


@dataclass(frozen=True)
class Slot:
    """A layout that is fixed (var -1, table [1]) or a function of one variable: PERMS[rank][table[choice]]."""

    var: int
    rank: int
    table: np.ndarray  # [domain of var] perm indices


class LayoutCost:
    """The layout law as tables: runtime = const + sum_v unary[v][c_v] + sum_(a,b) pairs[(a,b)][c_a, c_b] (ns)."""

    def __init__(self, nodes: Sequence[Node], variables: Sequence[LayoutVar]) -> None:
        self.vars = list(variables)
        self.const = 0.0
        self.unary = [np.zeros(math.factorial(v.rank)) for v in self.vars]
        self.pairs: dict[tuple[int, int], np.ndarray] = {}
        var_of = {(v.node, v.group): i for i, v in enumerate(self.vars)}
        flex = flexible_nodes(nodes)
        self.out_slots: list[Slot] = []
        for u, node in enumerate(nodes):
            operands = [nodes[p] for p in node.inputs]
            source = layout_source(node, flex) if node.op in SAME_LAYOUT else None
            slots = [self._out_slot(u, node, var_of, source)]
            self.out_slots.append(slots[0])
            for i, p in enumerate(node.inputs):
                group = dictates(node, i)
                if group is not None:
                    slot = self._group_slot(u, node, group, operands[i].rank, var_of)
                elif source is not None and i != source and node.op in ELEMENTWISE | {Op.CONCATENATE}:
                    slot = slots[0]
                else:
                    slot = self.out_slots[p]
                slots.append(slot)
                if slot is not self.out_slots[p] and not flex[p]:
                    self._add([self.out_slots[p], slot], partial(copy_cost, nodes[p]))
            for slot_ids, fn in node_terms(node, operands):
                self._add([slots[s] for s in slot_ids], fn)

    def default_layouts(self) -> list[tuple[int, ...]]:
        """Every node's layout when the config is all default."""
        return [tuple(PERMS[s.rank][s.table[self.vars[s.var].default if s.var >= 0 else 0]]) for s in self.out_slots]

    def evaluate(self, choices: np.ndarray) -> np.ndarray:
        """Noise-free runtimes (ns) [c] of choices [c, V] (perm index of each variable)."""
        total = np.full(len(choices), self.const)
        for v, table in enumerate(self.unary):
            total += table[choices[:, v]]
        for (a, b), table in self.pairs.items():
            total += table[choices[:, a], choices[:, b]]
        return total

    def _out_slot(self, u: int, node: Node, var_of: dict, source: int | None) -> Slot:
        if (u, 0) in var_of or node.op in FIXED_LAYOUT or (node.op in SAME_LAYOUT and source is None):
            return self._group_slot(u, node, 0, node.rank, var_of)
        src = self.out_slots[node.inputs[source or 0]]
        if node.op == Op.TRANSPOSE:
            return Slot(src.var, node.rank, transpose_map(src.rank, node.dims)[src.table])
        if node.op == Op.REDUCE:
            return Slot(src.var, node.rank, reduce_map(src.rank, node.dims)[src.table])
        assert node.op in SAME_LAYOUT, node.op
        return src

    def _group_slot(self, u: int, node: Node, group: int, rank: int, var_of: dict) -> Slot:
        if (u, group) in var_of:
            return Slot(var_of[u, group], rank, np.arange(math.factorial(rank)))
        return Slot(-1, rank, np.array([perm_index(default_layout(node, group, rank))]))

    def _add(self, slots: list[Slot], fn: Callable[..., np.ndarray]) -> None:
        """Tabulate fn over the (at most two) variables its slots depend on."""
        variables = sorted({s.var for s in slots if s.var >= 0})
        assert len(variables) <= 2, "every term couples at most two layout choices"
        sizes = [math.factorial(self.vars[v].rank) for v in variables]
        grids = np.meshgrid(*[np.arange(s) for s in sizes], indexing="ij") if variables else []
        choice = {v: g.ravel() for v, g in zip(variables, grids)}
        count = math.prod(sizes)
        args = [PERMS[s.rank][s.table[choice[s.var]] if s.var >= 0 else np.repeat(s.table, count)] for s in slots]
        values = np.broadcast_to(np.asarray(fn(*args), np.float64), (count,))
        if not variables:
            self.const += float(values[0])
        elif len(variables) == 1:
            self.unary[variables[0]] += values
        else:
            key = (variables[0], variables[1])
            self.pairs[key] = self.pairs.get(key, 0.0) + values.reshape(sizes)


# ---------------------------------------------------------------- layout graphs and configs


@dataclass
class LayoutGraph:
    """A layout-collection graph with its configurable nodes and cost tables."""

    name: str
    nodes: list[Node]
    splits: list[int]
    config_ids: np.ndarray  # [nc]
    cost: LayoutCost
    hash_weights: np.ndarray = field(repr=False)  # [V] odd uint64, for the per-config noise

    @property
    def vars(self) -> list[LayoutVar]:
        return self.cost.vars

    def arrays(self) -> dict[str, np.ndarray]:
        """Every key of a layout file but the config block and runtimes."""
        return {
            "node_feat": node_features(self.nodes, self.cost.default_layouts()),
            "node_opcode": np.array([n.op for n in self.nodes], np.uint8),
            "edge_index": edge_index(self.nodes),
            "node_config_ids": self.config_ids.astype(np.int64),
            "node_splits": official_splits(self.splits, len(self.nodes)),
        }


def official_splits(starts: list[int], num_nodes: int) -> np.ndarray:
    """[1, k + 1] node_splits as the official encoder writes them: 0, the running node count at the end of each
    computation (= the next one's first node), and n last."""
    bounds = starts + ([num_nodes] if starts[-1] != num_nodes else [])
    return np.array(bounds, np.int64).reshape(1, -1)


def _runs(rng: np.random.Generator, total: int, count: int) -> np.ndarray:
    """`count` sorted indices below `total` in runs of 8+ consecutive ones (at most 8 runs): configurable blocks
    whose nodes feed each other, not isolated nodes."""
    runs = int(rng.integers(1, min(8, max(count // 8, 1)) + 1))
    lengths = np.diff(np.r_[0, np.sort(rng.choice(np.arange(1, count), min(runs, count) - 1, replace=False)), count])
    gaps = np.diff(np.r_[0, np.sort(rng.integers(0, total - count + 1, len(lengths)))])  # [runs] free space
    starts = np.cumsum(gaps) + np.r_[0, np.cumsum(lengths)[:-1]]
    return np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lengths)])


def layout_graph(builder: GraphBuilder, name: str, configurable: int) -> LayoutGraph:
    """Pick up to `configurable` conv/dot/reshape nodes as configurable and tabulate the cost law."""
    rng = builder.rng
    nodes = builder.nodes
    eligible = np.array([i for i, n in enumerate(nodes) if n.op in (Op.CONVOLUTION, Op.DOT, Op.RESHAPE)], np.int64)
    if len(eligible) > configurable:
        eligible = eligible[_runs(rng, len(eligible), configurable)]
    variables = []
    for column, u in enumerate(eligible.tolist()):
        node = nodes[u]
        tensors = (u, *node.inputs[:2 if node.op == Op.CONVOLUTION else 1])  # output, input[, kernel]
        for group, t in enumerate(tensors):
            rank = nodes[t].rank
            variables.append(LayoutVar(u, column, group, rank, perm_index(default_layout(node, group, rank))))
    return LayoutGraph(name, nodes, builder.splits, eligible, LayoutCost(nodes, variables),
                       hash_weights(rng, len(variables)))


def sample_choices(graph: LayoutGraph, rng: np.random.Generator, n: int, search: str) -> tuple[np.ndarray, np.ndarray]:
    """choices [n, V] (perm index per variable) and explicit [n, V] (False: written as all -1, the default).

    random: every variable uniform over its permutations. default: 1-3 nodes per config move away from the
    default (mostly keeping its minor dim, 10% anywhere), the rest stay -1. Then 1-3% of rows are copied over
    others (duplicate configs).
    """
    variables = graph.vars
    domain = np.array([math.factorial(v.rank) for v in variables])
    uniform = (rng.random((n, len(variables))) * domain).astype(np.int64)
    if search == "random":
        choices, explicit = uniform, np.ones((n, len(variables)), bool)
    else:
        nc = len(graph.config_ids)
        column = np.array([v.column for v in variables])
        group = np.array([v.group for v in variables])
        groups = np.bincount(column, minlength=nc)
        moved = np.clip(1 + rng.poisson(0.7, n), 1, nc)
        order = np.argsort(np.argsort(rng.random((n, nc)), axis=1), axis=1)
        chosen = order < moved[:, None]  # [n, nc]
        must = (rng.random((n, nc)) * groups).astype(np.int64)  # [n, nc] one group surely changed
        explicit = chosen[:, column] & ((must[:, column] == group) | (rng.random((n, len(variables))) < 0.35))
        near = np.stack([_near_default(v, u) for v, u in zip(variables, rng.random((len(variables), n)))], axis=1)
        moved_far = rng.random((n, len(variables))) < 0.1
        choices = np.where(explicit, np.where(moved_far, uniform, near), np.array([v.default for v in variables]))
    dup = rng.choice(n, int(round(n * rng.uniform(0.01, 0.03))), replace=False)
    src = rng.integers(0, n, len(dup))
    choices[dup], explicit[dup] = choices[src], explicit[src]
    return choices, explicit


def _near_default(var: LayoutVar, u: np.ndarray) -> np.ndarray:
    """Perm indices keeping the default's minor dim, one per uniform draw in u [n]."""
    perms = PERMS[var.rank]
    same = np.flatnonzero(perms[:, 0] == perms[var.default, 0]) if var.rank else np.zeros(1, np.int64)
    return same[(u * len(same)).astype(np.int64)]


def config_features(graph: LayoutGraph, choices: np.ndarray, explicit: np.ndarray) -> np.ndarray:
    """The node_config_feat block [n, nc, 18] of choices/explicit [n, V], -1 padded."""
    feat = np.full((len(choices), len(graph.config_ids), LAYOUT_CONFIG_DIM), PAD, np.float32)
    for v, var in enumerate(graph.vars):
        lo = var.group * LAYOUT_GROUP
        values = PERMS[var.rank][choices[:, v]]  # [n, r]
        feat[:, var.column, lo:lo + var.rank] = np.where(explicit[:, v, None], values, PAD)
    return feat


def hash_weights(rng: np.random.Generator, count: int) -> np.ndarray:
    """Odd uint64 multipliers [count] that hash a row of config ints."""
    return rng.integers(0, 2**62, size=count, dtype=np.int64).astype(np.uint64) * np.uint64(2) + np.uint64(1)


def _config_noise(rows: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """A deterministic value in [-sqrt(3), sqrt(3)) (unit variance) per distinct row of ints [n, V]."""
    h = ((rows.astype(np.uint64) + np.uint64(1)) * weights).sum(axis=1, dtype=np.uint64)
    for shift, mult in ((33, 0xFF51AFD7ED558CCD), (33, 0xC4CEB9FE1A85EC53)):
        h ^= h >> np.uint64(shift)
        h *= np.uint64(mult)
    h ^= h >> np.uint64(33)
    return ((h >> np.uint64(11)).astype(np.float64) / 2.0**53 - 0.5) * math.sqrt(12.0)


def noisy(clean: np.ndarray, rows: np.ndarray, weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """int64 runtimes: clean x (1 + 0.1% per-config noise) x (1 +- 0.05% measurement noise), at least 1."""
    value = clean * (1 + CONFIG_NOISE * _config_noise(rows, weights))
    value *= 1 + rng.uniform(-MEASURE_NOISE, MEASURE_NOISE, len(clean))
    return np.maximum(np.round(value), 1).astype(np.int64)


def build_layout_graph(rng: np.random.Generator, family: str, nodes: int, configurable: int) -> LayoutGraph:
    """A fresh xla (conv net) or nlp (transformer) graph of about `nodes` nodes."""
    models = XLA_MODELS if family == "xla" else NLP_MODELS
    kind = str(rng.choice(models))
    builder = (convnet_graph if family == "xla" else transformer_graph)(rng, nodes, kind)
    return layout_graph(builder, kind, configurable)


# ---------------------------------------------------------------- tile kernels


@dataclass
class TileKernel:
    """A fused kernel: its graph and the iteration space a tile config cuts."""

    nodes: list[Node]
    dims: tuple[int, ...]  # iteration dims
    out_axes: tuple[int, ...]  # iteration axes of the output dims, in output order
    reduced: tuple[int, ...]  # axes accumulated over: splitting them costs partial-sum traffic (or a 2nd pass)
    operands: list[tuple[tuple[int, ...], int]]  # (iteration axes an input spans, element bytes)
    flops: float  # MXU flops per iteration point
    vector_ops: float  # element-wise ops per iteration point, transcendental ones weighted
    two_pass: bool  # softmax-like: a split reduced axis means a second pass over the input
    out_bytes: int = 4

    def default_tile(self) -> np.ndarray:
        """The compiler's pick: an (8, 128)-shaped output tile up to (64, 512), reductions whole up to 1024,
        halved (largest axis first) until it fits the fast memory."""
        tile = np.ones(len(self.dims), np.int64)
        lane = self.out_axes[-1]
        tile[lane] = min(_round_up(self.dims[lane], LANES), 512)
        if len(self.out_axes) > 1:
            sub = self.out_axes[-2]
            tile[sub] = min(_round_up(self.dims[sub], SUBLANES), 64)
        for axis in self.reduced:
            tile[axis] = self.dims[axis] if self.dims[axis] <= 1024 else 512
        tile = np.minimum(tile, np.array(self.dims))
        while 2 * self.footprint(tile[None])[0] > FAST_MEMORY and tile.max() > 1:
            largest = int(np.argmax(tile))
            tile[largest] = 2 ** (math.ceil(math.log2(tile[largest])) - 1)
        return tile

    def shaped(self, tiles: np.ndarray) -> np.ndarray:
        """Tiles [c, r] as the hardware runs them: output minor dim up to 128 lanes, next to 8 sublanes."""
        shaped = tiles.astype(np.float64)
        lane = self.out_axes[-1]
        shaped[:, lane] = np.ceil(shaped[:, lane] / LANES) * LANES
        if len(self.out_axes) > 1:
            sub = self.out_axes[-2]
            shaped[:, sub] = np.ceil(shaped[:, sub] / SUBLANES) * SUBLANES
        return shaped

    def footprint(self, tiles: np.ndarray) -> np.ndarray:
        """Bytes [c] one grid step moves: every operand's tile and the output tile (x2 for split reductions)."""
        shaped = self.shaped(tiles)
        steps = np.ceil(np.array(self.dims, np.float64) / tiles)  # [c, r]
        split = steps[:, list(self.reduced)].prod(axis=1) > 1
        out = shaped[:, list(self.out_axes)].prod(axis=1) * self.out_bytes
        out *= np.where(split & (not self.two_pass), 2.0, 1.0)  # read-modify-write partial sums
        return out + sum(shaped[:, list(axes)].prod(axis=1) * eb for axes, eb in self.operands)

    def runtime(self, tiles: np.ndarray) -> np.ndarray:
        """Noise-free ns of tile sizes [c, r]."""
        steps = np.ceil(np.array(self.dims, np.float64) / tiles)  # [c, r]
        split = steps[:, list(self.reduced)].prod(axis=1) > 1
        compute = self.shaped(tiles).prod(axis=1) * (self.flops / TILE_PEAK_FLOPS + self.vector_ops / VECTOR_OPS)
        moved = self.footprint(tiles)
        over = 2 * moved / FAST_MEMORY  # double-buffered footprint / budget
        memory = moved / TILE_BANDWIDTH * np.where(over > 1, 4 + 4 * (over - 1), 1.0)  # spills past the budget
        total = steps.prod(axis=1) * (np.maximum(compute, memory) + TILE_OVERHEAD) + LAUNCH_OVERHEAD
        return total * np.where(split & self.two_pass, 1.6, 1.0)

    def candidates(self) -> list[np.ndarray]:
        """Tile sizes the autotuner tries per axis: powers of two within 8x of the default tile, and the whole dim."""
        options = []
        for d, t in zip(self.dims, self.default_tile().tolist()):
            powers = [2**k for k in range(int(math.log2(d)) + 1) if t / 8 <= 2**k <= t * 8 and 2**k < d]
            options.append(np.unique(powers + ([d] if d <= 8 * t else [])))
        return options


def _round_up(value: int, multiple: int) -> int:
    return math.ceil(value / multiple) * multiple


def _ew_chain(b: GraphBuilder, x: int, rng: np.random.Generator, length: int, others: Sequence[int] = ()) -> int:
    """A chain of element-wise ops on x that mixes in every one of `others` (same shape) and broadcast constants."""
    ops = rng.choice([Op.ADD, Op.MULTIPLY, Op.SUBTRACT, Op.MAXIMUM, Op.EXPONENTIAL, Op.TANH, Op.RSQRT], length)
    pending = list(others)
    for op in (int(o) for o in ops):
        if op in TRANSCENDENTAL:
            x = b.unary(op, x)
        else:
            y = pending.pop() if pending and rng.random() < 0.5 else b.full(b.shape(x))
            x = b.binary(op, x, y)
    for y in pending:
        x = b.binary(Op.ADD, x, y)
    return x


def tile_kernel(rng: np.random.Generator) -> tuple[str, TileKernel]:
    """A random fused kernel (conv, dot, element-wise loop, reduction or softmax) and its family name."""
    family = str(rng.choice(["conv", "dot", "loop", "reduce", "softmax"], p=[0.3, 0.25, 0.2, 0.15, 0.1]))
    pick = lambda options: int(rng.choice(options))  # noqa: E731
    b = GraphBuilder(rng)
    if family == "conv":
        n, hw, k = pick([1, 8, 16, 32]), pick([7, 14, 28, 56, 112]), pick([1, 3])
        ci, co = pick([3, 32, 64, 96, 128, 256, 512]), pick([32, 64, 128, 192, 256, 512])
        window = Window((k, k), (1, 1), (k // 2,) * 2, (k // 2,) * 2, (1, 1))
        dims = ConvDims(0, 3, (1, 2), 2, 3, (0, 1), 0, 3, (1, 2))
        y = b.conv(b.param((n, hw, hw, ci)), b.param((k, k, ci, co)), (n, hw, hw, co), dims, window)
        space, reduced, flops = (n, hw, hw, co, ci), (4,), 2.0 * k * k  # iteration: output dims, then Ci
        operands = [((0, 1, 2, 4), 4), ((4, 3), 4), ((3,), 4)]
    elif family == "dot":
        m, kk, nn = pick([128, 256, 384, 512, 1024, 2048, 4096]), pick([64, 256, 768, 1024, 3072]), pick(
            [2, 64, 128, 768, 1000, 3072])
        y = b.dot(b.param((m, kk)), b.param((kk, nn)))
        space, reduced, flops = (m, nn, kk), (2,), 2.0  # iteration: M, N, then K
        operands = [((0, 2), 4), ((2, 1), 4), ((1,), 4)]
    if family in ("conv", "dot"):
        rank = b.nodes[y].rank
        y = _ew_chain(b, b.bias(y, rank - 1), rng, int(rng.integers(0, 4)))
        out_axes = tuple(range(rank))
    else:
        options = ([8, 16, 32, 64], [56, 128, 384, 512], [64, 96, 256, 768, 1024], [3, 4, 128, 512])
        space = tuple(pick(o) for o in options[:int(rng.integers(2, 5))])
        inputs = [b.param(space) for _ in range(int(rng.integers(1, 4)))]
        y = _ew_chain(b, inputs[0], rng, int(rng.integers(2, 12)), inputs[1:])
        flops, operands = 0.0, [(tuple(range(len(space))), 4) for _ in inputs]
        out_axes, reduced = tuple(range(len(space))), ()
        if family == "reduce":
            reduced = (len(space) - 1,) if rng.random() < 0.5 else tuple(range(len(space) - 1))
            y = b.reduce(y, reduced)
            out_axes = tuple(a for a in range(len(space)) if a not in reduced)
        elif family == "softmax":
            y = softmax(b, y)
            reduced = (len(space) - 1,)
    vector_ops = sum(TRANSCENDENTAL_COST if n.op in TRANSCENDENTAL else 1.0 for n in b.nodes
                     if n.op in ELEMENTWISE | {Op.REDUCE})
    return family, TileKernel(b.nodes, space, out_axes, reduced, operands, flops, vector_ops, family == "softmax")


def tile_features(kernel: TileKernel, tiles: np.ndarray) -> np.ndarray:
    """config_feat [c, 24]: kernel bounds 0..5, sum, product; output bounds likewise; input bounds 0."""
    feat = np.zeros((len(tiles), TILE_CONFIG_DIM), np.float32)
    for base, block in ((0, tiles), (8, tiles[:, list(kernel.out_axes)])):
        feat[:, base:base + block.shape[1]] = block
        feat[:, base + 6], feat[:, base + 7] = block.sum(axis=1), block.prod(axis=1)
    return feat


def sample_tiles(kernel: TileKernel, rng: np.random.Generator, n: int) -> np.ndarray:
    """Up to n distinct tile configs [c, r], in random order, the default tile among them half the time."""
    options = kernel.candidates()
    draws = np.stack([rng.choice(o, 3 * n) for o in options], axis=1)  # [3n, r]
    if rng.random() < 0.5:
        draws = np.vstack([kernel.default_tile()[None], draws])
    unique = np.unique(draws, axis=0)
    return unique[rng.permutation(len(unique))[:n]]


# ---------------------------------------------------------------- files


@dataclass
class Chunked:
    """An array written piece by piece along axis 0."""

    shape: tuple[int, ...]
    dtype: np.dtype
    chunks: Iterable[np.ndarray]


def write_npz(path: Path, arrays: Iterable[tuple[str, np.ndarray | Chunked | Callable[[], np.ndarray]]],
              compress: bool) -> None:
    """A deterministic .npz (fixed timestamps, keys in the given order), written atomically.

    Values may be arrays, Chunked streams, or callables evaluated when their turn comes (after earlier streams).
    """
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with atomic_write(path, "wb") as handle, zipfile.ZipFile(handle, "w", method) as archive:
        for name, value in arrays:
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_EPOCH)
            info.compress_type = method
            info.external_attr = 0o644 << 16
            value = value() if callable(value) else value
            with archive.open(info, "w", force_zip64=True) as entry:
                if isinstance(value, Chunked):
                    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(value.dtype)), "fortran_order": False,
                              "shape": value.shape}
                    np.lib.format.write_array_header_1_0(entry, header)
                    written = 0
                    for chunk in value.chunks:
                        entry.write(memoryview(np.ascontiguousarray(chunk, value.dtype)).cast("B"))
                        written += len(chunk)
                    assert written == value.shape[0], (name, written, value.shape)
                else:
                    np.lib.format.write_array(entry, np.ascontiguousarray(value), allow_pickle=False)


def _rng(seed: int, *names: object) -> np.random.Generator:
    words = [zlib.crc32(str(n).encode()) for n in names]
    return np.random.default_rng(np.random.SeedSequence([seed, *words]))


def _test_stem(seed: int, collection: str, index: int) -> str:
    return hashlib.sha256(f"{seed}/{collection}/{index}".encode()).hexdigest()[:16]


@dataclass
class _Rows:
    """sample_submission and answers rows per collection."""

    submission: dict[str, list[str]] = field(default_factory=dict)
    answers: dict[str, list[str]] = field(default_factory=dict)

    def add(self, collection: str, stem: str, count: int, top: int | None, truth: Sequence[str]) -> None:
        row_id = f"{collection}:{stem}"
        ranking = ";".join(map(str, range(min(count, top or count))))
        self.submission.setdefault(collection, []).append(f"{row_id},{ranking}")
        self.answers.setdefault(collection, []).append(f"{row_id},{';'.join(truth)}")


def _write_layout_file(path: Path, graph: LayoutGraph, search: str, count: int, test: bool,
                       rng: np.random.Generator, compress: bool) -> np.ndarray:
    """Write one layout file, streaming the config block; return its true runtimes [c]."""
    runtimes: list[np.ndarray] = []

    def chunks() -> Iterator[np.ndarray]:
        for start in range(0, count, CHUNK):
            choices, explicit = sample_choices(graph, rng, min(CHUNK, count - start), search)
            runtimes.append(noisy(graph.cost.evaluate(choices), choices, graph.hash_weights, rng))
            yield config_features(graph, choices, explicit)

    def stored() -> np.ndarray:  # called after the config block has streamed
        return np.zeros(count, np.int64) if test else np.concatenate(runtimes)

    block = Chunked((count, len(graph.config_ids), LAYOUT_CONFIG_DIM), np.dtype(np.float32), chunks())
    write_npz(path, [*graph.arrays().items(), ("node_config_feat", block), ("config_runtime", stored)], compress)
    return np.concatenate(runtimes)


def _layout_collections(out: Path, spec: SizeSpec, seed: int, family: str, searches: Sequence[str],
                        rows: _Rows) -> None:
    """Both searches of one family share each graph (as in the real data) but draw their own configs."""
    offset = 0
    for split, files in zip(SPLITS, spec.layout_files):
        for i in range(files):
            grng = _rng(seed, "layout", family, split, i)
            graph = build_layout_graph(grng, family, int(grng.integers(*spec.nodes)),
                                       int(grng.integers(spec.configurable[0], spec.configurable[1] + 1)))
            for search in searches:
                collection = f"layout:{family}:{search}"
                crng = _rng(seed, collection, split, i)
                count = int(crng.integers(*(spec.test_configs if split == "test" else spec.configs), endpoint=True))
                if split == "train" and family == "nlp" and i < spec.big_train_files:
                    count = BIG_CONFIGS
                stem = _test_stem(seed, collection, i) if split == "test" else f"{graph.name}_{offset + i}"
                path = out.joinpath(*collection.split(":"), split, f"{stem}.npz")
                truth = _write_layout_file(path, graph, search, count, split == "test", crng, spec.compress)
                if split == "test":
                    rows.add(collection, stem, count, None, [str(int(t)) for t in truth])
        offset += files


def _tile_collection(out: Path, spec: SizeSpec, seed: int, rows: _Rows) -> None:
    offset = 0
    for split, files in zip(SPLITS, spec.tile_files):
        for i in range(files):
            rng = _rng(seed, "tile", split, i)
            family, kernel = tile_kernel(rng)
            tiles = sample_tiles(kernel, rng, int(rng.integers(*spec.tile_configs, endpoint=True)))
            weights = hash_weights(rng, tiles.shape[1])
            runtime = noisy(kernel.runtime(tiles), tiles, weights, rng)
            default = kernel.default_tile()[None]
            base = float(noisy(kernel.runtime(default), default, weights, rng)[0])
            normalizer = np.round(base * (1 + rng.uniform(-NORMALIZER_NOISE, NORMALIZER_NOISE, len(tiles))))
            normalizer = np.maximum(normalizer, 1).astype(np.int64)
            stem = _test_stem(seed, "tile:xla", i) if split == "test" else f"{family}_fusion_{offset + i}"
            layouts = [row_major(n.rank) for n in kernel.nodes]
            arrays = {"node_feat": node_features(kernel.nodes, layouts),
                      "node_opcode": np.array([n.op for n in kernel.nodes], np.uint8),
                      "edge_index": edge_index(kernel.nodes), "config_feat": tile_features(kernel, tiles),
                      "config_runtime": np.zeros_like(runtime) if split == "test" else runtime,
                      "config_runtime_normalizers": normalizer}
            write_npz(out / "tile" / "xla" / split / f"{stem}.npz", arrays.items(), spec.compress)
            if split == "test":
                rows.add("tile:xla", stem, len(tiles), 5, [f"{r / q:.10g}" for r, q in zip(runtime, normalizer)])
        offset += files


def generate(out: str | Path, size: str = "tiny", seed: int = 0, collections: Sequence[str] = COLLECTIONS) -> Path:
    """Write a Kaggle-shaped dataset under `out` and return `out`.

    The requested collections must not exist there yet; sample_submission.csv and answers.csv cover exactly them.
    """
    if size not in SIZE_SPECS:
        raise ValueError(f"unknown size {size!r}; expected one of {', '.join(SIZES)}")
    unknown = [c for c in collections if c not in COLLECTIONS]
    if unknown:
        raise ValueError(f"unknown collections {unknown}; expected some of {', '.join(COLLECTIONS)}")
    out, spec = Path(out), SIZE_SPECS[size]
    npz, rows = out / "npz_all" / "npz", _Rows()
    stale = [c for c in collections if any(npz.joinpath(*c.split(":")).rglob("*.npz"))]
    if stale:
        raise FileExistsError(f"{npz} already holds {', '.join(stale)} files; remove them or pick an empty folder "
                              "(a fresh dataset must not mix with an older one)")
    if "tile:xla" in collections:
        _tile_collection(npz, spec, seed, rows)
    for family in ("xla", "nlp"):
        searches = [s for s in ("random", "default") if f"layout:{family}:{s}" in collections]
        if searches:
            _layout_collections(npz, spec, seed, family, searches, rows)
    ordered = [c for c in COLLECTIONS if c in rows.submission]
    with atomic_write(out / "sample_submission.csv") as handle:
        handle.write("ID,TopConfigs\n" + "".join(line + "\n" for c in ordered for line in rows.submission[c]))
    with atomic_write(out / "answers.csv") as handle:
        handle.write("ID,Runtimes\n" + "".join(line + "\n" for c in ordered for line in rows.answers[c]))
    return out


def main(argv: list[str] | None = None) -> int:
    """`solution synth`: write a synthetic dataset and say what was written."""
    parser = argparse.ArgumentParser(prog="solution synth", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="data/synthetic", help="dataset folder (the Kaggle root)")
    parser.add_argument("--size", default="tiny", choices=(*SIZES, "full"),
                        help="tiny | small | realistic; with --programs: tiny | small | full")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--collections", nargs="+", default=list(COLLECTIONS), choices=COLLECTIONS)
    parser.add_argument("--programs", action="store_true",
                        help="real JAX programs of the package's zoo, timed by its runtime law (docs/corpus.md); "
                             "needs jax: pip install '.[programs]'")
    args = parser.parse_args(argv)
    if args.programs:
        try:
            from ..programs import corpus  # jax is imported here only
        except ImportError as error:
            return fail(error, USAGE)
        return corpus.main(args.out, args.size, args.seed, args.collections)
    if args.size == "full":
        parser.error("--size full needs --programs; expected tiny, small or realistic")
    start = time.perf_counter()
    root = generate(args.out, args.size, args.seed, args.collections)
    files = sum(1 for _ in (root / "npz_all").rglob("*.npz"))
    print(f"wrote {files} files ({args.size}, seed {args.seed}) under {root} in {time.perf_counter() - start:.1f}s")
    return OK


if __name__ == "__main__":
    main()
