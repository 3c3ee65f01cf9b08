"""The physics prior: layouts carried through a whole graph, the work they cause, its fitted weights, the blend."""
