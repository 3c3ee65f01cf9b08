"""The JAX building blocks of the zoo's programs: layers, losses, optimizer steps, abstract arguments."""

from __future__ import annotations

import math
from collections.abc import Callable

try:
    import jax
    import jax.numpy as jnp
    from jax import lax
except ImportError as error:  # jax is the optional extra `programs`
    raise ImportError("solution synth --programs needs jax: pip install '.[programs]'") from error

Params = dict[str, object]
Built = tuple[Callable, tuple]  # a function and its abstract arguments (ShapeDtypeStruct pytrees)


def spec(shape: tuple[int, ...], dtype=jnp.float32) -> jax.ShapeDtypeStruct:
    """An abstract argument: lowering needs shapes only, never values."""
    return jax.ShapeDtypeStruct(tuple(int(d) for d in shape), dtype)


def dense_params(sizes: list[int], dtype) -> list[Params]:
    """One {w [a, b], b [b]} per consecutive pair of `sizes`."""
    return [{"w": spec((a, b), dtype), "b": spec((b,), dtype)} for a, b in zip(sizes[:-1], sizes[1:])]


def dense(p: Params, x) -> jax.Array:
    return x @ p["w"] + p["b"]


def layer_norm(x, eps: float = 1e-5) -> jax.Array:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + eps)


def batch_norm(x, axes: tuple[int, ...], scale, shift, eps: float = 1e-5) -> jax.Array:
    """Training-mode batch norm: statistics over `axes`."""
    mean = x.mean(axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axes, keepdims=True)
    return (x - mean) * lax.rsqrt(var + eps) * scale + shift


def conv(x, w, stride: int = 1, dilation: int = 1, groups: int = 1, nchw: bool = False) -> jax.Array:
    """A 2-D (or 1-D, by w's rank) convolution with SAME padding, channels last unless `nchw`."""
    spatial = w.ndim - 2
    labels = ("NCHW", "OIHW", "NCHW") if nchw else ("NHWC", "HWIO", "NHWC")
    if spatial == 1:
        labels = ("NCH", "OIH", "NCH") if nchw else ("NHC", "HIO", "NHC")
    return lax.conv_general_dilated(x, w, (stride,) * spatial, "SAME", rhs_dilation=(dilation,) * spatial,
                                    dimension_numbers=labels, feature_group_count=groups)


def max_pool(x, nchw: bool = False) -> jax.Array:
    window = (1, 1, 2, 2) if nchw else (1, 2, 2, 1)
    return lax.reduce_window(x, -jnp.inf, lax.max, window, window, "VALID")


def attention(p: Params, x, heads: int, causal: bool, memory=None) -> jax.Array:
    """Multi-head attention of x [B, T, D] over itself (or over `memory` [B, S, D])."""
    source = x if memory is None else memory
    b, t, d = x.shape
    s = source.shape[1]
    q = dense(p["q"], x).reshape(b, t, heads, d // heads)  # [B, T, H, Dh]
    k = dense(p["k"], source).reshape(b, s, heads, d // heads)
    v = dense(p["v"], source).reshape(b, s, heads, d // heads)
    logits = jnp.einsum("bthd,bshd->bhts", q, k) / math.sqrt(d // heads)
    if causal:
        logits = jnp.where(jnp.tril(jnp.ones((t, s), bool)), logits, -1e9)
    weights = jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(x.dtype)
    out = jnp.einsum("bhts,bshd->bthd", weights, v).reshape(b, t, d)
    return dense(p["o"], out)


def attention_params(d: int, dtype) -> Params:
    return {name: dense_params([d, d], dtype)[0] for name in "qkvo"}


def block_params(d: int, hidden: int, dtype, cross: bool = False) -> Params:
    params = {"attn": attention_params(d, dtype), "mlp": dense_params([d, hidden, d], dtype)}
    if cross:
        params["cross"] = attention_params(d, dtype)
    return params


def transformer_block(p: Params, x, heads: int, causal: bool, memory=None, activation=jax.nn.gelu) -> jax.Array:
    x = x + attention(p["attn"], layer_norm(x), heads, causal)
    if memory is not None:
        x = x + attention(p["cross"], layer_norm(x), heads, False, memory)
    h = activation(dense(p["mlp"][0], layer_norm(x)))
    return x + dense(p["mlp"][1], h)


def cross_entropy(logits, labels) -> jax.Array:
    """Mean softmax cross-entropy of logits [..., K] against integer labels [...]."""
    logits = logits.astype(jnp.float32)
    picked = jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
    return (jax.nn.logsumexp(logits, axis=-1) - picked).mean()


def training_step(loss: Callable, optimizer: str, lr: float = 1e-3) -> Callable:
    """(params, state, *batch) -> (params, state, loss) with jax.grad and an SGD-momentum or Adam update."""

    def step(params, state, *batch):
        value, grads = jax.value_and_grad(loss)(params, *batch)
        if optimizer == "sgd":
            state = jax.tree.map(lambda m, g: 0.9 * m + g, state, grads)
            params = jax.tree.map(lambda p, m: p - lr * m, params, state)
        else:
            mean, var = state
            mean = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, mean, grads)
            var = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, var, grads)
            params = jax.tree.map(lambda p, m, v: p - lr * m * lax.rsqrt(v + 1e-8), params, mean, var)
            state = (mean, var)
        return params, state, value

    return step


def program(loss: Callable, forward: Callable, params: Params, batch: tuple, train: bool, optimizer: str) -> Built:
    """A training step of `loss` (params, *batch), or an inference step of `forward` (params, *inputs): `batch`
    is the inputs, then the labels."""
    if not train:
        return forward, (params, *batch[:-1])
    state = params if optimizer == "sgd" else (params, params)
    return training_step(loss, optimizer), (params, state, *batch)


def image_classifier(forward: Callable, params: Params, batch: int, image: int, nchw: bool, dtype, train: bool,
                     optimizer: str) -> Built:
    """`program` of a classifier of square RGB images ([B, 3, H, W] with `nchw`, else [B, H, W, 3])."""
    shape = (batch, 3, image, image) if nchw else (batch, image, image, 3)
    batch_spec = (spec(shape, dtype), spec((batch,), jnp.int32))
    return program(lambda p, x, y: cross_entropy(forward(p, x), y), forward, params, batch_spec, train, optimizer)
