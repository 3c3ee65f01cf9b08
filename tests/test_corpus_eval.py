"""benchmarks/corpus_eval.py still runs: its smoke mode (tiny real-program corpus, one seed, seconds of training)
with one variant layered on top, and the report's tables hold every collection with its ceiling."""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from pathlib import Path

import pytest

from solution.data.reader import list_files
from solution.synth.files import generate
from solution.tools.settings import configs_folder

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load_corpus_eval():
    spec = importlib.util.spec_from_file_location("corpus_eval", BENCHMARKS / "corpus_eval.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["corpus_eval"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def table_rows(text: str, header: str) -> list[list[str]]:
    """The cells of each data row of the markdown table whose header line starts with `header`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def means(cell: str) -> float:
    """The mean of a 'mean [low, high]' cell."""
    return float(re.match(r"[+-]?[0-9.]+", cell).group())


def test_smoke_reports_model_ceiling_and_percent(tmp_path, capsys):
    layer = tmp_path / "narrow.yaml"
    layer.write_text("model:\n  ranker:\n    init_args:\n      hidden: 32\n")
    out = tmp_path / "corpus_eval.md"
    corpus_eval = load_corpus_eval()
    assert corpus_eval.main(["--smoke", "--variant", f"narrow={layer}", "--out", str(out)]) == 0
    text = out.read_text()
    assert text.rstrip() in capsys.readouterr().out  # printed as well as written
    assert text.startswith("# Leave-family-out evaluation") and "commit" in text
    assert f"CPU cores ({corpus_eval.cpu_model()})" in text  # fits on different CPUs differ in epochs a second
    assert "Command: `python benchmarks/corpus_eval.py --smoke --variant narrow=" in text

    shipped = table_rows(text, "| collection | held-out files | model | noise ceiling | % of ceiling |")
    assert [row[0] for row in shipped] == ["tile:xla", "layout:xla:default", "**mean of the 2**"]
    for row in shipped:
        model, ceiling, percent = (means(cell) for cell in row[2:5])
        assert -1 <= model <= 1 and 0 < ceiling <= 1 and math.isfinite(percent)  # tile: 1 is the best score

    variant = table_rows(text, "| collection | model | % of ceiling | Δ model | Δ % of ceiling |")
    assert [row[0] for row in variant] == ["tile:xla", "layout:xla:default", "**mean of the 2**"]
    assert all(math.isfinite(means(row[3])) for row in variant)
    assert len(table_rows(text, "| collection | settings | seed |")) == 4  # 2 collections x (shipped, narrow)


def test_smoke_members_scores_each_prefix_ensemble_against_one_fit(tmp_path):
    out = tmp_path / "corpus_eval.md"
    assert load_corpus_eval().main(["--smoke", "--members", "2", "--out", str(out)]) == 0
    text = out.read_text()
    rows = table_rows(text, "| collection | ensemble | model | % of ceiling | Δ against one fit")
    assert [row[:2] for row in rows] == [["tile:xla", "one fit"], ["", "x2"], ["layout:xla:default", "one fit"],
                                         ["", "x2"]]
    fits = {(row[0], row[1]): float(row[5]) for row in table_rows(text, "| collection | settings | seed |")}
    for collection, (one, two) in zip(["tile:xla", "layout:xla:default"], (rows[0:2], rows[2:4])):
        members = [fits[collection, "shipped"], fits[collection, "shipped #1"]]
        assert means(one[2]) == pytest.approx(sum(members) / 2, abs=1e-3)
        assert means(two[4]) == pytest.approx(fits[collection, "shipped x2"] - sum(members) / 2, abs=2e-3)
        assert means(two[5]) == pytest.approx(fits[collection, "shipped x2"] - members[0], abs=2e-3)


def test_a_kaggle_format_world_holds_out_families_by_name_against_given_ceilings(tmp_path):
    """A data root without programs.csv (as zoo-law): its train + valid files are the pool, families by file name,
    the layout ceiling as given (tile's is 1); its test files take no part."""
    corpus_eval = load_corpus_eval()
    world = tmp_path / "world"
    generate(world, "tiny", 0, ["tile:xla", "layout:xla:default"])
    files = corpus_eval.read_manifest(world)
    assert {f.split for f in files} == {"train", "valid"}
    assert all(f.stem.startswith(f.family + "_") for f in files)
    assert len(files) == sum(len(list_files(world, c, s)) for c in ("tile:xla", "layout:xla:default")
                             for s in ("train", "valid"))
    out = tmp_path / "world.md"
    argv = ["--data", str(world), "--ceilings", "layout:xla:default=0.8", "--collections", "tile:xla",
            "layout:xla:default", "--seeds", "1", "--folds", "2", "--seconds", "2", "--config",
            str(configs_folder() / "demo.yaml"), "--runs", str(tmp_path / "runs"), "--out", str(out)]
    assert corpus_eval.main(argv) == 0
    fits = table_rows(out.read_text(), "| collection | settings | seed |")
    ceilings = {row[0]: float(row[6]) for row in fits}
    assert ceilings == {"tile:xla": 1.0, "layout:xla:default": 0.8}
    for row in fits:  # every held-out file is one of the pool's, of the families held out
        held = row[3].rsplit(" (", 1)[0].split(", ")
        assert int(row[4]) == sum(f.family in held for f in files if f.collection == row[0])
    # the shipped members wait for a whole job's spare time: a replicate of --seconds is the job's first fit alone
    saved = sorted(p.name for p in (tmp_path / "runs").rglob("*.ckpt"))
    assert saved == ["layout_xla_default.ckpt", "tile_xla.ckpt"]


def test_a_world_without_noiseless_runtimes_needs_its_layout_ceilings(tmp_path):
    world = tmp_path / "world"
    generate(world, "tiny", 0, ["layout:xla:default"])
    with pytest.raises(SystemExit, match="layout:xla:default's noise ceiling"):
        load_corpus_eval().main(["--data", str(world), "--collections", "layout:xla:default", "--seeds", "1",
                                 "--folds", "2", "--seconds", "1", "--runs", str(tmp_path / "runs"),
                                 "--out", str(tmp_path / "out.md")])


def test_smoke_whole_job_scores_every_collection_of_the_seeds_fold(tmp_path):
    """--whole_job: one `solution run --budget` per seed over every collection's fold; seed s holds out fold s mod K."""
    out = tmp_path / "whole.md"
    argv = ["--smoke", "--whole_job", "--budget", "40", "--first_seed", "1", "--out", str(out)]
    assert load_corpus_eval().main(argv) == 0
    text = out.read_text()
    assert "within the whole job `solution run --budget 40 --seed <seed>`" in text
    fits = table_rows(text, "| collection | settings | seed |")
    job = [row for row in fits if row[1] == "shipped"]
    assert [(row[0], row[2]) for row in job] == [("tile:xla", "1"), ("layout:xla:default", "1")]
    assert all(row[3].endswith("(1)") and -1 <= float(row[5]) <= 1 for row in fits)  # seed 1 of 2 folds: fold 1
    first = [row for row in fits if row[1] == "shipped first"]  # each collection's first fit ranked alone
    assert [(row[0], row[2], row[4]) for row in first] == [(row[0], row[2], row[4]) for row in job]
    assert "## `shipped` against its first fits" in text


def test_whole_job_needs_a_budget():
    with pytest.raises(SystemExit):
        load_corpus_eval().main(["--smoke", "--whole_job"])


@pytest.mark.parametrize("flag", ["--budget", "--seconds"])
def test_a_time_of_zero_is_refused_naming_it(flag, capsys):
    with pytest.raises(SystemExit):
        load_corpus_eval().main(["--smoke", flag, "0"])
    assert "'0': expected a positive number of seconds" in capsys.readouterr().err


def test_the_report_names_a_corpus_found_at_data_by_its_programs_not_by_the_build_defaults(tmp_path):
    corpus_eval = load_corpus_eval()
    (tmp_path / "programs.csv").write_text(
        "collection,split,file,family,program,nodes,configs\n"
        "tile:xla,train,a_0_1,mlp,mlp_a,9,3\nlayout:xla:random,train,a,mlp,mlp_a,9,3\n"
        "layout:xla:default,valid,b,cnn,cnn_b,9,3\nlayout:nlp:random,test,c,bert,bert_c,9,3\n")
    args = corpus_eval.argparse.Namespace(built=False, data=tmp_path, size="small", corpus_seed=0)
    assert corpus_eval.corpus_line(args) == (f"Corpus: the program corpus found at {tmp_path} (2 xla, 1 nlp "
                                             "programs; built beforehand). ")
    built = corpus_eval.corpus_line(corpus_eval.argparse.Namespace(**{**vars(args), "built": True, "size": "full"}))
    assert built.startswith("Corpus: `solution synth --programs --size full --seed 0`")
