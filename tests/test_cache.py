"""cache: hits are bit-identical to misses, stale or corrupt entries are rebuilt, the data folder stays untouched."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest
from npz_factory import layout_arrays, make_tree, split_file, tile_arrays

import solution.data.preprocess as preprocess
from solution.data.cache import META, ArrayCache, code_digest
from solution.data.packing import pack
from solution.data.preprocess import RECORD_CODE, Preprocessing, load_graph, record_cache

SETTINGS = {"prune": "k_hop", "hops": 1}


def reference_arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "node_feat": rng.normal(size=(50, 7)).astype(np.float32),
        "config_index": np.arange(9, dtype=np.int64),
        "configs": rng.integers(0, 7**18, size=(4, 3), dtype=np.int64),
        "target": rng.random(4),
        "opcode": rng.integers(0, 121, size=11).astype(np.uint8),
        "empty": np.zeros((0, 6), np.float32),
        "no_edges": np.zeros((2, 0), np.int64),
    }


META_IN = {"kind": "layout", "nodes": 50, "is_test": False}


class Builder:
    """A build callback that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return reference_arrays(), dict(META_IN)


def assert_same_arrays(got: dict, expected: dict) -> None:
    assert set(got) == set(expected)
    for name, array in expected.items():
        assert got[name].dtype == array.dtype, name
        assert got[name].shape == array.shape, name
        assert np.array_equal(got[name], array), name


@pytest.fixture()
def source(tmp_path) -> Path:
    path = tmp_path / "data" / "graph.npz"
    path.parent.mkdir()
    path.write_bytes(b"source file content v1")
    return path


@pytest.fixture()
def folder(tmp_path) -> Path:
    return tmp_path / "cache"


def test_hit_is_bit_identical_and_skips_the_builder(source, folder):
    build = Builder()
    cache = ArrayCache(folder)
    miss, meta = cache.load(source, SETTINGS, build)
    assert build.calls == 1
    assert_same_arrays(miss, reference_arrays())
    assert meta == META_IN
    hit, meta_hit = cache.load(source, SETTINGS, build)
    assert build.calls == 1
    assert_same_arrays(hit, miss)
    assert meta_hit == META_IN
    fresh, _ = ArrayCache(folder).load(source, SETTINGS, build)  # another process
    assert build.calls == 1
    assert_same_arrays(fresh, reference_arrays())


def test_entries_are_read_only_views(source, folder):
    arrays, _ = ArrayCache(folder).load(source, SETTINGS, Builder())
    with pytest.raises(ValueError):
        arrays["node_feat"][0, 0] = 1.0


def test_key_ignores_settings_order(source, folder):
    cache = ArrayCache(folder)
    assert cache.key(source, {"a": 1, "b": [1, 2]}) == cache.key(source, {"b": [1, 2], "a": 1})


@pytest.mark.parametrize("change", [{"hops": 2}, {"prune": "none"}, {"extra": True}, {}])
def test_changed_settings_give_a_new_key_and_a_rebuild(source, folder, change):
    build = Builder()
    cache = ArrayCache(folder)
    cache.load(source, SETTINGS, build)
    other = {**SETTINGS, **change} if change else {"prune": "k_hop"}
    assert cache.key(source, other) != cache.key(source, SETTINGS)
    arrays, _ = cache.load(source, other, build)
    assert build.calls == 2
    assert_same_arrays(arrays, reference_arrays())
    cache.load(source, SETTINGS, build)  # the first entry is still there
    assert build.calls == 2


@pytest.mark.parametrize("same_size", [False, True])
def test_changed_source_content_gives_a_new_key_and_a_rebuild(source, folder, same_size):
    build = Builder()
    cache = ArrayCache(folder)
    cache.load(source, SETTINGS, build)
    key = cache.key(source, SETTINGS)
    stat = source.stat()
    source.write_bytes(b"source file content v2" if same_size else b"a longer source file content, v2")
    if same_size:  # make sure the modification time moves even on coarse-clock file systems
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000_000))
    assert cache.key(source, SETTINGS) != key
    cache.load(source, SETTINGS, build)
    assert build.calls == 2
    assert ArrayCache(folder).key(source, SETTINGS) == cache.key(source, SETTINGS)


def test_same_content_elsewhere_shares_the_entry(source, folder):
    build = Builder()
    cache = ArrayCache(folder)
    cache.load(source, SETTINGS, build)
    copy = source.with_name("copy.npz")
    copy.write_bytes(source.read_bytes())
    assert cache.key(copy, SETTINGS) == cache.key(source, SETTINGS)
    cache.load(copy, SETTINGS, build)
    assert build.calls == 1


# ---------------------------------------------------------------- corruption


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


