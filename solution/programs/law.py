"""An analytical runtime law of a TPU-like machine for HLO programs under layout configs, and for tiled kernels."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ..constants import LANES, SUBLANES
from ..format import ELEMENT_BYTES, LAYOUT_GROUP, TILE_CONFIG_DIM
from ..layouts import ELEMENTWISE, FLEXIBLE, MOVEMENT, perm_index, shape_tables
from ..physics.propagation import PARTS, Propagation, Slot, Tensor
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


class LayoutLaw:
    """Noise-free runtime (ns) of one program under layout configs, vectorised over configs: the work that the
    physics package's walk (`Propagation`) finds each node doing, priced with this machine's fixed constants.

    Layouts (the walk's rules): a configurable node (conv, dot, reshape) takes its output, input (operand 0) and
    kernel (operand 1 of a convolution) layouts from its config row; a -1 block is the compiler default: the HLO
    text's layout for the output, and for an operand the layout its producer gives (no copy). Every other node
    takes its layout by propagation (element-wise ops and data movement keep their first laid-out operand's,
    transposes and reduces map it, broadcasts and constants adapt to their user for free, parameters, tuples and
    loop state keep the text's). A user that needs another layout than its producer gives pays a copy. Unlike a
    file, the HLO text says each dot's operand order and contracting dims and each loop's trip count."""

    def __init__(self, module: Module, graph: InlinedModule, config_ids: np.ndarray, text: str) -> None:
        self.runs = computation_runs(module, graph, text.splitlines())  # [N]
        roots = set(graph.roots.values())
        tensors = [_tensor(instruction, [graph.nodes[o] for o in operands], operands, i in roots)
                   for i, (instruction, operands) in enumerate(zip(graph.nodes, graph.operands))]
        self.propagation = Propagation(tensors, self.runs, _slots(tensors, config_ids))
        self.fixed = np.array([_fixed_cost(instruction, tensor) for instruction, tensor in zip(graph.nodes, tensors)])
        self.prices = np.stack([_prices(tensor.name) for tensor in tensors])  # [N, len(PARTS)]

    def runtime(self, configs: np.ndarray) -> np.ndarray:
        """[C] ns of configs [C, NC, 18]."""
        return self.node_costs(configs).sum(axis=1)

    def node_costs(self, configs: np.ndarray) -> np.ndarray:
        """[C, N] ns each node adds (its copies included) under configs [C, NC, 18]."""
        costs = np.zeros((len(configs), len(self.fixed)))
        for i, (done, matmul) in enumerate(self.propagation.walk(np.asarray(configs, np.int64))):
            cost = self.fixed[i] + sum(self.prices[i, part] * amount for part, amount in done.items())
            costs[:, i] = self.runs[i] * (cost + (0.0 if matmul is None else _matmul_cost(matmul)))
        return costs


def _prices(opcode: str) -> np.ndarray:
    """ns per unit of each of PARTS done by a node of `opcode`: bytes over the bandwidth (a fused element-wise pass a
    fraction of a write, twice for transcendentals; data movement reads and writes; a transpose's copy or a reshape
    that is no bitcast strided; reducing across lanes shuffles), and an overhead per copy kernel launched."""
    fused = FUSED_PASS * (2.0 if opcode in TRANSCENDENTAL else 1.0)
    passes = 2.0 if opcode in MOVEMENT else 1.0
    per_byte = {"fused": fused, "passes": passes, "relayouts": TRANSPOSE_COPY, "copies": 1.0,
                "transposes": TRANSPOSE_COPY, "lane_reduces": LANE_REDUCE - 1.0}
    return np.array([COPY_OVERHEAD if part == "launches" else per_byte[part] / BANDWIDTH for part in PARTS])


def _matmul_cost(matmul: np.ndarray) -> np.ndarray:
    """[C] ns of a dot's or convolution's own work (MATMUL [C, 4]): the matrix units' time, slower per operand fed
    with its key dim second-minor or further out, or its bytes over the bandwidth, whichever is longer."""
    multiply_adds, stored, second, major = matmul.T
    compute = 2.0 * multiply_adds / PEAK_FLOPS * SECOND_MINOR_FEED ** second * MAJOR_FEED ** major
    return np.maximum(compute, stored / BANDWIDTH)


def _fixed_cost(instruction: Instruction, tensor: Tensor) -> float:
    """ns a node costs whatever the layouts: a kernel launch for every op that is not fused, a bitcast or a
    parameter; a broadcast's or constant's fused pass over its elements."""
    if tensor.rank < 0 or tensor.name in ("parameter", "get-tuple-element", "transpose", "reshape"):
        return 0.0
    if tensor.name in FLEXIBLE:
        return FUSED_PASS * math.prod(instruction.shape.dims) * tensor.element_bytes / BANDWIDTH
    return 0.0 if tensor.name in ELEMENTWISE else OP_OVERHEAD


def _tensor(instruction: Instruction, sources: list[Instruction], operands: list[int], is_root: bool) -> Tensor:
    """The walk's view of one instruction (`sources`: its operands' instructions): shape tables, the HLO text's
    layout, and what its attributes say (a transpose's permutation, a reduce's dims, a dot's or convolution's
    key dims). A rank over 6 is left out like a tuple."""
    shape = instruction.shape
    rank = len(shape.dims) if shape.element_type != "tuple" and len(shape.dims) <= LAYOUT_GROUP else -1
    element = ELEMENT_BYTES.get(shape.element_type, 4)
    dims = tuple(max(d, 1) for d in shape.dims) if rank >= 0 else ()
    tables = shape_tables(dims, element) if rank >= 0 else None
    text = perm_index(tuple(shape.minor_to_major)) if rank > 0 else 0
    dimensions = tuple(hlo.ints(instruction.attributes.get("dimensions", "{}"))) if instruction.opcode in (
        "transpose", "reduce") else ()
    return Tensor(instruction.opcode, rank, dims, tables, element, text, operands, dimensions, is_root,
                  keyed=_keyed(instruction, sources, operands))


def _keyed(instruction: Instruction, sources: list[Instruction], operands: list[int]):
    """A dot's or convolution's (elements reduced per output element, [(operand or -1 for the output, key dims)])
    from its dimension numbers; None for other instructions."""
    attributes = instruction.attributes
    if instruction.opcode == "dot":
        lhs = tuple(hlo.ints(attributes.get("lhs_contracting_dims", "{}")))
        rhs = tuple(hlo.ints(attributes.get("rhs_contracting_dims", "{}")))
        return math.prod(sources[0].shape.dims[d] for d in lhs), [(operands[0], lhs), (operands[1], rhs)]
    if instruction.opcode == "convolution":
        dims = hlo.conv_dims(attributes["dim_labels"])
        kernel = sources[1].shape.dims
        reduced = kernel[dims.kernel_input_feature] * math.prod(kernel[d] for d in dims.kernel_spatial)
        return reduced, [(operands[0], (dims.input_feature,)),
                         (operands[1], (dims.kernel_input_feature, dims.kernel_output_feature)),
                         (-1, (dims.output_feature,))]
    return None


def _slots(tensors: list[Tensor], config_ids: np.ndarray) -> dict[int, Slot]:
    """Each configurable node's slot as the HLO says it: the input block lays out operand 0, a convolution's kernel
    block operand 1."""
    slots = {}
    for column, node in enumerate(config_ids.tolist()):
        tensor = tensors[node]
        if tensor.rank < 0:
            continue
        arrays = [o if tensors[o].rank >= 0 else -1 for o in tensor.operands]  # -1: a tuple operand
        kernel = arrays[1] if tensor.name == "convolution" and len(arrays) > 1 else -1
        slots[node] = Slot(column, (arrays[0] if arrays else -1, kernel))
    return slots


def computation_runs(module: Module, graph: InlinedModule, lines: list[str]) -> np.ndarray:
    """[N] runs of each node per program run: 1 in the entry, x the trip count in a while body or condition, split
    evenly over a conditional's branches, 0 in the scalar regions of reduces, sorts and scatters (their callers pay)."""
    inlined = inlined_computations(module)
    runs = {module.entry.name: 1.0}
    for computation in reversed(list(module.computations.values())):  # callers before callees
        w = runs.get(computation.name, 0.0)
        for instruction in computation.instructions:
            callees = instruction.callees
            if instruction.opcode == "while":
                trips = trip_count(module, dict(callees)["condition"], lines)
                for key, callee in callees:
                    runs[callee] = runs.get(callee, 0.0) + w * (trips + (key == "condition"))
            elif instruction.opcode == "conditional":
                for _, callee in callees:
                    runs[callee] = runs.get(callee, 0.0) + w / len(callees)
            else:  # scalar regions (and inlined calls, whose nodes count in their caller's range)
                for _, callee in callees:
                    runs.setdefault(callee, 0.0)
    inlined_sizes: dict[str, int] = {}  # nodes a computation adds where a call inlines it (its parameters: none)
    sizes: dict[str, int] = {}  # nodes it adds where flatten lays it out
    for computation in module.computations.values():  # callees first
        calls = sum(inlined_sizes[dict(i.callees)["to_apply"]] for i in computation.instructions if i.opcode == "call")
        own = [i.opcode for i in computation.instructions if i.opcode != "call"]
        sizes[computation.name] = calls + len(own)
        inlined_sizes[computation.name] = calls + len(own) - own.count("parameter")
    per_node = [np.full(sizes[c.name], runs.get(c.name, 0.0)) for c in module.computations.values()
               if c.name not in inlined]
    flat = np.concatenate(per_node) if per_node else np.zeros(0)
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
