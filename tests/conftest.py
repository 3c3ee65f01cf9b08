"""Shared fixtures: one tiny synthetic dataset per session, a private cache folder, CPU-only runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ["CUDA_VISIBLE_DEVICES"] = ""


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Keep the tests' preprocessed graphs out of the user's cache."""
    folder = tmp_path_factory.mktemp("cache")
    os.environ["SOLUTION_CACHE"] = str(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny synthetic dataset in the Kaggle layout (read-only by convention: copy it before changing it)."""
    from solution.data.synth import generate

    return generate(tmp_path_factory.mktemp("tiny"), size="tiny", seed=0)
