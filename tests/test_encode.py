"""HLO text to TpuGraphs arrays: exact on the fixtures, the same for XLA's dump syntax, clear errors, whole files."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from solution import errors
from solution.data.reader import read_graph
from solution.format import OPCODE_IDS
from solution.programs.encode import (
    LAYOUT_KEYS,
    UnknownOpcodeWarning,
    encode_file,
    encode_program,
    write_npz,
)
from solution.programs.hlo import HloError, parse_module
from solution.tools.encode import main

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO.parent / "shared" / "fixtures"
HLO = FIXTURES / "hlo"
PROGRAMS = ["fixture_scan_rnn", "fixture_conv_reshape_dot", "fixture_attention_train", "fixture_conv_pool_pad",
            "fixture_embed_loop"]

PLAIN = """HloModule small, entry_computation_layout={(f32[8,16]{1,0}, f32[16,4]{1,0})->f32[8,4]{1,0}}

add.1 {
  a.1 = f32[] parameter(0)
  b.1 = f32[] parameter(1)
  ROOT s.1 = f32[] add(a.1, b.1)
}

fused.1 {
  p.1 = f32[8,4]{1,0} parameter(0)
  ROOT n.1 = f32[8,4]{1,0} negate(p.1)
}

ENTRY main.1 {
  x.1 = f32[8,16]{1,0} parameter(0)
  w.1 = f32[16,4]{1,0} parameter(1)
  d.1 = f32[8,4]{1,0} dot(x.1, w.1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  f.1 = f32[8,4]{1,0} fusion(d.1), kind=kLoop, calls=fused.1
  z.1 = f32[] constant(0)
  r.1 = f32[8]{0} reduce(f.1, z.1), dimensions={1}, to_apply=add.1
  t.1 = (f32[8]{0}, f32[8,4]{1,0}) tuple(r.1, f.1)
  ROOT g.1 = f32[8,4]{1,0} get-tuple-element(t.1), index=1
}
"""
# the same program as a later-stage XLA dump prints it: % names, operand shapes, tiled layouts, metadata, JSON
# backend configs, comments and the stack-frame tables after the last computation
DUMP = """HloModule small, is_scheduled=true, entry_computation_layout={(f32[8,16]{1,0}, f32[16,4]{1,0})->f32[8,4]{1,0}}

%add.1 (a.1: f32[], b.1: f32[]) -> f32[] {
  %a.1 = f32[] parameter(0)
  %b.1 = f32[] parameter(1)
  ROOT %s.1 = f32[] add(f32[] %a.1, f32[] %b.1)
}

%fused.1 (p.1: f32[8,4]) -> f32[8,4] {
  %p.1 = f32[8,4]{1,0:T(8,128)} parameter(0)
  ROOT %n.1 = f32[8,4]{1,0:T(8,128)} negate(f32[8,4]{1,0:T(8,128)} %p.1), metadata={op_name="jit(f)/neg[a={1, 2}, b=(3)]" source_file="/x/y.py" source_line=3}
}

ENTRY %main.1 (x.1: f32[8,16], w.1: f32[16,4]) -> f32[8,4] {
  %x.1 = f32[8,16]{1,0} parameter(0), sharding={replicated}, metadata={op_name="x"}
  %w.1 = f32[16,4]{1,0} parameter(1)
  %d.1 = f32[8,4]{1,0} dot(f32[8,16]{1,0} %x.1, f32[16,4]{1,0} %w.1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, backend_config={"a":{"b":{"c":[1,2]}},"s":"x,y=z"}
  %f.1 = f32[8,4]{1,0} fusion(f32[8,4]{1,0} %d.1), kind=kLoop, calls=%fused.1, frontend_attributes={_xla="a, b"}
  %z.1 = f32[] constant(0)
  %r.1 = f32[8]{0} reduce(f32[8,4]{1,0} %f.1, f32[] %z.1), dimensions={1}, to_apply=%add.1, /*note*/ metadata={op_name="r"}
  %t.1 = (f32[8]{0}, f32[8,4]{1,0}) tuple(f32[8]{0} %r.1, /*index=1*/f32[8,4]{1,0} %f.1)
  ROOT %g.1 = f32[8,4]{1,0} get-tuple-element((f32[8]{0}, f32[8,4]{1,0}) %t.1), index=1, control-predecessors={%r.1}
}

FileNames
1 "/x/y.py"
StackFrames
1 {file_location_id=1 parent_frame_id=1}
"""


def assert_same(got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    for key in LAYOUT_KEYS:
        assert got[key].dtype == expected[key].dtype, key
        assert got[key].shape == expected[key].shape, key
        assert np.array_equal(got[key], expected[key]), key


def lines_of(name: str) -> list[str]:
    return (HLO / f"{name}.hlo").read_text().splitlines()


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("name", PROGRAMS)
def test_fixture_encodes_exactly(name):
    with np.load(HLO / f"{name}.npz") as expected:
        assert_same(encode_file(HLO / f"{name}.hlo"), dict(expected))


@pytest.mark.parametrize("name", PROGRAMS[:2])
def test_collection_files_hold_the_encoded_graph(name):
    encoded = encode_file(HLO / f"{name}.hlo")
    for split in ("train", "valid", "test"):
        with np.load(FIXTURES / "npz" / "layout" / "xla" / "random" / split / f"{name}.npz") as stored:
            assert_same(encoded, {key: stored[key] for key in LAYOUT_KEYS})


def test_dump_syntax_encodes_like_jax_text(tmp_path):
    plain = encode_file(write(tmp_path / "plain.hlo", PLAIN.splitlines()))
    assert_same(encode_file(write(tmp_path / "dump.txt", DUMP.splitlines())), plain)
    assert plain["node_opcode"].tolist() == [OPCODE_IDS[op] for op in (
        "parameter", "parameter", "add", "parameter", "negate", "parameter", "parameter", "dot", "fusion",
        "constant", "reduce", "tuple", "get-tuple-element")]
    # fusion -> fused root, reduce -> reducer root: the edges into other computations
    edges = {tuple(e) for e in plain["edge_index"].tolist()}
    assert {(8, 4), (10, 2)} <= edges and plain["node_splits"].tolist() == [[0, 13]]


def test_stack_frame_tables_before_the_computations_are_skipped(tmp_path):
    """jax's compiled text (`.compile().as_text()`) prints the metadata tables between the module line and the
    first computation; XLA's dumps print them after the last."""
    lines = DUMP.splitlines()
    tables = lines[lines.index("FileNames"):]
    first = next(i for i, line in enumerate(lines) if line.endswith("{") and i > 0)
    moved = [lines[0], *tables, *lines[1:first], *lines[first:lines.index("FileNames")]]
    assert_same(encode_file(write(tmp_path / "tables_first.txt", moved)),
                encode_file(write(tmp_path / "dump.txt", lines)))


def test_other_syntax_nested_tuples_default_layouts_literals_and_attribute_forms():
    from solution.programs.encode import encode_module

    feat = encode_module(parse_module("""HloModule m
ENTRY main {
  c = f32[2,3] constant({ {1, 2, 3}, {4, 5, 6} })
  t = (f32[2,3], (s32[], f32[<=4]{0})) tuple(c, c), sharding={{maximal device=0}, {replicated}}
  g = f32[2,3] get-tuple-element(t), index=0
  s = f32[1,3]{1,0} slice(g), slice={[0:2:2], [0:3]}
  cc = f32[2,3]{1,0} custom-call(s), custom_call_target="f", replica_groups=[2,2]<=[4]
  ROOT r = f32[2,3]{0,1} reshape(cc), inferred_dimension=1
}
"""))["node_feat"]
    assert feat[0, 134:136].tolist() == [1, 0]  # no layout printed: XLA's default, major-to-minor
    assert feat[1, 29] == 2 and feat[1, 134:].tolist() == [0] * 6  # a tuple's top-level size, no layout
    assert feat[3, 109:121].tolist() == [0, 0, 0, 0, 2, 1, 3, 2, 2, 3, 5, 6]  # slice start, stride, limit
    assert feat[4, 107:109].tolist() == [1, 1]  # a custom-call's group counts, as its proto holds them
    assert feat[5, [0, 31, 134, 135]].tolist() == [1, 1, 0, 1]  # root, inferred dimension, layout {0,1}


def test_calls_are_inlined_with_parameters_bound_to_operands():
    module = parse_module("""HloModule m
ident.1 {
  ROOT p.1 = f32[2]{0} parameter(0)
}
twice.2 {
  q.1 = f32[2]{0} parameter(0)
  inner.1 = f32[2]{0} call(q.1), to_apply=ident.1
  ROOT sum.1 = f32[2]{0} add(inner.1, q.1)
}
ENTRY main.3 {
  x.1 = f32[2]{0} parameter(0)
  y.1 = f32[2]{0} call(x.1), to_apply=twice.2
  ROOT z.1 = f32[2]{0} call(y.1), to_apply=ident.1
}
""")
    from solution.programs.encode import encode_module

    arrays = encode_module(module)
    assert arrays["node_opcode"].tolist() == [OPCODE_IDS["parameter"], OPCODE_IDS["add"]]
    assert arrays["edge_index"].tolist() == [[1, 0]]  # add(x, x) once
    assert arrays["node_feat"][:, 0].tolist() == [0.0, 1.0]  # the entry's root is the inlined add


def test_program_for_rank_names_configurable_nodes_and_ranks():
    program = encode_program(HLO / "fixture_conv_reshape_dot.hlo")
    assert program.names == ["conv_general_dilated.1", "reshape.1", "dot_general.1"]
    assert program.ranks.tolist() == [[4, 4, 4], [2, 4, 0], [2, 2, 0]]
    inlined = encode_program(HLO / "fixture_scan_rnn.hlo").names
    assert "jit_dynamic_index_in_dim_.1/squeeze.1" in inlined and len(set(inlined)) == len(inlined)


def test_written_file_reads_back_as_a_layout_test_file(tmp_path):
    encoded = encode_file(HLO / "fixture_scan_rnn.hlo")
    write_npz(encoded, tmp_path / "program.npz")
    with np.load(tmp_path / "program.npz") as written:
        assert sorted(written.files) == sorted(LAYOUT_KEYS)
        assert_same(dict(written), encoded)
        arrays = dict(written)
    configs = 3
    arrays["node_config_feat"] = np.full((configs, len(arrays["node_config_ids"]), 18), -1, np.float32)
    arrays["config_runtime"] = np.zeros(configs, np.int64)
    (tmp_path / "test").mkdir()
    np.savez(tmp_path / "test" / "program.npz", **arrays)
    graph = read_graph(tmp_path / "test" / "program.npz")
    assert graph.is_test and graph.num_configs == configs
    assert np.array_equal(graph.node_feat, encoded["node_feat"])
    assert np.array_equal(graph.edge_index, encoded["edge_index"])
    assert np.array_equal(graph.config_node_ids, encoded["node_config_ids"])
    assert graph.computation_bounds().tolist() == [0, 23, 32, 55, 64, 86]


def test_unknown_opcode_is_zero_with_a_warning_naming_file_and_line(tmp_path):
    lines = lines_of("fixture_conv_reshape_dot")
    number = next(i for i, line in enumerate(lines, 1) if " multiply(" in line)
    lines[number - 1] = lines[number - 1].replace(" multiply(", " frobnicate(")
    path = write(tmp_path / "odd.hlo", lines)
    with pytest.warns(UnknownOpcodeWarning, match=f"{path} line {number}: opcode 'frobnicate'"):
        encoded = encode_file(path)
    with np.load(HLO / "fixture_conv_reshape_dot.npz") as expected:
        opcodes = expected["node_opcode"].copy()
        opcodes[opcodes == OPCODE_IDS["multiply"]] = 0
        assert encoded["node_opcode"].tolist() == opcodes.tolist()
        assert np.array_equal(encoded["node_feat"], expected["node_feat"])


def replace_on(lines: list[str], marker: str, old: str, new: str) -> int:
    """Replace `old` on the first line holding `marker`; its 1-based number."""
    number = next(i for i, line in enumerate(lines, 1) if marker in line)
    lines[number - 1] = lines[number - 1].replace(old, new)
    return number


BROKEN = {  # name: (edit of the fixture's lines -> line number, what the message says)
    "shape": (lambda ls: replace_on(ls, "dot_general.1 =", "f32[4,10]", "f32[4,x]"), "does not parse"),
    "element type": (lambda ls: replace_on(ls, "reshape.1 =", "f32[4,2048]", "q99[4,2048]"), "does not parse"),
    "operand": (lambda ls: replace_on(ls, "integer_pow.1 =", "(dot_general.1,", "(nowhere.1,"), "'nowhere.1'"),
    "opcode token": (lambda ls: replace_on(ls, "constant.3 =", "constant(0)", "42"), "an opcode"),
    "window": (lambda ls: replace_on(ls, "conv_general_dilated.1 =", "size=3x3", "size=3xq"), "do not parse"),
    "cut line": (lambda ls: (replace_on(ls, "dot_general.1 =", ", rhs_contracting_dims={0}", ""),
                             replace_on(ls, "dot_general.1 =", "params_1_.1)", "params_1"))[0], "truncated"),
    "callee": (lambda ls: replace_on(ls, "reduce_sum.7 =", "to_apply=region_0.2", "to_apply=gone.1"), "'gone.1'"),
}


@pytest.mark.parametrize("case", BROKEN)
def test_broken_line_names_file_and_line(tmp_path, case):
    edit, says = BROKEN[case]
    lines = lines_of("fixture_conv_reshape_dot")
    number = edit(lines)
    path = write(tmp_path / "broken.hlo", lines)
    with pytest.raises(HloError, match=f"line {number}: .*{says}") as caught:
        encode_file(path)
    assert str(path) in str(caught.value) and "expected" in str(caught.value) and caught.value.line == number


def test_truncated_module_and_non_hlo_files(tmp_path):
    lines = lines_of("fixture_scan_rnn")
    cut = write(tmp_path / "cut.hlo", lines[:40])
    with pytest.raises(HloError, match=f"{cut} line 40: the end of the file inside computation 'region_0.4'"):
        encode_file(cut)
    csv = tmp_path / "table.txt"
    csv.write_text("id,runtime\n1,2\n")
    with pytest.raises(HloError, match=f"{csv} line 1: 'id,runtime' \\(not HLO text\\); expected .*HloModule"):
        encode_file(csv)
    binary = tmp_path / "data.hlo"
    shutil.copy(HLO / "fixture_scan_rnn.npz", binary)
    with pytest.raises(HloError, match=f"{binary} line \\d+: .*expected"):
        encode_file(binary)
    empty = write(tmp_path / "empty.hlo", [])
    with pytest.raises(HloError, match="an empty file"):
        encode_file(empty)


def test_folder_input_encodes_every_module(tmp_path, capsys):
    folder = tmp_path / "programs"
    folder.mkdir()
    for name in PROGRAMS[:2]:
        shutil.copy(HLO / f"{name}.hlo", folder / f"{name}.hlo")
    write(folder / "small.before_optimizations.txt", DUMP.splitlines())
    (folder / "notes.md").write_text("not a module")
    assert main([str(folder), "--out", str(tmp_path / "out")]) == errors.OK
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ["fixture_conv_reshape_dot.npz", "fixture_scan_rnn.npz", "small.before_optimizations.npz"]
    for name in PROGRAMS[:2]:
        with np.load(tmp_path / "out" / f"{name}.npz") as got, np.load(HLO / f"{name}.npz") as expected:
            assert_same(dict(got), dict(expected))
    assert "fixture_scan_rnn.npz: 86 nodes, 110 edges, 9 configurable" in capsys.readouterr().out


def test_a_bad_module_in_a_folder_writes_nothing(tmp_path, capsys):
    folder = tmp_path / "programs"
    folder.mkdir()
    shutil.copy(HLO / "fixture_scan_rnn.hlo", folder / "a.hlo")
    write(folder / "b.hlo", lines_of("fixture_conv_reshape_dot")[:10])
    assert main([str(folder), "--out", str(tmp_path / "out")]) == errors.BAD_DATA
    assert "b.hlo line 10" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_command_writes_one_file_and_refuses_bad_paths(tmp_path, capsys):
    out = tmp_path / "sub" / "conv.npz"
    assert main([str(HLO / "fixture_conv_reshape_dot.hlo"), "--out", str(out)]) == errors.OK
    with np.load(out) as got, np.load(HLO / "fixture_conv_reshape_dot.npz") as expected:
        assert_same(dict(got), dict(expected))
    assert main([str(HLO / "fixture_conv_reshape_dot.hlo"), "--out", str(tmp_path / "into")]) == errors.OK
    assert (tmp_path / "into" / "fixture_conv_reshape_dot.npz").is_file()
    assert main([str(tmp_path / "nope.hlo"), "--out", str(out)]) == errors.USAGE
    assert main([str(HLO), "--out", str(tmp_path / "all.npz")]) == errors.USAGE
    assert "no such file" in capsys.readouterr().err


def test_tile_kernels_of_an_optimised_module_read_as_tile_test_files(tmp_path, capsys):
    dump = write(tmp_path / "small.after_optimizations.txt", DUMP.splitlines())
    assert main([str(dump), "--collection", "tile", "--configs", "6", "--out", str(tmp_path / "tiles")]) == errors.OK
    files = sorted((tmp_path / "tiles").iterdir())
    assert [f.name for f in files] == ["small.after_optimizations_fused.1.npz"]  # the one fused computation
    graph = read_graph(files[0], "test")
    assert graph.task.name == "tile" and graph.node_opcode.tolist() == [OPCODE_IDS["parameter"], OPCODE_IDS["negate"]]
    assert graph.edge_index.tolist() == [[1, 0]] and graph.node_feat[:, 0].tolist() == [0.0, 1.0]  # negate is root
    tiles = graph.config_feat  # [C, 24]: kernel bounds, sum, product; output bounds, sum, product; input bounds 0
    assert 1 < len(tiles) <= 6 and len({row.tobytes() for row in tiles}) == len(tiles)
    np.testing.assert_array_equal(tiles[0, :2], [8, 4])  # the default first: the whole [8, 4] output in one tile
    bounds = tiles[:, :2]
    assert ((bounds >= 1) & (bounds <= [8, 4])).all()
    np.testing.assert_array_equal(tiles[:, 6], bounds.sum(1))
    np.testing.assert_array_equal(tiles[:, 7], bounds.prod(1))
    assert (tiles[:, 16:] == 0).all() and graph.is_test


def test_a_module_compiled_by_xla_encodes_as_layout_and_as_tile_kernels(tmp_path, capsys):
    """Real later-stage text: jax's compiled module (after XLA's passes: fusions, stack-frame tables, tiled
    layouts) encodes as one layout file and as one tile file per fused computation, each read by the reader."""
    jax = pytest.importorskip("jax")

    def step(w, x):
        return jax.numpy.tanh(x @ w).sum(0) * 2.0

    args = (jax.numpy.ones((64, 32)), jax.numpy.ones((16, 64)))
    compiled = write(tmp_path / "step.after_optimizations.txt",
                     jax.jit(step).lower(*args).compile().as_text().splitlines())
    assert main([str(compiled), "--out", str(tmp_path / "layout.npz")]) == errors.OK
    with np.load(tmp_path / "layout.npz") as layout:
        assert len(layout["node_opcode"]) > 4 and OPCODE_IDS["fusion"] in layout["node_opcode"]
    assert main([str(compiled), "--collection", "tile", "--out", str(tmp_path / "tiles")]) == errors.OK
    files = sorted((tmp_path / "tiles").iterdir())
    assert files and all(read_graph(f, "test").task.name == "tile" for f in files)


def test_tile_encoding_refuses_unknown_fusions_and_unfused_modules(tmp_path, capsys):
    dump = write(tmp_path / "dump.txt", DUMP.splitlines())
    asked = [str(dump), "--collection", "tile", "--fusion", "fused.9", "--out", str(tmp_path / "t")]
    assert main(asked) == errors.USAGE
    assert "--fusion fused.9: not a fused computation" in capsys.readouterr().err
    plain = HLO / "fixture_conv_reshape_dot.hlo"
    assert main([str(plain), "--collection", "tile", "--out", str(tmp_path / "t")]) == errors.USAGE
    assert "no fused computation in this module" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()


def test_benchmark_script_runs(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("encode_bench", REPO / "benchmarks" / "encode_bench.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules["encode_bench"] = bench
    spec.loader.exec_module(bench)
    assert bench.main(["--smoke", "--out", str(tmp_path / "encode.md")]) == 0
    assert "instructions/s" in (tmp_path / "encode.md").read_text()
