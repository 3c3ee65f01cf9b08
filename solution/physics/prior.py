"""The physics prior of configs: the bytes and multiply-adds their layouts cause, under nine weights."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from ..data.packing import unpack
from ..data.preprocess import Graph
from ..data.reader import RawGraph
from ..data.sets import GraphSet
from .propagation import BYTE_PARTS, CONFIG_CHUNK, MATMUL, PARTS, ConfigWork, Propagation, file_propagation

# the prior's weights: one per part that counts bytes (the walk's first BYTE_PARTS; its kernel launches and lane
# reduces are level without them on all three worlds, docs/prior.md), then a dot's or convolution's: per multiply-add,
# per byte it stores, its matrix units' slowdown (log) per operand fed with its key dim not minor, and the roofline's
# sharpness (0: compute and memory time add up; large: the larger one alone)
WEIGHTS = (*PARTS[:BYTE_PARTS], "multiply_adds", "matmul_bytes", "feed_slowdown", "roofline_sharpness")
FEEDS = [MATMUL.index("second_minor_feeds"), MATMUL.index("major_feeds")]  # a dot record's badly fed operands
UNIT = np.array([1.0] * BYTE_PARTS + [0.0, 1.0, 0.0, 1.0])  # the plain count of bytes


def layout_traffic(raw: RawGraph, weights: np.ndarray = UNIT) -> np.ndarray:
    """[c] per config of a layout file, the work its layouts make the program do (`prior_work` of its `ConfigWork`,
    `propagation.py`, under `weights`; lower = predicted faster); by default the bytes moved in 8 x 128 tiles
    over each tensor's two most-minor dims larger than 1. A configurable node stores its output in the config's layout
    and reads its input (and a convolution's kernel) in the config's, a dot's or convolution's operand 0 being the one
    their shapes say (the files keep no operand order); every other node takes its layout as XLA propagates
    it: element-wise and data-movement ops keep their first laid-out operand's of the same rank, transposes and
    reduces map it, broadcasts and constants adapt to their users, parameters, tuples, loop state and the results
    keep the file's. Where a user needs another layout than its producer gives, a copy moves the tensor twice (read
    in one order, written in the other). A while loop's body counts once per trip, the trip count read from the
    stacked tensors its dynamic slices walk, and a conditional's branches an equal share each. No constant of a
    runtime law enters."""
    return prior_work(Propagation.of_file(raw).work(raw.config_feat), weights)


def graph_work(graph: Graph, rows: np.ndarray | None = None) -> ConfigWork:
    """The `ConfigWork` of a preprocessed layout graph's configs (or of its `rows`), in their order, from its whole
    file (read once per process)."""
    propagation = file_propagation(graph.meta["path"], graph.meta["split"])
    return ConfigWork.concatenate(list(_chunk_works(graph, rows)), propagation.matmuls)


def graph_prior(graph: Graph, weights: np.ndarray = UNIT) -> np.ndarray:
    """[c] `layout_traffic` of a preprocessed layout graph's configs, in its row order, a chunk of configs at a time
    (a file's [c, D, 4] matmuls at once could take gigabytes)."""
    return np.concatenate([prior_work(work, weights) for work in _chunk_works(graph)] or [np.zeros(0)])


def _chunk_works(graph: Graph, rows: np.ndarray | None = None) -> Iterator[ConfigWork]:
    """The `ConfigWork` of a graph's configs (or of its `rows`), CONFIG_CHUNK at a time (each unpacked in turn)."""
    propagation = file_propagation(graph.meta["path"], graph.meta["split"])
    configs = graph.configs if rows is None else graph.configs[rows]
    for start in range(0, len(configs), CONFIG_CHUNK):
        yield propagation.work(unpack(configs[start:start + CONFIG_CHUNK]))


def prior_work(work: ConfigWork, weights: np.ndarray) -> np.ndarray:
    """[c] the prior of configs whose work is `work`, under `weights` [len(WEIGHTS)]."""
    matmuls, owners = work.flat_matmuls()
    with torch.no_grad():
        total = weighed(torch.from_numpy(work.parts), torch.from_numpy(matmuls), torch.from_numpy(owners),
                        torch.from_numpy(weights))
    return total.numpy()


def weighed(parts: torch.Tensor, matmuls: torch.Tensor, owners: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """[N] the weighed work of configs with parts [N, K] and dots or convolutions matmuls [R, 4] (MATMUL), each of
    the config `owners` [R] says: the weighed byte parts, plus per dot or convolution the p-norm (p = 1 + sharpness)
    of its compute time (multiply-adds x their weight x the exp of its slowdown per badly fed operand, second-minor
    or further out alike) and its memory time (bytes x their weight), taken in logs (no 0 ** p, whose gradient in p
    is NaN)."""
    multiply_add, byte, feed, sharpness = weights[BYTE_PARTS:]
    badly_fed = matmuls[:, FEEDS].sum(1)  # [R]
    log_compute = (torch.log(multiply_add) + torch.log(matmuls[:, 0].clamp_min(1e-30))  # e^-69 where none
                   + feed * badly_fed)  # [R]
    log_memory = torch.log(byte) + torch.log(matmuls[:, 1].clamp_min(1e-30))  # [R]
    power = 1 + sharpness
    matmul_time = torch.exp(torch.logsumexp(torch.stack([log_compute, log_memory]) * power, 0) / power)  # [R]
    return (parts[:, :BYTE_PARTS] @ weights[:BYTE_PARTS]).index_add(0, owners, matmul_time)


def prior_by_row(graphs: GraphSet, index: int, weights: np.ndarray) -> np.ndarray:
    """[configs of the file] the physics prior (weights `weights`) of a split's graph by the file's config row
    (NaN for a row the preprocessing dropped as a duplicate)."""
    graph = graphs.load(index)
    values = np.full(int(graph.meta["configs_raw"]), np.nan)
    values[graph.config_index] = graph_prior(graph, weights)
    return values
