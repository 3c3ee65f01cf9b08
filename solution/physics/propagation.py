"""The one way layouts travel through a graph as XLA carries them, and the work each config's layouts cause: the engine
of the physics prior (over a file's nodes) and of the program corpus's runtime law (over HLO instructions)."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..data.reader import RawGraph, read_graph
from ..format import (
    CONV,
    DIMENSIONS,
    ELEMENT_BYTES,
    ELEMENT_TYPE,
    ELEMENT_TYPES,
    IS_ROOT,
    LAYOUT_GROUP,
    LAYOUT_MINOR_TO_MAJOR,
    OPCODE_NAMES,
    SHAPE_DIMS,
)
from ..layouts import (
    ELEMENTWISE,
    FLEXIBLE,
    MOVEMENT,
    PINNED,
    ShapeTables,
    block_keys,
    chosen_layout,
    perm_index,
    reduce_map,
    row_major,
    shape_tables,
    transpose_map,
)

TUPLE_COLUMN = ELEMENT_TYPE + ELEMENT_TYPES.index("tuple")
TYPE_BYTES = np.array([ELEMENT_BYTES.get(name, 4) for name in ELEMENT_TYPES])  # per one-hot column; 4 where unknown
CONFIG_CHUNK = 1024  # configs a pass: bounded memory on files with many thousands of configs
INPUT, KERNEL = 1, 2  # config blocks after the output's: operand 0 (input), a convolution's operand 1 (kernel)
PARTS = ("fused", "passes", "relayouts", "copies", "transposes", "launches", "lane_reduces")
BYTE_PARTS = 5  # the first PARTS count bytes moved ("relayouts": by reshapes that are no bitcast), the ones the
# prior weighs; then kernels launched, and bytes reduced across lanes, which the corpus law alone prices
MATMUL = ("multiply_adds", "bytes", "second_minor_feeds", "major_feeds")  # per configurable dot or convolution
# (every configurable node but a reshape): its multiply-adds over whole output tiles and the bytes its output and
# operands store (each x its runs), and how many of its operands (and a convolution's output) it feeds with their key
# dim second-minor, and further out
WORK_FEATURES = len(PARTS) + len(MATMUL)  # ConfigWork.features
# node_feat: a convolution's input batch and feature dims, kernel input and output feature dims, output batch and
# feature dims, feature group count
CONV_DIMS = (CONV, CONV + 1, CONV + 6, CONV + 7, CONV + 12, CONV + 13, CONV + 14)


@dataclass
class Tensor:
    """What the walk needs of one node, from a file's features (`file_tensors`) or an HLO instruction."""

    name: str  # HLO opcode
    rank: int  # -1: a tuple
    dims: tuple[int, ...]  # its sizes (none for a tuple)
    tables: ShapeTables | None  # bytes stored per order of its dims (None for a tuple)
    element_bytes: int  # of its element type (4 where the source names none)
    text: int  # its source's layout of its output (the file's, or the HLO text's), an index into PERMS[rank]
    operands: list[int]  # producers in HLO order; from a file, which keeps no operand order, in node order but a
    # dot's or convolution's two in HLO order (lhs or input first) where their shapes tell it
    dimensions: tuple[int, ...]  # the `dimensions` attribute (a transpose's permutation, a reduce's dims)
    is_root: bool
    conv: tuple[int, ...] = ()  # a convolution's CONV_DIMS (what a file tells of its operands)
    keyed: tuple | None = None  # a dot's or convolution's `_keyed` (None where its source does not say)


@dataclass(frozen=True)
class Slot:
    """A configurable node's config column, and the operands its input and kernel blocks lay out (-1: none)."""

    column: int
    laid_out: tuple[int, int]


