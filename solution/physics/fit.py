"""The physics prior's nine weights fitted to a collection's train runtimes, a penalty picked on held-out groups."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..data.sets import GraphSet
from ..data.splits import FAMILY_PATTERN, assign_folds, family_of
from ..metrics import kendall_tau, mean_over_graphs
from .prior import WEIGHTS, graph_work, prior_work, weighed
from .propagation import BYTE_PARTS, ConfigWork

# where a fit starts and its penalty pulls: each byte moved counts 1, a multiply-add a 75th of a byte (a TPU's matrix
# units do a few hundred per 4-byte element its memory moves), an operand fed with its key dim not minor doubles them,
# and a dot's compute and memory time nearly add up (p = 1.1): the runtimes, not the start, say how far they overlap
STARTS = {"multiply_adds": 4 / 300, "feed_slowdown": np.log(2.0), "roofline_sharpness": 0.1}
START = np.array([STARTS.get(name, 1.0) for name in WEIGHTS])
PAIRS = 1024  # config pairs a fit step draws per file
SHARPNESS = 10.0  # the logistic's slope per unit of log work, before the learned temperature


@dataclass(frozen=True)
class PriorFit:
    """How `solution run` weighs the prior (WEIGHTS): fitted to the runtimes of up to `files` train files
    (`configs` of each, `steps` of Adam over a pairwise logistic loss plus a penalty x the mean squared distance of
    the log weights from START's); of several `penalties`, the one whose fits rank the files of held-out families
    best (`folds` folds of whole groups); files 0: the plain count of bytes (UNIT). A step's time grows with the
    dot records it weighs (configs x dots per file): files with many dots bring fewer configs, so that all together
    bring at most `matmul_rows`."""

    files: int = 0
    configs: int = 256
    steps: int = 100
    penalties: tuple[float, ...] = (0.01,)
    folds: int = 3
    matmul_rows: int = 2**20


def fit_sample(counts: Sequence[int], fit: PriorFit, seed: int = 0) -> list[tuple[int, np.ndarray]]:
    """(file index, sorted config rows) of what a fit reads: up to `fit.files` of files with `counts` configs, up to
    `fit.configs` rows of each, drawn with `seed`."""
    rng = np.random.default_rng(seed)
    chosen = sorted(rng.permutation(len(counts))[:fit.files])
    return [(int(index), np.sort(rng.permutation(counts[index])[:fit.configs])) for index in chosen]


def fit_prior(graphs: GraphSet, fit: PriorFit, family_pattern: str = FAMILY_PATTERN,
              seed: int = 0) -> tuple[np.ndarray, float, int] | None:
    """The weights fitted to the runtimes of a split's `graphs` as `fit` says (`fit_sample`, then `fit_weights` with
    `family_pattern` and `seed`), the penalty they were fitted with and how many files they saw; None where `fit`
    samples no file."""
    chosen = fit_sample([graphs.num_configs(i) for i in range(len(graphs))], fit, seed)
    samples = []
    for index, rows in chosen:
        graph = graphs.load(index)
        samples.append((graph_work(graph, rows), graph.target[rows]))
    if not samples:
        return None
    weights, penalty = fit_weights(samples, fit, [graphs.stems[i] for i, _ in chosen], family_pattern, seed)
    return weights, penalty, len(samples)


def fit_weights(samples: Sequence[tuple[ConfigWork, np.ndarray]], fit: PriorFit, stems: Sequence[str] = (),
                family_pattern: str = FAMILY_PATTERN, seed: int = 0) -> tuple[np.ndarray, float]:
    """[len(WEIGHTS)] positive weights under which the log of the weighed work orders each sample's configs as its
    runtimes do, and the penalty they were fitted with; samples: (work, runtimes [c]) per file, named by `stems`,
    whose families (`family_of` with `family_pattern`) the folds keep whole where penalties compete."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a fit's ops are tiny: more threads only add overhead (3x the time on 2 cores)
    try:
        return _fit_weights(samples, fit, stems, family_pattern, seed)
    finally:
        torch.set_num_threads(threads)