CORRUPTIONS = {
    "flip_data_byte": lambda e: _flip(e / "node_feat.npy", -3),
    "flip_header_byte": lambda e: _flip(e / "configs.npy", 20),
    "flip_magic_byte": lambda e: _flip(e / "target.npy", 1),
    "truncate_npy": lambda e: (e / "node_feat.npy").write_bytes((e / "node_feat.npy").read_bytes()[:700]),
    "empty_npy": lambda e: (e / "opcode.npy").write_bytes(b""),
    "grow_npy": lambda e: (e / "opcode.npy").write_bytes((e / "opcode.npy").read_bytes() + b"\0"),
    "delete_npy": lambda e: (e / "configs.npy").unlink(),
    "swap_npy": lambda e: (e / "configs.npy").write_bytes((e / "config_index.npy").read_bytes()),
    "delete_meta": lambda e: (e / META).unlink(),
    "meta_not_json": lambda e: (e / META).write_text("{not json"),
    "meta_binary": lambda e: (e / META).write_bytes(b"\xff\xfe\x00garbage"),
    "meta_empty": lambda e: (e / META).write_text(""),
    "meta_list": lambda e: (e / META).write_text("[]"),
    "meta_null": lambda e: (e / META).write_text("null"),
    "meta_string": lambda e: (e / META).write_text('"meta"'),
    "meta_no_arrays": lambda e: (e / META).write_text('{"version": 1}'),
    "meta_other_code": lambda e: _edit_meta(e, code="0"),
    "meta_bad_check": lambda e: _edit_meta(e, arrays={"node_feat": 5}),
    "meta_arrays_list": lambda e: _edit_meta(e, arrays=[]),
    "meta_wrong_dtype": lambda e: _edit_meta(e, dtype="<f8"),
    "meta_wrong_shape": lambda e: _edit_meta(e, shape=[25, 14]),
}


def _edit_meta(entry: Path, code=None, arrays=None, dtype=None, shape=None) -> None:
    info = json.loads((entry / META).read_text())
    if code is not None:
        info["code"] = code
    if arrays is not None:
        info["arrays"] = arrays
    if dtype is not None:
        info["arrays"]["node_feat"]["dtype"] = dtype
    if shape is not None:
        info["arrays"]["node_feat"]["shape"] = shape
    (entry / META).write_text(json.dumps(info))


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_corrupt_entry_is_detected_and_rebuilt(source, folder, corruption):
    build = Builder()
    cache = ArrayCache(folder)
    cache.load(source, SETTINGS, build)
    entry = folder / cache.key(source, SETTINGS)
    assert (entry / META).is_file()
    CORRUPTIONS[corruption](entry)
    arrays, meta = ArrayCache(folder).load(source, SETTINGS, build)  # verification is once per process
    assert build.calls == 2
    assert_same_arrays(arrays, reference_arrays())
    assert meta == META_IN
    again, _ = ArrayCache(folder).load(source, SETTINGS, build)  # the rebuilt entry is intact
    assert build.calls == 2
    assert_same_arrays(again, reference_arrays())


def test_an_entry_another_process_wrote_meanwhile_stands(source, folder):
    """Two processes miss the same entry and both build it: the one that finishes second keeps the first one's
    entry (which that process is reading) and reads it, instead of replacing it under the reader."""
    first = ArrayCache(folder)
    entry = folder / first.key(source, SETTINGS)
    written = {}

    def build_while_another_writes():
        written["arrays"], _ = ArrayCache(folder).load(source, SETTINGS, Builder())  # the other process, first
        written["inode"] = entry.stat().st_ino
        return reference_arrays(), dict(META_IN)

    arrays, meta = first.load(source, SETTINGS, build_while_another_writes)
    assert entry.stat().st_ino == written["inode"]  # the same directory, not a replacement
    assert_same_arrays(arrays, reference_arrays())
    assert_same_arrays(written["arrays"], reference_arrays())
    assert meta == META_IN and not [p for p in folder.iterdir() if p.name.startswith(".")]


def test_failed_build_leaves_no_entry(source, folder):
    def broken():
        raise RuntimeError("boom")

    cache = ArrayCache(folder)
    with pytest.raises(RuntimeError):
        cache.load(source, SETTINGS, broken)
    assert not (folder / cache.key(source, SETTINGS)).exists()
    build = Builder()
    cache.load(source, SETTINGS, build)
    assert build.calls == 1


# ---------------------------------------------------------------- load_graph


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    make_tree(root)
    # train files with duplicated configs, so that dedup changes the record
    lay = layout_arrays(n=25, c=8, nc=4, seed=7)
    lay["node_config_feat"][[3, 6]] = lay["node_config_feat"][[0, 1]]
    split_file(root, "layout:xla:random", "train", "dup_layout", lay)
    til = tile_arrays(n=9, c=7, seed=8)
    til["config_feat"][[4, 5]] = til["config_feat"][[2, 2]]
    split_file(root, "tile:xla", "train", "dup_tile", til)
    lay_valid = dict(lay)
    lay_valid["config_runtime"] = lay["config_runtime"] + 1
    split_file(root, "layout:xla:random", "valid", "dup_layout", lay_valid)
    return root


