"""Candidate layouts: valid blocks (permutations of each tensor's dims, then -1s), distinct rows, the default first,
the two searches, and a user's own candidates from JSON or CSV."""

from __future__ import annotations

import json

import numpy as np
import pytest

from solution.errors import SettingsError
from solution.programs.candidates import describe_block, searched, user_candidates

RANKS = np.array([[4, 4, 4], [2, 2, 0], [3, 2, 0], [0, 0, 0]])  # a convolution, a dot, a reshape, a node with no layout
NAMES = ["convolution.3", "dot.12", "reshape.7", "other.1"]


def assert_valid(rows: np.ndarray) -> None:
    assert rows.shape[1:] == (len(RANKS), 18) and rows.dtype == np.float32
    assert (rows[0] == -1).all(), "the compiler default comes first"
    assert len({r.tobytes() for r in rows}) == len(rows), "candidates are distinct"
    for row in rows:
        for k, ranks in enumerate(RANKS):
            for b, rank in enumerate(ranks):
                block = row[k, 6 * b:6 * b + 6]
                if rank == 0 or (block == -1).all():
                    assert (block == -1).all()
                else:
                    assert sorted(block[:rank].astype(int)) == list(range(rank)) and (block[rank:] == -1).all()


@pytest.mark.parametrize("search", ["random", "default"])
def test_searched_candidates_are_valid_distinct_and_start_with_the_default(search):
    rows = searched(RANKS, 40, search, np.random.default_rng(0))
    assert_valid(rows)
    assert len(rows) == 41


def test_random_search_sets_every_block_and_default_search_few_nodes():
    random = searched(RANKS, 30, "random", np.random.default_rng(1))[1:]
    assert (random[:, :3, :6] >= 0).any(-1).all(), "random: every node's output block is set"
    default = searched(RANKS, 30, "default", np.random.default_rng(1), changed=1)[1:]
    changed = (default >= 0).any(-1).sum(-1)  # [C] nodes away from the default
    assert (changed == 1).all()


def test_search_stops_when_the_layouts_run_out():
    rows = searched(np.array([[2, 0, 0]]), 50, "random", np.random.default_rng(0))
    assert len(rows) == 3  # default, {0,1}, {1,0}


def test_user_candidates_from_json_and_csv_agree(tmp_path):
    listed = [{"dot.12": {"output": [1, 0], "input": "0,1"}},
              {"convolution.3": {"output": "3 2 1 0", "kernel": "default"}, "reshape.7": {"output": [2, 0, 1]}}]
    (tmp_path / "c.json").write_text(json.dumps(listed))
    (tmp_path / "c.csv").write_text("candidate,node,output,input,kernel\n0,dot.12,1 0,0 1,\n"
                                    "1,convolution.3,3 2 1 0,,default\n1,reshape.7,2 0 1,,\n")
    from_json = user_candidates(tmp_path / "c.json", NAMES, RANKS)
    from_csv = user_candidates(tmp_path / "c.csv", NAMES, RANKS)
    np.testing.assert_array_equal(from_json, from_csv)
    assert_valid(from_json)
    assert describe_block(from_json[1, 1, :6]) == "{1,0}" and describe_block(from_json[1, 0, :6]) == "default"
    assert describe_block(from_json[2, 2, :6]) == "{2,0,1}"


@pytest.mark.parametrize("content,message", [
    ('[{"dot.99": {"output": [1, 0]}}]', "not a configurable node"),
    ('[{"dot.12": {"output": [1, 1]}}]', "expected a permutation of 0..1"),
    ('[{"dot.12": {"output": [0, 1, 2]}}]', "expected a permutation of 0..1"),
    ('{"dot.12": 1}', "expected a list"),
    ('[{"dot.12": [1, 0', "line 1: not JSON"),
])
def test_bad_user_candidates_name_the_file_and_what_was_expected(tmp_path, content, message):
    path = tmp_path / "c.json"
    path.write_text(content)
    with pytest.raises(SettingsError, match=message) as caught:
        user_candidates(path, NAMES, RANKS)
    assert str(path) in str(caught.value)
