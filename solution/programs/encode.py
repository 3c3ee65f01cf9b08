"""The TpuGraphs layout arrays of an HLO module by the official encoder's rules, and `solution encode`."""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..atomic import atomic_write
from ..constants import CONFIGURABLE_OPCODES
from ..format import (
    CONV,
    DIMENSIONS,
    DYNAMIC_SLICE,
    ELEMENT_TYPE,
    ELEMENT_TYPES,
    EMPTY_PRODUCT_COLUMNS,
    IS_ROOT,
    IS_STABLE,
    LAYOUT,
    NODE_FEAT_DIM,
    OPCODE_IDS,
    PADDING,
    PARAMETER,
    REVERSAL,
    SHAPE,
    SLICE,
    TUPLE_SIZE,
    WINDOW,
)
from . import hlo
from .hlo import HloError, Instruction, Module, Shape

UNKNOWN_OPCODE = 0
SPLIT_ROLES = ("body", "condition", "branch_computations", "true_computation", "false_computation")
GROUPED = ("convolution", "custom-call")  # the instructions whose protos carry feature/batch group counts
LAYOUT_KEYS = {"node_feat": np.float32, "node_opcode": np.uint8, "edge_index": np.int64, "node_splits": np.int64,
               "node_config_ids": np.int64}  # format.md's keys and dtypes of a layout file, less its configurations
FEATURE_KEYS = ("dimensions", "iota_dimension", "inferred_dimension", "window", "dim_labels", "slice",
                "dynamic_slice_sizes", "padding", "is_stable", "feature_group_count", "batch_group_count")
FEATURE_KEY_SET = frozenset(FEATURE_KEYS)  # the attributes that set feature columns



class UnknownOpcodeWarning(UserWarning):
    """An opcode missing from the official list: encoded as 0, as the official encoder does."""


@dataclass
class Program:
    """One program's graph as the layout format holds it, with a name and tensor ranks per configurable node."""

    name: str
    arrays: dict[str, np.ndarray]  # LAYOUT_KEYS, plus node_config_feat when read from a layout file
    names: list[str]  # [NC] the configurable nodes' names (`dot.12`, as in the HLO)
    ranks: np.ndarray  # [NC, 3] rank of each one's output, input and kernel tensor; 0 where it has none


@dataclass
class InlinedModule:
    """A module's instructions after inlining its calls: one node each, in the encoder's order."""

    nodes: list[Instruction] = field(default_factory=list)  # [N]
    names: list[str] = field(default_factory=list)  # [N] unique: an inlined node is '<call>/<name>'
    operands: list[list[int]] = field(default_factory=list)  # [N] operand node ids, in order
    roots: dict[str, int] = field(default_factory=dict)  # root node of each computation kept
    splits: list[int] = field(default_factory=lambda: [0])  # node counts after each major computation

    def add(self, instruction: Instruction, name: str, operands: list[int]) -> int:
        self.nodes.append(instruction)
        self.names.append(name)
        self.operands.append(operands)
        return len(self.nodes) - 1


def encode_file(path: str | Path) -> dict[str, np.ndarray]:
    """The layout arrays (LAYOUT_KEYS) of the HLO module text at `path`."""
    return encode_module(hlo.read_module(path))


def encode_module(module: Module) -> dict[str, np.ndarray]:
    """The layout arrays of a parsed module (see `arrays`)."""
    return arrays(module, flatten(module))


def flatten(module: Module) -> InlinedModule:
    """Inline every `call` (as XLA's CallInliner does before layout assignment), then lay out the computations
    left in the text's order (callees first, the entry last), each one's instructions in order; split after each
    while body, while condition, conditional branch and the entry (the roles of TensorFlow's names that the
    official encoder splits after: 'while', 'cond', 'cluster'), and end at n."""
    graph = InlinedModule()
    inlined = inlined_computations(module)
    major = {callee for c in module.computations.values() for i in c.instructions
             for key, callee in i.callees if key in SPLIT_ROLES} | {module.entry.name}
    for computation in module.computations.values():
        if computation.name in inlined:
            continue
        graph.roots[computation.name] = _expand(module, computation, graph, None, "", ())
        if computation.name in major:
            graph.splits.append(len(graph.nodes))
    if graph.splits[-1] < len(graph.nodes):
        graph.splits.append(len(graph.nodes))
    return graph


