"""Synthetic TpuGraphs data in the exact Kaggle format: graphs (graphs.py, ops.py), the layout cost law (law.py),
layout configs (layouts.py), tile kernels and their law (tiles.py), and writing the five collections (files.py)."""
