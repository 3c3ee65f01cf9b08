"""Write, merge, check and score Kaggle submission CSVs (`ID,TopConfigs`); CLI: check-submission, score, submit."""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..atomic import atomic_write
from ..constants import COLLECTIONS
from ..data.reader import DataError, find_collections, list_files, submission_id
from ..data.tasks import task_of
from ..errors import BAD_DATA, OK
from ..metrics import TILE_TOPK, final_score, rank_order

HEADER = ("ID", "TopConfigs")
ANSWERS_HEADER = ("ID", "Runtimes")
SHOWN_PROBLEMS = 20  # problems quoted in a SubmissionError's message
_INDEX = re.compile(r"\s*[0-9]+\s*", re.ASCII)
MAX_DIGITS = 18  # any config index fits; more digits would overflow int64
FIELD_LIMIT = 1 << 30  # csv's default 128 KiB field limit is below a 100,040-config layout permutation (~0.6 MB)


class SubmissionError(ValueError):
    """A submission (or answers) file that breaks the format; the message names the file, row and expectation."""


class Row(NamedTuple):
    line: int  # line number in the file, the header being line 1
    id: str
    field: str  # the raw TopConfigs (or Runtimes) text


@dataclass
class CheckReport:
    """What `check` found: the parsed rows (ID -> config indices, fastest first) and every problem."""

    path: Path
    rows: dict[str, np.ndarray] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    expected: int | None = None  # number of test files checked against, None without a root

    @property
    def ok(self) -> bool:
        return not self.problems

    def raise_if_bad(self) -> CheckReport:
        if self.problems:
            raise SubmissionError(_error_text(self.path, self.problems))
        return self


def _error_text(path: Path, problems: list[str]) -> str:
    shown = problems[:SHOWN_PROBLEMS]
    more = len(problems) - len(shown)
    return f"{path}: " + "\n  ".join(shown + ([f"... and {more} more problem(s)"] if more else []))


def collection_of(row_id: str) -> str | None:
    """The collection an ID belongs to ('tile:xla:abc' -> 'tile:xla'), None when no collection prefix fits."""
    for name in COLLECTIONS:
        if row_id.startswith(name + ":") and len(row_id) > len(name) + 1:
            return name
    return None


# ---------------------------------------------------------------- writing


def collection_file_stem(collection: str) -> str:
    """'layout:xla:random' -> 'layout_xla_random': the name of its CSV and of its YAML in configs/."""
    return collection.replace(":", "_")


def rows_from_scores(collection: str, scores: dict[str, np.ndarray]) -> list[tuple[str, str]]:
    """(ID, TopConfigs) rows sorted by ID from per-file scores (stem -> [c], lower = faster)."""
    if collection not in COLLECTIONS:
        raise ValueError(f"unknown collection {collection!r}; expected one of {', '.join(COLLECTIONS)}")
    rows = []
    for stem in sorted(scores):
        order = _ranking(collection, stem, np.asarray(scores[stem]))[:task_of(collection).submitted]
        rows.append((f"{collection}:{stem}", _join(order)))
    return rows


def _join(order: np.ndarray) -> str:
    return ";".join(map(str, order.tolist()))


def _ranking(collection: str, stem: str, values: np.ndarray) -> np.ndarray:
    """Config indices fastest first: the stable ascending argsort of finite scores."""
    if values.ndim != 1 or values.size == 0:
        raise SubmissionError(f"{collection}:{stem}: scores of shape {values.shape}; expected one score per config")
    if not np.isfinite(values).all():
        raise SubmissionError(f"{collection}:{stem}: {int((~np.isfinite(values)).sum())} NaN/inf scores; "
                              "expected finite scores")
    return rank_order(values)


def csv_text(rows: list[tuple[str, str]]) -> str:
    """A submission's text: the header, then one line per (ID, order) row."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(HEADER)
    writer.writerows(rows)
    return text.getvalue()


def _write_rows(path: Path, rows: list[tuple[str, str]]) -> None:
    with atomic_write(path, newline="") as handle:
        handle.write(csv_text(rows))


def write_collection(path: str | Path, collection: str, scores: dict[str, np.ndarray]) -> Path:
    """Write one collection's submission CSV atomically."""
    path = Path(path)
    _write_rows(path, rows_from_scores(collection, scores))
    return path


