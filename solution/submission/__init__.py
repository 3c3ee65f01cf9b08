"""Submission: write, merge, check and score submission CSVs; ensembles of runs."""
