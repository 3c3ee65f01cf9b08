"""Synthetic computation graphs: a builder of XLA-like nodes, convnet- and transformer-like models, their
node features and edges in the official format."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..format import (
    DIMENSIONS,
    IS_ROOT,
    LAYOUT_MINOR_TO_MAJOR,
    NODE_FEAT_DIM,
    SHAPE_DIMS,
    SHAPE_PRODUCT,
    SHAPE_SUM,
    SLICE,
    TUPLE_SIZE,
    WINDOW,
)
from .ops import (
    CONV_DIMS,
    DTYPE_BYTES,
    DTYPE_COLUMN,
    PARAMETER_NUMBER,
    TUPLE_COLUMN,
    WINDOW_REVERSAL,
    Op,
)

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
