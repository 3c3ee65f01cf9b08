"""Submission CSVs: writing, merging, the checker's rejections, and scoring against known runtimes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.stats import kendalltau, rankdata

from solution.constants import COLLECTIONS
from solution.data.reader import list_files, read_graph, submission_id
from solution.submission import files as submission
from solution.submission.files import (
    SubmissionError,
    answers_from_split,
    check,
    check_main,
    collection_of,
    expected_test_files,
    format_scores,
    merge,
    read_answers,
    rows_from_scores,
    score,
    score_main,
    write_collection,
)
from solution.synth.files import generate
from solution.tools.cli import main


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("data"), size="tiny", seed=0)


@pytest.fixture(scope="module")
def expected(root) -> dict[str, int]:
    return expected_test_files(root)


@pytest.fixture(scope="module")
def answers(root) -> dict[str, np.ndarray]:
    return read_answers(root / "answers.csv")


def by_collection(values: dict[str, object]) -> dict[str, dict[str, object]]:
    """ID -> value regrouped as collection -> stem -> value."""
    groups: dict[str, dict[str, object]] = {c: {} for c in COLLECTIONS}
    for row_id, value in values.items():
        collection = collection_of(row_id)
        groups[collection][row_id[len(collection) + 1:]] = value
    return groups


def write_submission(folder: Path, scores: dict[str, np.ndarray], root: Path | None = None) -> Path:
    """One CSV per collection from ID -> scores, merged into folder/submission.csv."""
    parts = [write_collection(folder / f"{c.replace(':', '_')}.csv", c, stems)
             for c, stems in by_collection(scores).items()]
    return merge(parts, folder / "submission.csv", root)


def random_scores(expected: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {row_id: rng.random(count) for row_id, count in expected.items()}


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


@pytest.fixture
def valid_lines(tmp_path, root, expected) -> list[str]:
    return write_submission(tmp_path, random_scores(expected), root).read_text().splitlines()


def pick(expected: dict[str, int], collection: str, min_configs: int = 1) -> str:
    row_id = next((i for i, c in expected.items() if collection_of(i) == collection and c >= min_configs), None)
    assert row_id is not None, f"the synthetic data needs a {collection} test file with >= {min_configs} configs"
    return row_id


def replace_row(lines: list[str], row_id: str, top_configs: str) -> list[str]:
    return [f"{row_id},{top_configs}" if line.split(",")[0] == row_id else line for line in lines]


# ---------------------------------------------------------------- the test set


def test_expected_test_files_lists_every_test_file_with_its_config_count(root, expected):
    files = {submission_id(c, p): p for c in COLLECTIONS for p in list_files(root, c, "test")}
    assert set(expected) == set(files)
    assert {collection_of(i) for i in expected} == set(COLLECTIONS)
    for row_id, path in files.items():
        assert expected[row_id] == read_graph(path, "test").num_configs


def test_answers_from_split_uses_the_valid_runtimes(root):
    counts, answers = answers_from_split(root, "valid")
    files = {submission_id(c, p): p for c in COLLECTIONS for p in list_files(root, c, "valid")}
    assert set(answers) == set(files) == set(counts)
    for row_id, path in files.items():
        np.testing.assert_allclose(answers[row_id], read_graph(path, "valid").target())
        assert counts[row_id] == len(answers[row_id])


# ---------------------------------------------------------------- writing and merging


def test_rows_from_scores_ranks_ascending_with_stable_ties_and_tile_keeps_five():
    scores = {"b": np.array([1.0, 0.0, 1.0, 0.0]), "a": np.array([3.0, 2.0, 1.0, 0.5, 5.0, 4.0, 0.0])}
    assert rows_from_scores("layout:nlp:random", scores) == [
        ("layout:nlp:random:a", "6;3;2;1;0;5;4"), ("layout:nlp:random:b", "1;3;0;2")]
    assert rows_from_scores("tile:xla", scores) == [("tile:xla:a", "6;3;2;1;0"), ("tile:xla:b", "1;3;0;2")]
    ties = np.random.default_rng(0).integers(0, 3, 200).astype(float)
    by_index_within_ties = [i for value in (0, 1, 2) for i in np.flatnonzero(ties == value)]
    assert rows_from_scores("layout:xla:default", {"t": ties})[0][1] == ";".join(map(str, by_index_within_ties))


def test_rows_from_scores_rejects_nan_and_unknown_collection():
    with pytest.raises(SubmissionError, match="tile:xla:k.*NaN"):
        rows_from_scores("tile:xla", {"k": np.array([0.0, np.nan])})
    with pytest.raises(ValueError, match="unknown collection"):
        rows_from_scores("layout:xla", {"k": np.array([0.0])})


def test_valid_submission_from_random_scores_passes_the_checker(tmp_path, root, expected):
    path = write_submission(tmp_path, random_scores(expected), root)
    report = check(path, root)
    assert report.ok, report.problems
    assert report.expected == len(expected) and set(report.rows) == set(expected)
    ids = [line.split(",")[0] for line in path.read_text().splitlines()[1:]]
    assert ids == sorted(ids, key=lambda i: (COLLECTIONS.index(collection_of(i)), i))
    assert check_main([str(path), "--data.root", str(root)]) == 0


def test_merge_refuses_duplicate_ids_across_inputs(tmp_path):
    first = write_collection(tmp_path / "a.csv", "tile:xla", {"k": np.arange(6.0)})
    second = write_collection(tmp_path / "b.csv", "tile:xla", {"k": np.arange(6.0)})
    with pytest.raises(SubmissionError, match=r"b\.csv.*tile:xla:k.*a\.csv"):
        merge([first, second], tmp_path / "submission.csv")


def test_a_failed_merge_leaves_the_old_submission_untouched(tmp_path, root, expected):
    out = write_submission(tmp_path, random_scores(expected), root)
    before = out.read_bytes()
    four = [tmp_path / f"{c.replace(':', '_')}.csv" for c in COLLECTIONS[1:]]
    with pytest.raises(SubmissionError, match="missing ID tile:xla:"):
        merge(four, out, root)
    assert out.read_bytes() == before


def test_write_collection_is_atomic(tmp_path, monkeypatch):
    path = write_collection(tmp_path / "tile_xla.csv", "tile:xla", {"k": np.arange(6.0)})
    before = path.read_bytes()

    class FailingWriter:
        def __init__(self, handle, **_):
            self.handle = handle

        def writerow(self, row):
            self.handle.write(",".join(row) + "\n")

        def writerows(self, rows):
            self.handle.write("tile:xla:k,0;1")
            raise OSError("disk full")

    monkeypatch.setattr(submission.csv, "writer", FailingWriter)
    with pytest.raises(OSError, match="disk full"):
        write_collection(path, "tile:xla", {"k": -np.arange(6.0)})
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["tile_xla.csv"]


# ---------------------------------------------------------------- the checker's rejections


def malformed(lines: list[str], expected: dict[str, int], case: str) -> tuple[list[str], str]:
    """A broken copy of a valid submission's lines and the phrase (with the ID) the checker must report."""
    tile = pick(expected, "tile:xla", min_configs=6)
    layout = pick(expected, "layout:xla:random", min_configs=3)
    c = expected[layout]
    perm = list(range(c))
    if case == "header":
        return ["Id,TopConfigs", *lines[1:]], "header 'Id,TopConfigs'; expected ID,TopConfigs"
    if case == "missing":
        return [line for line in lines if not line.startswith(tile + ",")], f"missing ID {tile}"
    if case == "duplicate":
        row = next(line for line in lines if line.startswith(tile + ","))
        return [*lines, row], f"({tile}): duplicate ID"
    if case == "unknown":
        return [*lines, "tile:xla:no_such_file,0;1;2;3;4"], "(tile:xla:no_such_file): unknown ID"
    if case == "bad prefix":
        return [*lines, "layout:xla:other:k,0"], "(layout:xla:other:k): unknown ID"
    if case == "non-integer":
        return replace_row(lines, tile, "0;1;x;3;4"), f"({tile}): entry 3 'x' is not a non-negative integer"
    if case == "negative":
        return replace_row(lines, tile, "0;1;-2;3;4"), f"({tile}): entry 3 '-2' is not a non-negative integer"
    if case == "float":
        return replace_row(lines, tile, "0;1;2.0;3;4"), f"({tile}): entry 3 '2.0' is not a non-negative integer"
    if case == "empty TopConfigs":
        return replace_row(lines, layout, ""), f"({layout}): empty TopConfigs"
    if case == "out of range":
        return replace_row(lines, layout, ";".join(map(str, perm[:-1] + [c]))), f"({layout}): index {c} out of range"
    if case == "repeated":
        return replace_row(lines, layout, ";".join(map(str, perm[:-1] + [0]))), f"({layout}): index 0 repeated"
    if case == "incomplete permutation":
        return (replace_row(lines, layout, ";".join(map(str, perm[1:]))),
                f"({layout}): incomplete permutation: {c - 1} of {c} configs, missing 0")
    if case == "tile 4":
        return replace_row(lines, tile, "0;1;2;3"), f"({tile}): 4 indices; expected 5"
    if case == "tile 6":
        return replace_row(lines, tile, "0;1;2;3;4;5"), f"({tile}): 6 indices; expected 5"
    if case == "three fields":
        return [*lines, f"{tile},0;1;2;3;4,9"], f"line {len(lines) + 1}: 3 fields; expected 2"
    raise AssertionError(case)