def merge(paths: list[Path], out: str | Path, root: str | Path | None = None) -> Path:
    """Merge per-collection CSVs into one submission (collections in COLLECTIONS order, IDs sorted); with `root`,
    check it against the test files before writing, so a bad merge never replaces `out`."""
    out = Path(out)
    merged: dict[str, np.ndarray] = {}
    source: dict[str, str] = {}
    for path in map(Path, paths):
        report = check(path).raise_if_bad()
        for row_id, order in report.rows.items():
            if row_id in merged:
                raise SubmissionError(f"{path}: ID {row_id} also in {source[row_id]}; expected each ID in one input")
            merged[row_id], source[row_id] = order, str(path)
    ordered = sorted(merged, key=lambda row_id: (COLLECTIONS.index(collection_of(row_id)), row_id))
    rows = [(row_id, _join(merged[row_id])) for row_id in ordered]
    if root is not None:
        problems = _validate([Row(i + 2, *row) for i, row in enumerate(rows)], expected_test_files(root))[1]
        if problems:
            raise SubmissionError(_error_text(out, problems))
    _write_rows(out, rows)
    return out


# ---------------------------------------------------------------- the test set


def expected_test_files(root: str | Path) -> dict[str, int]:
    """ID -> number of configs of every test file of every collection found under `root`."""
    return {submission_id(collection, path): _count_configs(path)
            for collection in find_collections(root) for path in list_files(root, collection, "test")}


def _count_configs(path: Path) -> int:
    return len(_read_arrays(path, ("config_runtime",))["config_runtime"])


