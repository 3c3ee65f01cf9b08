"""configs: exact pack/unpack round trip and duplicate-config removal; a settings file with a renamed key refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from solution import errors
from solution.data.packing import dedup, pack, unpack
from solution.tools.cli import main
from solution.tools.lightning_cli import check_settings_file


def random_configs(c: int, nc: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(-1, 6, size=(c, nc, 18)).astype(np.float32)


@pytest.mark.parametrize("c,nc,chunk", [(1, 1, 4096), (7, 3, 4096), (10, 5, 3), (9, 4, 3), (8, 2, 1),
                                        (50, 120, 16), (5, 0, 2), (0, 4, 3), (4097, 2, 4096)])
def test_pack_unpack_round_trip(c, nc, chunk):
    configs = random_configs(c, nc, seed=c + nc)
    packed = pack(configs, chunk=chunk)
    assert packed.shape == (c, nc) and packed.dtype == np.int64
    restored = unpack(packed)
    assert restored.shape == (c, nc, 18) and restored.dtype == np.float32
    assert np.array_equal(restored, configs)


def test_pack_matches_unchunked_and_extremes():
    configs = random_configs(23, 6, seed=3)
    configs[0] = -1  # all "compiler default"
    configs[1] = 5  # largest symbol everywhere
    assert np.array_equal(pack(configs, chunk=4), pack(configs, chunk=1000))
    packed = pack(configs)
    assert (packed[0] == 0).all() and (packed[1] == 7**18 - 1).all()
    assert np.array_equal(unpack(packed), configs)


def test_pack_is_injective_on_single_digit_changes():
    base = random_configs(1, 1, seed=5)
    packed = {int(pack(base)[0, 0])}
    for position in range(18):
        for value in range(-1, 6):
            if value != base[0, 0, position]:
                other = base.copy()
                other[0, 0, position] = value
                packed.add(int(pack(other)[0, 0]))
    assert len(packed) == 1 + 18 * 6


def test_unpack_accepts_any_leading_shape():
    configs = random_configs(6, 4, seed=1)
    packed = pack(configs)
    assert np.array_equal(unpack(packed[2]), configs[2])  # [nc] -> [nc, 18]
    assert np.array_equal(unpack(packed.reshape(2, 3, 4)), configs.reshape(2, 3, 4, 18))


def test_packed_is_nine_times_smaller():
    configs = random_configs(100, 30)
    assert configs.nbytes == 9 * pack(configs).nbytes


# ---------------------------------------------------------------- dedup


def duplicated_keys():
    """Rows 0, 2, 5 equal (A); rows 1, 4 equal (B); row 3 unique (C); row 6 equal to row 3."""
    rng = np.random.default_rng(0)
    a, b, c = (rng.integers(-1, 6, size=(4, 18)).astype(np.float32) for _ in range(3))
    configs = np.stack([a, b, a, c, b, a, c])
    runtime = np.array([50, 9, 30, 7, 11, 40, 8], dtype=np.int64)
    return configs, runtime


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("mode,expected", [
    ("first", [50, 9, 7]),
    ("min", [30, 9, 7]),
    ("mean", [40, 10, 7.5]),
])
def test_dedup_modes(packed, mode, expected):
    configs, runtime = duplicated_keys()
    keys = pack(configs) if packed else configs
    rows, merged = dedup(keys, runtime, mode)
    assert rows.tolist() == [0, 1, 3]  # first occurrences, in the original order
    assert np.allclose(merged, expected) and len(merged) == 3


def test_dedup_none_keeps_every_row():
    configs, runtime = duplicated_keys()
    rows, merged = dedup(pack(configs), runtime, "none")
    assert rows.tolist() == list(range(7)) and np.array_equal(merged, runtime)


@pytest.mark.parametrize("mode", ["first", "min", "mean"])
def test_dedup_without_duplicates_is_identity(mode):
    keys = pack(random_configs(40, 8, seed=2))
    runtime = np.arange(40, 0, -1).astype(np.float64)
    rows, merged = dedup(keys, runtime, mode)
    assert rows.tolist() == list(range(40)) and np.array_equal(merged, runtime)


@pytest.mark.parametrize("mode", ["first", "min", "mean"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dedup_against_reference(mode, seed):
    rng = np.random.default_rng(seed)
    distinct = rng.integers(-1, 6, size=(15, 3, 18)).astype(np.float32)
    pick = rng.integers(0, 15, size=200)
    keys = pack(distinct[pick])
    runtime = rng.random(200) * 1e6
    rows, merged = dedup(keys, runtime, mode)
    reference_rows, reference = [], []
    for i, p in enumerate(pick.tolist()):
        if p not in pick[:i]:
            copies = np.flatnonzero(pick == p)
            reference_rows.append(i)
            reference.append({"first": runtime[i], "min": runtime[copies].min(),
                              "mean": runtime[copies].mean()}[mode])
    assert rows.tolist() == reference_rows
    assert np.allclose(merged, reference, rtol=1e-12)


def test_dedup_tile_keys():
    keys = np.array([[1.0, 2.0], [3.0, 4.0], [1.0, 2.0]], np.float32)
    rows, merged = dedup(keys, np.array([3.0, 1.0, 2.0]), "min")
    assert rows.tolist() == [0, 1] and merged.tolist() == [2.0, 1.0]


@pytest.mark.parametrize("mode", ["max", "", "First", None])
def test_dedup_invalid_mode(mode):
    configs, runtime = duplicated_keys()
    with pytest.raises(ValueError):
        dedup(pack(configs), runtime, mode)


def test_run_refuses_a_blend_floor_out_of_range_before_training(tiny_root, tmp_path, capsys):
    layer = tmp_path / "floor.yaml"
    layer.write_text("blend_floor: 1.5\n")
    assert main(["run", "--config", str(layer), "--data.root", str(tiny_root), "--out", str(tmp_path / "out")]) \
        == errors.USAGE
    printed = capsys.readouterr()
    assert "blend_floor=1.5; expected a number from 0 to the largest of blend_weights=" in printed.err
    assert not (tmp_path / "out" / "checkpoints").exists()  # refused before any collection trained


@pytest.mark.parametrize("text,key", [("prior_weights: [0.5]", "prior_weights"),  # now blend_weights
                                      ("data:\n  fold_variant_parts: _.*$", "fold_variant_parts")])  # family_pattern
def test_run_refuses_a_settings_file_with_a_renamed_key_in_one_line(text, key, tiny_root, tmp_path, capsys):
    layer = tmp_path / "old.yaml"
    layer.write_text(text + "\n")
    assert main(["run", "--config", str(layer), "--data.root", str(tiny_root), "--out", str(tmp_path)]) == errors.USAGE
    printed = capsys.readouterr()
    assert printed.err.strip().count("\n") == 0 and printed.out == "", printed
    assert str(layer) in printed.err and f"'{key}'" in printed.err
    assert not (tmp_path / "checkpoints").exists()  # refused before anything trained


def test_every_benchmark_variant_is_a_settings_layer_this_version_accepts():
    """The variant YAMLs that docs/results.md's commands layer over the shipped settings name no removed or renamed
    key (a measured option that is gone leaves with its variant; its figure names the commit it ran at)."""
    variants = sorted((Path(__file__).parent.parent / "benchmarks" / "variants").glob("*.yaml"))
    assert len(variants) >= 20
    for variant in variants:
        check_settings_file(variant)