CASES = ["header", "missing", "duplicate", "unknown", "bad prefix", "non-integer", "negative", "float",
         "empty TopConfigs", "out of range", "repeated", "incomplete permutation", "tile 4", "tile 6", "three fields"]


@pytest.mark.parametrize("case", CASES)
def test_checker_rejects_malformed_rows_naming_the_problem(tmp_path, valid_lines, root, expected, case):
    lines, phrase = malformed(valid_lines, expected, case)
    path = write_lines(tmp_path / "bad.csv", lines)
    report = check(path, root)
    assert len(report.problems) == 1 and phrase in report.problems[0], report.problems
    with pytest.raises(SubmissionError) as err:
        report.raise_if_bad()
    assert str(path) in str(err.value) and phrase in str(err.value)


@pytest.mark.parametrize("content, phrase", [
    (None, "no such file"),
    (b"", "empty file"),
    (b"\n  \n", "empty file"),
    (b"PK\x03\x04\x14\x00\x00\x00\x08\x00\xff\xfe\xfa", "not a text file"),
    (b"a;b;c\n1;2;3\n", "header 'a;b;c'"),
])
def test_checker_rejects_files_that_are_not_submissions(tmp_path, content, phrase):
    path = tmp_path / "submission.csv"
    if content is not None:
        path.write_bytes(content)
    report = check(path)
    assert not report.ok and len(report.problems) == 1 and phrase in report.problems[0]
    assert "expected a CSV with header ID,TopConfigs" in report.problems[0] or "expected ID,TopConfigs" in \
        report.problems[0]