def _read_arrays(path: Path, keys: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """Only `keys` (and those of `optional` present) of an npz, opened lazily: big config arrays are never read."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {key: npz[key] for key in keys + tuple(k for k in optional if k in npz.files)}
    except KeyError as err:
        raise DataError(path, str(err.args[0]), "key missing", "a TpuGraphs .npz file") from err
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as err:
        raise DataError(path, "<file>", f"unreadable archive ({type(err).__name__}: {err})",
                        "a complete .npz (zip) file") from err


def answers_from_split(root: str | Path, split: str = "valid") -> tuple[dict[str, int], dict[str, np.ndarray]]:
    """Treat a split with known runtimes as the test set: (ID -> config count, ID -> runtimes, lower = faster)."""
    answers = {submission_id(collection, path): _target(path)
               for collection in find_collections(root) for path in list_files(root, collection, split)}
    return {row_id: len(runtimes) for row_id, runtimes in answers.items()}, answers


def _target(path: Path) -> np.ndarray:
    """The file's target as RawGraph.target() defines it, read lazily: runtime / normalizer for tile."""
    arrays = _read_arrays(path, ("config_runtime",), optional=("config_runtime_normalizers",))
    for key, values in arrays.items():
        if values.size == 0 or values.min() <= 0:
            raise DataError(path, key, f"minimum {values.min(initial=0)}", "positive values (a split with runtimes)")
    runtime = arrays["config_runtime"].astype(np.float64)
    normalizers = arrays.get("config_runtime_normalizers")
    return runtime if normalizers is None else runtime / normalizers


# ---------------------------------------------------------------- reading and checking


def _read_csv(path: Path, header: tuple[str, str]) -> tuple[list[Row] | None, list[str]]:
    """The data rows of a two-column CSV (None when it cannot be read at all) and its problems."""
    expected = ",".join(header)
    if not path.is_file():
        return None, [f"no such file; expected a CSV with header {expected}"]
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        return None, [f"not a text file; expected a CSV with header {expected}"]
    if not text.strip():
        return None, [f"empty file; expected a CSV with header {expected}"]
    csv.field_size_limit(max(csv.field_size_limit(), FIELD_LIMIT))  # process-wide, and only ever raised
    reader = csv.reader(io.StringIO(text, newline=""))  # line_num counts \n, \r\n and \r line ends alike
    rows: list[Row] | None = None  # None until the header is read
    problems = []
    while True:
        line = reader.line_num + 1  # where the next row starts
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as err:  # e.g. a field over FIELD_LIMIT
            problems.append(f"line {line}: unreadable CSV ({err}); expected {expected}")
            if reader.line_num < line:  # no progress: stop rather than loop
                break
            continue
        if rows is None:
            if tuple(cell.strip() for cell in cells) != header:
                return None, [f"line {line}: header {_quote(','.join(cells))}; expected {expected}"]
            rows = []
        elif len(cells) <= 1 and not "".join(cells).strip():
            continue  # a blank line
        elif len(cells) != 2:
            problems.append(f"line {line}: {len(cells)} fields; expected 2 ({expected})")
        else:
            rows.append(Row(line, cells[0].strip(), cells[1]))
    if rows is None:  # every line unreadable
        return None, problems or [f"no header; expected a CSV with header {expected}"]
    return rows, problems


def _quote(text: str, limit: int = 40) -> str:
    """repr of `text`, shortened to about `limit` characters: a problem line must stay one readable line."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} characters)"


def _validate(rows: list[Row], expected: dict[str, int] | None,
              against: str = "test file under the data root") -> tuple[dict[str, np.ndarray], list[str]]:
    """Parse every row's TopConfigs and list each problem; without `expected`, only what needs no config counts."""
    parsed: dict[str, np.ndarray] = {}
    problems: list[str] = []
    first_line: dict[str, int] = {}
    for row in rows:
        where = f"line {row.line} ({row.id if len(row.id) <= 100 else row.id[:100] + '...'})"  # garbage IDs: short
        if row.id in first_line:
            problems.append(f"{where}: duplicate ID, first on line {first_line[row.id]}; expected each ID once")
            continue
        first_line[row.id] = row.line
        collection = collection_of(row.id)
        if collection is None:
            problems.append(f"{where}: unknown ID; expected '<collection>:<stem>' with a collection "
                            f"among {', '.join(COLLECTIONS)}")
            continue
        if expected is not None and row.id not in expected:
            problems.append(f"{where}: unknown ID; no such {against}")
            continue
        order, problem = _parse_order(row.field)
        if problem is None:
            count = None if expected is None else expected[row.id]
            submitted = task_of(collection).submitted
            problem = _layout_problem(order, count) if submitted is None else _top_problem(order, count, submitted)
        if problem:
            problems.append(f"{where}: {problem}")
        else:
            parsed[row.id] = order
    if expected is not None:
        problems += [f"missing ID {row_id} ({count} configs); expected a row for every {against}"
                     for row_id, count in expected.items() if row_id not in first_line]
    return parsed, problems


def _parse_order(text: str) -> tuple[np.ndarray, str | None]:
    """Distinct config indices of one TopConfigs field, or what is wrong with them."""
    if not text.strip():
        return np.empty(0, np.int64), "empty TopConfigs; expected config indices joined by ';'"
    tokens = text.split(";")
    bad = [i for i, token in enumerate(tokens) if not _INDEX.fullmatch(token)]
    if bad:
        return np.empty(0, np.int64), (f"entry {bad[0] + 1} {_quote(tokens[bad[0]])} is not a non-negative integer; "
                                       "expected TopConfigs to hold config indices joined by ';'")
    huge = [i for i, token in enumerate(tokens) if len(token.strip().lstrip("0")) > MAX_DIGITS]
    if huge:
        return np.empty(0, np.int64), (f"entry {huge[0] + 1} {_quote(tokens[huge[0]].strip())} out of range; "
                                       "expected TopConfigs to hold config indices")
    order = np.array([int(token) for token in tokens], dtype=np.int64)
    values, counts = np.unique(order, return_counts=True)
    if (counts > 1).any():
        return order, f"index {values[counts > 1][0]} repeated; expected distinct config indices in TopConfigs"
    return order, None


def _top_problem(order: np.ndarray, count: int | None, submitted: int) -> str | None:
    """Rows of the `submitted` fastest configs (all of them when the file has fewer); `count` = the file's
    configs."""
    if count is None:
        return None if len(order) <= submitted else f"{len(order)} indices; expected {submitted} in TopConfigs"
    if order.max() >= count:
        return _out_of_range(order, count)
    want = min(submitted, count)
    return None if len(order) == want else \
        f"{len(order)} indices; expected {want} in TopConfigs (the file has {count} configs)"


def _out_of_range(order: np.ndarray, count: int) -> str:
    return f"index {order.max()} out of range; the file has {count} configs (TopConfigs indices 0..{count - 1})"


def _layout_problem(order: np.ndarray, count: int | None) -> str | None:
    """Layout rows: a permutation of every config; without `count`, of 0..len-1."""
    if count is not None and order.max() >= count:
        return _out_of_range(order, count)
    size = len(order) if count is None else count
    if len(order) == size and order.max() == size - 1:
        return None
    missing = np.setdiff1d(np.arange(size), order)  # never np.arange(order.max()): that may be 10**18
    listed = ", ".join(map(str, missing[:10].tolist())) + (" ..." if len(missing) > 10 else "")
    found = f"{len(order)} of {count} configs" if count is not None else f"{len(order)} indices up to {order.max()}"
    return f"incomplete permutation: {found}, missing {listed}; expected every config index once in TopConfigs"


def check(csv_path: str | Path, root: str | Path | None = None, expected: dict[str, int] | None = None) -> CheckReport:
    """Every problem of a submission; against the test files under `root` (or `expected`: ID -> configs) if given."""
    path = Path(csv_path)
    if expected is None and root is not None:
        expected = expected_test_files(root)
    report = CheckReport(path, expected=None if expected is None else len(expected))
    rows, report.problems = _read_csv(path, HEADER)
    if rows is not None:
        if not rows and not report.problems:
            report.problems.append(f"no rows after the header; expected a row ({','.join(HEADER)}) per test file")
        report.rows, more = _validate(rows, expected)
        report.problems += more
    return report


def read_answers(path: str | Path) -> dict[str, np.ndarray]:
    """ID -> true runtimes in config-index order from an answers CSV (`ID,Runtimes`, ';'-joined floats)."""
    path = Path(path)
    rows, problems = _read_csv(path, ANSWERS_HEADER)
    answers: dict[str, np.ndarray] = {}
    for row in rows or []:
        where = f"line {row.line} ({row.id})"
        try:
            runtimes = np.array([float(token) for token in row.field.split(";")])
        except ValueError:
            problems.append(f"{where}: Runtimes {row.field[:40]!r}; expected numbers joined by ';'")
            continue
        if row.id in answers:
            problems.append(f"{where}: duplicate ID; expected each ID once")
        elif not np.isfinite(runtimes).all() or runtimes.min() <= 0:
            problems.append(f"{where}: runtimes in [{runtimes.min()}, {runtimes.max()}]; expected positive numbers")
        answers[row.id] = runtimes
    if problems:
        raise SubmissionError(_error_text(path, problems))
    return answers


# ---------------------------------------------------------------- scoring


def score(csv_path: str | Path, answers: dict[str, np.ndarray]) -> dict:
    """Per collection present in the submission: {'score', 'files'} plus tile top-K errors; 'final' is the mean of
    the five collection scores, None unless all five are there. Each present collection must be complete."""
    path = Path(csv_path)
    rows, problems = _read_csv(path, HEADER)
    if problems or not rows:
        no_rows = f"no rows after the header; expected rows ({','.join(HEADER)}) to score"
        raise SubmissionError(_error_text(path, problems or [no_rows]))
    present = {collection_of(row.id) for row in rows} - {None}
    expected = {row_id: len(runtimes) for row_id, runtimes in answers.items() if collection_of(row_id) in present}
    parsed, problems = _validate(rows, expected, against="file in the answers")
    if problems:
        raise SubmissionError(_error_text(path, problems))
    result: dict = {}
    for collection in (c for c in COLLECTIONS if c in present):
        ids = sorted(row_id for row_id in parsed if collection_of(row_id) == collection)
        pairs = [(_positions(parsed[row_id], len(answers[row_id])), answers[row_id]) for row_id in ids]
        entry = task_of(collection).collection_metrics(pairs, [len(parsed[row_id]) for row_id in ids])
        result[collection] = {**entry, "files": len(ids)}
    result["final"] = final_score({c: result[c]["score"] for c in COLLECTIONS}) if present == set(COLLECTIONS) \
        else None
    return result


def _positions(order: np.ndarray, count: int) -> np.ndarray:
    """Predicted score of each config: its position in the submitted order; unlisted configs rank after all."""
    pred = np.full(count, float(count))
    pred[order] = np.arange(len(order))
    return pred


def format_scores(scores: dict) -> str:
    """An aligned text table of `score`'s result."""
    collections = {name: values for name, values in scores.items() if name != "final"}
    topk = [f"top{k}_error" for k in TILE_TOPK if any(f"top{k}_error" in v for v in collections.values())]
    columns = ["files", "score", *topk]
    lines = [f"{'collection':<20}" + "".join(f"{c:>13}" for c in columns)]
    for name, values in collections.items():
        lines.append(f"{name:<20}" + "".join(f"{_cell(values.get(c)):>13}" for c in columns))
    lines.append(f"{'final (mean of 5)':<20}{'':>13}{_cell(scores.get('final')):>13}")
    return "\n".join(lines)


def _cell(value: float | int | None) -> str:
    if value is None:
        return "-"
    return str(value) if isinstance(value, int) else f"{value:.4f}"


# ---------------------------------------------------------------- command line


def check_main(argv: list[str] | None = None) -> int:
    """`solution check-submission FILE`: each problem on stderr; exit BAD_DATA when there is one."""
    parser = argparse.ArgumentParser(prog="solution check-submission", description="Check a submission CSV.")
    parser.add_argument("file", type=Path)
    parser.add_argument("--data.root", "--root", dest="root", type=Path, default=None,
                        help="dataset whose test files the submission must cover (without it: format only)")
    args = parser.parse_args(argv)
    report = check(args.file, args.root)
    for problem in report.problems:
        print(f"error: {args.file}: {problem}", file=sys.stderr)
    if not report.ok:
        print(f"{args.file}: {len(report.problems)} problem(s)")
        return BAD_DATA
    against = f"all {report.expected} test files under {args.root}" if args.root else "format only (no --data.root)"
    print(f"{args.file}: OK, {len(report.rows)} rows; checked {against}")
    return OK


def score_main(argv: list[str] | None = None) -> int:
    """`solution score FILE --answers PATH`: the score table."""
    parser = argparse.ArgumentParser(prog="solution score", description="Score a submission against known runtimes.")
    parser.add_argument("file", type=Path)
    parser.add_argument("--answers", type=Path, required=True,
                        help="an answers.csv (ID,Runtimes) or a data root whose valid split serves as answers")
    args = parser.parse_args(argv)
    answers = answers_from_split(args.answers)[1] if args.answers.is_dir() else read_answers(args.answers)
    print(format_scores(score(args.file, answers)))
    return OK


def submit_main(argv: list[str] | None = None) -> int:
    """`solution submit`: merge the per-collection CSVs into one submission."""
    parser = argparse.ArgumentParser(prog="solution submit", description="Merge per-collection CSVs into one.")
    parser.add_argument("files", nargs="*", type=Path,
                        help="per-collection CSVs (default: <dir>/<collection>.csv for all five)")
    parser.add_argument("--dir", type=Path, default=Path("submissions"))
    parser.add_argument("--out", type=Path, default=None, help="default: <dir>/submission.csv")
    parser.add_argument("--data.root", "--root", dest="root", type=Path, default=None,
                        help="dataset whose test files the submission must cover")
    args = parser.parse_args(argv)
    files = args.files or [args.dir / f"{collection_file_stem(c)}.csv" for c in COLLECTIONS]
    out = merge(files, args.out or args.dir / "submission.csv", args.root)
    checked = (f"checked the format of every row and that it covers each test file of {args.root} with a "
               "permutation of its configs") if args.root else ("checked the format of every row (header, IDs, "
               "orders that are permutations); not against the test files: give --data.root for that")
    print(f"wrote {out} from {len(files)} file(s); {checked}")
    return OK
