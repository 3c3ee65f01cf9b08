"""Scatter reductions: the torch fallback against a loop reference, and against torch_scatter."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest
import torch

from solution.models import scatter

REDUCTIONS = {"sum": scatter.scatter_sum, "mean": scatter.scatter_mean, "max": scatter.scatter_max}

# `make test` sets SOLUTION_REQUIRE_SCATTER=1: a missing torch_scatter then fails these tests instead of skipping
needs_torch_scatter = pytest.mark.skipif(
    not scatter.AVAILABLE and not os.environ.get("SOLUTION_REQUIRE_SCATTER"), reason="torch_scatter not installed"
)


def inputs(dim: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, int]:
    """A [4, 9, 5] source, an index along `dim` that leaves slots 1 and 6 empty, and the slot count."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.randn(4, 9, 5, generator=generator, dtype=torch.float64)
    choices = torch.tensor([0, 2, 3, 4, 5])
    index = choices[torch.randint(0, len(choices), (src.size(dim),), generator=generator)]
    return src.requires_grad_(), index, 7


def reference(reduce: str, src: torch.Tensor, index: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    slots = []
    for slot in range(size):
        members = src.index_select(dim, (index == slot).nonzero().flatten())
        if members.size(dim) == 0:
            slots.append(torch.zeros_like(src.select(dim, 0)))
        else:
            slots.append({"sum": members.sum, "mean": members.mean, "max": lambda d: members.amax(d)}[reduce](dim))
    return torch.stack(slots, dim)


def result_and_grad(reduce: Callable[..., torch.Tensor], dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Output of `reduce(src, index, dim, size)` on the test inputs, and the gradient of a random projection."""
    src, index, size = inputs(dim)
    out = reduce(src, index, dim, size)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)
    (out * weights).sum().backward()
    return out.detach(), src.grad


@pytest.mark.parametrize("reduce", list(REDUCTIONS))
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_torch_path_matches_loop_reference(reduce: str, dim: int) -> None:
    with scatter.use_backend("torch"):
        out, grad = result_and_grad(REDUCTIONS[reduce], dim)
    expected, expected_grad = result_and_grad(
        lambda src, index, d, size: reference(reduce, src, index, d % src.dim(), size), dim)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(grad, expected_grad)


@needs_torch_scatter
@pytest.mark.parametrize("reduce", list(REDUCTIONS))
@pytest.mark.parametrize("dim", [0, 1])
def test_backends_agree(reduce: str, dim: int) -> None:
    with scatter.use_backend("torch"):
        out, grad = result_and_grad(REDUCTIONS[reduce], dim)
    with scatter.use_backend("torch_scatter"):
        out_ts, grad_ts = result_and_grad(REDUCTIONS[reduce], dim)
    torch.testing.assert_close(out_ts, out)
    torch.testing.assert_close(grad_ts, grad)
    assert (out[(slice(None),) * dim + (1,)] == 0).all()  # an empty slot


@pytest.mark.parametrize("backend", [pytest.param("torch_scatter", marks=needs_torch_scatter), "torch"])
def test_empty_index(backend: str) -> None:
    with scatter.use_backend(backend):
        for reduce in REDUCTIONS.values():
            out = reduce(torch.zeros(0, 3), torch.zeros(0, dtype=torch.long), 0, 4)
            torch.testing.assert_close(out, torch.zeros(4, 3))


def test_use_backend_restores_and_checks_names() -> None:
    before = scatter.BACKEND
    with scatter.use_backend("torch"):
        assert scatter.BACKEND == "torch"
    assert scatter.BACKEND == before
    with pytest.raises(ValueError, match="expected one of"):
        scatter.set_backend("cuda")
    assert scatter.BACKEND == before


def test_index_must_match_dim() -> None:
    with pytest.raises(ValueError, match="1-D"):
        scatter.scatter_sum(torch.zeros(3, 4), torch.zeros(4, dtype=torch.long), 0, 2)


def test_environment_forces_fallback() -> None:
    env = dict(os.environ, SOLUTION_SCATTER="torch")
    code = "from solution.models import scatter; print(scatter.BACKEND)"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "torch"


@needs_torch_scatter
def test_auto_takes_plain_torch_on_cpu(monkeypatch) -> None:
    """"auto" leaves CPU tensors to plain torch (the faster path there) and gives CUDA tensors to torch_scatter."""
    def refuse(*args, **kwargs):
        raise AssertionError("torch_scatter called for a CPU tensor")
    for name in ("scatter_sum", "scatter_mean", "scatter_max"):
        monkeypatch.setattr(scatter.torch_scatter, name, refuse)
    with scatter.use_backend("auto"):
        for reduce in REDUCTIONS.values():
            reduce(torch.ones(3, 2), torch.tensor([0, 1, 1]), 0, 2)
        assert not scatter._fused(torch.ones(1))
    with scatter.use_backend("torch_scatter"):
        assert scatter._fused(torch.ones(1))