def test_checker_without_root_checks_what_needs_no_config_counts(tmp_path):
    good = write_lines(tmp_path / "good.csv", ["ID,TopConfigs", "tile:xla:a,3;1", "layout:nlp:default:b,2;0;1"])
    assert check(good).ok
    bad = write_lines(tmp_path / "bad.csv", ["ID,TopConfigs", "tile:xla:a,0;1;2;3;4;5", "layout:nlp:default:b,3;0;1"])
    problems = check(bad).problems
    assert len(problems) == 2
    assert "(tile:xla:a): 6 indices; expected 5" in problems[0]
    assert "(layout:nlp:default:b): incomplete permutation: 3 indices up to 3, missing 2" in problems[1]


def test_check_cli_prints_every_problem_and_fails(tmp_path, valid_lines, root, expected, capsys):
    tile = pick(expected, "tile:xla", min_configs=6)
    layout = pick(expected, "layout:nlp:default", min_configs=2)
    lines = replace_row(replace_row(valid_lines, tile, "0;1;2;3"), layout, "0")
    path = write_lines(tmp_path / "bad.csv", lines)
    assert check_main([str(path), "--root", str(root)]) == 3
    printed = capsys.readouterr()
    assert f"error: {path}: line" in printed.err and f"({tile}): 4 indices" in printed.err
    assert f"({layout}): incomplete permutation" in printed.err and printed.out == f"{path}: 2 problem(s)\n"


# ---------------------------------------------------------------- scoring


@pytest.fixture(scope="module")
def distinct(answers) -> dict[str, np.ndarray]:
    """The answers with ties broken by config index (ordinal ranks): only then can tau-b reach exactly +-1."""
    return {row_id: rankdata(runtimes, method="ordinal").astype(float) for row_id, runtimes in answers.items()}


