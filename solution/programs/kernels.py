"""Fused kernels as tile files: a kernel's graph (its inputs as parameters), its iteration space, candidate tiles.
The corpus cuts kernels out of whole programs; `solution encode --collection tile` takes the fused computations
of an optimised XLA dump."""

from __future__ import annotations

import numpy as np

from ..format import ELEMENT_BYTES
from . import encode, hlo, law
from .encode import InlinedModule
from .hlo import Module

PARAMETER_OPCODE = 63
ATTRIBUTE_COLUMNS = slice(31, 134)  # node_feat columns an instruction's attributes set (format.md)
EPILOGUE = 4  # element-wise ops fused after a dot/conv, or before a reduce, at most


def users_of(graph: InlinedModule) -> list[list[int]]:
    """[N] the nodes that read each node."""
    users: list[list[int]] = [[] for _ in graph.nodes]
    for user, operands in enumerate(graph.operands):
        for operand in set(operands):
            users[operand].append(user)
    return users


def fused_members(graph: InlinedModule, users: list[list[int]], anchor: int) -> list[int]:
    """The fused kernel around `anchor`: a dot or conv with the element-wise ops after it, or a reduce with the
    element-wise ops before it (single-use chains of the same shape)."""
    members, node = [anchor], anchor
    if graph.nodes[anchor].opcode == "reduce":
        shape = graph.nodes[graph.operands[anchor][0]].shape
        while len(members) <= EPILOGUE:
            producer = graph.operands[node][0] if graph.operands[node] else -1
            if producer < 0 or graph.nodes[producer].opcode not in law.ELEMENTWISE or \
                    graph.nodes[producer].shape.dims != shape.dims or len(users[producer]) != 1:
                break
            members.append(producer)
            node = producer
    else:
        shape = graph.nodes[anchor].shape
        while len(members) <= EPILOGUE and len(users[node]) == 1:
            user = users[node][0]
            if graph.nodes[user].opcode not in law.ELEMENTWISE or graph.nodes[user].shape.dims != shape.dims:
                break
            members.append(user)
            node = user
    return sorted(members)


def kernel_arrays(graph: InlinedModule, arrays: dict[str, np.ndarray], members: list[int]) -> dict[str, np.ndarray]:
    """node_feat, node_opcode, edge_index of a fused kernel: its inputs as parameters, then its members."""
    inputs = sorted({o for m in members for o in graph.operands[m] if o not in members})
    order = inputs + members
    index = {node: k for k, node in enumerate(order)}
    features = arrays["node_feat"][order].copy()  # [K, 140]
    opcodes = arrays["node_opcode"][order].copy()
    features[:len(inputs), ATTRIBUTE_COLUMNS] = 0.0
    features[:len(inputs), encode.PARAMETER] = np.arange(len(inputs))
    opcodes[:len(inputs)] = PARAMETER_OPCODE
    features[:, encode.IS_ROOT] = 0.0
    features[-1, encode.IS_ROOT] = 1.0
    edges = sorted({(index[m], index[o]) for m in members for o in graph.operands[m]})
    return {"node_feat": features, "node_opcode": opcodes,
            "edge_index": np.array(edges, dtype=np.int64).reshape(-1, 2)}


