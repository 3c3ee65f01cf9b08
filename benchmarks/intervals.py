"""The 95 % t interval the benchmark reports give every mean over seeds: 'mean [low, high]'."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats


def t_interval(values: Sequence[float], digits: int = 3, sign: str = "") -> str:
    """'mean [low, high]' of `values` (the 95 % t interval of their mean), or the mean alone for one value;
    `sign` '+' writes signs (for differences)."""
    values = np.asarray(values, dtype=np.float64)
    mean = values.mean()
    if len(values) < 2:
        return f"{mean:{sign}.{digits}f}"
    half = stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
    return f"{mean:{sign}.{digits}f} [{mean - half:{sign}.{digits}f}, {mean + half:{sign}.{digits}f}]"
