"""Shared fixtures: one tiny synthetic dataset per session, a private cache folder, CPU-only runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ["CUDA_VISIBLE_DEVICES"] = ""
# the benchmark scripts import their shared helpers (processes.py, intervals.py) from their own folder, as a
# script run from there does
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Keep the tests' preprocessed graphs out of the user's cache."""
    folder = tmp_path_factory.mktemp("cache")
    os.environ["SOLUTION_CACHE"] = str(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny synthetic dataset in the Kaggle layout (read-only by convention: copy it before changing it)."""
    from solution.synth.files import generate

    return generate(tmp_path_factory.mktemp("tiny"), size="tiny", seed=0)


# `make test` runs the suite in two parts: the tests marked `scatter` run only once torch_scatter is built and
# installed, every other test runs while it builds (pytest -m "not scatter"). A test is marked when its id names
# scatter, when it is skipped without torch_scatter, or when it is listed here (it hides an installed torch_scatter).
AFTER_SCATTER_BUILD = ("tests/test_kernel.py::test_kernel_runs_alone_and_writes_a_checked_submission",)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "scatter: needs torch_scatter installed to check what it should (make test "
                                       "runs these after building it)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        skipped_without = any("torch_scatter" in str(mark.kwargs.get("reason", ""))
                              for mark in item.iter_markers("skipif"))
        if "scatter" in item.nodeid.lower() or skipped_without or item.nodeid.startswith(AFTER_SCATTER_BUILD):
            item.add_marker(pytest.mark.scatter)
