"""reader: every malformed file gives a DataError naming file, key, what was found and what was expected."""

from __future__ import annotations

import shutil
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pytest
from npz_factory import collection_dir, layout_arrays, make_tree, split_file, tile_arrays, write_npz

from solution.data import reader
from solution.data.reader import (
    ConfigNodeWarning,
    DataError,
    ExtraKeyWarning,
    find_collections,
    list_files,
    read_graph,
)

N, C, NC = 12, 5, 3  # layout_arrays defaults
TN = 6  # tile_arrays default


def _write(tmp_path: Path, arrays: dict, split: str = "train", kind: str = "layout", compressed=False) -> Path:
    collection = "layout:xla:random" if kind == "layout" else "tile:xla"
    return split_file(tmp_path, collection, split, "model_batch_8", arrays, compressed)


def _expect_error(path: Path, key: str, found: tuple[str, ...], expected: tuple[str, ...]) -> DataError:
    with pytest.raises(DataError) as info:
        read_graph(path)
    err, message = info.value, str(info.value)
    assert err.file == str(path) and str(path) in message
    assert err.key == key and f"'{key}'" in message
    for part in found:
        assert part in err.found and part in message, (part, message)
    for part in expected:
        assert part in err.expected and part in message, (part, message)
    return err


# ---------------------------------------------------------------- valid files


@pytest.mark.parametrize("dtypes", ["real", "readme"])
@pytest.mark.parametrize("compressed", [False, True])
def test_valid_layout_file_is_read_as_written(tmp_path, dtypes, compressed):
    arrays = layout_arrays(dtypes=dtypes)
    graph = read_graph(_write(tmp_path, arrays, compressed=compressed))
    assert graph.task.name == "layout" and not graph.is_test and graph.num_configs == C
    assert graph.node_feat.dtype == np.float32 and np.array_equal(graph.node_feat, arrays["node_feat"])
    assert graph.config_feat.dtype == np.int8 and np.array_equal(graph.config_feat, arrays["node_config_feat"])
    for got, key in [(graph.node_opcode, "node_opcode"), (graph.edge_index, "edge_index"),
                     (graph.config_node_ids, "node_config_ids"), (graph.config_runtime, "config_runtime")]:
        assert got.dtype == np.int64 and np.array_equal(got, arrays[key]), key
    assert graph.node_splits.shape == (3,) and np.array_equal(graph.node_splits, arrays["node_splits"].ravel())
    assert graph.node_splits[0] == 0 and graph.node_splits[-1] == len(arrays["node_feat"])  # the official form
    assert graph.normalizers is None
    assert np.array_equal(graph.target(), arrays["config_runtime"].astype(np.float64))


@pytest.mark.parametrize("dtypes", ["real", "readme"])
def test_valid_tile_file_is_read_as_written(tmp_path, dtypes):
    arrays = tile_arrays(dtypes=dtypes)
    graph = read_graph(_write(tmp_path, arrays, kind="tile"))
    assert graph.task.name == "tile" and graph.config_node_ids is None and graph.node_splits is None
    assert graph.config_feat.dtype == np.float32 and np.array_equal(graph.config_feat, arrays["config_feat"])
    assert graph.normalizers.dtype == np.int64
    assert np.array_equal(graph.normalizers, arrays["config_runtime_normalizers"])
    expected = arrays["config_runtime"].astype(np.float64) / arrays["config_runtime_normalizers"]
    assert np.array_equal(graph.target(), expected)


def test_node_splits_are_optional(tmp_path):
    arrays = layout_arrays()
    del arrays["node_splits"]
    graph = read_graph(_write(tmp_path, arrays))
    assert graph.node_splits is None and graph.computation_bounds().tolist() == [0, len(arrays["node_feat"])]


@pytest.mark.parametrize("splits,bounds", [
    ([0, 12], [0, 12]),  # one computation: the common case, n last
    ([0, 5, 9, 12], [0, 5, 9, 12]),  # the official form: running counts after each major computation, then n
    ([0, 5, 9], [0, 5, 9, 12]),  # last value below n: the last computation runs to n
    ([0], [0, 12]),
    ([0, 5, 5, 12, 12], [0, 5, 12]),  # repeats (empty computations) are no computations
])
def test_node_splits_in_the_official_encoders_form_are_accepted(tmp_path, splits, bounds):
    arrays = layout_arrays(n=12)
    arrays["node_splits"] = np.array([splits], np.int64)
    graph = read_graph(_write(tmp_path, arrays))
    assert graph.node_splits.tolist() == splits and graph.computation_bounds().tolist() == bounds


