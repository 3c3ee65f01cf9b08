"""The benchmark scripts still run (seconds-long smoke mode); their figures are produced by running them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["data_bench", "ablations", "speed", "segments", "ensembles"])
def test_benchmark_smoke(name, capsys, tmp_path):
    out_file = ["--out", str(tmp_path / f"{name}.md")] if name != "data_bench" else []
    assert load(name).main(["--smoke", *out_file]) == 0
    out = capsys.readouterr().out
    expected = {"data_bench": ["Node retention", "smaller", "cached", "peak RSS"],
                "ablations": ["tile:xla", "layout:xla:default", "early fusion", "no pruning", "nodes kept", "±"],
                "speed": ["Same predictions", "Training step", "Inference pass", "| torch |", "| 256 |"],
                "segments": ["| 800 | 4 |", "every segment (default): peak memory of the largest graph / the smallest",
                             "| layout:nlp:random |", "GST, 1 segment sampled"],
                "ensembles": ["| tile:xla |", "| layout:xla:random |", "2-seed ensemble", "2-fold ensemble",
                              "x2 chunkings", "±", "**mean**"]}[name]
    for text in expected:
        assert text in out


def test_encode_once_and_early_fusion_give_the_same_scores():
    assert load("speed").same_predictions("cpu") < 1e-4
