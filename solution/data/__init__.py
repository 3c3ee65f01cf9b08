"""Data: read and check the npz files, prune, featurize, pack, cache, batch; the synthetic generator."""
