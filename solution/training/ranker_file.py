"""Ranker files: a collection's trained members, its physics prior's weights and their blend, saved whole as data
(no pickled code) and read back with every key and class checked, so that every command ranks the same way."""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import __version__
from ..atomic import atomic_files
from ..constants import COLLECTIONS
from ..data.sets import GraphSet
from ..physics.blend import blend_shares
from ..physics.prior import WEIGHTS, prior_by_row
from ..submission.ensemble import combine
from ..submission.files import SubmissionError
from .checkpoints import CheckpointError, check_contents, checkpoint_collection, load_as_data, saved_settings
from .inference import ScoreTable

FORMAT, FORMAT_VERSION, SUFFIX = "solution.ranker", 1, ".ranker"
MEMBER_KEYS = ("state_dict", "hyper_parameters", "datamodule_hyper_parameters")  # what a member keeps of its checkpoint
WRITERS = "`solution run` or `solution fit`"


@dataclass
class SavedRanker:
    """One collection's ranker: per graph, the mean of its members' normalised ranks at 1 - `weight` against the
    physics prior's ranks (its weights `prior`, by name) at `weight`; at weight 1 the prior alone ranks and no
    network is built. `tried` holds the valid score of each weight the valid files chose among."""

    collection: str
    members: list[dict[str, Any]]  # each a checkpoint's MEMBER_KEYS
    prior: dict[str, float] = field(default_factory=dict)  # the physics prior's weights by name; empty: none
    weight: float = 0.0  # the prior's share of the ranks
    tried: list[tuple[float, float]] = field(default_factory=list)  # (weight, valid score) of each weight tried
    package_version: str = __version__

    @classmethod
    def of_checkpoints(cls, checkpoints: Sequence[Mapping[str, Any]], prior: np.ndarray | None = None,
                       weight: float = 0.0, tried: Sequence[tuple[float, float]] = ()) -> SavedRanker:
        """A ranker of checkpoints read by `read_checkpoint` (one collection), with the prior's weights in WEIGHTS'
        order."""
        members = [{key: saved[key] for key in MEMBER_KEYS if key in saved} for saved in checkpoints]
        collection = saved_settings(members[0])["data"].get("collection")
        named = {} if prior is None else {name: float(value) for name, value in zip(WEIGHTS, prior)}
        return cls(collection, members, named, float(weight), [(float(w), float(s)) for w, s in tried])

    @property
    def fitted_prior(self) -> np.ndarray:
        """[len(WEIGHTS)] the prior's weights in WEIGHTS' order."""
        return np.array([self.prior[name] for name in WEIGHTS])

    @property
    def data_settings(self) -> dict:
        """The data settings that shape the inputs (pruning, features, segments): the first member's."""
        return saved_settings(self.members[0])["data"] if self.members else {"collection": self.collection}

    def save(self, path: str | Path) -> Path:
        """Write the ranker to `path` atomically (a temporary sibling renamed over it when whole)."""
        buffer = io.BytesIO()
        torch.save({"format": FORMAT, "format_version": FORMAT_VERSION, "package_version": self.package_version,
                    "collection": self.collection, "members": self.members, "prior": self.prior,
                    "weight": self.weight, "tried": [list(pair) for pair in self.tried]}, buffer)
        with atomic_files([path], "wb") as (handle,):
            handle.write(buffer.getvalue())
        return Path(path)

    def scores(self, graphs: GraphSet, member_scores: Callable[[int], ScoreTable]) -> dict[int, np.ndarray]:
        """Graph index -> [configs] the blended score of each config row of `graphs` (lower = predicted faster);
        `member_scores(j)` scores every config of `graphs` with member j."""
        tables = [member_scores(j) for j in range(len(self.members))] if self.weight < 1 else []
        shares = np.array(blend_shares(len(tables), self.weight))
        out = {}
        for index in range(len(graphs)):
            ranked = [table_row_scores(table, graphs, index) for table in tables]
            if self.weight > 0:
                ranked.append(prior_by_row(graphs, index, self.fitted_prior))
            out[index] = ranked[0] if len(ranked) == 1 else combine(ranked, shares, "rank")
        return out