@pytest.mark.parametrize("splits,found,expected", [
    ([0, 5, 13], "values in [0, 13]", "integers in [0, 12]"),
    ([0, -1, 12], "values in [-1, 12]", "integers in [0, 12]"),
    ([3, 5, 12], "first value 3", "0 first"),
    ([0, 9, 5, 12], "a decrease at position 2 (9 -> 5)", "non-decreasing"),
])
def test_malformed_node_splits_are_refused(tmp_path, splits, found, expected):
    arrays = layout_arrays(n=12)
    arrays["node_splits"] = np.array([splits], np.int64)
    _expect_error(_write(tmp_path, arrays), "node_splits", (found,), (expected,))


@pytest.mark.parametrize("key, dtype", [("node_feat", np.float32), ("node_config_feat", np.int8)])
def test_float64_accepted_and_cast_to_the_read_dtype(tmp_path, key, dtype):
    arrays = layout_arrays()
    arrays[key] = arrays[key].astype(np.float64)
    graph = read_graph(_write(tmp_path, arrays))
    got = graph.node_feat if key == "node_feat" else graph.config_feat
    assert got.dtype == dtype and np.array_equal(got, arrays[key])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, ">f4"])
@pytest.mark.parametrize("compressed", [False, True])
def test_layouts_read_block_by_block_are_the_whole_array(tmp_path, monkeypatch, dtype, compressed):
    """node_config_feat is read a few configs at a time into int8, whatever its stored dtype and compression."""
    monkeypatch.setattr(reader, "_BLOCK", 2 * NC * 18)  # 2 configs a block: 3 blocks for 5 configs
    arrays = layout_arrays()
    arrays["node_config_feat"] = arrays["node_config_feat"].astype(dtype)
    path = _write(tmp_path, arrays, compressed=compressed)
    with np.load(path) as npz:
        assert reader._read_compact(npz, "node_config_feat") is not None  # the block-by-block path, not its fallback
    graph = read_graph(path)
    assert graph.config_feat.dtype == np.int8 and np.array_equal(graph.config_feat, arrays["node_config_feat"])


@pytest.mark.parametrize("bad, found", [(7.0, "values in [-1, 7]"), (2.5, "not integers"), (np.nan, "NaN/inf")])
def test_a_bad_layout_value_in_the_last_block_is_reported_as_from_a_whole_read(tmp_path, monkeypatch, bad, found):
    monkeypatch.setattr(reader, "_BLOCK", 2 * NC * 18)
    arrays = layout_arrays()
    arrays["node_config_feat"][-1, 0, 0] = bad
    _expect_error(_write(tmp_path, arrays), "node_config_feat", (found,), ())


def test_reading_layouts_never_holds_them_at_their_stored_width(tmp_path, monkeypatch):
    """Peak traced memory of read_graph on a 7.2 MB float32 node_config_feat stays under that float32 size: only
    the int8 result (1/4 of it) and one block exist at a time."""
    monkeypatch.setattr(reader, "_BLOCK", 1 << 16)
    arrays = layout_arrays(n=60, c=2000, nc=50)
    stored = arrays["node_config_feat"].astype(np.float32)
    path = _write(tmp_path, arrays)
    del arrays
    tracemalloc.start()
    try:
        graph = read_graph(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert graph.config_feat.shape == (2000, 50, 18)
    assert peak < 0.5 * stored.nbytes, (peak, stored.nbytes)


def test_float64_tile_config_accepted(tmp_path):
    arrays = tile_arrays()
    arrays["config_feat"] = arrays["config_feat"].astype(np.float64)
    graph = read_graph(_write(tmp_path, arrays, kind="tile"))
    assert graph.config_feat.dtype == np.float32 and np.array_equal(graph.config_feat, arrays["config_feat"])


@pytest.mark.parametrize("key", ["node_opcode", "edge_index", "node_config_ids", "config_runtime", "node_splits"])
@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.uint64])
def test_other_integer_dtypes_accepted(tmp_path, key, dtype):
    arrays = layout_arrays()
    arrays[key] = arrays[key].astype(dtype)
    graph = read_graph(_write(tmp_path, arrays))
    got = {"node_opcode": graph.node_opcode, "edge_index": graph.edge_index,
           "node_config_ids": graph.config_node_ids, "config_runtime": graph.config_runtime,
           "node_splits": graph.node_splits}[key]
    assert got.dtype == np.int64 and np.array_equal(got.reshape(arrays[key].shape), arrays[key])


