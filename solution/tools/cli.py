"""The `solution` command: the Lightning sub-commands (fit/validate/test/predict, solution/tools/lightning_cli.py)
and the package's own, each imported only when used (a command that needs no trainer never loads Lightning, and
`predict` on the CPU needs none: solution/tools/predict.py)."""

from __future__ import annotations

import gc
import importlib
import sys

from .. import errors
from .failures import guarded

# the package's own sub-commands: module and function, imported only when used
COMMANDS = {
    "run": ("tools.pipeline", "main"),
    "synth": ("tools.synth", "main"),
    "inspect": ("data.inspection", "main"),
    "submit": ("submission.files", "submit_main"),
    "check-submission": ("submission.files", "check_main"),
    "score": ("submission.files", "score_main"),
    "demo": ("tools.demo", "main"),
    "kernel": ("tools.bundle", "main"),
    "compare": ("tools.compare", "main"),
    "sweep": ("tools.sweep", "main"),
    "ensemble": ("submission.ensemble", "main"),
    "encode": ("tools.encode", "main"),
    "rank": ("tools.rank", "main"),
    "pretrain": ("tools.pretrain", "main"),
}


USAGE = """usage: solution run --data.root PATH [--config configs/demo.yaml] [--budget SECONDS] ...
       solution {fit,validate,test,predict} --config configs/<collection>.yaml [--data.root PATH] ...
       solution demo | synth | inspect | submit | check-submission | score | kernel | compare | sweep | ensemble
       solution encode PROGRAM.hlo --out FILE.npz | rank PROGRAM --ranker FILE.ranker
       solution pretrain --data.root CORPUS --out DIR
       [--help]"""


def dispatch(argv: list[str]) -> int:
    """Run one sub-command: a package one returns its own code (a finding), a Lightning one 0 when it returns."""
    if argv[0] in COMMANDS:
        module, function = COMMANDS[argv[0]]
        return int(getattr(importlib.import_module(f"solution.{module}"), function)(argv[1:]) or 0)
    if argv[0] in ("predict", "validate", "test"):  # on the CPU, without Lightning where they need no trainer
        done = importlib.import_module("solution.tools.predict").rank_here(argv[0], argv[1:])
        if done is not None:
            return done
    importlib.import_module("solution.tools.lightning_cli").lightning_main(argv)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run a `solution` command and return its exit code (solution.errors): every failure a user can cause is
    told as one line, `error: <message>`, on stderr; any other exception is a bug and keeps its traceback."""
    argv = sys.argv[1:] if argv is None else list(argv)
    # what is loaded by now (torch's objects and the package's) lives as long as the process: kept out of every
    # later garbage collection, which would scan it again and again (half of a test file's preprocessing time)
    gc.freeze()
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return errors.OK
    return guarded(lambda: dispatch(argv))

if __name__ == "__main__":
    sys.exit(main())
