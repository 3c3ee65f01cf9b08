"""Models: message-passing layers, the layout and tile rankers, baselines, ranking losses, scatter backends."""

from . import baselines, losses, rankers  # noqa: F401 -- every model class, so that the registry (spec.py) is whole