def direct_scores(answers: dict[str, np.ndarray], scores: dict[str, np.ndarray]) -> dict[str, float]:
    """Reference scores per collection, computed straight from the definitions with scipy."""
    values: dict[str, list[float]] = {c: [] for c in COLLECTIONS}
    for row_id, target in answers.items():
        order = np.argsort(scores[row_id], kind="stable")
        collection = collection_of(row_id)
        if collection == "tile:xla":
            values[collection].append(2 - target[order[:5]].min() / target.min())
        else:
            position = np.empty(len(order))
            position[order] = np.arange(len(order))
            values[collection].append(kendalltau(position, target).statistic)
    return {c: float(np.mean(v)) for c, v in values.items()}


def test_ranking_by_true_runtimes_scores_one(tmp_path, root, distinct):
    result = score(write_submission(tmp_path, distinct, root), distinct)
    for collection in COLLECTIONS:
        assert result[collection]["score"] == pytest.approx(1.0)
        assert result[collection]["files"] == sum(collection_of(i) == collection for i in distinct)
    assert result["tile:xla"]["top1_error"] == pytest.approx(0.0)
    assert result["tile:xla"]["top5_error"] == pytest.approx(0.0)
    assert result["final"] == pytest.approx(1.0)


def test_reversed_ranking_gives_tau_minus_one(tmp_path, root, distinct):
    result = score(write_submission(tmp_path, {i: -a for i, a in distinct.items()}, root), distinct)
    for collection in COLLECTIONS[1:]:
        assert result[collection]["score"] == pytest.approx(-1.0)
    assert result["tile:xla"]["score"] < 1.0 and result["tile:xla"]["top1_error"] > 0.0


def test_random_ranking_agrees_with_scipy(tmp_path, root, answers):
    scores = random_scores({i: len(a) for i, a in answers.items()}, seed=1)
    result = score(write_submission(tmp_path, scores, root), answers)
    reference = direct_scores(answers, scores)
    for collection in COLLECTIONS:
        assert result[collection]["score"] == pytest.approx(reference[collection])
    assert result["final"] == pytest.approx(np.mean(list(reference.values())))
    table = format_scores(result)
    assert all(c in table for c in COLLECTIONS) and f"{result['final']:.4f}" in table


def test_score_of_one_collection_has_no_final(tmp_path, distinct):
    stems = by_collection(distinct)["layout:nlp:random"]
    path = write_collection(tmp_path / "part.csv", "layout:nlp:random", stems)
    result = score(path, distinct)
    assert set(result) == {"layout:nlp:random", "final"} and result["final"] is None
    assert result["layout:nlp:random"]["score"] == pytest.approx(1.0)


def test_score_rejects_ids_not_in_the_answers_and_incomplete_collections(tmp_path, answers):
    stems = by_collection(answers)["tile:xla"]
    path = write_collection(tmp_path / "part.csv", "tile:xla", {**stems, "zz_unknown": np.arange(6.0)})
    with pytest.raises(SubmissionError, match=r"\(tile:xla:zz_unknown\): unknown ID; no such file in the answers"):
        score(path, answers)
    dropped = sorted(stems)[0]
    path = write_collection(tmp_path / "part.csv", "tile:xla", {s: v for s, v in stems.items() if s != dropped})
    with pytest.raises(SubmissionError, match=f"missing ID tile:xla:{dropped}"):
        score(path, answers)


def test_score_cli_takes_answers_csv_or_a_data_root(tmp_path, root, answers, capsys):
    path = write_submission(tmp_path, answers, root)
    assert score_main([str(path), "--answers", str(root / "answers.csv")]) == 0
    assert "final (mean of 5)" in capsys.readouterr().out
    _, valid = answers_from_split(root, "valid")
    valid_path = write_submission(tmp_path / "valid", valid)
    assert score_main([str(valid_path), "--answers", str(root)]) == 0
    assert "1.0000" in capsys.readouterr().out
    assert main(["score", str(valid_path), "--answers", str(root / "answers.csv")]) == 3
    printed = capsys.readouterr()
    assert f"error: {valid_path}: " in printed.err and "unknown ID" in printed.err and printed.out == ""


def test_read_answers_rejects_malformed_runtimes(tmp_path):
    path = write_lines(tmp_path / "answers.csv", ["ID,Runtimes", "tile:xla:a,1.5;2", "tile:xla:b,1;x"])
    with pytest.raises(SubmissionError, match=r"answers\.csv: line 3 \(tile:xla:b\): Runtimes '1;x'"):
        read_answers(path)
    with pytest.raises(SubmissionError, match="header"):
        read_answers(write_lines(tmp_path / "wrong.csv", ["ID,TopConfigs", "tile:xla:a,1"]))
