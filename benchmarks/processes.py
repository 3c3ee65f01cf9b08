"""Running a command as a user runs it, in its own process: wall seconds, and the peak memory of the process
(VmHWM) and of its whole tree (RssAnon summed over it and its descendants, such as data-loader workers), sampled
from /proc. Shared by the benchmark scripts; import it with the benchmarks folder on the path (as a script has)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def status_kib(pid: int, key: str) -> int:
    """One /proc/<pid>/status figure in KiB (0 for a process that ended while read)."""
    try:
        line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith(key))
        return int(line.split()[1])
    except (OSError, StopIteration):
        return 0


def descendants(pid: int) -> set[int]:
    """`pid` and every process below it."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    tree, frontier = {pid}, [pid]
    while frontier:
        frontier = [child for child, parent in parents.items() if parent in frontier and child not in tree]
        tree.update(frontier)
    return tree


def measured(command: list[str], log: Path, interval: float = 0.1, env: dict[str, str] | None = None,
             cwd: Path = REPO) -> dict[str, float]:
    """Run `command` in `cwd` (output to `log`, `env` added to the environment): its wall seconds, the main
    process's peak RSS and the tree's peak RssAnon, in MiB. A failure raises with the log's tail."""
    peak = {"main": 0, "tree": 0}
    done = threading.Event()
    start = time.perf_counter()
    with open(log, "w") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, cwd=cwd,
                                   env={**os.environ, "WANDB_MODE": "disabled", **(env or {})})

        def sample() -> None:
            while not done.is_set():
                peak["main"] = max(peak["main"], status_kib(process.pid, "VmHWM"))
                peak["tree"] = max(peak["tree"], sum(status_kib(p, "RssAnon") for p in descendants(process.pid)))
                done.wait(interval)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = process.wait()
        done.set()
        sampler.join()
    if code != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {code}:\n{log.read_text()[-3000:]}")
    return {"seconds": time.perf_counter() - start, "main_mib": peak["main"] / 1024, "tree_mib": peak["tree"] / 1024}
