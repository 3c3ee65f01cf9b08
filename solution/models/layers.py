"""Building blocks of the rankers: SAGE message passing, cross-config attention, the graph encoder, the links of the
configurable nodes and their message passing, pooling, readout."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from ..constants import NUM_OPCODES, PAD
from ..data.batch import Batch
from ..errors import SettingsError
from .scatter import scatter_max, scatter_mean, scatter_sum

# Shapes: N nodes of G graphs (concatenated), E edges, C configs per graph (padded), K configurable-node
# slots per graph (padded), d = hidden. Node-major throughout: a config-aware node tensor is [N, C, d], so
# gathers and scatters run along dim 0 over contiguous C*d rows, a per-graph pool lands directly on
# [G, C, d], and the same block code serves the config-independent [N, d].

EDGE_DIRECTIONS = ("forward", "reverse", "both")


def mlp(in_dim: int, out_dim: int, dropout: float = 0.0) -> nn.Sequential:
    return nn.Sequential(nn.Linear(in_dim, out_dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(out_dim, out_dim))


def layout_symbols(values: torch.Tensor) -> torch.Tensor:
    """Layout config values (-1 = the compiler's choice, 0..5 a dimension) as symbols 0..6, long: the one decoding
    every layout ranker embeds or one-hots (width LAYOUT_SYMBOLS per value)."""
    return (values - PAD).round().long()


def valid_configs(batch: Batch) -> torch.Tensor:
    """[G, C] config mask; a graph without any valid config keeps all of its slots, so that no softmax
    runs over an empty set (its scores are masked downstream anyway)."""
    mask = batch.config_mask
    return mask | ~mask.any(1, keepdim=True)


class SAGEBlock(nn.Module):
    """GraphSAGE with mean aggregation, residual and LayerNorm, on node-major [N, d] or [N, C, d] tensors:
    one adjacency shared by every config."""

    def __init__(self, dim: int, edge_direction: str = "forward", dropout: float = 0.0) -> None:
        super().__init__()
        if edge_direction not in EDGE_DIRECTIONS:
            raise SettingsError(f"edge_direction={edge_direction!r}; expected one of {', '.join(EDGE_DIRECTIONS)}")
        # (source, target) rows of edge_index per message direction; row 0 = producer, row 1 = consumer
        self.routes = {"forward": [(0, 1)], "reverse": [(1, 0)], "both": [(0, 1), (1, 0)]}[edge_direction]
        # Linear(concat(x, messages...)) as a sum of Linears: no [N, C, (1 + routes) d] concat copy
        self.linear = nn.Linear(dim, dim)
        self.message_linears = nn.ModuleList(nn.Linear(dim, dim, bias=False) for _ in self.routes)
        self.dropout = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        out = self.linear(x)  # [N, (C,) d]
        for (source, target), linear in zip(self.routes, self.message_linears):
            # gather + scatter: the messages are a transient [E, C, d] tensor (freed after the scatter; its
            # gradient is again [E, C, d] in backward), the price of one adjacency shared over C
            messages = x.index_select(0, edge_index[source])  # [E, (C,) d]
            out = out + linear(scatter_mean(messages, edge_index[target], 0, x.size(0)))
        return self.norm(x + self.dropout(F.gelu(out)))  # [N, (C,) d]


class CrossConfigAttention(nn.Module):
    """1st-place cross-config attention: per node and channel, a softmax over the graph's valid configs of
    z / T (T learnable) weights z; z is refined from concat(z, a * z)."""

    def __init__(self, dim: int, temperature: float = 0.5, dropout: float = 0.0) -> None:
        super().__init__()
        self.log_temperature = nn.Parameter(torch.tensor(float(temperature)).log())
        # Linear(concat(z, a * z)) as two Linears: no [N, C, 2d] concat copy
        self.linear = nn.Linear(dim, dim)
        self.attended_linear = nn.Linear(dim, dim, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(dim)

    def forward(self, z: torch.Tensor, node_mask: torch.Tensor) -> torch.Tensor:
        """z [N, C, d]; node_mask [N, C] marks each node's valid configs."""
        logits = (z * (-self.log_temperature).exp()).masked_fill(~node_mask[..., None], float("-inf"))  # [N, C, d]
        # weights times the number of valid configs (mean 1), so the attended term keeps its size whatever
        # the number of configs in the batch; multiplied last, so that autograd saves one tensor fewer
        attended = logits.softmax(1) * z * node_mask.sum(1)[:, None, None]  # [N, C, d]
        return self.norm(z + self.dropout(self.linear(z) + self.attended_linear(attended)))  # [N, C, d]


class GraphEncoder(nn.Module):
    """Opcode embedding + node features -> MLP -> `layers` SAGE blocks: the config-independent pass."""

    def __init__(self, node_feat_dim: int, hidden: int, opcode_dim: int, layers: int, edge_direction: str,
                 dropout: float) -> None:
        super().__init__()
        self.opcode = nn.Embedding(NUM_OPCODES, opcode_dim)
        self.input = mlp(opcode_dim + node_feat_dim, hidden, dropout)
        self.blocks = nn.ModuleList(SAGEBlock(hidden, edge_direction, dropout) for _ in range(layers))

    def forward(self, batch: Batch) -> torch.Tensor:
        """[N, d] node states, the same for every config."""
        x = self.input(torch.cat([self.opcode(batch.node_opcode), batch.node_feat], -1))  # [N, d]
        for block in self.blocks:
            x = block(x, batch.edge_index)
        return x


@dataclass
class ConfigLinks:
    """Where a batch's config-aware state lives: its M configurable nodes, and the T nodes they touch (themselves,
    their producers and their consumers) along three routes, with the routes' mean aggregations as sparse
    matrices (one product moves every route's messages at once, without an [edges, C, d] copy)."""

    ROUTES = 3

    nodes: torch.Tensor  # [M] batch node ids of the configurable nodes, graph by graph in slot order
    graph: torch.Tensor  # [M] each one's graph row
    slot: torch.Tensor  # [M] each one's column in config_node / config_feat
    touched: torch.Tensor  # [T] batch node ids of the touched nodes
    routes: tuple[tuple[torch.Tensor, torch.Tensor], ...]  # (configurable index [R], touched index [R]) per route
    spread: torch.Tensor  # [T, 3M] sparse: per route, the mean over the configurable nodes reaching a touched node
    collect: torch.Tensor  # [3M, T] sparse: per route, the mean over the touched nodes a configurable node reaches

    @classmethod
    def of(cls, batch: Batch) -> ConfigLinks:
        graph, slot = (batch.config_node != PAD).nonzero(as_tuple=True)  # [M] each
        nodes = batch.config_node[graph, slot]  # [M]
        configurable = index_of(nodes, batch.node_opcode.size(0))  # [N], -1 elsewhere
        producer, consumer = batch.edge_index
        out = configurable[producer] >= 0  # [E] edges leaving a configurable node
        into = configurable[consumer] >= 0  # [E] edges entering one
        touched = torch.zeros_like(configurable, dtype=torch.bool)
        touched[nodes] = True
        touched[consumer[out]] = True
        touched[producer[into]] = True
        touched = touched.nonzero().flatten()  # [T]
        position = index_of(touched, configurable.size(0))  # [N]
        routes = ((configurable[producer[out]], position[consumer[out]]),  # the touched node reads k's output
                  (configurable[consumer[into]], position[producer[into]]),  # it produces one of k's operands
                  (torch.arange(nodes.numel(), device=nodes.device), position[nodes]))  # it is k
        k = torch.cat([r * nodes.numel() + ks for r, (ks, _) in enumerate(routes)])  # [R] rows of the [3M] stack
        t = torch.cat([ts for _, ts in routes])  # [R]
        shape = (touched.numel(), cls.ROUTES * nodes.numel())
        return cls(nodes, graph, slot, touched, routes, mean_matrix(t, k, shape), mean_matrix(k, t, shape[::-1]))


def index_of(ids: torch.Tensor, size: int) -> torch.Tensor:
    """[size] position of each id in `ids`, -1 for the others."""
    position = torch.full((size,), PAD, dtype=torch.long, device=ids.device)
    position[ids] = torch.arange(ids.numel(), device=ids.device)
    return position


def mean_matrix(rows: torch.Tensor, cols: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """Sparse [rows, cols] matrix whose product with x [cols, ...] averages, for each row, the x of its columns."""
    degree = torch.bincount(rows, minlength=shape[0]).clamp(min=1)  # [rows]
    values = 1.0 / degree[rows].float()
    return torch.sparse_coo_tensor(torch.stack([rows, cols]), values, shape, check_invariants=False).coalesce()


def sparse_mean(matrix: torch.Tensor, x: torch.Tensor, onto: torch.Tensor | None = None) -> torch.Tensor:
    """matrix @ x with the sparse matrix in x's dtype (bfloat16 under autocast); with `onto`, added onto it in place
    instead of into a new zeroed tensor."""
    matrix = matrix.to(x.dtype)
    return torch.sparse.mm(matrix, x) if onto is None else onto.addmm_(matrix, x)


class LinkBlock(nn.Module):
    """Config-aware message passing that keeps its d x d products on the configurable nodes: each configurable
    node's state is sent (one d x d map per route) to the nodes it touches; each touched node joins the means of
    what reaches it with its own config-independent state (where producer and consumer layouts meet, and a
    mismatch costs a copy), and sends the result back along the same routes. Two hops per block; the [T, C, d]
    compute is one sparse product each way and one GELU. The encoder's states may be wider (`context_dim`) than the
    config-aware ones."""

    def __init__(self, dim: int, dropout: float = 0.0, context_dim: int | None = None) -> None:
        super().__init__()
        routes = ConfigLinks.ROUTES
        self.send = nn.Linear(dim, routes * dim, bias=False)
        self.context = nn.Linear(context_dim or dim, dim)
        self.receive = nn.Linear(routes * dim, dim, bias=False)
        self.linear = nn.Linear(dim, dim)
        self.dropout = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(dim)

    def forward(self, z: torch.Tensor, own: torch.Tensor, links: ConfigLinks) -> torch.Tensor:
        """z [M, C, d] configurable-node states; own [T, d] the touched nodes' own term, `self.context` of their
        encoder states (config-independent: computed once for every slice of configs)."""
        z = z.contiguous()  # a slice of the configs is a strided view: copied once here, not in every product
        (m, c, d), routes = z.shape, ConfigLinks.ROUTES
        met = self.meet(z, own, links)  # [T, C, d]
        back = sparse_mean(links.collect, met.view(-1, c * d)).view(routes, m * c, d)  # [3, M*C, d]
        receive = self.receive.weight.view(d, routes, d).permute(1, 2, 0)  # [3, d_in, d_out]
        out = self.linear(z).view(m * c, d)
        # accumulated route by route: no [3, M*C, d] product beside `back`; unbound, so that the backward stacks the
        # routes' gradients once instead of zero-filling a [3, M*C, d] per route
        for part, weight in zip(back.unbind(0), receive.unbind(0)):
            out = torch.addmm(out, part, weight)
        return self.norm(z + self.dropout(F.gelu(out.view(m, c, d))))

    def meet(self, z: torch.Tensor, own: torch.Tensor, links: ConfigLinks) -> torch.Tensor:
        """[T, C, d]: at each touched node, the means of what its configurable nodes send along each route, joined
        with its own term [T, d]."""
        (m, c, d), routes, t = z.shape, ConfigLinks.ROUTES, own.size(0)
        # the sends are a temporary, freed before the [T, C, d] tensors exist (the sparse product's backward does
        # not keep them)
        sent = self.sent(z).view(routes * m, c * d)  # [3M, C*d]
        # one [T, C*d] buffer: the own term, the product accumulated onto it in place, then GELU: no zeroed product
        # and no sum. A fresh tensor, never a view of `own` (which the next slice of configs reuses) nor one whose
        # in-place update the backward would copy
        met = sparse_mean(links.spread, sent, onto=own.repeat(1, c)).view(t, c, d)  # [T, C, d]
        return F.gelu(met) if torch.is_grad_enabled() else torch.ops.aten.gelu_(met)

    def sent(self, z: torch.Tensor) -> torch.Tensor:
        """[3, M*C, d]: what each configurable node sends along each route; route-major, so that the [3M, C*d]
        stack the sparse product takes is a view."""
        m, c, d = z.shape
        flat, sends = z.reshape(m * c, d), self.send.weight.view(-1, d, d).unbind(0)  # 3 x [d_out, d_in]
        # one product per route, stacked: a broadcast matmul would copy z once per route, and again in its backward
        return torch.stack([F.linear(flat, send) for send in sends])  # [3, M*C, d]


def in_chunks(fn: Callable[..., torch.Tensor], size: int, dim: int, *xs: torch.Tensor | None) -> torch.Tensor:
    """fn(*xs), computed `size` slices of `dim` at a time when no gradient is taken (fn must act on each slice
    alone; a None among xs passes as it is): the same result, with its intermediates bounded by the slice. With
    gradients (or size 0), one call."""
    if size <= 0 or torch.is_grad_enabled() or xs[0].size(dim) <= size:
        return fn(*xs)
    out = None
    for start in range(0, xs[0].size(dim), size):
        part = fn(*(None if x is None else x.narrow(dim, start, min(size, x.size(dim) - start)) for x in xs))
        if out is None:  # written slice by slice: no list of parts beside the result
            out = part.new_empty(part.shape[:dim] + (xs[0].size(dim),) + part.shape[dim + 1:])
        out.narrow(dim, start, part.size(dim)).copy_(part)
    return out


def per_config(x: torch.Tensor) -> torch.Tensor:
    """A config-independent [I, d] as [I, 1, d] (broadcasts over configs); [I, C, d] unchanged."""
    return x.unsqueeze(1) if x.dim() == 2 else x


def pool(x: torch.Tensor, node_graph: torch.Tensor, graphs: int) -> torch.Tensor:
    """Per-graph mean and max of node-major x [N, ..., d] -> [G, ..., 2d]."""
    return torch.cat([scatter_mean(x, node_graph, 0, graphs), scatter_max(x, node_graph, 0, graphs)], -1)


def log_sum_exp(x: torch.Tensor, node_graph: torch.Tensor, graphs: int) -> torch.Tensor:
    """Per-graph log of the sum of exp(x) over node-major x [N, ...] -> [G, ...]; -inf for a graph without nodes."""
    top = scatter_max(x.detach(), node_graph, 0, graphs)  # [G, ...]: the sum's scale, exact for any shift
    total = scatter_sum((x - top[node_graph]).exp(), node_graph, 0, graphs)  # [G, ...]
    return top + total.log()


class Readout(nn.Module):
    """Per-config features [G, C, in] -> MLP -> masked self-attention over the graph's configs -> score."""

    def __init__(self, in_dim: int, hidden: int, attention: bool, heads: int, dropout: float) -> None:
        super().__init__()
        self.mlp = mlp(in_dim, hidden, dropout)
        self.attention = nn.MultiheadAttention(hidden, heads, dropout=dropout, batch_first=True) \
            if attention else None
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x [G, C, in], mask [G, C] -> scores [G, C], lower = faster. In float32 also under a lower-precision
        autocast: bfloat16's 8-bit mantissa would tie most of a graph's scores (tied configs lose their order)."""
        with torch.autocast(x.device.type, enabled=False):
            x = self.mlp(x.float())  # [G, C, d]
            if self.attention is not None:
                x = x + self.attention(x, x, x, key_padding_mask=~mask, need_weights=False)[0]
            return self.head(self.norm(x)).squeeze(-1)  # [G, C]