@dataclass
class ConfigWork:
    """What configs make a program do: PARTS summed over its nodes but for the configurable dots' and convolutions'
    own work ([C, K]), which is kept per dot or convolution (MATMUL, [C, D, 4]): the prior weighs each one's compute
    against its memory traffic."""

    parts: np.ndarray  # [C, len(PARTS)]
    matmuls: np.ndarray  # [C, D, len(MATMUL)]

    def __len__(self) -> int:
        return len(self.parts)

    def __getitem__(self, rows) -> ConfigWork:
        return ConfigWork(self.parts[rows], self.matmuls[rows])

    def flat_matmuls(self) -> tuple[np.ndarray, np.ndarray]:
        """The dot records one after the other, [C x D, 4], and the config each is of, [C x D]."""
        count, matmuls = self.matmuls.shape[:2]
        return self.matmuls.reshape(-1, len(MATMUL)), np.repeat(np.arange(count), matmuls)

    def features(self) -> np.ndarray:
        """[C, WORK_FEATURES] log1p of each PARTS amount and of the dots' and convolutions' MATMUL summed over them:
        what the configs make the program do, for a model to weigh."""
        return np.log1p(np.concatenate([self.parts, self.matmuls.sum(1)], 1)).astype(np.float32)

    @staticmethod
    def concatenate(works: list[ConfigWork], matmuls: int) -> ConfigWork:
        """The works of successive chunks of configs of one file (with `matmuls` dots and convolutions)."""
        if not works:
            return ConfigWork(np.zeros((0, len(PARTS))), np.zeros((0, matmuls, len(MATMUL))))
        return ConfigWork(np.concatenate([w.parts for w in works]), np.concatenate([w.matmuls for w in works]))


class Propagation:
    """A graph as the walk reads it: its nodes, how often each runs, and which configurable node each config column
    sets. Where runs and slots come from is its source's business: a file infers them from shapes
    (`of_file`), an HLO program reads them from its text."""

    def __init__(self, tensors: list[Tensor], runs: np.ndarray, slots: dict[int, Slot]) -> None:
        self.tensors = tensors
        self.runs = runs  # [n] times per program run
        self.slots = slots

    @classmethod
    def of_file(cls, raw: RawGraph) -> Propagation:
        """A layout file's graph: operand order, loop trip counts and each block's operand as its shapes tell."""
        tensors = file_tensors(raw)
        return cls(tensors, loop_runs(tensors, raw.computation_bounds()), file_slots(raw, tensors))

    def work(self, configs: np.ndarray) -> ConfigWork:
        """What configs [C, nc, 18] (values -1..5) make the whole program do: its PARTS, and each configurable dot's
        or convolution's MATMUL, a chunk of configs at a time."""
        chunks = [self._pass(configs[start:start + CONFIG_CHUNK]) for start in range(0, len(configs), CONFIG_CHUNK)]
        return ConfigWork.concatenate(chunks, self.matmuls)

    @functools.cached_property
    def matmuls(self) -> int:
        """How many configurable dots and convolutions the graph has (every configurable node but its reshapes)."""
        return sum(self.tensors[i].name != "reshape" for i in self.slots)

    def walk(self, configs: np.ndarray) -> Iterator[tuple[Work, np.ndarray | None]]:
        """Node by node in (topological) node order, what one run of each does under configs [C, nc, 18]: its Work,
        and a configurable dot's or convolution's MATMUL [C, 4] (else None)."""
        tensors, keys = self.tensors, block_keys(configs)  # keys: [C, nc, 3]
        layouts: list[np.ndarray | int | None] = []  # per node: [C] or one order for all; None: adapts to users
        for i, tensor in enumerate(tensors):
            matmul = None
            if i in self.slots:
                slot = self.slots[i]
                layout, done, matmul = _configured(tensor, tensors, layouts, keys[:, slot.column], slot.laid_out)
            else:
                layout, done = _propagated(tensor, tensors, layouts)
            if tensor.is_root:  # a result leaves in its source's layout
                done = done + _copy(tensor, layout, tensor.text)
            layouts.append(layout)
            yield done, matmul

    def _pass(self, configs: np.ndarray) -> ConfigWork:
        """`work` of one chunk of configs: each node's, times its runs."""
        parts = np.zeros((len(configs), len(PARTS)))
        matmuls = []
        for runs, (done, matmul) in zip(self.runs, self.walk(configs)):
            for k, amount in done.items():
                parts[:, k] += runs * amount
            if matmul is not None:
                matmuls.append(matmul * [runs, runs, 1, 1])  # [C, 4]: multiply-adds and bytes per program run
        stacked = np.stack(matmuls, 1) if matmuls else np.zeros((len(configs), 0, len(MATMUL)))  # [C, D, 4]
        return ConfigWork(parts, stacked)


