"""Config rankers: encode the graph once, join each config to its configurable nodes, compare configs jointly.

Each ranker is chosen in the YAML as `model.ranker` (`class_path` + `init_args`) and owns its arguments;
`node_feat_dim` and `config_width` come from the data module.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ..constants import LANES, SUBLANES
from ..data.batch import Batch
from ..data.preprocess import OPERAND_COLUMNS
from ..errors import SettingsError
from ..format import LAYOUT_GROUP, LAYOUT_SYMBOLS
from ..physics.propagation import WORK_FEATURES
from .layers import (
    ConfigLinks,
    CrossConfigAttention,
    GraphEncoder,
    LinkBlock,
    Readout,
    in_chunks,
    layout_symbols,
    log_sum_exp,
    mlp,
    per_config,
    pool,
    valid_configs,
)
from .segments import segmented_scores
from .spec import Remembered


class Ranker(Remembered):
    """Base of every ranker: a batch in, scores [G, C] out, lower = predicted faster."""


class LayoutRanker(Ranker):
    """Layout configs: the graph is encoded once, [N, d]; each config's layouts join the states of the configurable
    nodes only, [M, C, w]; link blocks pass config-aware messages through the nodes those touch, with
    cross-config attention per node after each (`cross_attention`); the per-graph pool of the configurable
    nodes (per config) and of the encoding (shared) feed a readout that scores each config, its configs
    attending to each other (`readout_attention`); `config_hidden` sets the width w of the config-aware states
    (default `hidden`); `physical_layout` adds what each config's output layouts mean in memory; `config_work`
    adds to the readout what each config makes the whole program do (the batch's `config_work`, by the physics
    prior's walk: bytes each kind of pass moves, the dots' work); `operand_layouts` adds what each config's input and
    kernel layouts mean in memory for the operands they lay out, and where each block's layout puts its key dims (a
    dot's contracted dims, a convolution's feature dims: the batch's `config_operands`); `literal_tiles` adds the
    tiles of all three blocks over each order's two most-minor dims whatever their size (where a size-1 dim sits);
    `runtime_sum` > 0 adds to each config's score the log of a sum over the configurable nodes of exp(a learned linear
    cost of each one's config-aware state, times that gain): runtime as a sum of per-op costs, in which the costliest
    ops dominate. The config-dependent compute scales with the configurable nodes, not the graph, and with w^2.
    Without gradients (validation, ranking) the config-aware layers run `inference_rows` (node, config)
    rows at a time: link blocks a slice of the configs, attention a slice of the nodes; the same scores, in
    bounded memory. Batches over the data's segment budget train and predict segment by segment (see
    models/segments.py)."""

    def __init__(
        self,
        node_feat_dim: int,
        config_width: int,
        hidden: int = 128,
        opcode_dim: int = 32,
        graph_layers: int = 2,
        config_layers: int = 2,
        cross_attention: bool = True,
        readout_attention: bool = True,
        heads: int = 4,
        temperature: float = 0.5,
        edge_direction: str = "both",
        dropout: float = 0.0,
        inference_rows: int = 4096,
        config_hidden: int | None = 64,
        physical_layout: bool = False,
        config_work: bool = False,
        operand_layouts: bool = False,
        literal_tiles: bool = False,
        runtime_sum: float = 0.0,
    ) -> None:
        super().__init__()
        self.inference_rows = inference_rows
        self.work_features = WORK_FEATURES if config_work else 0
        width = config_hidden or hidden
        self.encoder = GraphEncoder(node_feat_dim, hidden, opcode_dim, graph_layers, edge_direction, dropout)
        # the configurable nodes' encodings enter the config-aware width
        self.narrow = nn.Identity() if width == hidden else nn.Linear(hidden, width, bias=False)
        self.config_embed = mlp(config_width, width, dropout)
        self.physics = zero_linear(PHYSICAL_FEATURES, width) if physical_layout else None
        self.operands = zero_linear(OPERAND_FEATURES, width) if operand_layouts else None
        self.literal = zero_linear(3 * LITERAL_FEATURES, width) if literal_tiles else None
        self.blocks = nn.ModuleList(LinkBlock(width, dropout, hidden) for _ in range(config_layers))
        self.cross = nn.ModuleList(CrossConfigAttention(width, temperature, dropout) for _ in range(config_layers)) \
            if cross_attention else None
        self.readout = Readout(2 * width + 2 * hidden + self.work_features, hidden, readout_attention, heads, dropout)
        self.cost = zero_linear(width, 1) if runtime_sum else None  # starts at log(M) in every config: no effect
        self.cost_gain = runtime_sum  # the costs' scale: a multiple of the rate at which they move

    def op_costs(self, z: torch.Tensor) -> torch.Tensor:
        """[M, C] each configurable node's log cost in each config, from its config-aware state z [M, C, w]."""
        return self.cost_gain * self.cost(z).squeeze(-1)

    def read(self, features: torch.Tensor, batch: Batch, costs: torch.Tensor | None = None) -> torch.Tensor:
        """Scores [G, C] from the pooled features [G, C, 2w + 2d], with `config_work` + the batch's work features,
        plus the log of the summed op costs [G, C] where `runtime_sum` makes them."""
        mask = valid_configs(batch)  # [G, C]
        if self.work_features:
            found = 0 if batch.config_work is None else batch.config_work.size(-1)
            if found != self.work_features:
                raise SettingsError(f"model.ranker.init_args.config_work=true needs data.config_work=true: the batch "
                                    f"holds {found} work features a config, expected {self.work_features}")
            work = batch.config_work.to(features.dtype) * mask[..., None]  # [G, C, K], padding zeroed
            features = torch.cat([features, work], -1)  # [G, C, 2w + 2d + K]
        scores = self.readout(features, mask)  # [G, C]
        return scores if costs is None else scores + costs

    def configure(self, h_nodes: torch.Tensor, values: torch.Tensor, terms: torch.Tensor | None,
                  index: torch.Tensor | None) -> torch.Tensor:
        """z [M, C, w]: each configurable node's encoding h_nodes [M, w] plus the embedding of its layouts in each
        config, values [M, C, 18] (layout symbols 0..6), plus what its layouts mean in memory (`memory_terms`: its
        terms [M, C, w], or its three blocks' rows [M, C, 3] of their table; None where the settings add none)."""
        symbols = values + LAYOUT_SYMBOLS * torch.arange(values.size(-1), device=values.device)  # [M, C, 18]
        layouts = self.config_embed[1:](one_hot_linear(self.config_embed[0], symbols.flatten(0, 1)))  # [M*C, w]
        z = per_config(h_nodes) + layouts.view(*values.shape[:2], h_nodes.size(-1))  # [M, C, w]
        if terms is None:
            return z
        if index is not None:
            terms = F.embedding_bag(index.flatten(0, 1), terms, mode="sum").view_as(z)  # [M, C, w]
        return z + terms + sum(linear.bias for linear in self.memory_linears())

    def memory_linears(self) -> list[nn.Linear]:
        """The linear maps of what layouts mean in memory that the settings turn on."""
        return [linear for linear in (self.physics, self.operands, self.literal) if linear is not None]

    def memory_terms(self, values: torch.Tensor, dims: torch.Tensor | None,
                     operands: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """What each config's layouts, values [M, C, 18] (symbols 0..6), mean in memory for the nodes' output dims
        [M, 6] and config_operands [M, 30], through the ranker's linear maps (`physical_layout`: the output layout's
        tiles; `operand_layouts`: the `operand_layout_features`; `literal_tiles`: the `literal_tile_features`),
        biases left out. With gradients (a training step's few configs), per (node, config): ([M, C, w], None).
        Without (every config of a file), each of those features reads one block and is zero where the block is
        unset, so a config's are the sum of its blocks'; a node's configs repeat a few layouts per block (a
        permutation of its rank), so each is computed once: a table [U, w] with a row per distinct (node, block,
        layout), and each node's three blocks' rows in each config [M, C, 3]. (None, None) with none on."""
        if not self.memory_linears():
            return None, None
        if torch.is_grad_enabled():
            return self.projected(values - 1, dims, operands), None
        digits = LAYOUT_SYMBOLS ** torch.arange(LAYOUT_GROUP - 1, -1, -1, device=values.device)  # [6]
        # each block read in base 7, as a float product (exact: the keys are below 2^24) 4x faster than in integers
        keys = (values.unflatten(-1, (3, LAYOUT_GROUP)).float() @ digits.float()).long()  # [M, C, 3]
        owner = torch.arange(3 * values.size(0), device=values.device).view(-1, 1, 3)  # [M, 1, 3] node * 3 + block
        distinct, index = torch.unique(owner * BLOCK_KEYS + keys, return_inverse=True)  # [U], [M, C, 3]
        node, block = distinct // (3 * BLOCK_KEYS), distinct // BLOCK_KEYS % 3  # [U] each
        order = distinct.new_full((distinct.numel(), 3, LAYOUT_GROUP), -1)
        order[torch.arange(distinct.numel()), block] = distinct[:, None] // digits % LAYOUT_SYMBOLS - 1
        order = order.flatten(1)[:, None]  # [U, 1, 18]: values -1..5, only its own block set
        dims, operands = (None if x is None else x[node] for x in (dims, operands))  # [U, 6], [U, 30]
        return self.projected(order, dims, operands)[:, 0], index  # [U, w], [M, C, 3]

    def projected(self, order: torch.Tensor, dims: torch.Tensor | None, operands: torch.Tensor | None) -> torch.Tensor:
        """[R, C, w] the memory features of layouts order [R, C, 18] (values -1..5) of R nodes with output dims [R, 6]
        and config_operands [R, 30], through the linear maps the settings turn on, without their biases."""
        terms = 0
        if self.physics is not None:
            terms = terms + F.linear(physical_layout_features(order[..., :LAYOUT_GROUP], dims), self.physics.weight)
        if self.operands is not None:
            terms = terms + F.linear(operand_layout_features(order, operands), self.operands.weight)
        if self.literal is not None:
            terms = terms + F.linear(literal_tile_features(order, dims, operands), self.literal.weight)
        return terms

    @staticmethod
    def config_operands(batch: Batch) -> torch.Tensor:
        """The batch's config_operands [G, K, 30]; a SettingsError where the data did not make them."""
        found = 0 if batch.config_operands is None else batch.config_operands.size(-1)
        if found != OPERAND_COLUMNS:
            raise SettingsError(f"model.ranker.init_args.operand_layouts=true needs data.operand_layouts=true: the "
                                f"batch holds {found} operand columns a configurable node, expected {OPERAND_COLUMNS}")
        return batch.config_operands

    def embed(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, ConfigLinks]:
        """The encoder's h [N, d], the configurable nodes' config-aware z [M, C, w], and their links."""
        links = ConfigLinks.of(batch)
        h = self.encoder(batch)  # [N, d]
        node_mask = valid_configs(batch)[links.graph]  # [M, C]
        configs_per_pass, nodes_per_pass = (rows_per_slice(self.inference_rows, n) for n in node_mask.shape)
        values = layout_symbols(batch.config_feat[links.graph, :, links.slot])  # [M, C, 18] in 0..6
        h_nodes = self.narrow(h.index_select(0, links.nodes))  # [M, w]
        tiled = self.physics is not None or self.literal is not None
        dims = batch.config_dims[links.graph, links.slot] if tiled else None  # [M, 6]
        operands = self.config_operands(batch)[links.graph, links.slot] if self.operands is not None else None
        terms, index = self.memory_terms(values, dims, operands)  # [M, C, w] and None, or [U, w] and [M, C, 3]
        z = in_chunks(lambda part, rows: self.configure(h_nodes, part, terms, rows), configs_per_pass, 1, values, index)
        h_touched = h.index_select(0, links.touched)  # [T, d]
        for i, block in enumerate(self.blocks):
            own = block.context(h_touched)  # [T, w] once for every slice of configs
            z = in_chunks(lambda part: block(part, own, links), configs_per_pass, 1, z)
            if self.cross is not None:
                z = in_chunks(self.cross[i], nodes_per_pass, 0, z, node_mask)
        return h, z, links

    def forward(self, batch: Batch) -> torch.Tensor:
        if batch.node_segment is not None:
            return segmented_scores(self, batch)
        graphs, configs = batch.config_mask.shape
        h, z, links = self.embed(batch)
        graph_part = per_config(pool(h, batch.node_graph, graphs)).expand(-1, configs, -1)  # [G, C, 2d]
        features = torch.cat([pool(z, links.graph, graphs), graph_part], -1)  # [G, C, 2w + 2d]
        costs = None if self.cost is None else log_sum_exp(self.op_costs(z), links.graph, graphs)  # [G, C]
        return self.read(features, batch, costs)  # [G, C]


def zero_linear(features: int, width: int) -> nn.Linear:
    """A linear map of extra features that starts at zero: the model starts as without them and learns how much
    they matter."""
    linear = nn.Linear(features, width)
    nn.init.zeros_(linear.weight)
    nn.init.zeros_(linear.bias)
    return linear


def one_hot_linear(linear: nn.Linear, symbols: torch.Tensor) -> torch.Tensor:
    """linear(one-hot of symbols [R, k] over its inputs) -> [R, out], each row's k symbols distinct. Without
    gradients, as a sum of k of its columns (3.7x faster than the product); with them, as the product with the
    one-hot matrix (embedding_bag's backward sorts the symbols: 2.6x slower forward and backward)."""
    if not torch.is_grad_enabled():
        return F.embedding_bag(symbols, linear.weight.t().contiguous(), mode="sum") + linear.bias
    one_hot = symbols.new_zeros(symbols.size(0), linear.in_features, dtype=linear.weight.dtype)
    return linear(one_hot.scatter_(1, symbols, 1.0))  # [R, out]


PHYSICAL_FEATURES = 6
BLOCK_KEYS = LAYOUT_SYMBOLS ** LAYOUT_GROUP  # distinct base-7 keys of a layout block


def physical_layout_features(order: torch.Tensor, dims: torch.Tensor, true_rank: bool = True) -> torch.Tensor:
    """[M, C, 6] what an output layout means in memory, from order [M, C, 6] (its minor-to-major dimensions, -1
    beyond the rank; all -1: left to the compiler, unknown here) and dims [M, 6] (the output's sizes): log2 of the
    minor and second-minor sizes, whether they fill the 128 lanes and 8 sublanes of a tile, the log of the bytes
    stored in 8 x 128 tiles over the real ones, and whether the layout is set; zeros where it is not. Size-1 dims
    take no room wherever the order puts them (XLA's true rank counts the dims larger than 1), so the tiles lie
    over the two most-minor dims larger than 1; without `true_rank`, over the order's two most-minor dims whatever
    their size (a size-1 dim there padded to 128 lanes or 8 sublanes)."""
    ranked = order >= 0  # [M, C, 6]
    per_node = dims.clamp(min=1)[:, None].expand(-1, order.size(1), -1)  # [M, C, 6]
    sizes = torch.gather(per_node, 2, order.clamp(min=0)).masked_fill(~ranked, 1.0)  # [M, C, 6] minor first
    if true_rank:
        sizes = torch.gather(sizes, 2, torch.sort((sizes <= 1).to(torch.uint8), dim=-1, stable=True).indices)
    minor, second = sizes[..., 0], sizes[..., 1]  # [M, C] each
    padded = torch.ceil(minor / LANES) * LANES * torch.ceil(second / SUBLANES) * SUBLANES
    is_set = ranked[..., 0].to(sizes.dtype)
    features = torch.stack([minor.log2(), second.log2(), (minor % LANES == 0).to(sizes.dtype),
                            (second % SUBLANES == 0).to(sizes.dtype), (padded / (minor * second)).log(), is_set], -1)
    return features * is_set[..., None]  # [M, C, 6]


OPERAND_FEATURES = 2 * PHYSICAL_FEATURES + 4 * 3


def operand_layout_features(order: torch.Tensor, operands: torch.Tensor) -> torch.Tensor:
    """[M, C, 24] from a config's three blocks, order [M, C, 18] (minor-to-major dims, -1 beyond the rank or where
    a block is left to the compiler), and each node's config_operands [M, 30]: the `physical_layout_features` of
    the input and kernel blocks for the operands they lay out (zeros where the walk found none); then whether a
    block's layout puts a key dim most-minor, second-minor (the minor one not key) or neither, for a convolution's
    output, input and kernel blocks and a dot's input block apart (an op's operands meet its compute units in their
    own ways); zeros where the block sets no layout or has no key dims."""
    blocks = order.unflatten(-1, (3, LAYOUT_GROUP))  # [M, C, 3, 6]
    physical = block_tiles(blocks[..., 1:, :], operand_sizes(operands), true_rank=True)  # [M, C, 6] each
    keys = operands[:, 2 * LAYOUT_GROUP:].unflatten(-1, (3, LAYOUT_GROUP))  # [M, 3, 6]
    is_key = torch.gather(keys[:, None].expand(-1, order.size(1), -1, -1), 3, blocks.clamp(min=0))  # [M, C, 3, 6]
    is_key = is_key * (blocks >= 0)
    minor, second = is_key[..., 0], is_key[..., 1] * (1 - is_key[..., 0])  # [M, C, 3] each
    keyed = (blocks[..., 0] >= 0) & (keys.sum(-1) > 0)[:, None]  # [M, C, 3]: a set block with key dims
    where = torch.stack([minor, second, keyed * (1 - minor) * (1 - second)], -1)  # [M, C, 3 blocks, 3]
    convolution = (keys[:, 2].sum(-1) > 0).to(operands.dtype)[:, None, None]  # [M, 1, 1]: it has kernel key dims
    dot_input = where[:, :, 1] * (1 - convolution)  # [M, C, 3]
    return torch.cat([*physical, (where * convolution[..., None]).flatten(-2), dot_input], -1)  # [M, C, 24]


LITERAL_FEATURES = PHYSICAL_FEATURES - 1


def literal_tile_features(order: torch.Tensor, dims: torch.Tensor, operands: torch.Tensor | None) -> torch.Tensor:
    """[M, C, 15] the `physical_layout_features` (but whether set) of a config's output, input and kernel blocks,
    order [M, C, 18], with the tiles over each order's two most-minor dims whatever their size: where a size-1 dim
    sits then counts. The output's sizes are dims [M, 6], the operands' the first 12 config_operands [M, 30] (zeros
    where the walk found no operand, or without operand_layouts)."""
    inputs = dims.new_zeros(dims.size(0), 2, LAYOUT_GROUP) if operands is None else operand_sizes(operands)
    sizes = torch.cat([dims[:, None], inputs], 1)  # [M, 3, 6]
    tiles = block_tiles(order.unflatten(-1, (3, LAYOUT_GROUP)), sizes, true_rank=False)  # [M, C, 6] each
    return torch.cat([t[..., :LITERAL_FEATURES] for t in tiles], -1)  # [M, C, 15]


def operand_sizes(operands: torch.Tensor) -> torch.Tensor:
    """[M, 2, 6] the sizes of the operands a node's input and kernel blocks lay out, from config_operands [M, 30]."""
    return operands[:, :2 * LAYOUT_GROUP].unflatten(-1, (2, LAYOUT_GROUP))


def block_tiles(blocks: torch.Tensor, sizes: torch.Tensor, true_rank: bool) -> list[torch.Tensor]:
    """The `physical_layout_features` [M, C, 6] of each of a config's blocks [M, C, B, 6] over its tensor's sizes
    [M, B, 6]; zeros where the sizes are unknown (all 0)."""
    known = (sizes.sum(-1) > 0).to(sizes.dtype)  # [M, B]
    return [physical_layout_features(blocks[..., b, :], sizes[:, b], true_rank) * known[:, None, b, None]
            for b in range(blocks.size(2))]


def rows_per_slice(rows: int, across: int) -> int:
    """How many slices of `across` rows each fit in a budget of `rows` (at least one; 0: no budget)."""
    return max(rows // max(across, 1), 1) if rows > 0 else 0


class TileRanker(Ranker):
    """Tile configs: the small kernel graph is encoded once and pooled; each global tile config, embedded at
    `config_hidden` (default `hidden`), joins it late; a readout compares the configs of a kernel."""

    def __init__(
        self,
        node_feat_dim: int,
        config_width: int,
        hidden: int = 128,
        opcode_dim: int = 32,
        graph_layers: int = 2,
        cross_attention: bool = True,
        heads: int = 4,
        edge_direction: str = "forward",
        dropout: float = 0.0,
        config_hidden: int | None = None,
    ) -> None:
        super().__init__()
        width = config_hidden or hidden
        self.encoder = GraphEncoder(node_feat_dim, hidden, opcode_dim, graph_layers, edge_direction, dropout)
        self.config_mlp = mlp(config_width, width, dropout)
        self.readout = Readout(2 * hidden + width, hidden, cross_attention, heads, dropout)

    def forward(self, batch: Batch) -> torch.Tensor:
        mask = valid_configs(batch)  # [G, C]
        graphs, configs = mask.shape
        kernel = pool(self.encoder(batch), batch.node_graph, graphs)  # [G, 2d]
        config = self.config_mlp(batch.config_feat)  # [G, C, w]
        joined = torch.cat([kernel[:, None].expand(-1, configs, -1), config], -1)  # [G, C, 2d + w]
        return self.readout(joined, mask)  # [G, C]