def inlined_computations(module: Module) -> set[str]:
    """Computations that only `call`s call: their instructions are copied into the callers."""
    called, other = set(), set()
    for computation in module.computations.values():
        for instruction in computation.instructions:
            for key, callee in instruction.callees:
                (called if instruction.opcode == "call" and key == "to_apply" else other).add(callee)
    return called - other


def _expand(module: Module, computation: hlo.Computation, graph: InlinedModule, arguments: list[int] | None,
            prefix: str, stack: tuple[str, ...]) -> int:
    """Add the computation's nodes (its parameters bound to `arguments` when it is inlined) and return the node
    its root stands for."""
    local: dict[str, int] = {}
    for instruction in computation.instructions:
        operands = [local[name] for name in instruction.operands]
        if arguments is not None and instruction.opcode == "parameter":
            local[instruction.name] = _argument(module, instruction, arguments)
        elif instruction.opcode == "call":
            callee = _callee(module, instruction, stack)
            local[instruction.name] = _expand(module, callee, graph, operands, f"{prefix}{instruction.name}/",
                                              (*stack, computation.name))
        else:
            local[instruction.name] = graph.add(instruction, prefix + instruction.name, operands)
    return local[computation.root.name]


def _argument(module: Module, parameter: Instruction, arguments: list[int]) -> int:
    if parameter.parameter_number >= len(arguments):
        raise HloError(module.path, parameter.line, f"parameter({parameter.parameter_number}) of a computation "
                       f"called with {len(arguments)} operands", "a parameter number below the call's operand count")
    return arguments[parameter.parameter_number]


def _callee(module: Module, call: Instruction, stack: tuple[str, ...]) -> hlo.Computation:
    names = [callee for key, callee in call.callees if key == "to_apply"]
    if len(names) != 1:
        raise HloError(module.path, call.line, f"call '{call.name}' without one to_apply", "to_apply=<computation>")
    if names[0] in stack:
        raise HloError(module.path, call.line, f"call '{call.name}' calls '{names[0]}' recursively",
                       "calls that end")
    return module.computations[names[0]]


def arrays(module: Module, graph: InlinedModule) -> dict[str, np.ndarray]:
    """node_feat [N, 140], node_opcode [N], edge_index [E, 2], node_splits [1, K], node_config_ids [NC]: the
    arrays of tpu_graphs' hlo_encoder.cc and featurizers.h (the layout task's features)."""
    opcodes = _opcodes(module, graph.nodes)  # [N]
    return {
        "node_feat": _node_features(module, graph),
        "node_opcode": opcodes,
        "edge_index": _edges(graph),
        "node_splits": np.array([graph.splits], dtype=np.int64),
        "node_config_ids": np.flatnonzero(np.isin(opcodes, CONFIGURABLE_OPCODES)).astype(np.int64),
    }


def _opcodes(module: Module, nodes: list[Instruction]) -> np.ndarray:
    """[N] uint8 official ids; an opcode missing from the list is 0, with one warning per name."""
    ids = [OPCODE_IDS.get(node.opcode, UNKNOWN_OPCODE) for node in nodes]
    unknown = {}
    for node, opcode in zip(nodes, ids):
        if opcode == UNKNOWN_OPCODE:
            unknown.setdefault(node.opcode, node.line)
    for name, line in unknown.items():
        warnings.warn(f"{module.path} line {line}: opcode '{name}' is not in the official opcode list; encoded as "
                      f"{UNKNOWN_OPCODE} (unknown), as the official encoder does", UnknownOpcodeWarning, stacklevel=2)
    return np.array(ids, dtype=np.uint8)