def _fit_weights(samples: Sequence[tuple[ConfigWork, np.ndarray]], fit: PriorFit, stems: Sequence[str],
                 family_pattern: str, seed: int) -> tuple[np.ndarray, float]:
    """`fit_weights` in the calling thread's torch settings."""
    samples = within_rows(samples, fit.matmul_rows, seed)
    penalty = fit.penalties[0]
    if len(fit.penalties) > 1 and len({family_of(stem, family_pattern) for stem in stems}) >= fit.folds > 1:
        folds = assign_folds(list(stems), fit.folds, family_pattern)  # [F]
        held_out = [held_out_tau(samples, folds, fit.steps, p, seed) for p in fit.penalties]
        penalty = fit.penalties[int(np.argmax(held_out))]  # ties: the first
    return fitted_weights(samples, fit.steps, penalty, seed), penalty


def within_rows(samples: Sequence[tuple[ConfigWork, np.ndarray]], rows: int,
                seed: int) -> list[tuple[ConfigWork, np.ndarray]]:
    """The samples, each file keeping an even share of `rows` dot records: a file with D dots keeps share / D of its
    configs (at least 2), drawn with `seed`."""
    share, rng = rows // max(len(samples), 1), np.random.default_rng(seed)
    kept = []
    for work, runtimes in samples:
        count = max(share // max(work.matmuls.shape[1], 1), 2)
        chosen = np.sort(rng.permutation(len(work))[:count]) if count < len(work) else np.arange(len(work))
        kept.append((work[chosen], np.asarray(runtimes)[chosen]))
    return kept


def held_out_tau(samples: Sequence[tuple[ConfigWork, np.ndarray]], folds: np.ndarray, steps: int, penalty: float,
                 seed: int) -> float:
    """Mean Kendall tau over the samples of each fold, ranked by weights fitted to the other folds."""
    taus = []
    for fold in np.unique(folds):
        weights = fitted_weights([s for s, f in zip(samples, folds) if f != fold], steps, penalty, seed)
        taus += [kendall_tau(prior_work(work, weights), runtimes)
                 for (work, runtimes), f in zip(samples, folds) if f == fold]
    return mean_over_graphs(taus)


def fitted_weights(samples: Sequence[tuple[ConfigWork, np.ndarray]], steps: int, penalty: float,
                   seed: int) -> np.ndarray:
    """[len(WEIGHTS)] the weights of one fit; PAIRS pairs of configs of every file are drawn afresh each step."""
    samples = [(work, runtimes) for work, runtimes in samples if len(runtimes) > 1]
    start = torch.tensor(np.log(START))
    if not samples or not steps:
        return START.copy()
    longest = max(len(runtimes) for _, runtimes in samples)
    # [F x M, B] the byte parts (the only ones weighed), padded with zeros
    parts = torch.zeros(len(samples) * longest, BYTE_PARTS, dtype=torch.float64)
    runtimes = torch.zeros(len(samples), longest, dtype=torch.float64)  # [F, M]
    for f, (work, file_runtimes) in enumerate(samples):
        byte_parts = np.asarray(work.parts, np.float64)[:, :BYTE_PARTS]
        parts[f * longest:f * longest + len(work)] = torch.from_numpy(byte_parts)
        runtimes[f, :len(work)] = torch.from_numpy(np.asarray(file_runtimes, np.float64))
    flat = [work.flat_matmuls() for work, _ in samples]
    matmuls = torch.from_numpy(np.concatenate([records for records, _ in flat]))  # [R, 4]
    owners = torch.from_numpy(np.concatenate([f * longest + of for f, (_, of) in enumerate(flat)]))  # [R] rows of parts
    counts = torch.tensor([len(r) for _, r in samples], dtype=torch.float64)[:, None]  # [F, 1]
    generator = torch.Generator().manual_seed(seed)
    log_weights = start.clone().requires_grad_(True)
    log_temperature = torch.zeros((), dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adam([log_weights, log_temperature], lr=0.05)
    for _ in range(steps):
        work = torch.log(weighed(parts, matmuls, owners, log_weights.exp()) + 1e-9).reshape(len(samples), longest)
        i, j = (torch.rand((2, len(samples), PAIRS), generator=generator, dtype=torch.float64) * counts).long()
        order = torch.sign(runtimes.gather(1, i) - runtimes.gather(1, j))  # [F, PAIRS] +1 where config i is slower
        margin = SHARPNESS * log_temperature.exp() * (work.gather(1, i) - work.gather(1, j)) * order
        loss = torch.nn.functional.softplus(-margin).mean() + penalty * ((log_weights - start) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return log_weights.detach().exp().numpy()