def test_no_configurable_nodes_accepted(tmp_path):
    graph = read_graph(_write(tmp_path, layout_arrays(nc=0)))
    assert graph.config_feat.shape == (C, 0, 18) and graph.config_node_ids.shape == (0,)


def test_no_edges_accepted(tmp_path):
    graph = read_graph(_write(tmp_path, layout_arrays(m=0)))
    assert graph.edge_index.shape == (0, 2)


# ---------------------------------------------------------------- keys

LAYOUT_REQUIRED = ["node_feat", "node_opcode", "edge_index", "node_config_feat", "node_config_ids", "config_runtime"]
TILE_REQUIRED = ["node_feat", "node_opcode", "edge_index", "config_feat", "config_runtime",
                 "config_runtime_normalizers"]


@pytest.mark.parametrize("kind,key", [("layout", k) for k in LAYOUT_REQUIRED] + [("tile", k) for k in TILE_REQUIRED])
def test_missing_key(tmp_path, kind, key):
    arrays = layout_arrays() if kind == "layout" else tile_arrays()
    del arrays[key]
    _expect_error(_write(tmp_path, arrays, kind=kind), key, ("missing",), (key,))


@pytest.mark.parametrize("kind,extra", [("layout", "foo"), ("layout", "config_runtime_normalizers"),
                                        ("tile", "node_splits"), ("tile", "node_config_ids")])
def test_extra_key_is_read_past_with_a_warning(tmp_path, kind, extra):
    arrays = layout_arrays() if kind == "layout" else tile_arrays()
    arrays[extra] = np.zeros(3, np.int64)
    path = _write(tmp_path, arrays, kind=kind)
    with pytest.warns(ExtraKeyWarning, match=f"{path}: key\\(s\\) {extra}: unexpected in a {kind} file"):
        graph = read_graph(path)
    assert graph.task.name == kind and np.array_equal(graph.node_feat, arrays["node_feat"])


# ---------------------------------------------------------------- shapes

# (kind, key, new shape, expected shape text)
BAD_SHAPES = [
    ("layout", "node_feat", (N * 140,), "(*, 140)"),
    ("layout", "node_feat", (N, 140, 1), "(*, 140)"),
    ("layout", "node_feat", (N, 139), "(*, 140)"),
    ("layout", "node_feat", (N, 141), "(*, 140)"),
    ("layout", "node_opcode", (N, 1), f"({N},)"),
    ("layout", "node_opcode", (N + 1,), f"({N},)"),
    ("layout", "node_opcode", (N - 1,), f"({N},)"),
    ("layout", "edge_index", (2 * N * 2,), "(*, 2)"),
    ("layout", "edge_index", (2 * N, 3), "(*, 2)"),
    ("layout", "config_runtime", (C, 1), "(*,)"),
    ("layout", "node_config_feat", (C, NC * 18), f"({C}, *, 18)"),
    ("layout", "node_config_feat", (C, NC, 17), f"({C}, *, 18)"),
    ("layout", "node_config_feat", (C, NC, 19), f"({C}, *, 18)"),
    ("layout", "node_config_feat", (C + 1, NC, 18), f"({C}, *, 18)"),
    ("layout", "node_config_ids", (NC + 1,), f"({NC},)"),
    ("layout", "node_config_ids", (NC, 1), f"({NC},)"),
    ("tile", "config_feat", (C, 23), f"({C}, 24)"),
    ("tile", "config_feat", (C, 25), f"({C}, 24)"),
    ("tile", "config_feat", (C, 24, 1), f"({C}, 24)"),
    ("tile", "config_feat", (C + 1, 24), f"({C}, 24)"),
    ("tile", "config_runtime_normalizers", (C - 1,), f"({C},)"),
    ("tile", "node_feat", (TN, 139), "(*, 140)"),
]


@pytest.mark.parametrize("kind,key,shape,expected", BAD_SHAPES)
def test_wrong_shape(tmp_path, kind, key, shape, expected):
    arrays = layout_arrays() if kind == "layout" else tile_arrays()
    arrays[key] = np.resize(arrays[key], shape)  # same dtype, other shape
    _expect_error(_write(tmp_path, arrays, kind=kind), key, (str(shape),), (expected,))


# ---------------------------------------------------------------- dtypes


@pytest.mark.parametrize("key", ["node_feat", "node_opcode", "edge_index", "node_config_feat", "node_config_ids",
                                 "config_runtime"])