def table_row_scores(table: ScoreTable, graphs: GraphSet, index: int) -> np.ndarray:
    """[configs] a table's mean score of each config row of graph `index`; one it misses is refused."""
    rows, mean, _ = table.graph(index)
    if not np.array_equal(rows, np.arange(graphs.num_configs(index))):
        raise SubmissionError(f"{graphs.paths[index]}: predictions cover {len(rows)} of {graphs.num_configs(index)} "
                              "configs; expected every config ranked (nothing was written)")
    return mean


def read_ranker(path: str | Path) -> SavedRanker:
    """A ranker file (`.ranker`), or a checkpoint as a ranker of one member and no prior; anything else, a file cut
    short, one holding pickled objects, naming a class outside the package or a key of another version, is refused
    in one line (CheckpointError)."""
    path = Path(path)
    if path.suffix != SUFFIX:
        saved = load_as_data(path, "checkpoint", WRITERS)
        check_contents(saved, path)
        checkpoint_collection(saved, path)
        return SavedRanker.of_checkpoints([saved])
    data = load_as_data(path, "ranker", WRITERS)
    if not isinstance(data, Mapping) or data.get("format") != FORMAT:
        raise CheckpointError(f"{path}: key format is {_got(data, 'format')}; expected {FORMAT!r} (a file written "
                              f"by {WRITERS})")
    if data.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: key format_version is {_got(data, 'format_version')}; expected "
                              f"{FORMAT_VERSION} (written by package version {data.get('package_version')!r})")
    ranker = SavedRanker(data.get("collection"), data.get("members"), data.get("prior"), data.get("weight"),
                         [tuple(pair) for pair in data.get("tried") or []], str(data.get("package_version")))
    check_ranker(ranker, path)
    return ranker


def check_ranker(ranker: SavedRanker, path: Path) -> None:
    """Refuse a ranker whose keys do not hold what `SavedRanker` says, naming the file and the key."""
    if ranker.collection not in COLLECTIONS:
        raise CheckpointError(f"{path}: key collection is {ranker.collection!r}; expected one of "
                              f"{', '.join(COLLECTIONS)}")
    weight = ranker.weight
    if not isinstance(weight, float) or not 0 <= weight <= 1:
        raise CheckpointError(f"{path}: key weight is {weight!r}; expected a number from 0 to 1")
    if not isinstance(ranker.members, list) or not ranker.members and weight < 1:
        raise CheckpointError(f"{path}: key members holds no member; expected at least one unless weight is 1")
    for index, member in enumerate(ranker.members):
        check_contents(member, path, f"members[{index}].")
        collection = saved_settings(member)["data"].get("collection")
        if collection != ranker.collection:
            raise CheckpointError(f"{path}: key members[{index}].datamodule_hyper_parameters.collection is "
                                  f"{collection!r}; expected {ranker.collection!r}, the ranker's")
    prior = ranker.prior
    names_ok = isinstance(prior, Mapping) and (not prior or set(prior) == set(WEIGHTS))
    if not names_ok or not all(isinstance(v, float) and math.isfinite(v) for v in prior.values()) \
            or weight > 0 and not prior:
        raise CheckpointError(f"{path}: key prior holds {sorted(prior) if isinstance(prior, Mapping) else prior!r}; "
                              f"expected a number for each of {', '.join(WEIGHTS)}"
                              + (" (the ranker blends the prior in)" if weight > 0 else " or none"))


def _got(data: Any, key: str) -> str:
    """How a key of a loaded file reads in an error: its value, or that it is missing."""
    return repr(data[key]) if isinstance(data, Mapping) and key in data else "missing"


def describe(ranker: SavedRanker) -> str:
    """What a ranker ranks by, in words: 'the physics prior alone', '2 members and the physics prior at weight 0.5'."""
    if ranker.weight >= 1:
        return "the physics prior alone"
    members = "one network" if len(ranker.members) == 1 else f"{len(ranker.members)} networks"
    return members + (f" and the physics prior at weight {ranker.weight:g}" if ranker.weight > 0 else ", no prior")