def tiled_kernel(graph: InlinedModule, members: list[int]) -> law.TiledKernel | None:
    """The law's iteration space of a fused kernel: around its dot, convolution or reduce, or else over its last
    member's output (an element-wise loop); None where it has more than six axes or no array output."""
    nodes = [graph.nodes[m] for m in members]
    vector = sum(4.0 if n.opcode in law.TRANSCENDENTAL else 1.0 for n in nodes if n.opcode in law.ELEMENTWISE)
    anchor = next((m for m in members if graph.nodes[m].opcode in ("dot", "convolution", "reduce")), members[-1])
    node, operands = graph.nodes[anchor], [graph.nodes[o] for o in graph.operands[anchor]]
    if not node.shape.dims or len(node.shape.minor_to_major) != len(node.shape.dims):
        return None  # a scalar or a tuple: nothing to tile
    element = ELEMENT_BYTES.get(node.shape.element_type, 4)
    out_dims, layout = node.shape.dims, node.shape.minor_to_major
    rank = len(out_dims)
    extra_inputs = sum(1 for m in members for o in graph.operands[m] if o not in members and o != anchor
                       and m != anchor)
    if node.opcode == "reduce":
        reduced = tuple(hlo.ints(node.attributes.get("dimensions", "{}")))
        source = operands[0].shape
        kept = tuple(a for a in range(len(source.dims)) if a not in reduced)
        dims, out_axes = source.dims, kept
        lane = kept[layout[0]] if rank else source.minor_to_major[0]
        sublane = kept[layout[1]] if rank > 1 else -1
        inputs = [(tuple(range(len(dims))), element)] * max(1, extra_inputs)
        flops, per_point = 0.0, vector + 1.0
    elif node.opcode == "dot":
        lhs_c = hlo.ints(node.attributes.get("lhs_contracting_dims", "{}"))
        batch = len(hlo.ints(node.attributes.get("lhs_batch_dims", "{}")))
        k = int(np.prod([operands[0].shape.dims[d] for d in lhs_c]))
        lhs_free = len(operands[0].shape.dims) - batch - len(lhs_c)
        dims, out_axes, reduced = (*out_dims, k), tuple(range(rank)), (rank,)
        lane, sublane = layout[0], layout[1] if rank > 1 else -1
        inputs = [((*range(batch + lhs_free), rank), element),
                  ((*range(batch), *range(batch + lhs_free, rank), rank), element)]
        inputs += [(out_axes, element)] * extra_inputs
        flops, per_point = 2.0, vector / max(k, 1)
    elif node.opcode != "convolution":  # element-wise: one point per output element, every input spans it
        dims, out_axes, reduced = out_dims, tuple(range(rank)), ()
        lane, sublane = layout[0], layout[1] if rank > 1 else -1
        inputs = [(out_axes, element)] * max(1, extra_inputs + len(operands))
        flops, per_point = 0.0, vector
    else:
        labels = hlo.conv_dims(node.attributes["dim_labels"])
        kernel = operands[1].shape.dims
        spatial = [a for a in range(rank) if a not in (labels.output_batch, labels.output_feature)]
        dims, out_axes, reduced = (*out_dims, kernel[labels.kernel_input_feature]), tuple(range(rank)), (rank,)
        lane, sublane = layout[0], layout[1] if rank > 1 else -1
        inputs = [((labels.output_batch, *spatial, rank), element), ((labels.output_feature, rank), element)]
        inputs += [(out_axes, element)] * extra_inputs
        window = int(np.prod([kernel[d] for d in labels.kernel_spatial]))
        flops, per_point = 2.0 * window, vector / max(dims[-1], 1)
    if len(dims) > 6 or min(dims, default=0) < 1:
        return None
    return law.TiledKernel(tuple(int(d) for d in dims), out_axes, lane, sublane, reduced, inputs, flops, per_point,
                           element)


def fused_computations(module: Module) -> list[str]:
    """The computations that `fusion` instructions call, in the text's order."""
    called = {callee for c in module.computations.values() for i in c.instructions if i.opcode == "fusion"
              for key, callee in i.callees if key == "calls"}
    return [name for name in module.computations if name in called]


def fusion_kernel(module: Module, name: str) -> tuple[dict[str, np.ndarray], law.TiledKernel | None]:
    """One fused computation as a tile file's graph (node_feat, node_opcode, edge_index: its parameters, its
    instructions and those of the computations it calls, encoded by the official rules as a module of its own),
    and its iteration space."""
    needed, frontier = {name}, [name]
    while frontier:
        frontier = [callee for c in frontier for i in module.computations[c].instructions
                    for _, callee in i.callees if callee not in needed]
        needed.update(frontier)
    computations = {c: module.computations[c] for c in module.computations if c in needed}
    kernel = Module(f"{module.name}/{name}", module.path, computations, module.computations[name])
    graph = encode.flatten(kernel)
    arrays = encode.arrays(kernel, graph)
    own = {node.name for node in module.computations[name].instructions}
    members = [k for k, node in enumerate(graph.nodes) if node.name in own and node.opcode != "parameter"
               and graph.names[k] == node.name]
    return ({key: arrays[key] for key in ("node_feat", "node_opcode", "edge_index")},
            tiled_kernel(graph, members) if members else None)
