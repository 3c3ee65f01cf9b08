"""The benchmark scripts' last step: their markdown report to a file and to the terminal."""

from __future__ import annotations

from pathlib import Path

from solution.atomic import atomic_write


def write_report(path: Path, text: str) -> None:
    """Write the report to `path` atomically (its folder made if missing), then print it and where it went."""
    with atomic_write(path) as handle:
        handle.write(text)
    print(f"{text}\nwrote {path}", flush=True)
