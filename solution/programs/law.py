"""An analytical runtime law of a TPU-like machine for HLO programs under layout configs, and for tiled kernels."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ..constants import LANES, SUBLANES
from ..format import ELEMENT_BYTES, LAYOUT_GROUP, TILE_CONFIG_DIM
from ..layouts import (
    ELEMENTWISE,
    FLEXIBLE,
    MOVEMENT,
    PINNED,
    ShapeTables,
    chosen_layout,
    perm_index,
    reduce_map,
    shape_tables,
    transpose_map,
)
from . import hlo
from .encode import InlinedModule, inlined_computations
from .hlo import Instruction, Module

# machine (ns, bytes): one TPU-like core
BANDWIDTH = 1200.0  # bytes / ns of main memory
PEAK_FLOPS = 1.0e5  # flops / ns of the matrix units
OP_OVERHEAD = 200.0  # ns per kernel a non-fused op launches
FUSED_PASS = 0.3  # element-wise ops fuse: a fraction of a write of their output each
SECOND_MINOR_FEED, MAJOR_FEED = 1.3, 2.0  # matrix unit slowdown: the operand's key dim second-minor / further out
COPY_OVERHEAD = 300.0  # ns per layout-changing copy
TRANSPOSE_COPY = 2.0  # a copy that changes the minor dim is a transpose: strided, twice as slow
LANE_REDUCE = 1.25  # reducing across lanes (the minor dim) needs shuffles
NOISE = 0.02  # sigma of the lognormal measurement noise
# tiled kernels
VMEM = 16 * 2**20  # fast-memory bytes a kernel's double-buffered tiles must fit
VECTOR_OPS = 2000.0  # element-wise ops / ns of the vector unit
TILE_OVERHEAD = 350.0  # ns per grid step
LAUNCH_OVERHEAD = 2000.0
SPILL = 3.0  # slowdown per unit of overflow past VMEM

TRANSCENDENTAL = frozenset({"exponential", "log", "logistic", "rsqrt", "sqrt", "tanh", "tan", "power", "sine",
                            "cosine", "exponential-minus-one", "log-plus-one", "atan2", "cbrt"})
_CONSTANT = re.compile(r"constant\((-?\d+)\)")


# ---------------------------------------------------------------- the layout law


@dataclass
class _Node:
    """What the law needs of one instruction."""

    opcode: str
    rank: int  # -1: a tuple or a rank the law does not lay out (> 6)
    tables: ShapeTables | None
    real_bytes: float
    text: int  # index of the HLO text's layout in PERMS[rank]
    operands: list[int]
    weight: float  # how often it runs per program run (loop trip counts)
    attributes: object = None  # see _attributes


class LayoutLaw:
    """Noise-free runtime (ns) of one program under layout configs, vectorised over configs.

    Layouts: a configurable node (conv, dot, reshape) takes its output, input (operand 0) and kernel (operand 1 of
    a convolution) layouts from its config row; a -1 block is the compiler default: the HLO text's layout for the
    output, and for an operand the layout its producer gives (no copy). Every other node takes its layout by
    propagation (element-wise ops and data movement keep their first laid-out operand's, transposes and reduces map
    it, broadcasts and constants adapt to their user for free, parameters, tuples and loop state keep the text's).
    A user that needs another layout than its producer gives pays a copy."""

    def __init__(self, module: Module, graph: InlinedModule, config_ids: np.ndarray, text: str) -> None:
        self.weights = computation_weights(module, graph, text.splitlines())  # [N]
        self.nodes = [_node(instruction, [graph.nodes[o] for o in operands], operands, float(weight))
                      for instruction, operands, weight in zip(graph.nodes, graph.operands, self.weights)]
        self.config_slot = {int(node): k for k, node in enumerate(config_ids)}
        self.roots = set(graph.roots.values())

    def runtime(self, configs: np.ndarray) -> np.ndarray:
        """[C] ns of configs [C, NC, 18]."""
        return self.node_costs(configs).sum(axis=1)

    def node_costs(self, configs: np.ndarray) -> np.ndarray:
        """[C, N] ns each node adds (its copies included) under configs [C, NC, 18]."""
        count = len(configs)
        costs = np.zeros((count, len(self.nodes)))
        layouts: list[np.ndarray | int | None] = []  # per node: [C] or one PERMS index; None: adapts to its users
        for i, node in enumerate(self.nodes):
            slot = self.config_slot.get(i)
            blocks = None if slot is None else configs[:, slot].reshape(count, 3, LAYOUT_GROUP)  # [C, 3, 6]
            layout, cost = self._node(node, layouts, blocks, i in self.roots)
            layouts.append(layout)
            costs[:, i] = node.weight * cost
        return costs

    def _node(self, node: _Node, layouts: list, blocks: np.ndarray | None, is_root: bool):
        """The node's output layout and its cost ([C] or a number) given its operands' layouts."""
        opcode, nodes = node.opcode, self.nodes
        if node.rank < 0 or opcode == "parameter" or opcode == "get-tuple-element":
            cost = 0.0
            if opcode in PINNED or node.rank < 0:  # operands pinned to their text layouts (loop state, outputs)
                cost = sum(self._copy(o, layouts[o], nodes[o].text) for o in node.operands if nodes[o].rank >= 0)
            return (node.text if node.rank >= 0 else None), cost
        if opcode in FLEXIBLE:
            return None, FUSED_PASS * node.real_bytes / BANDWIDTH
        if opcode in ("dot", "convolution", "reshape"):
            layout, cost = self._configurable(node, layouts, blocks)
        elif opcode == "transpose":
            source = layouts[node.operands[0]]
            layout = None if source is None else transpose_map(node.rank, node.attributes)[source]
            cost = 0.0  # a bitcast once layouts are assigned; the users pay if they need another order
        elif opcode == "reduce" and len(node.operands) == 2:
            source = self._seen(node.operands[0], layouts)
            operand = nodes[node.operands[0]]
            if operand.rank <= 0:
                return node.text, OP_OVERHEAD
            layout = reduce_map(operand.rank, node.attributes)[source]
            lanes = np.isin(operand.tables.minor[source], node.attributes)
            cost = OP_OVERHEAD + operand.tables.padded[source] / BANDWIDTH * np.where(lanes, LANE_REDUCE, 1.0)
        elif opcode in ELEMENTWISE or opcode in MOVEMENT:
            layout, cost = self._propagated(node, layouts)
            stored = node.tables.padded[layout]
            if opcode in ELEMENTWISE:
                cost = cost + FUSED_PASS * stored / BANDWIDTH * (2.0 if opcode in TRANSCENDENTAL else 1.0)
            else:
                cost = cost + OP_OVERHEAD + 2 * stored / BANDWIDTH
        else:  # gather, scatter, custom calls, ...: the text's layout, a pass over output and operands
            layout = node.text
            moved = node.tables.padded[layout] + sum(nodes[o].tables.padded[self._seen(o, layouts)]
                                                     for o in node.operands if nodes[o].rank >= 0)
            cost = OP_OVERHEAD + moved / BANDWIDTH
        if is_root:  # a computation's result leaves in the text's layout
            cost = cost + self._copy_between(node, layout, node.text)
        return layout, cost

    def _seen(self, operand: int, layouts: list):
        """The layout an operand arrives in: its own, or the text's where it adapts to its users."""
        layout = layouts[operand]
        return self.nodes[operand].text if layout is None else layout

    def _propagated(self, node: _Node, layouts: list):
        """Element-wise and data-movement ops: the first laid-out operand of the same rank sets the layout; the
        other laid-out operands of that rank are copied into it where they differ."""
        same = [o for o in node.operands if self.nodes[o].rank == node.rank and layouts[o] is not None]
        if not same:
            return node.text, 0.0
        layout = layouts[same[0]]
        return layout, sum(self._copy(o, layouts[o], layout) for o in same[1:])

    def _configurable(self, node: _Node, layouts: list, blocks: np.ndarray | None):
        """A conv, dot or reshape: its config's layouts (or the defaults), copies into them, then its own cost."""
        nodes = self.nodes
        out = node.text if blocks is None else chosen_layout(blocks[:, 0], node.rank, node.text)
        seen, copies = [], 0.0
        for position, operand in enumerate(node.operands[:2]):
            arriving = self._seen(operand, layouts)
            wanted = arriving
            block = 1 if position == 0 else 2
            if blocks is not None and nodes[operand].rank >= 0 and (position == 0 or node.opcode == "convolution"):
                wanted = chosen_layout(blocks[:, block], nodes[operand].rank, arriving)
                if layouts[operand] is not None:
                    copies = copies + self._copy(operand, arriving, wanted)
            seen.append(wanted)
        if node.opcode == "reshape":
            operand = nodes[node.operands[0]]
            if operand.rank < 0:
                return out, copies
            bitcast = ((operand.tables.canonical[seen[0]] == operand.tables.canonical[operand.text])
                       & (node.tables.canonical[out] == node.tables.canonical[node.text]))  # both row-major
            moved = operand.tables.padded[seen[0]] + node.tables.padded[out]
            cost = np.where(bitcast, 0.0, COPY_OVERHEAD + TRANSPOSE_COPY * moved / BANDWIDTH)
            return out, copies + cost
        lhs, rhs = nodes[node.operands[0]], nodes[node.operands[1]]
        stored = lhs.tables.padded[seen[0]] + rhs.tables.padded[seen[1]] + node.tables.padded[out]
        flops = node.attributes["flops"] * node.tables.padded[out] / max(node.real_bytes, 1.0)  # whole tiles
        feeds = [_feed(nodes[o].tables, layout, keys) for o, layout, keys in
                 zip(node.operands, seen, node.attributes["keys"])]
        feeds.append(_feed(node.tables, out, node.attributes["out_keys"]))
        compute = flops / PEAK_FLOPS * feeds[0] * feeds[1] * feeds[2]
        return out, copies + OP_OVERHEAD + np.maximum(compute, stored / BANDWIDTH)

    def _copy(self, operand: int, source, target):
        """ns to copy the operand's tensor from layout `source` to `target` (0 where they are the same order)."""
        return self._copy_between(self.nodes[operand], source, target)

    @staticmethod
    def _copy_between(node: _Node, source, target):
        if source is None or node.rank <= 0:
            return 0.0
        tables = node.tables
        differs = tables.canonical[source] != tables.canonical[target]
        moved = (tables.padded[source] + tables.padded[target]) / BANDWIDTH
        transpose = np.where(tables.minor[source] != tables.minor[target], TRANSPOSE_COPY, 1.0)
        return np.where(differs, COPY_OVERHEAD + moved * transpose, 0.0)


def _feed(tables: ShapeTables, layout, keys: tuple[int, ...]) -> np.ndarray:
    """Matrix-unit slowdown of one operand: 1 with a key dim (contracting, or a conv's feature dims) minor."""
    if not keys:
        return np.ones(1)
    minor, second = tables.minor[layout], tables.second[layout]
    return np.where(np.isin(minor, keys), 1.0, np.where(np.isin(second, keys), SECOND_MINOR_FEED, MAJOR_FEED))


def _node(instruction: Instruction, sources: list[Instruction], operands: list[int], weight: float) -> _Node:
    """The law's view of one instruction (`sources`: its operands' instructions): shape tables and the attributes
    its cost needs."""
    shape = instruction.shape
    rank = len(shape.dims) if shape.element_type != "tuple" and len(shape.dims) <= LAYOUT_GROUP else -1
    element = ELEMENT_BYTES.get(shape.element_type, 4)
    tables = shape_tables(tuple(max(d, 1) for d in shape.dims), element) if rank >= 0 else None
    text = perm_index(tuple(shape.minor_to_major)) if rank > 0 else 0
    real = float(math.prod(shape.dims)) * element if rank >= 0 else 0.0
    return _Node(instruction.opcode, rank, tables, real, text, operands, weight, _attributes(instruction, sources))


def _attributes(instruction: Instruction, sources: list[Instruction]):
    """Per opcode: transpose permutation, reduce dims, or a dot's / conv's flops and key dims per operand."""
    points = 2.0 * math.prod(instruction.shape.dims)  # a multiply and an add per output point and reduced point
    attributes = instruction.attributes
    if instruction.opcode == "transpose":
        return tuple(hlo.ints(attributes["dimensions"]))
    if instruction.opcode == "reduce":
        return tuple(hlo.ints(attributes.get("dimensions", "{}")))
    if instruction.opcode == "dot":
        lhs = tuple(hlo.ints(attributes.get("lhs_contracting_dims", "{}")))
        rhs = tuple(hlo.ints(attributes.get("rhs_contracting_dims", "{}")))
        reduced = math.prod(sources[0].shape.dims[d] for d in lhs)
        return {"keys": (lhs, rhs), "out_keys": (), "flops": points * reduced}
    if instruction.opcode == "convolution":
        dims = hlo.conv_dims(attributes["dim_labels"])
        kernel = sources[1].shape.dims
        reduced = kernel[dims.kernel_input_feature] * math.prod(kernel[d] for d in dims.kernel_spatial)
        return {"keys": ((dims.input_feature,), (dims.kernel_input_feature, dims.kernel_output_feature)),
                "out_keys": (dims.output_feature,), "flops": points * reduced}
    return None


def computation_weights(module: Module, graph: InlinedModule, lines: list[str]) -> np.ndarray:
    """[N] runs of each node per program run: 1 in the entry, x the trip count in a while body or condition, split
    evenly over a conditional's branches, 0 in the scalar regions of reduces, sorts and scatters (their callers pay)."""
    inlined = inlined_computations(module)
    weight = {module.entry.name: 1.0}
    for computation in reversed(list(module.computations.values())):  # callers before callees
        w = weight.get(computation.name, 0.0)
        for instruction in computation.instructions:
            callees = instruction.callees
            if instruction.opcode == "while":
                trips = trip_count(module, dict(callees)["condition"], lines)
                for key, callee in callees:
                    weight[callee] = weight.get(callee, 0.0) + w * (trips + (key == "condition"))
            elif instruction.opcode == "conditional":
                for _, callee in callees:
                    weight[callee] = weight.get(callee, 0.0) + w / len(callees)
            else:  # scalar regions (and inlined calls, whose nodes count in their caller's range)
                for _, callee in callees:
                    weight.setdefault(callee, 0.0)
    inlined_sizes: dict[str, int] = {}  # nodes a computation adds where a call inlines it (its parameters: none)
    sizes: dict[str, int] = {}  # nodes it adds where flatten lays it out
    for computation in module.computations.values():  # callees first
        calls = sum(inlined_sizes[dict(i.callees)["to_apply"]] for i in computation.instructions if i.opcode == "call")
        own = [i.opcode for i in computation.instructions if i.opcode != "call"]
        sizes[computation.name] = calls + len(own)
        inlined_sizes[computation.name] = calls + len(own) - own.count("parameter")
    weights = [np.full(sizes[c.name], weight.get(c.name, 0.0)) for c in module.computations.values()
               if c.name not in inlined]
    flat = np.concatenate(weights) if weights else np.zeros(0)
    if len(flat) != len(graph.nodes):
        raise ValueError(f"{module.path}: {len(flat)} nodes counted per computation; expected the {len(graph.nodes)} "
                         "nodes of the encoded graph")
    return flat


def trip_count(module: Module, condition: str, lines: list[str]) -> int:
    """A while loop's trip count: the largest integer constant its condition compares with (JAX's scans and
    fori_loops compare the counter with their length); 1 where there is none."""
    found = [int(m.group(1)) for i in module.computations[condition].instructions if i.opcode == "constant"
             for m in [_CONSTANT.search(lines[i.line - 1])] if m]
    return max([1, *found])


def noisy(runtime: np.ndarray, rng: np.random.Generator, sigma: float = NOISE) -> np.ndarray:
    """int64 measured runtimes: runtime x lognormal(0, sigma), at least 1 ns."""
    return np.maximum(np.round(runtime * rng.lognormal(0.0, sigma, len(runtime))), 1).astype(np.int64)


# ---------------------------------------------------------------- tiled kernels


@dataclass
class TiledKernel:
    """A fused kernel as its iteration space: a tile config picks a tile size per axis."""

    dims: tuple[int, ...]  # [S] iteration axes: the output's dims, then the reduced ones
    out_axes: tuple[int, ...]  # axes of the output dims, in output order
    lane: int  # the axis of the output's minor dim (padded to 128 lanes)
    sublane: int  # the axis of its second-minor dim (padded to 8 sublanes); -1 for none
    reduced: tuple[int, ...]  # axes summed over: splitting them makes partial sums go to memory and back
    operands: list[tuple[tuple[int, ...], int]]  # (axes an input spans, element bytes)
    flops: float  # matrix-unit flops per iteration point
    vector_ops: float  # element-wise ops per iteration point (transcendentals weigh more)
    out_bytes: int

    def shaped(self, tiles: np.ndarray) -> np.ndarray:
        """Tiles [C, S] as the hardware runs them: the lane axis rounded up to 128, the sublane axis to 8."""
        shaped = tiles.astype(np.float64)
        shaped[:, self.lane] = np.ceil(shaped[:, self.lane] / LANES) * LANES
        if self.sublane >= 0:
            shaped[:, self.sublane] = np.ceil(shaped[:, self.sublane] / SUBLANES) * SUBLANES
        return shaped

    def footprint(self, tiles: np.ndarray) -> np.ndarray:
        """[C] bytes one grid step holds: each input's tile and the output tile."""
        shaped = self.shaped(tiles)
        out = shaped[:, list(self.out_axes)].prod(axis=1) * self.out_bytes
        return out + sum(shaped[:, list(axes)].prod(axis=1) * size for axes, size in self.operands)

    def runtime(self, tiles: np.ndarray) -> np.ndarray:
        """[C] noise-free ns of tile sizes [C, S]: grid steps x (max(compute, memory) + per-step overhead) +
        launch, partial-sum traffic where a reduced axis is split, a spill penalty past VMEM."""
        dims = np.array(self.dims, dtype=np.float64)
        steps = np.ceil(dims / tiles)  # [C, S]
        shaped = self.shaped(tiles)
        points = shaped.prod(axis=1)
        out_points = shaped[:, list(self.out_axes)].prod(axis=1)
        compute = points * (self.flops / PEAK_FLOPS + self.vector_ops / VECTOR_OPS)
        footprint = self.footprint(tiles)
        split = steps[:, list(self.reduced)].prod(axis=1) > 1 if self.reduced else np.zeros(len(tiles), bool)
        moved = footprint + np.where(split, out_points * self.out_bytes, 0.0)  # read back the partial sums
        over = 2 * footprint / VMEM  # double-buffered
        memory = moved / BANDWIDTH * np.where(over > 1, SPILL * over, 1.0)
        return steps.prod(axis=1) * (np.maximum(compute, memory) + TILE_OVERHEAD) + LAUNCH_OVERHEAD

    def default_tile(self) -> np.ndarray:
        """[S] the compiler's pick: 512 lanes x 64 sublanes of output at most, reductions whole up to 2048, other
        axes 1, halved (largest first) until double-buffered it fits VMEM."""
        tile = np.ones(len(self.dims), np.int64)
        tile[self.lane] = min(self.dims[self.lane], 512)
        if self.sublane >= 0:
            tile[self.sublane] = min(self.dims[self.sublane], 64)
        for axis in self.reduced:
            tile[axis] = min(self.dims[axis], 2048)
        while 2 * self.footprint(tile[None])[0] > VMEM and tile.max() > 1:
            largest = int(np.argmax(tile))
            tile[largest] = max(1, tile[largest] // 2)
        return tile

    def candidates(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """[<= count, S] distinct tile configs, the default among them, in random order: per axis a power of two
        or the whole dim."""
        options = [np.unique([*(2 ** k for k in range(int(math.log2(d)) + 1)), d]) for d in self.dims]
        draws = np.stack([rng.choice(o, 4 * count) for o in options], axis=1)  # [4 count, S]
        unique = np.unique(np.vstack([self.default_tile()[None], draws]), axis=0)
        default = np.flatnonzero((unique == self.default_tile()).all(axis=1))
        rest = np.setdiff1d(np.arange(len(unique)), default)
        picked = np.concatenate([default, rng.permutation(rest)[:count - 1]])
        return unique[rng.permutation(picked)]

    def config_feat(self, tiles: np.ndarray) -> np.ndarray:
        """[C, 24] float32: kernel bounds (tile per iteration axis) 0..5, sum, product; output bounds likewise;
        input bounds 0."""
        feat = np.zeros((len(tiles), TILE_CONFIG_DIM), np.float32)
        for start, block in ((0, tiles), (8, tiles[:, list(self.out_axes)])):
            width = min(block.shape[1], 6)
            feat[:, start:start + width] = block[:, :width]
            feat[:, start + 6] = block.sum(axis=1)
            feat[:, start + 7] = block.prod(axis=1)
        return feat
