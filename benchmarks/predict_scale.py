"""Ranking one real-size file end to end: `solution predict` on the layout file with the most configs in a data
root (in the realistic synthetic data, a 14k-node BERT-like graph with 100,040 configs), run as a user runs it:
wall time, configs/s and the peak memory of the whole process tree (each data-loader worker is a process).

    python benchmarks/predict_scale.py --data data/synthetic-realistic --workers 0 4   # benchmarks/results/
    python benchmarks/predict_scale.py --smoke   # tiny data: checks that the script runs

The file is linked as the only test file of a scratch root, the collection's other files beside it as train and
valid. A checkpoint of the collection's shipped settings, trained for one step, ranks it: ranking speed does not
depend on the weights. Each worker setting runs twice with its own preprocessing cache: the first read of the
file builds the cache (cold), the second reads it (warm). Memory: RssAnon (the process's own pages, not the
mapped files) summed over the process and its descendants, sampled every 0.2 s from /proc.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
from processes import measured
from reports import write_report

from solution.data.datamodule import usable_workers
from solution.data.reader import list_files
from solution.submission.files import collection_file_stem
from solution.synth.files import generate

REPO = Path(__file__).resolve().parent.parent
SPLITS = ("train", "valid", "test")


def configs_in(path: Path) -> int:
    """The number of configs of a layout file, read from its config_runtime alone."""
    with np.load(path) as npz:
        return len(npz["config_runtime"])


def scratch_root(root: Path, collection: str, out: Path) -> tuple[Path, Path]:
    """A root whose test split is `collection`'s file with the most configs and whose train and valid splits are
    its other files (symbolic links); that file."""
    files = [path for split in SPLITS for path in list_files(root, collection, split)]
    biggest = max(files, key=configs_in)
    folder = out.joinpath("npz_all", "npz", *collection.split(":"))
    for split in SPLITS:
        (folder / split).mkdir(parents=True, exist_ok=True)
    for path in files:
        split = "test" if path == biggest else ("valid" if path.parent.name == "valid" else "train")
        (folder / split / path.name).symlink_to(path.resolve())
    return out, biggest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("data/synthetic-realistic"),
                        help="a data root (the realistic synthetic data is generated there when absent)")
    parser.add_argument("--collection", default="layout:nlp:random")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 4], help="data.num_workers settings")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/predict-scale.md"))
    parser.add_argument("--smoke", action="store_true", help="tiny data, 0 workers")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="solution-predict-scale-"))
    if args.smoke:
        args.data, args.workers = work / "data", [0]
    if not (args.data / "npz_all").is_dir():
        generate(args.data, "tiny" if args.smoke else "realistic", 0, [args.collection])
    root, biggest = scratch_root(args.data, args.collection, work / "root")
    configs = configs_in(biggest)
    solution = [sys.executable, "-m", "solution"]
    config = ["--config", str(REPO / "configs" / f"{collection_file_stem(args.collection)}.yaml"),
              "--data.root", str(root), "--trainer.logger", "false", "--trainer.enable_progress_bar", "false"]
    env_note = f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}"
    checkpoints = work / "checkpoints"
    measured([*solution, "fit", *config, "--data.cache_dir", str(work / "fit-cache"), "--trainer.max_steps", "1",
           "--trainer.limit_val_batches", "0", "--checkpoint.dirpath", str(checkpoints)], work / "fit.log")
    checkpoint = checkpoints / "last.ckpt"
    rows = []
    for workers in args.workers:
        cache = work / f"cache-{workers}"
        for state in ("cold", "warm"):
            run = measured([*solution, "predict", *config, "--ckpt_path", str(checkpoint),
                            "--data.cache_dir", str(cache), "--data.num_workers", str(workers)],
                           work / f"predict-{workers}-{state}.log")
            rows.append(f"| {workers} ({usable_workers(workers)} started) | {state} | {run['seconds']:,.0f} | "
                        f"{configs / run['seconds']:,.0f} | {run['tree_mib']:,.0f} |")
            print(rows[-1], flush=True)
    given = " ".join(["python benchmarks/predict_scale.py", *(argv if argv is not None else sys.argv[1:])])
    lines = [f"# Ranking one real-size file end to end ({args.collection})", "", f"Command: `{given}`", "",
             f"The file: `{biggest.name}`, {configs:,} configs. Machine: {os.cpu_count()} cores; {env_note}. "
             "Wall time of the whole `solution predict` command (imports, reading the file, ranking, writing the "
             "submission part); configs/s = configs / that time; peak = RssAnon of the command's process tree "
             "(MiB), sampled every 0.2 s. Cold: the first read, which builds the preprocessing cache; warm: the "
             "same command again.", "",
             "| data.num_workers | cache | seconds | configs/s | peak RssAnon MiB |", "|---|---|---|---|---|", *rows]
    write_report(args.out, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
