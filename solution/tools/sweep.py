"""`solution sweep GRID.yaml`: the grid of a W&B sweep file, run here one `solution fit` after another with no
W&B server."""

from __future__ import annotations

import argparse
import itertools
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from ..errors import OK, UNEXPECTED, SettingsError


def _error(path: Path, key: str, expected: str, found: Any) -> ValueError:
    return ValueError(f"{path}: key {key!r} is {found!r}; expected {expected}")


def read_sweep(path: Path) -> dict[str, Any]:
    """A W&B sweep file with a grid this runner can run: `method: grid`, `parameters` of `values` or `value`, and
    a `command` list."""
    try:
        sweep = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise SettingsError(f"{path}: not a readable YAML sweep file ({error})") from error
    if not isinstance(sweep, Mapping):
        raise _error(path, "(top level)", "a mapping", type(sweep).__name__)
    if sweep.get("method") != "grid":
        raise _error(path, "method", "grid (random and bayes sweeps need the W&B server)", sweep.get("method"))
    parameters = sweep.get("parameters")
    if not isinstance(parameters, Mapping) or not parameters:
        raise _error(path, "parameters", "a mapping of setting -> {values: [...]} or {value: x}", parameters)
    for name, spec in parameters.items():
        if not (isinstance(spec, Mapping) and (isinstance(spec.get("values"), list) and spec["values"]
                                               or "value" in spec)):
            raise _error(path, f"parameters.{name}", "{values: [a non-empty list]} or {value: x}", spec)
    command = sweep.get("command")
    if not (isinstance(command, list) and "${args}" in command):
        raise _error(path, "command", "a list holding ${args}", command)
    return sweep


def grid(parameters: Mapping[str, Mapping]) -> list[dict[str, Any]]:
    """Every combination of the parameters' values, the last parameter varying fastest (as W&B's grid)."""
    names = list(parameters)
    choices = [spec["values"] if "values" in spec else [spec["value"]] for spec in parameters.values()]
    return [dict(zip(names, combination)) for combination in itertools.product(*choices)]


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def command(template: list[str], params: Mapping[str, Any], program: str, extra: list[str]) -> list[str]:
    """The sweep's command for one combination, with W&B's macros expanded; `extra` goes after the parameters."""
    macros = {"${env}": [], "${interpreter}": [sys.executable], "${program}": [program],
              "${args}": [f"--{k}={_text(v)}" for k, v in params.items()] + extra,
              "${args_no_hyphens}": [f"{k}={_text(v)}" for k, v in params.items()] + extra}
    return [part for item in template for part in macros.get(item, [item])]


def main(argv: list[str] | None = None) -> int:
    """`solution sweep GRID.yaml`: run every combination; UNEXPECTED when a run failed."""
    argv = sys.argv[1:] if argv is None else list(argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    parser = argparse.ArgumentParser(prog="solution sweep", description=__doc__,
                                     epilog="Arguments after -- are added to every run, e.g. -- --data.root PATH")
    parser.add_argument("file", type=Path, help="a W&B sweep YAML with method: grid (e.g. configs/sweep.yaml)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--stop-on-error", action="store_true", help="stop at the first failed run")
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    sweep = read_sweep(args.file)
    runs = [command(sweep["command"], params, sweep.get("program", "solution"), extra)
            for params in grid(sweep["parameters"])]
    failed = []
    for index, cmd in enumerate(runs, 1):
        print(f"[{index}/{len(runs)}] {shlex.join(cmd)}", flush=True)
        if not args.dry_run and subprocess.run(cmd).returncode != 0:
            failed.append(index)
            if args.stop_on_error:
                break
    if failed:
        print(f"error: {args.file}: {len(failed)} of {len(runs)} runs failed: {', '.join(map(str, failed))}",
              file=sys.stderr)
        return UNEXPECTED
    if not args.dry_run:
        print(f"{len(runs)} runs done; compare them with: solution compare runs")
    return OK
