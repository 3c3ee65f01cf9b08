"""Models: message-passing layers, the layout and tile rankers, baselines, ranking losses, scatter backends."""