def data_files(root: Path) -> list[tuple[Path, str]]:
    return sorted((p, p.parent.name) for p in root.rglob("*.npz"))


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under root (folders too) with its type, size and modification time."""
    out = {}
    for path in [root, *root.rglob("*")]:
        stat = path.stat()
        out[str(path)] = (path.is_dir(), stat.st_size if path.is_file() else 0, stat.st_mtime_ns)
    return out


def assert_same_graph(got, expected) -> None:
    for field in dataclasses.fields(got):
        a, b = getattr(got, field.name), getattr(expected, field.name)
        if field.name == "meta":
            assert a == b
        else:
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), field.name


SETTING_VARIANTS = [
    Preprocessing(),
    Preprocessing(prune="output_path", dedup="mean", sentinel=False),
    Preprocessing(prune="none", dedup="first", extra_features=False),
    Preprocessing(prune="k_hop", hops=0, dedup="none"),
]


@pytest.mark.parametrize("settings", SETTING_VARIANTS, ids=["default", "output_path", "none", "hops0"])
def test_load_graph_cached_equals_uncached(data_root, tmp_path, settings):
    cache = ArrayCache(tmp_path / "cache")
    files = data_files(data_root)
    assert {split for _, split in files} == {"train", "valid", "test"} and len(files) == 15
    for path, split in files:
        plain = load_graph(path, split, settings, None)
        miss = load_graph(path, split, settings, cache)
        hit = load_graph(path, split, settings, ArrayCache(tmp_path / "cache"))
        assert_same_graph(miss, plain)
        assert_same_graph(hit, plain)


def test_load_graph_dedups_train_only(data_root):
    settings = Preprocessing(dedup="min")
    for collection, stem, distinct in [("layout/xla/random", "dup_layout", 6), ("tile/xla", "dup_tile", 5)]:
        train = load_graph(data_root / "npz_all/npz" / collection / "train" / f"{stem}.npz", "train", settings, None)
        assert train.num_configs == distinct and train.meta["configs_raw"] == distinct + 2
        assert len(np.unique(train.config_index)) == distinct
    valid = load_graph(data_root / "npz_all/npz/layout/xla/random/valid/dup_layout.npz", "valid", settings, None)
    assert valid.num_configs == 8 and np.array_equal(valid.config_index, np.arange(8))


def test_load_graph_record_matches_the_file(data_root):
    path = data_root / "npz_all/npz/layout/xla/random/train/dup_layout.npz"
    graph = load_graph(path, "train", Preprocessing(dedup="first"), None)
    with np.load(path) as raw:
        config_feat, runtime = raw["node_config_feat"], raw["config_runtime"]
    assert np.array_equal(graph.configs, pack(config_feat)[graph.config_index])
    assert np.array_equal(graph.target, runtime[graph.config_index].astype(np.float64))
    assert graph.config_index.tolist() == [0, 1, 2, 4, 5, 7]  # rows 3 and 6 repeat rows 0 and 1


def test_load_graph_hit_does_not_rebuild(data_root, tmp_path, monkeypatch):
    calls = []
    original = preprocess.build_record

    def counting(*args, **kwargs):
        calls.append(args[0].path)
        return original(*args, **kwargs)

    monkeypatch.setattr(preprocess, "build_record", counting)
    files = data_files(data_root)
    for round_ in range(2):
        cache = ArrayCache(tmp_path / "cache")
        for path, split in files:
            load_graph(path, split, Preprocessing(), cache)
        assert len(calls) == len(files), round_
    load_graph(files[0][0], files[0][1], Preprocessing(hops=2), cache)  # a setting changed
    assert len(calls) == len(files) + 1


def test_load_graph_never_writes_to_the_data_folder(data_root, tmp_path):
    before = snapshot(data_root)
    cache = ArrayCache(tmp_path / "cache")
    for settings in SETTING_VARIANTS[:2]:
        for path, split in data_files(data_root):
            load_graph(path, split, settings, cache)
            load_graph(path, split, settings, cache)
            load_graph(path, split, settings, None)
    assert snapshot(data_root) == before
    assert any((tmp_path / "cache").iterdir())


def test_code_digest_follows_the_source_of_the_modules(tmp_path, monkeypatch):
    module = tmp_path / "record_code_probe.py"
    module.write_text("SCALE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = code_digest(["record_code_probe"])
    assert code_digest(["record_code_probe"]) == before
    module.write_text("SCALE = 2\n")
    assert code_digest(["record_code_probe"]) != before


def test_entries_of_other_code_are_not_served(source, folder):
    build = Builder()
    ArrayCache(folder, code="a").load(source, SETTINGS, build)
    ArrayCache(folder, code="a").load(source, SETTINGS, build)
    assert build.calls == 1
    ArrayCache(folder, code="b").load(source, SETTINGS, build)  # the preprocessing code changed
    assert build.calls == 2
    assert record_cache(folder).code == code_digest(RECORD_CODE) != ""