def test_string_dtype_rejected(tmp_path, key):
    arrays = layout_arrays()
    arrays[key] = arrays[key].astype(str)
    dtype = str(arrays[key].dtype)
    _expect_error(_write(tmp_path, arrays), key, (dtype,), ("dtype",))


@pytest.mark.parametrize("key", ["node_opcode", "edge_index", "config_runtime"])
def test_float_dtype_rejected_for_integer_keys(tmp_path, key):
    arrays = layout_arrays()
    arrays[key] = arrays[key].astype(np.float32)
    _expect_error(_write(tmp_path, arrays), key, ("float32",), ("integer",))


def test_object_array_rejected(tmp_path):
    arrays = layout_arrays()
    arrays["node_feat"] = np.array([{"a": 1}, None], dtype=object)  # needs pickle to load
    _expect_error(_write(tmp_path, arrays), "<file>", ("unreadable",), (".npz",))


# ---------------------------------------------------------------- values


def _set(key, index, value):
    def mutate(arrays):
        array = arrays[key].copy()
        array[index] = value
        arrays[key] = array
    return mutate


def _astype(key, dtype, index, value):
    def mutate(arrays):
        array = arrays[key].astype(dtype)
        array[index] = value
        arrays[key] = array
    return mutate


# (id, kind, mutation, key, found parts, expected parts)
BAD_VALUES = [
    ("edge_negative", "layout", _set("edge_index", (3, 1), -1), "edge_index", ("-1",), (f"{N - 1}",)),
    ("edge_eq_n", "layout", _set("edge_index", (0, 0), N), "edge_index", (f"{N}",), (f"{N - 1}",)),
    ("edge_big", "layout", _set("edge_index", (5, 1), 10**9), "edge_index", (f"{10**9}",), (f"{N - 1}",)),
    ("tile_edge_eq_n", "tile", _set("edge_index", (0, 1), TN), "edge_index", (f"{TN}",), (f"{TN - 1}",)),
    ("opcode_121", "layout", _set("node_opcode", 0, 121), "node_opcode", ("121",), ("120",)),
    ("opcode_255", "layout", _set("node_opcode", 1, 255), "node_opcode", ("255",), ("120",)),
    ("opcode_negative", "layout", _astype("node_opcode", np.int32, 1, -3), "node_opcode", ("-3",), ("0",)),
    ("config_id_eq_n", "layout", _set("node_config_ids", 2, N), "node_config_ids", (f"{N}",), (f"{N - 1}",)),
    ("config_id_negative", "layout", _set("node_config_ids", 0, -1), "node_config_ids", ("-1",), (f"{N - 1}",)),
    ("config_id_dup", "layout", lambda a: a.__setitem__("node_config_ids", a["node_config_ids"][[0, 0, 1]]),
     "node_config_ids", ("duplicate",), ("once",)),
    ("feat_nan", "layout", _set("node_feat", (2, 30), np.nan), "node_feat", ("NaN",), ("finite",)),
    ("feat_inf", "layout", _set("node_feat", (2, 30), np.inf), "node_feat", ("inf",), ("finite",)),
    ("feat_neg_inf", "layout", _set("node_feat", (0, 0), -np.inf), "node_feat", ("inf",), ("finite",)),
    ("feat64_overflow", "layout", _astype("node_feat", np.float64, (1, 28), 1e300), "node_feat", ("inf",),
     ("finite",)),
    ("config_nan", "layout", _set("node_config_feat", (1, 0, 3), np.nan), "node_config_feat", ("NaN",),
     ("finite",)),
    ("config_inf", "layout", _set("node_config_feat", (1, 0, 3), np.inf), "node_config_feat", ("inf",),
     ("finite",)),
    ("tile_config_nan", "tile", _set("config_feat", (0, 3), np.nan), "config_feat", ("NaN",), ("finite",)),
    ("tile_config_inf", "tile", _set("config_feat", (4, 23), np.inf), "config_feat", ("inf",), ("finite",)),
    ("tile_feat_nan", "tile", _set("node_feat", (0, 139), np.nan), "node_feat", ("NaN",), ("finite",)),
    ("config_minus_2", "layout", _set("node_config_feat", (0, 1, 0), -2), "node_config_feat", ("-2",),
     ("-1", "5")),
    ("config_6", "layout", _set("node_config_feat", (4, 2, 17), 6), "node_config_feat", ("6",), ("-1", "5")),
    ("config_fraction", "layout", _set("node_config_feat", (2, 1, 7), 2.5), "node_config_feat",
     ("not integer",), ("integers",)),
    ("runtime_zero_train", "layout", _set("config_runtime", 2, 0), "config_runtime", ("0",), ("positive",)),
    ("runtime_negative", "layout", _set("config_runtime", 0, -7), "config_runtime", ("-7",), ("positive",)),
    ("runtime_all_zero_train", "layout", lambda a: a["config_runtime"].fill(0), "config_runtime",
     ("zero", "train"), ("positive",)),
    ("tile_runtime_zero", "tile", _set("config_runtime", 1, 0), "config_runtime", ("0",), ("positive",)),
    ("tile_runtime_all_zero", "tile", lambda a: a["config_runtime"].fill(0), "config_runtime", ("zero",),
     ("positive",)),
    ("tile_normalizer_zero", "tile", _set("config_runtime_normalizers", 3, 0), "config_runtime_normalizers",
     ("0",), ("positive",)),
    ("tile_normalizer_negative", "tile", _set("config_runtime_normalizers", 3, -5),
     "config_runtime_normalizers", ("-5",), ("positive",)),
]


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@pytest.mark.parametrize("split", ["train", "valid"])
@pytest.mark.parametrize("kind,mutate,key,found,expected", [case[1:] for case in BAD_VALUES],
                         ids=[case[0] for case in BAD_VALUES])