def _edges(graph: InlinedModule) -> np.ndarray:
    """[E, 2] int64 rows [user, operand] and [caller, callee root], unique, sorted, without self-edges."""
    users = [user for user, operands in enumerate(graph.operands) for _ in operands]
    targets = [operand for operands in graph.operands for operand in operands]
    for caller, node in enumerate(graph.nodes):
        for _, callee in node.callees:
            users.append(caller)
            targets.append(graph.roots[callee])
    n = max(len(graph.nodes), 1)
    keys = np.unique(np.array(users, dtype=np.int64) * n + np.array(targets, dtype=np.int64))  # sorted [user, operand]
    edges = np.stack([keys // n, keys % n], axis=1)  # [E', 2]
    return edges[edges[:, 0] != edges[:, 1]]


# ---------------------------------------------------------------- features


def _node_features(module: Module, graph: InlinedModule) -> np.ndarray:
    """[N, 140] float32 (featurizers.h, the layout task's columns): each node's shape row, then the columns that
    its parameter number and attributes set, then is_root."""
    shapes: dict[Shape, int] = {}
    index = [shapes.setdefault(node.shape, len(shapes)) for node in graph.nodes]  # [N]
    table = np.array([_shape_row(shape) for shape in shapes], dtype=np.float32).reshape(-1, NODE_FEAT_DIM)  # [S, 140]
    features = table[index]  # [N, 140]
    rows, columns, values = [], [], []
    known: dict[tuple, dict[int, float]] = {}  # the columns of each distinct opcode, parameter and attributes
    for i, node in enumerate(graph.nodes):
        if node.parameter_number or node.opcode in GROUPED or not FEATURE_KEY_SET.isdisjoint(node.attributes):
            key = (node.opcode, node.parameter_number, *(node.attributes.get(k) for k in FEATURE_KEYS))
            set_columns = known.get(key)
            if set_columns is None:
                set_columns = known[key] = _columns(module, node)
            rows.extend([i] * len(set_columns))
            columns.extend(set_columns)
            values.extend(set_columns.values())
    features[rows, columns] = values
    features[list(graph.roots.values()), IS_ROOT] = 1.0
    return features


def _columns(module: Module, node: Instruction) -> dict[int, float]:
    """{column: value} that the node's parameter number and attributes set."""
    columns: dict[int, float] = {PARAMETER: node.parameter_number}
    attributes = node.attributes
    try:
        for key in ("dimensions", "iota_dimension", "inferred_dimension"):
            if key in attributes:
                _leading(columns, DIMENSIONS, hlo.ints(attributes[key]), 6)
        if "window" in attributes:
            _window(columns, hlo.window(attributes["window"]))
        if "dim_labels" in attributes:
            _conv(columns, hlo.conv_dims(attributes["dim_labels"]))
        if node.opcode in GROUPED:
            columns[CONV + 14] = int(attributes.get("feature_group_count", 1))
            columns[CONV + 15] = int(attributes.get("batch_group_count", 1))
        if "slice" in attributes:
            spans = hlo.slices(attributes["slice"])
            for k, part in enumerate((0, 2, 1)):  # start, stride, limit
                _sequence(columns, SLICE + 4 * k, [s[part] for s in spans], 2)
        if "dynamic_slice_sizes" in attributes:
            _sequence(columns, DYNAMIC_SLICE, hlo.ints(attributes["dynamic_slice_sizes"]), 2)
        if "padding" in attributes:
            pads = hlo.padding(attributes["padding"])
            _sequence(columns, PADDING, [p[0] for p in pads], 2)
            _sequence(columns, PADDING + 4, [p[1] for p in pads], 2)
    except (ValueError, KeyError, IndexError):
        raise HloError(module.path, node.line, f"attributes of {node.opcode} '{node.name}' that do not parse",
                       "window={size=.. stride=.. pad=lo_hi..}, dim_labels=b01f_01io->b01f, slice={[a:b:s], ..}, "
                       "padding=lo_hi_in x .., dimensions={..} as XLA prints them") from None
    columns[IS_STABLE] = float(attributes.get("is_stable") == "true")
    return columns


_EMPTY_ROW = tuple(float(column in EMPTY_PRODUCT_COLUMNS) for column in range(NODE_FEAT_DIM))  # [140]


@functools.lru_cache(maxsize=4096)
def _shape_row(shape: Shape) -> tuple[float, ...]:
    """[140] the columns a shape fixes (element type, dims, tuple size, layout), the rest at their empty values."""
    row = list(_EMPTY_ROW)
    if shape.element_type in ELEMENT_TYPES:
        row[ELEMENT_TYPE + ELEMENT_TYPES.index(shape.element_type)] = 1.0
    _sequence(row, SHAPE, shape.dims, 6)
    row[TUPLE_SIZE] = shape.tuple_size
    _leading(row, LAYOUT, shape.minor_to_major, 6)
    return tuple(row)


def _leading(columns: dict[int, float] | list[float], start: int, values: Sequence[int], lead: int) -> None:
    """The first `lead` values from column `start` (the rest stay 0)."""
    for k, value in enumerate(values[:lead]):
        columns[start + k] = value


def _sequence(columns: dict[int, float] | list[float], start: int, values: Sequence[int], lead: int) -> None:
    """`lead` values, their sum and their product (1 for none), from column `start`."""
    _leading(columns, start, values, lead)
    columns[start + lead] = sum(values)
    columns[start + lead + 1] = math.prod(values)


def _window(columns: dict[int, float], window: hlo.Window) -> None:
    """Six blocks of 8 (size, stride, padding low, high, window dilation, base dilation), then reversal."""
    for k, values in enumerate(window[:6]):
        _sequence(columns, WINDOW + 8 * k, values, 6)
    _leading(columns, REVERSAL, [float(r) for r in window.reversal], 6)
    columns[REVERSAL + 6] = sum(window.reversal)
    columns[REVERSAL + 7] = len(window.reversal) - sum(window.reversal)


def _conv(columns: dict[int, float], dims: hlo.ConvDims) -> None:
    """14 columns: input batch, feature, spatial x4; kernel input, output feature, spatial x4; output batch,
    feature."""
    columns[CONV], columns[CONV + 1] = dims.input_batch, dims.input_feature
    _leading(columns, CONV + 2, dims.input_spatial, 4)
    columns[CONV + 6], columns[CONV + 7] = dims.kernel_input_feature, dims.kernel_output_feature
    _leading(columns, CONV + 8, dims.kernel_spatial, 4)
    columns[CONV + 12], columns[CONV + 13] = dims.output_batch, dims.output_feature


# ---------------------------------------------------------------- files and the command


def write_npz(arrays: dict[str, np.ndarray], out_path: str | Path) -> None:
    """Write a layout file without configurations (LAYOUT_KEYS in their dtypes), whole or not at all."""
    with atomic_write(out_path, "wb") as handle:
        save_arrays(handle, arrays, LAYOUT_KEYS)


def save_arrays(handle, arrays: dict[str, np.ndarray], keys: dict[str, type]) -> None:
    """`arrays[key]` in `keys[key]`'s dtype, for each key, as one compressed npz into an open binary handle."""
    np.savez_compressed(handle, **{key: np.asarray(arrays[key], dtype=dtype) for key, dtype in keys.items()})


def encode_program(path: str | Path) -> Program:
    """The program of `solution rank`: its arrays, configurable nodes' names and their tensors' ranks."""
    module = hlo.read_module(path)
    graph = flatten(module)
    encoded = arrays(module, graph)
    ids = encoded["node_config_ids"]
    names = [graph.names[i] for i in ids]
    ranks = np.array([tensor_ranks(graph, i) for i in ids], dtype=np.int64).reshape(-1, 3)
    return Program(Path(path).stem, encoded, names, ranks)


def tensor_ranks(graph: InlinedModule, node: int) -> tuple[int, int, int]:
    """The rank of the node's output, input (operand 0) and kernel (operand 1 of a convolution)."""
    operands = [len(graph.nodes[o].shape.dims) for o in graph.operands[node][:2]]
    kernel = operands[1] if graph.nodes[node].opcode == "convolution" and len(operands) > 1 else 0
    return len(graph.nodes[node].shape.dims), operands[0] if operands else 0, kernel
