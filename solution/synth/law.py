"""The layout cost law of the synthetic data: the runtime of each config from the graph it runs on.

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Callable, Sequence

import numpy as np

from ..constants import LANES, SUBLANES
from ..layouts import PERMS, perm_index, reduce_map, row_major, transpose_map
from .graphs import Node
from .ops import ELEMENTWISE, FIXED_LAYOUT, SAME_LAYOUT, SOURCES, Op

# layout cost law (ns, bytes)
BANDWIDTH = 1200.0  # bytes / ns
PEAK_FLOPS = 1.0e5  # flops / ns
OP_OVERHEAD = 150.0
FUSED_PASS = 0.25  # element-wise ops fuse into their neighbours: a fraction of a pass over the tensor each
COPY_OVERHEAD = 600.0
COPY_LEVELS = (0.25, 1.0, 3.0)  # same (8, 128) tiling dims / same minor dim / minor dim moves
MISALIGNED = 1.6  # conv/dot slowdown unless the contraction dim is minor in one operand, second-minor in the other
MAX_LANE_WASTE = 4.0
CONFIG_NOISE, MEASURE_NOISE = 0.001, 0.0005


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
