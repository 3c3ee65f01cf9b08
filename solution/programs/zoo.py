"""A zoo of real JAX programs (families of models, inference and training steps) lowered to HLO text."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .blocks import (  # jax through blocks: the one module that imports it
    Built,
    Params,
    batch_norm,
    block_params,
    conv,
    cross_entropy,
    dense,
    dense_params,
    image_classifier,
    jax,
    jnp,
    lax,
    layer_norm,
    max_pool,
    program,
    spec,
    transformer_block,
)


@dataclass(frozen=True)
class LoweredProgram:
    """One zoo program: its family (the unit that evaluation holds out), a variant label and its HLO text."""

    family: str  # no '_' and no '.': the first part of every file stem made from it
    variant: str  # e.g. 'train-d4-w256-b8-bf16'
    kind: str  # 'xla' or 'nlp': the layout collections it goes to
    hlo: str  # jax.jit(f).lower(*args).as_text(dialect="hlo")

    @property
    def instructions(self) -> int:
        """Instruction lines of the HLO text."""
        return sum(1 for line in self.hlo.splitlines() if " = " in line and not line.startswith("HloModule"))


# ---------------------------------------------------------------- families
# Each family: (rng, scale) -> (variant label, function, abstract arguments). `scale` in (0, 1] sets the depth
# and width ranges: 1 reaches the largest programs (~20k instructions), small values a few hundred.


def _pick(rng: np.random.Generator, options: list, scale: float):
    """One of the first ceil(scale * len) options: small scales keep the small end."""
    return options[int(rng.integers(max(1, math.ceil(scale * len(options)))))]


def _common(rng: np.random.Generator) -> tuple[bool, str, object, str]:
    """Training or inference, the optimizer and the dtype, and their variant label."""
    train = bool(rng.random() < 0.6)
    optimizer = str(rng.choice(["sgd", "adam"]))
    dtype = jnp.bfloat16 if rng.random() < 0.3 else jnp.float32
    label = (f"train-{optimizer}" if train else "infer") + ("-bf16" if dtype == jnp.bfloat16 else "")
    return train, optimizer, dtype, label


def mlp(rng: np.random.Generator, scale: float) -> tuple[str, Built]:
    train, optimizer, dtype, label = _common(rng)
    depth, width = _pick(rng, [2, 3, 4, 6, 8, 12], scale), _pick(rng, [64, 100, 256, 512, 1024, 2048], scale)
    batch, inputs = int(rng.choice([8, 32, 128, 256])), int(rng.choice([3, 20, 784, 1000]))
    params = dense_params([inputs] + [width] * depth + [10], dtype)

    def forward(p, x):
        for layer in p[:-1]:
            x = jax.nn.relu(dense(layer, x))
        return dense(p[-1], x)

    batch_spec = (spec((batch, inputs), dtype), spec((batch,), jnp.int32))
    built = program(lambda p, x, y: cross_entropy(forward(p, x), y), forward, params, batch_spec, train, optimizer)
    return f"{label}-d{depth}-w{width}-b{batch}", built


def cnn(rng: np.random.Generator, scale: float) -> tuple[str, Built]:
    train, optimizer, dtype, label = _common(rng)
    depth, width = _pick(rng, [2, 3, 4, 6, 8], scale), _pick(rng, [8, 16, 32, 64, 96, 128], scale)
    batch, image, nchw = int(rng.choice([1, 4, 16])), int(rng.choice([28, 32, 64])), bool(rng.random() < 0.3)
    channels = [3] + [width * 2 ** min(i // 2, 2) for i in range(depth)]
    kernel = int(rng.choice([3, 5]))
    params = {"convs": [spec((o, i, kernel, kernel) if nchw else (kernel, kernel, i, o), dtype)
                        for i, o in zip(channels[:-1], channels[1:])],
              "head": dense_params([channels[-1], 10], dtype)[0]}

    def forward(p, x):
        for i, w in enumerate(p["convs"]):
            x = jax.nn.relu(conv(x, w, nchw=nchw))
            if i % 2 == 1 and x.shape[2] > 4:
                x = max_pool(x, nchw)
        return dense(p["head"], x.mean((2, 3) if nchw else (1, 2)))

    built = image_classifier(forward, params, batch, image, nchw, dtype, train, optimizer)
    return f"{label}-{'nchw' if nchw else 'nhwc'}-d{depth}-w{width}-k{kernel}-b{batch}", built


def resnet(rng: np.random.Generator, scale: float) -> tuple[str, Built]:
    train, optimizer, dtype, label = _common(rng)
    stages, blocks = _pick(rng, [2, 3, 4], scale), _pick(rng, [1, 2, 3, 4, 6, 8], scale)
    width, batch, image = _pick(rng, [16, 32, 64, 128], scale), int(rng.choice([2, 8, 16])), int(rng.choice([32, 64]))
    bottleneck = bool(rng.random() < 0.4)
    head = dense_params([width * 2 ** (stages - 1), 10], dtype)[0]
    params: Params = {"stem": spec((3, 3, 3, width), dtype), "stages": [], "head": head}
    c = width
    for s in range(stages):
        out = width * 2 ** s
        stage = []
        for b in range(blocks):
            kernels = [(1, 1, c, out // 4), (3, 3, out // 4, out // 4), (1, 1, out // 4, out)] if bottleneck else \
                [(3, 3, c, out), (3, 3, out, out)]
            block = {"w": [spec(k, dtype) for k in kernels], "bn": [(spec((k[-1],), dtype),) * 2 for k in kernels]}
            if c != out or (b == 0 and s > 0):
                block["proj"] = spec((1, 1, c, out), dtype)
            stage.append(block)
            c = out
        params["stages"].append(stage)

    def forward(p, x):
        x = jax.nn.relu(conv(x, p["stem"]))
        for s, stage in enumerate(p["stages"]):
            for b, block in enumerate(stage):
                stride = 2 if (b == 0 and s > 0) else 1
                h = x
                for i, (w, (gamma, beta)) in enumerate(zip(block["w"], block["bn"])):
                    h = batch_norm(conv(h, w, stride if i == 0 else 1), (0, 1, 2), gamma, beta)
                    h = jax.nn.relu(h) if i < len(block["w"]) - 1 else h
                shortcut = conv(x, block["proj"], stride) if "proj" in block else x
                x = jax.nn.relu(h + shortcut)
        return dense(p["head"], x.mean((1, 2)))

    built = image_classifier(forward, params, batch, image, False, dtype, train, optimizer)
    kind = "bottleneck" if bottleneck else "basic"
    return f"{label}-{kind}-s{stages}-n{blocks}-w{width}-b{batch}", built


def unet(rng: np.random.Generator, scale: float) -> tuple[str, Built]:
    train, optimizer, dtype, label = _common(rng)
    levels, width = _pick(rng, [2, 3, 4], scale), _pick(rng, [8, 16, 32, 64], scale)
    batch, image = int(rng.choice([1, 2, 4])), int(rng.choice([32, 64, 128]))
    down, up, c = [], [], 1
    for level in range(levels):
        out = width * 2 ** level
        down.append([spec((3, 3, c, out), dtype), spec((3, 3, out, out), dtype)])
        c = out
    for level in reversed(range(levels - 1)):
        out = width * 2 ** level
        up.append({"up": spec((2, 2, c, out), dtype), "w": [spec((3, 3, 2 * out, out), dtype),
                                                             spec((3, 3, out, out), dtype)]})
        c = out
    params = {"down": down, "up": up, "out": spec((1, 1, c, 2), dtype)}

    def forward(p, x):
        skips = []
        for level, (w1, w2) in enumerate(p["down"]):
            if level:
                x = max_pool(x)
            x = jax.nn.relu(conv(jax.nn.relu(conv(x, w1)), w2))
            skips.append(x)
        for block, skip in zip(p["up"], reversed(skips[:-1])):
            x = lax.conv_transpose(x, block["up"], (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
            x = jnp.concatenate([x, skip], axis=-1)
            for w in block["w"]:
                x = jax.nn.relu(conv(x, w))
        return conv(x, p["out"])

    def loss(p, x, y):
        return cross_entropy(forward(p, x), y)

    batch_spec = (spec((batch, image, image, 1), dtype), spec((batch, image, image), jnp.int32))
    return f"{label}-l{levels}-w{width}-i{image}-b{batch}", program(loss, forward, params, batch_spec, train, optimizer)


def rnn(rng: np.random.Generator, scale: float) -> tuple[str, Built]:
    train, optimizer, dtype, label = _common(rng)
    steps, hidden = int(rng.choice([8, 16, 32, 64])), _pick(rng, [32, 64, 128, 256, 512], scale)
    layers, batch, inputs = _pick(rng, [1, 2, 3], scale), int(rng.choice([4, 16, 64])), int(rng.choice([8, 40, 128]))
    cell = str(rng.choice(["lstm", "gru"]))
    gates = 4 if cell == "lstm" else 3
    params = {"cells": [{"x": spec((i, gates * hidden), dtype), "h": spec((hidden, gates * hidden), dtype),
                         "b": spec((gates * hidden,), dtype)} for i in [inputs] + [hidden] * (layers - 1)],
              "head": dense_params([hidden, 10], dtype)[0]}

    def run(p, xs):  # xs [T, B, I]
        for c in p["cells"]:
            def step(carry, x, c=c):
                h, m = carry
                z = x @ c["x"] + h @ c["h"] + c["b"]
                if cell == "lstm":
                    i, f, o, g = jnp.split(z, 4, axis=-1)
                    m = jax.nn.sigmoid(f) * m + jax.nn.sigmoid(i) * jnp.tanh(g)
                    h = jax.nn.sigmoid(o) * jnp.tanh(m)
                else:
                    r, u, n = jnp.split(z, 3, axis=-1)
                    h = jax.nn.sigmoid(u) * h + (1 - jax.nn.sigmoid(u)) * jnp.tanh(n * jax.nn.sigmoid(r))
                return (h, m), h

            zeros = jnp.zeros((xs.shape[1], hidden), xs.dtype)
            _, xs = lax.scan(step, (zeros, zeros), xs)
        return dense(p["head"], xs[-1])

    batch_spec = (spec((steps, batch, inputs), dtype), spec((batch,), jnp.int32))
    built = program(lambda p, x, y: cross_entropy(run(p, x), y), run, params, batch_spec, train, optimizer)
    return f"{label}-{cell}-t{steps}-l{layers}-h{hidden}-b{batch}", built


def mixer(rng: np.random.Generator, scale: float) -> tuple[str, Built]:
    train, optimizer, dtype, label = _common(rng)
    blocks, channels = _pick(rng, [2, 4, 6, 8, 12, 16, 24], scale), _pick(rng, [64, 128, 256, 512], scale)
    patches, batch = int(rng.choice([16, 49, 64, 196])), int(rng.choice([2, 8, 32]))
    params = {"embed": dense_params([48, channels], dtype)[0],
              "blocks": [{"token": dense_params([patches, 2 * patches, patches], dtype),
                          "channel": dense_params([channels, 4 * channels, channels], dtype)} for _ in range(blocks)],
              "head": dense_params([channels, 10], dtype)[0]}

    def forward(p, x):  # x [B, P, 48]
        x = dense(p["embed"], x)
        for block in p["blocks"]:
            h = jnp.swapaxes(layer_norm(x), 1, 2)  # [B, C, P]
            h = dense(block["token"][1], jax.nn.gelu(dense(block["token"][0], h)))
            x = x + jnp.swapaxes(h, 1, 2)
            h = dense(block["channel"][1], jax.nn.gelu(dense(block["channel"][0], layer_norm(x))))
            x = x + h
        return dense(p["head"], x.mean(1))

    batch_spec = (spec((batch, patches, 48), dtype), spec((batch,), jnp.int32))
    built = program(lambda p, x, y: cross_entropy(forward(p, x), y), forward, params, batch_spec, train, optimizer)
    return f"{label}-n{blocks}-c{channels}-p{patches}-b{batch}", built


def moe(rng: np.random.Generator, scale: float) -> tuple[str, Built]:
    train, optimizer, dtype, label = _common(rng)
    experts, width = int(rng.choice([4, 8, 16])), _pick(rng, [64, 128, 256, 512], scale)
    layers, tokens = _pick(rng, [1, 2, 4, 6], scale), int(rng.choice([64, 256, 1024]))
    params = {"layers": [{"router": spec((width, experts), dtype), "up": spec((experts, width, 2 * width), dtype),
                          "down": spec((experts, 2 * width, width), dtype)} for _ in range(layers)],
              "head": dense_params([width, 10], dtype)[0]}

    def forward(p, x):  # x [N, D]
        for layer in p["layers"]:
            gate = jax.nn.softmax((x @ layer["router"]).astype(jnp.float32), axis=-1)  # [N, E]
            choice = jax.nn.one_hot(jnp.argmax(gate, -1), experts, dtype=x.dtype)  # [N, E] top-1 dispatch
            routed = jnp.einsum("ne,nd->end", choice, x)  # [E, N, D]
            h = jax.nn.relu(jnp.einsum("end,edf->enf", routed, layer["up"]))
            out = jnp.einsum("enf,efd->end", h, layer["down"])
            x = x + jnp.einsum("end,ne->nd", out, choice * gate.astype(x.dtype))
        return dense(p["head"], x)

    batch_spec = (spec((tokens, width), dtype), spec((tokens,), jnp.int32))
    built = program(lambda p, x, y: cross_entropy(forward(p, x), y), forward, params, batch_spec, train, optimizer)
    return f"{label}-e{experts}-l{layers}-w{width}-n{tokens}", built


def gnn(rng: np.random.Generator, scale: float) -> tuple[str, Built]:
    train, optimizer, dtype, label = _common(rng)
    layers, width = _pick(rng, [1, 2, 3, 4, 6], scale), _pick(rng, [16, 32, 64, 128, 256], scale)
    nodes = int(rng.choice([100, 500, 2000]))
    edges = nodes * int(rng.choice([2, 4, 8]))
    features = int(rng.choice([7, 16, 100]))
    params = {"embed": dense_params([features, width], dtype)[0],
              "layers": [{"message": dense_params([2 * width, width], dtype)[0],
                          "update": dense_params([2 * width, width], dtype)[0]} for _ in range(layers)],
              "head": dense_params([width, 4], dtype)[0]}

    def forward(p, x, senders, receivers):
        h = jax.nn.relu(dense(p["embed"], x))
        for layer in p["layers"]:
            pair = jnp.concatenate([h[senders], h[receivers]], axis=-1)  # [E, 2D] gathers
            message = jax.nn.relu(dense(layer["message"], pair))
            summed = jax.ops.segment_sum(message, receivers, num_segments=nodes)  # scatter-add [N, D]
            h = h + jax.nn.relu(dense(layer["update"], jnp.concatenate([h, summed], axis=-1)))
        return dense(p["head"], h)

    graph = (spec((nodes, features), dtype), spec((edges,), jnp.int32), spec((edges,), jnp.int32))
    batch_spec = (*graph, spec((nodes,), jnp.int32))
    built = program(lambda p, x, s, r, y: cross_entropy(forward(p, x, s, r), y), forward, params, batch_spec, train,
                    optimizer)
    return f"{label}-l{layers}-w{width}-n{nodes}-e{edges}", built


def wavenet(rng: np.random.Generator, scale: float) -> tuple[str, Built]:
    train, optimizer, dtype, label = _common(rng)
    layers, channels = _pick(rng, [3, 5, 8, 12, 16], scale), _pick(rng, [16, 32, 64, 128], scale)
    length, batch = int(rng.choice([256, 1024, 4000])), int(rng.choice([1, 4, 8]))
    params = {"input": spec((1, 1, channels), dtype),
              "layers": [{"filter": spec((2, channels, channels), dtype), "gate": spec((2, channels, channels), dtype),
                          "out": spec((1, channels, channels), dtype)} for _ in range(layers)],
              "head": spec((1, channels, 256), dtype)}

    def forward(p, x):  # x [B, L, 1]
        x = conv(x, p["input"])
        for i, layer in enumerate(p["layers"]):
            dilation = 2 ** (i % 10)
            h = jnp.tanh(conv(x, layer["filter"], dilation=dilation)) * \
                jax.nn.sigmoid(conv(x, layer["gate"], dilation=dilation))
            x = x + conv(h, layer["out"])
        return conv(jax.nn.relu(x), p["head"])

    batch_spec = (spec((batch, length, 1), dtype), spec((batch, length), jnp.int32))
    built = program(lambda p, x, y: cross_entropy(forward(p, x), y), forward, params, batch_spec, train, optimizer)
    return f"{label}-l{layers}-c{channels}-t{length}-b{batch}", built


def mobilenet(rng: np.random.Generator, scale: float) -> tuple[str, Built]:
    """Inverted residual blocks: a 1x1 expansion, a 3x3 depthwise convolution (one group per channel), a 1x1
    projection; NHWC or NCHW."""
    train, optimizer, dtype, label = _common(rng)
    blocks, width = _pick(rng, [2, 3, 4, 6, 9, 12], scale), _pick(rng, [16, 24, 32, 48, 64], scale)
    expand, batch = int(rng.choice([2, 4, 6])), int(rng.choice([1, 4, 16]))
    image, nchw = int(rng.choice([32, 64, 96])), bool(rng.random() < 0.3)

    def kernel(height: int, inputs: int, outputs: int):
        return spec((outputs, inputs, height, height) if nchw else (height, height, inputs, outputs), dtype)

    layers, c = [], width
    for b in range(blocks):
        out = width * 2 ** (b // 3)
        layers.append({"expand": kernel(1, c, c * expand), "depthwise": kernel(3, 1, c * expand),
                       "project": kernel(1, c * expand, out)})
        c = out
    params = {"stem": kernel(3, 3, width), "blocks": layers, "head": dense_params([c, 10], dtype)[0]}

    def forward(p, x):
        x = jax.nn.relu(conv(x, p["stem"], nchw=nchw))
        for b, block in enumerate(p["blocks"]):
            stride = 2 if b % 3 == 2 and x.shape[2] > 4 else 1
            h = jax.nn.relu6(conv(x, block["expand"], nchw=nchw))
            h = jax.nn.relu6(conv(h, block["depthwise"], stride, groups=h.shape[1 if nchw else 3], nchw=nchw))
            h = conv(h, block["project"], nchw=nchw)
            x = x + h if h.shape == x.shape else h
        return dense(p["head"], x.mean((2, 3) if nchw else (1, 2)))

    built = image_classifier(forward, params, batch, image, nchw, dtype, train, optimizer)
    return f"{label}-{'nchw' if nchw else 'nhwc'}-n{blocks}-w{width}-x{expand}-b{batch}", built


def densenet(rng: np.random.Generator, scale: float) -> tuple[str, Built]:
    """Dense blocks: each layer convolves the concatenation of every earlier feature map of its block;
    transitions halve the channels (1x1) and the image (average pool)."""
    train, optimizer, dtype, label = _common(rng)
    stages, layers = _pick(rng, [2, 3, 4], scale), _pick(rng, [2, 3, 4, 6, 8], scale)
    growth, batch, image = _pick(rng, [8, 12, 16, 32], scale), int(rng.choice([1, 4, 16])), int(rng.choice([32, 64]))
    c, blocks = 2 * growth, []
    for stage in range(stages):
        convs = [spec((3, 3, c + growth * i, growth), dtype) for i in range(layers)]
        c += growth * layers
        transition = spec((1, 1, c, c // 2), dtype) if stage < stages - 1 else None
        blocks.append({"convs": convs, "transition": transition})
        c = c // 2 if transition is not None else c
    params = {"stem": spec((3, 3, 3, 2 * growth), dtype), "stages": blocks, "head": dense_params([c, 10], dtype)[0]}

    def forward(p, x):
        x = conv(x, p["stem"])
        for stage in p["stages"]:
            for w in stage["convs"]:
                x = jnp.concatenate([x, conv(jax.nn.relu(x), w)], axis=-1)
            if stage["transition"] is not None:
                x = conv(jax.nn.relu(x), stage["transition"])
                x = lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4
        return dense(p["head"], x.mean((1, 2)))

    built = image_classifier(forward, params, batch, image, False, dtype, train, optimizer)
    return f"{label}-s{stages}-n{layers}-g{growth}-i{image}-b{batch}", built


def vit(rng: np.random.Generator, scale: float) -> tuple[str, Built]:
    """A vision transformer: the image cut into patches by a rank-6 reshape and transpose, a linear patch
    embedding, bidirectional transformer blocks, a classifier on the mean token."""
    train, optimizer, dtype, label = _common(rng)
    layers, width = _pick(rng, [1, 2, 4, 6, 8], scale), _pick(rng, [64, 128, 192, 256, 384], scale)
    heads = int(rng.choice([h for h in (2, 4, 8) if width % h == 0]))
    patch, image, batch = int(rng.choice([4, 8])), int(rng.choice([32, 64])), int(rng.choice([2, 8, 32]))
    tokens = (image // patch) ** 2
    params = {"embed": dense_params([patch * patch * 3, width], dtype)[0], "positions": spec((tokens, width), dtype),
              "blocks": [block_params(width, 4 * width, dtype) for _ in range(layers)],
              "head": dense_params([width, 10], dtype)[0]}

    def forward(p, x):  # x [B, H, W, 3]
        side = image // patch
        x = x.reshape(batch, side, patch, side, patch, 3).transpose(0, 1, 3, 2, 4, 5)
        x = dense(p["embed"], x.reshape(batch, tokens, patch * patch * 3)) + p["positions"]
        for block in p["blocks"]:
            x = transformer_block(block, x, heads, causal=False)
        return dense(p["head"], layer_norm(x).mean(1))

    built = image_classifier(forward, params, batch, image, False, dtype, train, optimizer)
    return f"{label}-l{layers}-d{width}-h{heads}-p{patch}-i{image}-b{batch}", built


def dlrm(rng: np.random.Generator, scale: float) -> tuple[str, Built]:
    """A recommender: embedding-table lookups (gathers), a bottom MLP for the dense inputs, the pairwise dot
    products of all the feature vectors (a batched dot), a top MLP."""
    train, optimizer, dtype, label = _common(rng)
    tables, dim = int(rng.choice([4, 8, 16, 26])), _pick(rng, [16, 32, 64, 128], scale)
    depth, batch = _pick(rng, [1, 2, 3, 4], scale), int(rng.choice([64, 256, 1024]))
    rows, features = int(rng.choice([1000, 10000, 100000])), 13
    pairs = (tables + 1) ** 2
    params = {"tables": [spec((rows, dim), dtype) for _ in range(tables)],
              "bottom": dense_params([features] + [4 * dim] * (depth - 1) + [dim], dtype),
              "top": dense_params([dim + pairs] + [8 * dim] * depth + [2], dtype)}

    def forward(p, dense_inputs, ids):  # dense_inputs [B, 13], ids [B, tables]
        x = dense_inputs
        for layer in p["bottom"]:
            x = jax.nn.relu(dense(layer, x))
        vectors = jnp.stack([x] + [table[ids[:, t]] for t, table in enumerate(p["tables"])], axis=1)  # [B, T+1, D]
        interactions = jnp.einsum("bnd,bmd->bnm", vectors, vectors).reshape(batch, pairs)
        h = jnp.concatenate([x, interactions], axis=-1)
        for layer in p["top"][:-1]:
            h = jax.nn.relu(dense(layer, h))
        return dense(p["top"][-1], h)

    batch_spec = (spec((batch, features), dtype), spec((batch, tables), jnp.int32), spec((batch,), jnp.int32))
    built = program(lambda p, x, i, y: cross_entropy(forward(p, x, i), y), forward, params, batch_spec, train,
                    optimizer)
    return f"{label}-t{tables}-d{dim}-l{depth}-r{rows}-b{batch}", built


def _nlp_sizes(rng: np.random.Generator, scale: float) -> tuple[int, int, int, int, int]:
    """Layers, width, heads, sequence length, batch of a language model."""
    layers, width = _pick(rng, [1, 2, 4, 6, 8, 12, 16, 24], scale), _pick(rng, [64, 128, 256, 512, 768, 1024], scale)
    heads = int(rng.choice([h for h in (2, 4, 8, 12, 16) if width % h == 0]))
    return layers, width, heads, int(rng.choice([32, 128, 256, 512])), int(rng.choice([1, 4, 8, 16]))


def encoder(rng: np.random.Generator, scale: float) -> tuple[str, Built]:
    """A BERT-like encoder: token embeddings (gather), blocks, a classifier on the first token."""
    train, optimizer, dtype, label = _common(rng)
    layers, width, heads, seq, batch = _nlp_sizes(rng, scale)
    vocab = int(rng.choice([1000, 8000, 30522]))
    params = {"tokens": spec((vocab, width), dtype), "positions": spec((seq, width), dtype),
              "blocks": [block_params(width, 4 * width, dtype) for _ in range(layers)],
              "head": dense_params([width, 2], dtype)[0]}

    def forward(p, ids):
        x = p["tokens"][ids] + p["positions"]
        for block in p["blocks"]:
            x = transformer_block(block, x, heads, causal=False)
        return dense(p["head"], layer_norm(x[:, 0]))

    batch_spec = (spec((batch, seq), jnp.int32), spec((batch,), jnp.int32))
    built = program(lambda p, x, y: cross_entropy(forward(p, x), y), forward, params, batch_spec, train, optimizer)
    return f"{label}-l{layers}-d{width}-h{heads}-t{seq}-b{batch}", built


def decoder(rng: np.random.Generator, scale: float) -> tuple[str, Built]:
    """A GPT-like causal language model with a tied output projection."""
    train, optimizer, dtype, label = _common(rng)
    layers, width, heads, seq, batch = _nlp_sizes(rng, scale)
    vocab = int(rng.choice([1000, 8000, 32000]))
    params = {"tokens": spec((vocab, width), dtype), "positions": spec((seq, width), dtype),
              "blocks": [block_params(width, 4 * width, dtype) for _ in range(layers)]}

    def forward(p, ids):
        x = p["tokens"][ids] + p["positions"]
        for block in p["blocks"]:
            x = transformer_block(block, x, heads, causal=True, activation=jax.nn.silu)
        return layer_norm(x) @ p["tokens"].T  # [B, T, V]

    batch_spec = (spec((batch, seq), jnp.int32), spec((batch, seq), jnp.int32))
    built = program(lambda p, x, y: cross_entropy(forward(p, x), y), forward, params, batch_spec, train, optimizer)
    return f"{label}-l{layers}-d{width}-h{heads}-t{seq}-b{batch}", built


def seq2seq(rng: np.random.Generator, scale: float) -> tuple[str, Built]:
    """A T5-like encoder-decoder with cross-attention."""
    train, optimizer, dtype, label = _common(rng)
    layers, width, heads, seq, batch = _nlp_sizes(rng, scale)
    layers = max(1, layers // 2)
    vocab = int(rng.choice([1000, 8000, 32000]))
    params = {"tokens": spec((vocab, width), dtype),
              "encoder": [block_params(width, 4 * width, dtype) for _ in range(layers)],
              "decoder": [block_params(width, 4 * width, dtype, cross=True) for _ in range(layers)]}

    def forward(p, source, target):
        memory = p["tokens"][source]
        for block in p["encoder"]:
            memory = transformer_block(block, memory, heads, causal=False, activation=jax.nn.relu)
        x = p["tokens"][target]
        for block in p["decoder"]:
            x = transformer_block(block, x, heads, causal=True, memory=layer_norm(memory), activation=jax.nn.relu)
        return layer_norm(x) @ p["tokens"].T

    targets = spec((batch, seq // 2), jnp.int32)
    batch_spec = (spec((batch, seq), jnp.int32), targets, targets)  # source ids, target ids, labels
    built = program(lambda p, s, t, y: cross_entropy(forward(p, s, t), y), forward, params, batch_spec, train,
                    optimizer)
    return f"{label}-l{layers}-d{width}-h{heads}-t{seq}-b{batch}", built


def generate(rng: np.random.Generator, scale: float) -> tuple[str, Built]:
    """Autoregressive decoding with a key/value cache: one lax.scan step per token (a while loop in HLO)."""
    _, _, dtype, _ = _common(rng)
    label = "infer-bf16" if dtype == jnp.bfloat16 else "infer"
    layers, width, heads, seq, batch = _nlp_sizes(rng, scale)
    steps, vocab = int(rng.choice([4, 16, 64])), int(rng.choice([1000, 8000]))
    params = {"tokens": spec((vocab, width), dtype),
              "blocks": [block_params(width, 4 * width, dtype) for _ in range(layers)]}
    dh = width // heads

    def decode(p, cache_k, cache_v, first):  # caches [L, B, S, H, Dh]
        def step(carry, position):
            token, k_all, v_all = carry
            x = p["tokens"][token][:, None]  # [B, 1, D]
            for i, block in enumerate(p["blocks"]):
                h = layer_norm(x)
                q = dense(block["attn"]["q"], h).reshape(batch, 1, heads, dh)
                k = dense(block["attn"]["k"], h).reshape(batch, 1, heads, dh)
                v = dense(block["attn"]["v"], h).reshape(batch, 1, heads, dh)
                k_all = lax.dynamic_update_slice(k_all, k[None].astype(k_all.dtype), (i, 0, position, 0, 0))
                v_all = lax.dynamic_update_slice(v_all, v[None].astype(v_all.dtype), (i, 0, position, 0, 0))
                logits = jnp.einsum("bqhd,bshd->bhqs", q, k_all[i]) / math.sqrt(dh)
                logits = jnp.where(jnp.arange(seq) <= position, logits, -1e9)
                out = jnp.einsum("bhqs,bshd->bqhd", jax.nn.softmax(logits, -1), v_all[i]).reshape(batch, 1, width)
                x = x + dense(block["attn"]["o"], out)
                x = x + dense(block["mlp"][1], jax.nn.gelu(dense(block["mlp"][0], layer_norm(x))))
            token = jnp.argmax(layer_norm(x[:, 0]) @ p["tokens"].T, axis=-1).astype(jnp.int32)
            return (token, k_all, v_all), token

        _, tokens = lax.scan(step, (first, cache_k, cache_v), jnp.arange(steps))
        return tokens

    cache = spec((layers, batch, seq, heads, dh), dtype)
    return (f"{label}-l{layers}-d{width}-h{heads}-t{seq}-s{steps}-b{batch}",
            (decode, (params, cache, cache, spec((batch,), jnp.int32))))


FAMILIES: dict[str, tuple[str, Callable[[np.random.Generator, float], tuple[str, Built]]]] = {
    "mlp": ("xla", mlp), "cnn": ("xla", cnn), "resnet": ("xla", resnet), "unet": ("xla", unet),
    "rnn": ("xla", rnn), "mixer": ("xla", mixer), "moe": ("xla", moe), "gnn": ("xla", gnn),
    "wavenet": ("xla", wavenet), "mobilenet": ("xla", mobilenet), "densenet": ("xla", densenet), "vit": ("xla", vit),
    "dlrm": ("xla", dlrm),
    "encoder": ("nlp", encoder), "decoder": ("nlp", decoder), "seq2seq": ("nlp", seq2seq),
    "generate": ("nlp", generate),
}


def lower(family: str, rng: np.random.Generator, scale: float) -> LoweredProgram:
    """Draw one program of `family` at `scale` and lower it to HLO text (before XLA's optimisation passes)."""
    kind, make = FAMILIES[family]
    variant, (function, arguments) = make(rng, scale)
    text = jax.jit(function).lower(*arguments).as_text(dialect="hlo")
    return LoweredProgram(family, variant, kind, text)
