"""Scatter reductions (sum, mean, max) along one dim; the only module that imports torch_scatter."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

from ..errors import SettingsError

# Two paths for one behaviour. torch_scatter's fused kernels are the GPU's fast path; on CPU plain torch
# (index_add_ and scatter_reduce) is as fast or faster (whole steps 0-7 % faster, its max 20x in a forward
# pass; benchmarks/results/scatter.md, from benchmarks/scatter.py). So "auto", the default, takes torch_scatter for CUDA
# tensors when it is installed and plain torch otherwise; torch_scatter has no PyPI wheel and is missing on a
# Kaggle notebook, and both paths give the same numbers (tested). SOLUTION_SCATTER=torch_scatter or =torch
# forces one path everywhere.
try:
    import torch_scatter
except ImportError:
    torch_scatter = None

BACKENDS = ("auto", "torch_scatter", "torch")
AVAILABLE = torch_scatter is not None


def _check(name: str) -> str:
    if name not in BACKENDS:
        raise SettingsError(f"scatter backend {name!r}; expected one of {', '.join(BACKENDS)}")
    if name == "torch_scatter" and not AVAILABLE:
        raise SettingsError("scatter backend 'torch_scatter' is not installed (pip install torch-scatter)")
    return name


BACKEND = _check(os.environ.get("SOLUTION_SCATTER", "auto"))


def set_backend(name: str) -> None:
    """Use `name` ("auto", "torch_scatter" or "torch") for every later call."""
    global BACKEND
    BACKEND = _check(name)


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Use `name` inside the `with` block, then restore the previous backend."""
    previous = BACKEND
    set_backend(name)
    try:
        yield
    finally:
        set_backend(previous)


def _along(index: torch.Tensor, src: torch.Tensor, dim: int) -> torch.Tensor:
    """The 1-D index viewed along `dim` and expanded to the shape of `src` (no copy)."""
    shape = [1] * src.dim()
    shape[dim] = -1
    return index.view(shape).expand_as(src)


def _out_shape(src: torch.Tensor, dim: int, dim_size: int) -> list[int]:
    shape = list(src.shape)
    shape[dim] = dim_size
    return shape


def _fused(src: torch.Tensor) -> bool:
    """torch_scatter's kernels for `src` (forced, or "auto" on a CUDA tensor), unless a torch.compile trace is
    running (it cannot trace them; inductor fuses the plain-torch ops itself)."""
    chosen = BACKEND == "torch_scatter" or (BACKEND == "auto" and AVAILABLE and src.is_cuda)
    return chosen and not torch.compiler.is_compiling()


def _validate(src: torch.Tensor, index: torch.Tensor, dim: int) -> int:
    dim = dim % src.dim()
    if index.dim() != 1 or index.numel() != src.size(dim):
        raise ValueError(f"index must be 1-D with src.size({dim})={src.size(dim)} entries, got {tuple(index.shape)}")
    return dim


def scatter_sum(src: torch.Tensor, index: torch.Tensor, dim: int, dim_size: int) -> torch.Tensor:
    """out[..., i, ...] = sum of src[..., j, ...] over j with index[j] == i (slot i along `dim`)."""
    dim = _validate(src, index, dim)
    if _fused(src):
        return torch_scatter.scatter_sum(src, index, dim, dim_size=dim_size)
    return src.new_zeros(_out_shape(src, dim, dim_size)).index_add_(dim, index, src)


def scatter_mean(src: torch.Tensor, index: torch.Tensor, dim: int, dim_size: int) -> torch.Tensor:
    """Mean over the entries of each slot; 0 for empty slots."""
    dim = _validate(src, index, dim)
    if _fused(src):
        return torch_scatter.scatter_mean(src, index, dim, dim_size=dim_size)
    count = torch.bincount(index, minlength=dim_size).clamp_min(1).to(src.dtype)  # [dim_size]
    shape = [1] * src.dim()
    shape[dim] = dim_size
    return scatter_sum(src, index, dim, dim_size) / count.view(shape)


def scatter_max(src: torch.Tensor, index: torch.Tensor, dim: int, dim_size: int) -> torch.Tensor:
    """Maximum over the entries of each slot (values only); 0 for empty slots."""
    dim = _validate(src, index, dim)
    if _fused(src):
        return torch_scatter.scatter_max(src, _along(index, src, dim), dim, dim_size=dim_size)[0]
    out = src.new_zeros(_out_shape(src, dim, dim_size))
    return out.scatter_reduce(dim, _along(index, src, dim), src, "amax", include_self=False)
