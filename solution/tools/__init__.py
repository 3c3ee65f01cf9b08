"""Tools around the pipeline: the command line, the Kaggle kernel and its bundler, tracking, compare, sweeps, demo."""
