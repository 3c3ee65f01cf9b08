"""Synthetic tile kernels, their tile configs and the tile cost law.

Tile law: grid steps x (max(compute, memory of one tile) + per-tile overhead) + launch, tile dims rounded up to
the (8, 128) vector shape; waste where tiles do not divide the dims, partial-sum traffic (or a second softmax
pass) when a reduced dim is split, a cliff past a fast-memory budget; compute per point comes from the kernel's
ops. Normalizer = the default tile's runtime (+-0.3% run to run), so y = runtime / normalizer is near 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..format import TILE_CONFIG_DIM
from .graphs import ConvDims, GraphBuilder, Node, Window, softmax
from .law import LANES, SUBLANES
from .ops import ELEMENTWISE, TRANSCENDENTAL, Op

# tile cost law
TILE_BANDWIDTH = 1200.0
TILE_PEAK_FLOPS = 5.0e4
VECTOR_OPS = 2000.0  # element-wise ops / ns
TRANSCENDENTAL_COST = 4.0  # in element-wise ops
TILE_OVERHEAD = 350.0
LAUNCH_OVERHEAD = 2000.0
FAST_MEMORY = 4 * 2**20
NORMALIZER_NOISE = 0.003


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
