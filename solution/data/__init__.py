"""Data: read and check the npz files, prune, featurize, pack, cache, batch, serve (generators: solution/synth)."""