def test_bad_values(tmp_path, split, kind, mutate, key, found, expected):
    arrays = layout_arrays(split=split) if kind == "layout" else tile_arrays(split=split)
    mutate(arrays)
    found = tuple(split if part == "train" else part for part in found)
    _expect_error(_write(tmp_path, arrays, split=split, kind=kind), key, found, expected)


def test_config_node_with_other_opcode_warns_not_errors(tmp_path):
    arrays = layout_arrays()
    arrays["node_opcode"][arrays["node_config_ids"][1]] = 63
    path = _write(tmp_path, arrays)
    with pytest.warns(ConfigNodeWarning) as record:
        graph = read_graph(path)
    message = str(record[0].message)
    assert str(path) in message and "'node_config_ids'" in message and "63" in message
    assert np.array_equal(graph.config_node_ids, arrays["node_config_ids"])


def test_configurable_opcodes_do_not_warn(tmp_path):
    arrays = layout_arrays(nc=3)
    arrays["node_opcode"][arrays["node_config_ids"]] = [26, 34, 75]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigNodeWarning)
        read_graph(_write(tmp_path, arrays))


@pytest.mark.parametrize("kind", ["layout", "tile"])
def test_all_zero_runtimes_accepted_in_test(tmp_path, kind):
    arrays = layout_arrays(split="test") if kind == "layout" else tile_arrays(split="test")
    assert not arrays["config_runtime"].any()
    graph = read_graph(_write(tmp_path, arrays, split="test", kind=kind))
    assert graph.is_test and graph.num_configs == C
    assert np.array_equal(graph.target(), np.zeros(C))


def test_split_argument_overrides_folder(tmp_path):
    arrays = layout_arrays(split="test")
    path = write_npz(tmp_path / "loose" / "hash.npz", arrays)
    assert read_graph(path, split="test").is_test
    with pytest.raises(DataError):
        read_graph(path, split="valid")


def test_nonzero_runtimes_are_not_test(tmp_path):
    assert not read_graph(_write(tmp_path, layout_arrays(), split="valid")).is_test


@pytest.mark.parametrize("kind,split", [("layout", "train"), ("tile", "train"), ("layout", "test"),
                                        ("tile", "test")])
def test_zero_configs_rejected(tmp_path, kind, split):
    arrays = layout_arrays(c=0, split=split) if kind == "layout" else tile_arrays(c=0, split=split)
    _expect_error(_write(tmp_path, arrays, split=split, kind=kind), "config_runtime", ("0 configs",),
                  ("at least one",))


# ---------------------------------------------------------------- unreadable files


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("fraction", [0.5, 0.9, 0.01])
def test_truncated_file(tmp_path, compressed, fraction):
    path = _write(tmp_path, layout_arrays(n=60), compressed=compressed)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])
    _expect_error(path, "<file>", ("unreadable",), ("npz",))


def test_empty_file(tmp_path):
    path = _write(tmp_path, layout_arrays())
    path.write_bytes(b"")
    _expect_error(path, "<file>", ("unreadable",), ("npz",))


