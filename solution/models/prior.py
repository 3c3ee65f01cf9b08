"""A layout ranking from physics: the bytes each config's layouts make the program move, the kernels its copies
launch and the multiply-adds its matrix units do, part by part, weighed as a collection's own runtimes say (eleven
weights; no model)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..data.packing import unpack
from ..data.preprocess import Graph
from ..data.propagation import BYTE_PARTS, CONFIG_CHUNK, PARTS, Propagation, file_propagation
from ..data.reader import RawGraph
from ..data.splits import FOLD_GROUP, assign_folds, model_group
from ..metrics import kendall_tau, mean_over_graphs

UNIT = np.array([1.0] * BYTE_PARTS + [0.0] * (len(PARTS) - BYTE_PARTS))  # [K] the plain count of bytes
# [K] where a fit starts and its penalty pulls: each byte moved counts 1, a kernel launched as 4000 bytes, a reduce
# across lanes adds a tenth of its bytes again, a multiply-add a 75th of a byte (a TPU's matrix units do a few hundred
# per 4-byte element its memory moves), and an operand fed with its key dim not minor as much again
OTHER_STARTS = {"launches": 4000.0, "lane_reduces": 0.1, "multiply_adds": 4 / 300, "second_minor_feeds": 4 / 300,
                "major_feeds": 4 / 300}
START = np.where(UNIT > 0, 1.0, [OTHER_STARTS.get(p, 0.0) for p in PARTS])
PAIRS = 1024  # config pairs a fit step draws per file
SHARPNESS = 10.0  # the logistic's slope per unit of log work, before the learned temperature


@dataclass(frozen=True)
class PriorFit:
    """How `solution run` weighs the prior's parts (PARTS): fitted to the runtimes of up to `files` train files
    (`configs` of each, `steps` of Adam over a pairwise logistic loss plus a penalty x the mean squared distance of
    the log weights from START's); of several `penalties`, the one whose fits rank the files of held-out model groups
    best (`folds` folds of whole groups); files 0: the plain count of bytes (UNIT)."""

    files: int = 0
    configs: int = 256
    steps: int = 300
    penalties: tuple[float, ...] = (0.01,)
    folds: int = 3


def layout_traffic(raw: RawGraph, weights: np.ndarray = UNIT) -> np.ndarray:
    """[c] per config of a layout file, the work its layouts make the program do, its PARTS (`data/propagation.py`)
    weighed by `weights` [K] (lower = predicted faster); by default the bytes moved in 8 x 128 tiles over
    each tensor's two most-minor dims larger than 1. A configurable node stores its output in the config's layout and
    reads its input (and a convolution's kernel) in the config's, a dot's or convolution's operand 0 being the one
    their shapes say (the files keep no operand order); every other node takes its layout as XLA propagates
    it: element-wise and data-movement ops keep their first laid-out operand's of the same rank, transposes and
    reduces map it, broadcasts and constants adapt to their users, parameters, tuples, loop state and the results
    keep the file's. Where a user needs another layout than its producer gives, a copy moves the tensor twice (read
    in one order, written in the other). A while loop's body counts once per trip, the trip count read from the
    stacked tensors its dynamic slices walk, and a conditional's branches an equal share each. No constant of a
    runtime law enters."""
    return Propagation(raw).parts(raw.config_feat) @ weights


def graph_parts(graph: Graph, rows: np.ndarray | None = None) -> np.ndarray:
    """[c, K] the PARTS of a preprocessed layout graph's configs (or of its `rows`), in their order, from its whole
    file (read once per process, as the traffic features are)."""
    propagation = file_propagation(graph.meta["path"], graph.meta["split"])
    configs = graph.configs if rows is None else graph.configs[rows]
    parts = [propagation.parts(unpack(configs[start:start + CONFIG_CHUNK]))
             for start in range(0, len(configs), CONFIG_CHUNK)]  # unpacked a chunk at a time: bounded memory
    return np.concatenate(parts) if parts else np.zeros((0, len(PARTS)))


def graph_prior(graph: Graph, weights: np.ndarray = UNIT) -> np.ndarray:
    """[c] `layout_traffic` of a preprocessed layout graph's configs, in its row order."""
    return graph_parts(graph) @ weights


def fit_sample(counts: Sequence[int], fit: PriorFit, seed: int = 0) -> list[tuple[int, np.ndarray]]:
    """(file index, sorted config rows) of what a fit reads: up to `fit.files` of files with `counts` configs, up to
    `fit.configs` rows of each, drawn with `seed`."""
    rng = np.random.default_rng(seed)
    chosen = sorted(rng.permutation(len(counts))[:fit.files])
    return [(int(index), np.sort(rng.permutation(counts[index])[:fit.configs])) for index in chosen]


def fit_weights(samples: Sequence[tuple[np.ndarray, np.ndarray]], fit: PriorFit, stems: Sequence[str] = (),
                variant_parts: str = FOLD_GROUP, seed: int = 0) -> tuple[np.ndarray, float]:
    """[K] positive part weights under which the log of the weighed parts orders each sample's configs as its
    runtimes do, and the penalty they were fitted with; samples: (parts [c, K], runtimes [c]) per file, named by
    `stems`, whose model groups (`model_group` with `variant_parts`) the folds keep whole where penalties compete."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a fit's ops are tiny: more threads only add overhead (3x the time on 2 cores)
    try:
        return _fit_weights(samples, fit, stems, variant_parts, seed)
    finally:
        torch.set_num_threads(threads)


def _fit_weights(samples: Sequence[tuple[np.ndarray, np.ndarray]], fit: PriorFit, stems: Sequence[str],
                 variant_parts: str, seed: int) -> tuple[np.ndarray, float]:
    """`fit_weights` in the calling thread's torch settings."""
    penalty = fit.penalties[0]
    if len(fit.penalties) > 1 and len({model_group(stem, variant_parts) for stem in stems}) >= fit.folds > 1:
        folds = assign_folds(list(stems), fit.folds, variant_parts)  # [F]
        held_out = [held_out_tau(samples, folds, fit.steps, p, seed) for p in fit.penalties]
        penalty = fit.penalties[int(np.argmax(held_out))]  # ties: the first
    return fitted_weights(samples, fit.steps, penalty, seed), penalty


def held_out_tau(samples: Sequence[tuple[np.ndarray, np.ndarray]], folds: np.ndarray, steps: int, penalty: float,
                 seed: int) -> float:
    """Mean Kendall tau over the samples of each fold, ranked by weights fitted to the other folds."""
    taus = []
    for fold in np.unique(folds):
        weights = fitted_weights([s for s, f in zip(samples, folds) if f != fold], steps, penalty, seed)
        taus += [kendall_tau(parts @ weights, runtimes) for (parts, runtimes), f in zip(samples, folds) if f == fold]
    return mean_over_graphs(taus)


def fitted_weights(samples: Sequence[tuple[np.ndarray, np.ndarray]], steps: int, penalty: float,
                   seed: int) -> np.ndarray:
    """[K] the part weights of one fit; PAIRS pairs of configs of every file are drawn afresh each step."""
    samples = [(parts, runtimes) for parts, runtimes in samples if len(runtimes) > 1]
    start = torch.tensor(np.log(START))
    if not samples or not steps:
        return START.copy()
    longest = max(len(runtimes) for _, runtimes in samples)
    parts = torch.zeros(len(samples), longest, len(PARTS), dtype=torch.float64)  # [F, M, K], padded with zeros
    runtimes = torch.zeros(len(samples), longest, dtype=torch.float64)  # [F, M]
    for f, (file_parts, file_runtimes) in enumerate(samples):
        parts[f, :len(file_runtimes)] = torch.from_numpy(np.asarray(file_parts, np.float64))
        runtimes[f, :len(file_runtimes)] = torch.from_numpy(np.asarray(file_runtimes, np.float64))
    counts = torch.tensor([len(r) for _, r in samples], dtype=torch.float64)[:, None]  # [F, 1]
    generator = torch.Generator().manual_seed(seed)
    log_weights = start.clone().requires_grad_(True)
    log_temperature = torch.zeros((), dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adam([log_weights, log_temperature], lr=0.05)
    for _ in range(steps):
        work = torch.log(parts @ log_weights.exp() + 1e-9)  # [F, M]
        i, j = (torch.rand((2, len(samples), PAIRS), generator=generator, dtype=torch.float64) * counts).long()
        order = torch.sign(runtimes.gather(1, i) - runtimes.gather(1, j))  # [F, PAIRS] +1 where config i is slower
        margin = SHARPNESS * log_temperature.exp() * (work.gather(1, i) - work.gather(1, j)) * order
        loss = torch.nn.functional.softplus(-margin).mean() + penalty * ((log_weights - start) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return log_weights.detach().exp().numpy()
