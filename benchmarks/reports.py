"""The benchmark scripts' last step: their markdown report to a file and to the terminal, naming the machine."""

from __future__ import annotations

import platform
import shlex
import sys
from collections.abc import Sequence
from datetime import date
from pathlib import Path

from processes import REPO

import solution
from solution.atomic import atomic_write


def measured_code() -> Path:
    """The folder of the `solution` package this process runs: this checkout's, else a SystemExit that says so (a
    benchmark run from a second checkout with an environment installed from another would time that other code and
    write its figures under this checkout's commit)."""
    package = Path(solution.__file__).resolve().parent
    if package != REPO / "solution":
        raise SystemExit(f"error: this benchmark ran the solution package at {package}, not this checkout's "
                         f"{REPO / 'solution'}: run it with PYTHONPATH={REPO}")
    return package


def write_report(path: Path, text: str) -> None:
    """Write the report to `path` atomically (its folder made if missing), then print it and where it went; refused
    where the process ran another checkout's package (`measured_code`)."""
    measured_code()
    with atomic_write(path) as handle:
        handle.write(text)
    print(f"{text}\nwrote {path}", flush=True)


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it, else what `platform` says: runs on different CPUs differ."""
    try:
        with open("/proc/cpuinfo") as handle:
            return next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def write_titled_report(path: Path, script: str, title: str, about: str, argv: Sequence[str] | None,
                        sections: list[str]) -> None:
    """`write_report` of `sections` under a head: the title, the command line that ran `script` (argv, or the
    process's own), the date and the CPU, and what the figures are (`about`)."""
    command = shlex.join(["python", script, *(sys.argv[1:] if argv is None else argv)])
    head = [f"# {title}", "", f"Command: `{command}`  ", f"Written by {script} on {date.today()}, {cpu_model()}.", "",
            about, ""]
    write_report(path, "\n".join(head + sections))