@pytest.mark.parametrize("seed", [0, 1])
def test_random_bytes(tmp_path, seed):
    path = _write(tmp_path, layout_arrays())
    path.write_bytes(np.random.default_rng(seed).bytes(5000))
    _expect_error(path, "<file>", ("unreadable",), ("npz",))


def test_plain_npy_is_not_an_npz(tmp_path):
    path = tmp_path / "train" / "x.npz"
    path.parent.mkdir()
    with open(path, "wb") as handle:
        np.save(handle, np.zeros((3, 140), np.float32))
    with pytest.raises(DataError) as info:
        read_graph(path)
    assert str(path) in str(info.value)


def test_missing_file(tmp_path):
    path = tmp_path / "npz_all" / "train" / "nothing.npz"
    _expect_error(path, "<file>", ("no such file",), ("npz",))


@pytest.mark.parametrize("compressed", [False, True])
def test_any_single_corrupted_byte_gives_data_error_or_a_valid_read(tmp_path, compressed):
    """Flip every byte of a small file in turn: a reader error must always be a DataError."""
    path = _write(tmp_path, layout_arrays(n=4, c=2, nc=1, m=2, computations=1), compressed=compressed)
    data = path.read_bytes()
    escaped = {}
    for offset in range(len(data)):
        corrupt = bytearray(data)
        corrupt[offset] ^= 0xFF
        path.write_bytes(bytes(corrupt))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                read_graph(path)
        except DataError as err:
            assert str(path) in str(err)
        except Exception as err:  # noqa: BLE001 - the point of the test
            escaped.setdefault(type(err).__name__, offset)
    assert not escaped, f"non-DataError exceptions (type: first offset): {escaped}"


# ---------------------------------------------------------------- discovery


@pytest.fixture()
def tree(tmp_path):
    files = make_tree(tmp_path)
    return tmp_path, files


def test_find_collections_from_every_accepted_root(tree):
    root, _ = tree
    npz = root / "npz_all" / "npz"
    expected = {"layout:xla:random": npz / "layout" / "xla" / "random", "tile:xla": npz / "tile" / "xla"}
    assert find_collections(root) == expected
    assert find_collections(npz) == expected
    assert find_collections(str(npz)) == expected
    for name, folder in expected.items():
        assert {k: v.resolve() for k, v in find_collections(folder).items()} == {name: folder.resolve()}


@pytest.mark.parametrize("collection", ["layout:xla:random", "tile:xla"])
@pytest.mark.parametrize("split", ["train", "valid", "test"])
def test_list_files_same_from_every_root(tree, collection, split):
    root, files = tree
    expected = sorted(p.resolve() for p in files[(collection, split)])
    assert len(expected) == 2
    for start in (root, root / "npz_all" / "npz", collection_dir(root, collection)):
        assert [p.resolve() for p in list_files(start, collection, split)] == expected


def test_list_files_ignores_other_files(tree):
    root, files = tree
    folder = collection_dir(root, "tile:xla") / "valid"
    (folder / "notes.txt").write_text("x")
    assert len(list_files(root, "tile:xla", "valid")) == len(files[("tile:xla", "valid")])


def test_empty_folder_is_an_error(tmp_path):
    (tmp_path / "npz_all" / "npz").mkdir(parents=True)
    with pytest.raises(DataError) as info:
        find_collections(tmp_path)
    assert str(tmp_path) in str(info.value) and "layout" in str(info.value)


def test_missing_root_is_an_error(tmp_path):
    with pytest.raises(DataError) as info:
        find_collections(tmp_path / "absent")
    assert str(tmp_path / "absent") in str(info.value)


def test_list_files_missing_split_names_the_folder(tree):
    root, _ = tree
    folder = collection_dir(root, "tile:xla") / "valid"
    shutil.rmtree(folder)
    with pytest.raises(DataError) as info:
        list_files(root, "tile:xla", "valid")
    assert str(folder) in str(info.value) and info.value.key == "valid"


def test_list_files_missing_collection(tree):
    root, _ = tree
    with pytest.raises(DataError) as info:
        list_files(root, "layout:nlp:default", "train")
    assert "layout:nlp:default" in str(info.value) and str(root) in str(info.value)


@pytest.mark.parametrize("collection,split", [("layout:xla:bogus", "train"), ("tile:xla", "training")])
def test_unknown_names_are_value_errors(tree, collection, split):
    root, _ = tree
    with pytest.raises(ValueError):
        list_files(root, collection, split)
