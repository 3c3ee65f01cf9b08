"""An untrained layout ranking from memory physics: the elements each config's layouts make the program move."""

from __future__ import annotations

import numpy as np

from ..data.packing import unpack
from ..data.preprocess import Graph
from ..data.propagation import CONFIG_CHUNK, Propagation, file_propagation
from ..data.reader import RawGraph


def layout_traffic(raw: RawGraph) -> np.ndarray:
    """[c] per config of a layout file, the tensor elements its layouts make the program move, in 8 x 128 tiles
    over each tensor's two most-minor dims larger than 1 (lower = predicted faster). A configurable node stores its
    output in the config's layout and reads its input (and a convolution's kernel) in the config's; every other
    node takes its layout as XLA propagates it: element-wise and data-movement ops keep their first laid-out
    operand's of the same rank, transposes and reduces map it, broadcasts and constants adapt to their users,
    parameters, tuples, loop state and the results keep the file's. Where a user needs another layout than its
    producer gives, a copy moves the tensor twice (read in one order, written in the other). Each tensor counts once
    per pass over it; no constant of a runtime law enters."""
    return Propagation(raw).traffic(raw.config_feat).sum(1)


def graph_prior(graph: Graph) -> np.ndarray:
    """[c] `layout_traffic` of a preprocessed layout graph's configs, in its row order, from its whole file (read
    once per process, as the traffic features are)."""
    propagation = file_propagation(graph.meta["path"], graph.meta["split"])
    parts = [propagation.traffic(unpack(graph.configs[start:start + CONFIG_CHUNK])).sum(1)
             for start in range(0, graph.num_configs, CONFIG_CHUNK)]  # unpacked a chunk at a time: bounded memory
    return np.concatenate(parts) if parts else np.zeros(0)