def loop_runs(tensors: list[Tensor], bounds: np.ndarray) -> np.ndarray:
    """[n] how often each node runs per program run: a while loop's body and condition (the computations of the
    roots the while node has edges to) its trip count times the while node's own runs, a conditional's branches an
    equal share of its runs, nested calls multiplied; 1 elsewhere."""
    computation = np.searchsorted(bounds, np.arange(len(tensors)), side="right") - 1  # [n]
    runs = np.ones(len(tensors))
    for i in reversed(range(len(tensors))):  # a call's computations come before it: outer calls first
        if tensors[i].name not in ("while", "conditional"):
            continue
        spans = [(bounds[c], bounds[c + 1]) for c in {computation[o] for o in tensors[i].operands} - {computation[i]}]
        if not spans:  # no edge to a computation of its own
            continue
        if tensors[i].name == "while":
            share = trip_count(tensors, [k for start, end in spans for k in range(start, end)])
        else:
            share = 1 / len(spans)
        for start, end in spans:
            runs[start:end] = runs[i] * share
    return runs


def trip_count(tensors: list[Tensor], body: list[int]) -> int:
    """A loop's trip count as its body's dynamic slices imply it (the files keep no constants): a scan or a decode
    loop reads or writes one slice of a stacked tensor per trip along one dim (the most slices any of its dims
    holds), and walks past the end of none, so the fewest of those over the dynamic slices and
    dynamic-update-slices among the loop's `body` nodes; 1 where there is none."""
    counts = []
    for tensor in (tensors[k] for k in body):
        if tensor.name not in ("dynamic-slice", "dynamic-update-slice"):
            continue
        for other in (tensors[o].dims for o in tensor.operands if tensors[o].rank == tensor.rank > 0):
            whole, piece = (other, tensor.dims) if tensor.name == "dynamic-slice" else (tensor.dims, other)
            counts.append(max((w // p for w, p in zip(whole, piece) if p > 0), default=1))
    return min([c for c in counts if c > 1], default=1)


@functools.lru_cache(maxsize=256)
def file_propagation(path: str, split: str) -> Propagation:
    """The propagation of a layout file of a split, read once per process for the files in use (~0.6 KiB a node)."""
    return Propagation.of_file(read_graph(path, split))


def file_tensors(raw: RawGraph) -> list[Tensor]:
    """The walk's view of every node of a file."""
    feat = raw.node_feat
    dims = feat[:, SHAPE_DIMS].astype(np.int64)  # [n, 6], 0 beyond the rank
    ranks = np.where(feat[:, TUPLE_COLUMN] > 0, -1, (dims > 0).sum(1))  # [n]
    types = feat[:, ELEMENT_TYPE:ELEMENT_TYPE + len(ELEMENT_TYPES)]  # [n, 19] one-hot
    element_bytes = np.where(types.any(1), TYPE_BYTES[types.argmax(1)], 4)  # [n]
    edges = raw.edge_index[np.lexsort(raw.edge_index.T[::-1])]  # [m, 2] (consumer, producer), by consumer, producer
    producers, bounds = edges[:, 1].tolist(), np.searchsorted(edges[:, 0], np.arange(len(feat) + 1)).tolist()
    operands = [producers[start:end] for start, end in zip(bounds[:-1], bounds[1:])]  # [n] each node's producers
    # whole columns as Python lists once: per-node reads of numpy scalars cost most of a file's walk set-up
    columns = zip(ranks.tolist(), raw.node_opcode.tolist(), dims.tolist(), element_bytes.tolist(),
                  feat[:, LAYOUT_MINOR_TO_MAJOR].astype(np.int64).tolist(),
                  feat[:, DIMENSIONS:DIMENSIONS + LAYOUT_GROUP].astype(np.int64).tolist(),
                  (feat[:, IS_ROOT] > 0).tolist(), feat[:, list(CONV_DIMS)].astype(np.int64).tolist(), operands)
    tensors = []
    for rank, opcode, sizes, nbytes, layout, dimensions, is_root, conv, producers in columns:
        shape, text = tuple(sizes[:max(rank, 0)]), tuple(layout[:max(rank, 0)])
        tensors.append(Tensor(
            OPCODE_NAMES[opcode] if opcode < len(OPCODE_NAMES) else "", rank, shape,
            shape_tables(shape, nbytes) if rank >= 0 else None, nbytes,
            perm_index(text if _is_order(text, rank) else row_major(max(rank, 0))), producers,
            tuple(dimensions), is_root, tuple(conv)))
    for tensor in tensors:
        tensor.operands = _hlo_order(tensor, tensors)
        tensor.keyed = _keyed(tensor, tensors)
    return tensors


def file_slots(raw: RawGraph, tensors: list[Tensor]) -> dict[int, Slot]:
    """Each configurable node's slot in a file, which keeps no operand order: the input block lays out the first
    operand of the rank some config gives that block (any laid-out one where no config sets it), a convolution's
    kernel block the second of its rank."""
    blocks = raw.config_feat.reshape(*raw.config_feat.shape[:2], 3, LAYOUT_GROUP)  # [c, nc, 3, 6]
    block_ranks = (blocks >= 0).sum(-1).max(0)  # [nc, 3] each block's rank where some config sets it, else 0
    slots = {}
    for k, node in enumerate(raw.config_node_ids.tolist()):
        tensor, laid_out = tensors[node], []
        for block in (INPUT, KERNEL):
            rank = block_ranks[k, block]
            candidates = [o for o in tensor.operands if (tensors[o].rank == rank if rank else tensors[o].rank > 0)]
            usable = candidates and (block == INPUT or tensor.name == "convolution")
            laid_out.append(candidates[min(block - INPUT, len(candidates) - 1)] if usable else -1)
        slots[node] = Slot(k, tuple(laid_out))
    return slots


def _hlo_order(tensor: Tensor, tensors: list[Tensor]) -> list[int]:
    """A dot's or convolution's two operands with the one its shapes say is operand 0 first (node order where they
    do not say); any other node's as they are."""
    if tensor.name not in ("dot", "convolution") or len(tensor.operands) != 2 or tensor.rank < 0:
        return tensor.operands
    first, second = (tensors[o] for o in tensor.operands)
    if min(first.rank, second.rank) <= 0:
        return tensor.operands
    swapped = _shape_rules(tensor, second, first) > _shape_rules(tensor, first, second)
    return tensor.operands[::-1] if swapped else tensor.operands


def _shape_rules(tensor: Tensor, lhs: Tensor, rhs: Tensor) -> int:
    """How many of a dot's or convolution's shape rules hold with `lhs` as operand 0 and `rhs` as operand 1."""
    if tensor.name == "dot":
        return int(dot_keys(lhs.dims, rhs.dims, tensor.dims) is not None)
    input_batch, input_feature, kernel_input, kernel_output, output_batch, output_feature, groups = tensor.conv

    def size(dims: tuple[int, ...], d: int) -> int:
        return dims[d] if 0 <= d < len(dims) else -1

    return ((size(lhs.dims, input_batch) == size(tensor.dims, output_batch))
            + (size(lhs.dims, input_feature) == size(rhs.dims, kernel_input) * max(groups, 1))
            + (size(rhs.dims, kernel_output) == size(tensor.dims, output_feature)))


@functools.lru_cache(maxsize=4096)
def _is_order(dims: tuple[int, ...], rank: int) -> bool:
    """Whether `dims` orders all `rank` dims of a tensor once each."""
    return sorted(dims) == list(range(rank))


class Work(dict):
    """What one node makes the program do: part (an index into PARTS) -> amount ([C], or one number for all
    configs)."""

    def __add__(self, other: Work) -> Work:
        total = Work(self)
        for part, amount in other.items():
            total[part] = total.get(part, 0.0) + amount
        return total


def work(**amounts) -> Work:
    """A Work of named PARTS."""
    return Work({PARTS.index(name): amount for name, amount in amounts.items()})


def _configured(tensor: Tensor, tensors: list[Tensor], layouts: list, keys: np.ndarray, laid_out: tuple[int, int]):
    """A configurable node's output layout [C], work and, for a dot or convolution, its MATMUL [C, 4] (else None):
    its output and the operands its blocks lay out (`laid_out`: input, kernel) in the config's layouts (-1 blocks:
    the source's for the output, the producer's for an operand), copies into those. A reshape whose operand and
    output both keep their source's orders is a bitcast and moves nothing itself."""
    out = chosen_layout(keys[:, 0], tensor.rank, tensor.text)  # keys: [C, 3], one per block
    own, copies, bitcast, chosen = _stored(tensor, out), Work(), False, {}
    for block, index in zip((INPUT, KERNEL), laid_out):
        if index < 0:
            continue
        operand = tensors[index]
        wanted = chosen_layout(keys[:, block], operand.rank, _seen(index, tensors, layouts))
        copies = copies + _copy(operand, layouts[index], wanted)
        own = own + _stored(operand, wanted)
        chosen[index] = wanted
        if tensor.name == "reshape":
            bitcast = _keeps_text(operand, wanted) & _keeps_text(tensor, out)
    if tensor.name == "reshape":
        return out, copies + work(relayouts=np.where(bitcast, 0.0, own), launches=np.where(bitcast, 0.0, 1.0)), None
    return out, copies, _matmul(tensor, tensors, layouts, chosen, out, own, len(keys))  # launches anyway


def _matmul(tensor: Tensor, tensors: list[Tensor], layouts: list, chosen: dict, out, own, count: int) -> np.ndarray:
    """[count, 4] a dot's or convolution's MATMUL: its multiply-adds over whole output tiles (0 where its shapes do
    not say), the bytes it stores (`own`: its output and the operands the config lays out; and the others as they
    arrive where its shapes say which they are), and how many of its operands (or a convolution's output) have their
    key dim (a contracted one, or a convolution's feature dim) second-minor, and further out, in their layouts
    (`chosen`: the layouts the config reads operands in; the others arrive as they are)."""
    multiply_adds, second, major = 0.0, 0.0, 0.0
    if tensor.keyed:
        reduced, keys = tensor.keyed  # keys: (operand or -1 for the output, its key dims)
        multiply_adds = _stored(tensor, out) / tensor.element_bytes * reduced
        own = own + sum(_stored(tensors[i], _seen(i, tensors, layouts)) for i, _ in keys if i >= 0 and i not in chosen)
        for index, dims in keys:
            if not dims:  # an outer product's operand: nothing to feed
                continue
            owner, layout = (tensor, out) if index < 0 else (
                tensors[index], chosen[index] if index in chosen else _seen(index, tensors, layouts))
            minor = _among(owner.tables.minor[layout], dims)
            second_minor = ~minor & _among(owner.tables.second[layout], dims)
            second = second + second_minor
            major = major + ~(minor | second_minor)
    record = np.empty((count, len(MATMUL)))  # [C, 4]
    record[:, 0], record[:, 1], record[:, 2], record[:, 3] = multiply_adds, own, second, major
    return record


def _among(values: np.ndarray, dims: tuple[int, ...]) -> np.ndarray:
    """Whether each of `values` ([C] or one) is one of `dims` (np.isin's work without its set-up: a few dims)."""
    return (np.asarray(values)[..., None] == np.asarray(dims)).any(-1)


def _keyed(tensor: Tensor, tensors: list[Tensor]):
    """(elements reduced per output element, [(operand or -1 for the output, key dims)]) of a dot or convolution
    whose operands are in HLO order; None for other nodes and where its shapes do not say."""
    if tensor.name not in ("dot", "convolution") or tensor.rank < 0:
        return None
    ranked = [o for o in tensor.operands if tensors[o].rank > 0]
    if tensor.name == "convolution":
        if len(ranked) < 2:
            return None
        kernel = tensors[ranked[1]].dims
        _, input_feature, kernel_input, kernel_output, _, output_feature, _ = tensor.conv
        if not all(0 <= k < len(kernel) for k in (kernel_input, kernel_output)):
            return None
        return math.prod(kernel) / max(kernel[kernel_output], 1), [
            (ranked[0], (input_feature,)), (ranked[1], (kernel_input, kernel_output)), (-1, (output_feature,))]
    if not ranked:
        return None
    lhs, rhs = ranked[0], ranked[-1]  # one operand for both: x . x
    keys = dot_keys(tensors[lhs].dims, tensors[rhs].dims, tensor.dims)
    if keys is None:
        return None
    return math.prod(tensors[lhs].dims[k] for k in keys[0]), [(lhs, keys[0]), (rhs, keys[1])]


@functools.lru_cache(maxsize=4096)
def dot_keys(lhs: tuple[int, ...], rhs: tuple[int, ...],
             out: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The contracted dims of a dot's lhs and rhs as their shapes and the output's imply (the files keep no
    dimension numbers): the output holds the batch dims, then the lhs's other free dims, then the rhs's, each in
    operand order, and contracted dims pair up in size. Of the readings that fit, the one that reduces the most
    elements, then the fewest contracted dims; None where none fits."""
    readings = []
    for contracted in range(min(len(lhs), len(rhs)) + 1):
        batch = len(lhs) + len(rhs) - len(out) - 2 * contracted
        lhs_free = len(lhs) - batch - contracted
        if batch < 0 or lhs_free < 0 or len(rhs) - batch - contracted < 0:
            continue
        for lhs_keys in _contracted(lhs, out[:batch], out[batch:batch + lhs_free], free_last=False):
            for rhs_keys in _contracted(rhs, out[:batch], out[batch + lhs_free:], free_last=True):
                if [lhs[k] for k in lhs_keys] == [rhs[k] for k in rhs_keys]:
                    readings.append((-math.prod(lhs[k] for k in lhs_keys), contracted, lhs_keys, rhs_keys))
    return min(readings, key=lambda r: r[:2])[2:] if readings else None


def _contracted(dims: tuple[int, ...], batch: tuple[int, ...], free: tuple[int, ...], free_last: bool):
    """Each way to read `dims` as the batch dims and the free dims (each in order) and the rest: the rest's dims;
    where sizes repeat, the free dims as early as they fit first, or as late (`free_last`: x . W's W)."""
    for batch_dims in itertools.combinations(range(len(dims)), len(batch)):
        if [dims[d] for d in batch_dims] != list(batch):
            continue
        others = [d for d in range(len(dims)) if d not in batch_dims]
        ways = list(itertools.combinations(others, len(free)))
        for free_dims in ways[::-1] if free_last else ways:
            if [dims[d] for d in free_dims] == list(free):
                yield tuple(d for d in others if d not in free_dims)


def _propagated(tensor: Tensor, tensors: list[Tensor], layouts: list):
    """Any other node's output layout and work, by how its op carries its operands' layouts."""
    name, rank = tensor.name, tensor.rank
    if rank < 0 or name in ("parameter", "get-tuple-element"):
        pinned = name in PINNED or rank < 0  # operands leave in their source's layouts (loop state, tuples, calls)
        copies = [_copy(tensors[o], layouts[o], tensors[o].text) for o in tensor.operands] if pinned else []
        return (tensor.text if rank >= 0 else None), sum(copies, Work())
    if name in FLEXIBLE:
        return None, Work()
    if name == "transpose":
        source = layouts[tensor.operands[0]] if tensor.operands else None
        permutation = tensor.dimensions[:rank]
        if source is None or not _is_order(permutation, rank):
            return None, Work()
        return transpose_map(rank, permutation)[source], Work()  # a bitcast: its users pay for another order
    if name == "reduce":
        laid_out = [o for o in tensor.operands if tensors[o].rank > rank]
        if not laid_out:
            return tensor.text, Work()
        operand = tensors[laid_out[0]]
        source = _seen(laid_out[0], tensors, layouts)
        reduced = tensor.dimensions[:operand.rank - rank]
        valid = len(set(reduced)) == len(reduced) and all(0 <= d < operand.rank for d in reduced)
        read = _stored(operand, source)
        if not valid:
            return tensor.text, work(passes=read)
        lanes = _among(operand.tables.minor[source], reduced)  # across the lanes: shuffles
        return reduce_map(operand.rank, reduced)[source], work(passes=read, lane_reduces=np.where(lanes, read, 0.0))
    if name in ELEMENTWISE or name in MOVEMENT:
        same = [o for o in tensor.operands if tensors[o].rank == rank and layouts[o] is not None]
        layout = layouts[same[0]] if same else tensor.text
        copies = sum((_copy(tensors[o], layouts[o], layout) for o in same[1:]), Work())
        part = "fused" if name in ELEMENTWISE else "passes"
        return layout, copies + work(**{part: _stored(tensor, layout)})
    read = sum(_stored(tensors[o], _seen(o, tensors, layouts)) for o in tensor.operands if tensors[o].rank >= 0)
    return tensor.text, work(passes=read + _stored(tensor, tensor.text))  # gather, custom calls, ...: the source's


def _stored(tensor: Tensor, layout) -> np.ndarray | float:
    """Bytes a tensor stores in 8 x 128 tiles in `layout` ([C] or one order)."""
    return tensor.tables.padded[layout]


def _seen(operand: int, tensors: list[Tensor], layouts: list):
    """The layout an operand arrives in: its own, or its source's where it adapts to its users."""
    layout = layouts[operand]
    return tensors[operand].text if layout is None else layout


def _copy(tensor: Tensor, source, target) -> Work:
    """The copy of the tensor from layout `source` to `target` where they store it differently: the bytes it
    moves (a transpose where the minor dim changes), and one kernel."""
    if source is None or tensor.rank <= 0:
        return Work()
    tables = tensor.tables
    differs = tables.canonical[source] != tables.canonical[target]
    moved = np.where(differs, tables.padded[source] + tables.padded[target], 0.0)
    transpose = tables.minor[source] != tables.minor[target]
    return work(copies=np.where(transpose, 0.0, moved), transposes=np.where(transpose, moved, 0.0),
                launches=differs.astype(np.float64))


def _keeps_text(tensor: Tensor, layout) -> np.ndarray:
    """Whether `layout` ([C] or one order) stores the tensor as its source's layout does."""
    return tensor.tables.canonical[layout] == tensor.tables.canonical[tensor.text]
