"""`solution encode`, `rank`, `predict` and `fit` on real-size programs lowered here: a ResNet and a transformer
training step, compiled by XLA (CPU) and taken at layout assignment, the stage the official dataset encodes.

    python benchmarks/own_programs.py                    # writes benchmarks/results/own_programs.md
    python benchmarks/own_programs.py --smoke            # small programs: checks that the script runs

Each command runs as a user runs it, start-up included, in its own process: wall seconds (median of --repeats),
`solution rank` and `solution predict` (on the CPU: no trainer, no Lightning import) in float32 and under bfloat16
autocast (`bf16-mixed`), run in turn, and the float32 predict through the Lightning CLI,
configs/s, and memory: the main process's peak resident set (VmHWM) and the peak RssAnon of the process tree
(each data-loader worker is a process). Ranking speed does not depend on the weights: the checkpoint is the
shipped layout_xla_random.yaml fitted for --epochs on the two programs with random runtimes (that fit is the
memory measurement). Needs jax (`pip install '.[programs]'`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np
from processes import measured
from reports import write_report

from solution.programs.candidates import searched
from solution.programs.encode import LAYOUT_KEYS, encode_program

REPO = Path(__file__).resolve().parent.parent
PROGRAMS = {"resnet": 32, "transformer": 8}  # blocks / layers of the two training steps
SMOKE = {"resnet": 2, "transformer": 1}
PRECISIONS = ("32", "bf16-mixed")  # float32, and the model under bfloat16 autocast (run side by side)


def lower(name: str, depth: int) -> tuple:
    """(function, abstract arguments) of a training step: a ResNet of `depth` basic blocks (batch norm, SGD with
    momentum) or a transformer encoder of `depth` layers (Adam), built from the zoo's blocks."""
    import jax.numpy as jnp

    from solution.programs import blocks

    if name == "resnet":
        width = 64
        block = {key: blocks.spec(shape) for key, shape in (("w1", (3, 3, width, width)), ("w2", (3, 3, width, width)),
                                                             ("g1", (width,)), ("b1", (width,)), ("g2", (width,)),
                                                             ("b2", (width,)))}
        params = {"stem": blocks.spec((3, 3, 3, width)), "blocks": [block] * depth, "head": blocks.spec((width, 10))}

        def loss(p, x, y):
            h = blocks.conv(x, p["stem"])
            for b in p["blocks"]:
                inner = jnp.maximum(blocks.batch_norm(blocks.conv(h, b["w1"]), (0, 1, 2), b["g1"], b["b1"]), 0)
                h = jnp.maximum(h + blocks.batch_norm(blocks.conv(inner, b["w2"]), (0, 1, 2), b["g2"], b["b2"]), 0)
            return ((h.mean((1, 2)) @ p["head"] - y) ** 2).mean()

        batch = (blocks.spec((8, 32, 32, 3)), blocks.spec((8, 10)))
        return blocks.program(loss, None, params, batch, True, "sgd")
    width = 128
    params = [blocks.block_params(width, 4 * width, jnp.float32)] * depth

    def loss(p, x):
        for layer in p:
            x = blocks.transformer_block(layer, x, 4, False)
        return (x ** 2).mean()

    return blocks.program(loss, None, params, (blocks.spec((8, 64, width)),), True, "adam")


def lowered_at_layout_assignment(name: str, depth: int, folder: Path) -> Path:
    """<folder>/<name>.hlo: the program's module after XLA's layout assignment, dumped by a child process (XLA reads
    its dump flags once, at start-up)."""
    dump = folder / f"dump-{name}"
    env = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={dump} --xla_dump_hlo_as_text "
                                      "--xla_dump_hlo_pass_re=layout-assignment"}
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import jax, own_programs; "
            f"f, args = own_programs.lower({name!r}, {depth}); jax.jit(f).lower(*args).compile()")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    dumped = max(dump.glob("*after_layout-assignment*.txt"), key=lambda path: path.stat().st_size)
    target = folder / f"{name}.hlo"
    target.write_text(dumped.read_text())
    return target


def data_root(programs: dict[str, Path], root: Path, configs: int) -> dict[str, dict]:
    """A layout:xla:random root whose train, valid and test splits each hold every program with the compiler
    default and `configs` random candidates (random runtimes: speed and memory do not depend on them)."""
    facts = {}
    for index, (name, path) in enumerate(programs.items()):
        start = time.perf_counter()
        program = encode_program(path)
        seconds = time.perf_counter() - start
        rows = searched(program.ranks, configs, "random", np.random.default_rng(index))
        runtime = np.random.default_rng(index).integers(1_000_000, 2_000_000, len(rows))
        for split in ("train", "valid", "test"):
            folder = root / "npz_all" / "npz" / "layout" / "xla" / "random" / split
            folder.mkdir(parents=True, exist_ok=True)
            np.savez(folder / f"{name}.npz", **{key: program.arrays[key] for key in LAYOUT_KEYS},
                     node_config_feat=rows, config_runtime=runtime if split != "test" else 0 * runtime)
        lines = sum(1 for line in path.read_text().splitlines() if " = " in line)
        facts[name] = {"nodes": len(program.arrays["node_opcode"]), "configurable": len(program.names),
                       "configs": len(rows), "encode_s": seconds, "instructions": lines}
    return facts


def side_by_side(commands: dict[str, list[str]], log: Path, repeats: int) -> dict[str, dict[str, float]]:
    """Per command, the median wall time of `repeats` runs with the largest memory figures; the commands run in
    turn (A B A B ...), so that a drift in the machine's speed reaches each alike."""
    runs = {name: [] for name in commands}
    for _ in range(repeats):
        for name, command in commands.items():
            runs[name].append(measured(command, log))
    return {name: {"seconds": statistics.median(r["seconds"] for r in mine),
                   "main_mib": max(r["main_mib"] for r in mine), "tree_mib": max(r["tree_mib"] for r in mine)}
            for name, mine in runs.items()}


def repeated(command: list[str], log: Path, repeats: int) -> dict[str, float]:
    """The median wall time of `repeats` runs, with the largest memory figures."""
    return side_by_side({"one": command}, log, repeats)["one"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", type=int, default=999, help="random candidates per program (plus the default)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs of the measured fit")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each timed command (median)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "own_programs.md")
    parser.add_argument("--smoke", action="store_true", help="tiny programs, 20 configs, one run each")
    args = parser.parse_args(argv)
    if args.smoke:
        args.configs, args.epochs, args.repeats = 20, 1, 1
    work = Path(tempfile.mkdtemp(prefix="solution-own-programs-"))
    depths = SMOKE if args.smoke else PROGRAMS
    programs = {name: lowered_at_layout_assignment(name, depth, work) for name, depth in depths.items()}
    facts = data_root(programs, work / "data", args.configs)
    solution = [sys.executable, "-m", "solution"]
    config = ["--config", str(REPO / "configs" / "layout_xla_random.yaml"), "--data.root", str(work / "data"),
              "--trainer.logger", "false", "--trainer.enable_progress_bar", "false"]
    fit = measured([*solution, "fit", *config, "--data.cache_dir", str(work / "cache"), "--trainer.max_epochs",
                    str(args.epochs), "--checkpoint.dirpath", str(work / "checkpoints")], work / "fit.log")
    checkpoint = work / "checkpoints" / "last.ckpt"
    ranks = {name: side_by_side({p: [*solution, "rank", str(path), "--ckpt", str(checkpoint), "--configs",
                                     str(args.configs), "--top", "3", "--precision", p] for p in PRECISIONS},
                                work / f"rank-{name}.log", args.repeats)
             for name, path in programs.items()}
    predicting = ["predict", *config, "--ckpt_path", str(checkpoint), "--data.cache_dir", str(work / "cache"),
                  "--submission.out_dir", str(work / "submission")]
    predict = side_by_side({p: [*solution, *predicting, "--trainer.precision", p] for p in PRECISIONS},
                           work / "predict.log", args.repeats)
    through_trainer = repeated([sys.executable, "-c", "import sys; from solution.tools.lightning_cli import "
                                "lightning_main; lightning_main(sys.argv[1:])", *predicting],
                               work / "predict-lightning.log", args.repeats)
    lightning = repeated([sys.executable, "-c", "import solution.tools.lightning_cli"], work / "import.log",
                         args.repeats)
    total = sum(f["configs"] for f in facts.values())
    given = " ".join(["python benchmarks/own_programs.py", *(argv if argv is not None else sys.argv[1:])])
    lines = [f"# solution encode / rank / predict / fit on programs lowered here ({date.today()})", "",
             f"Command: `{given}`; {os.cpu_count()} CPUs, torch threads: default.", "",
             "| program | HLO instructions | nodes | configurable | configs | encode (s) | instructions/s | "
             "`solution rank` (s, start-up included): float32 / `--precision bf16-mixed` | configs/s | "
             "peak RSS (MiB) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, f in facts.items():
        full, low = (ranks[name][p] for p in PRECISIONS)
        lines.append(f"| {name} | {f['instructions']:,} | {f['nodes']:,} | {f['configurable']} | {f['configs']} | "
                     f"{f['encode_s']:.2f} | {f['instructions'] / f['encode_s']:,.0f} | {full['seconds']:.2f} / "
                     f"{low['seconds']:.2f} | {f['configs'] / full['seconds']:,.0f} / "
                     f"{f['configs'] / low['seconds']:,.0f} | {full['main_mib']:,.0f} |")
    lines += ["", "| command | wall (s) | configs/s | main peak RSS (MiB) | tree peak RssAnon (MiB) |",
              "|---|---|---|---|---|"]
    lines += [f"| `solution predict` of both files ({total} configs){flag} | {predict[p]['seconds']:.2f} | "
              f"{total / predict[p]['seconds']:,.0f} | {predict[p]['main_mib']:,.0f} | "
              f"{predict[p]['tree_mib']:,.0f} |"
              for p, flag in zip(PRECISIONS, ("", ", `--trainer.precision bf16-mixed`"))]
    lines += [f"| the same predict (float32) through the Lightning CLI's trainer | {through_trainer['seconds']:.2f} | "
              f"{total / through_trainer['seconds']:,.0f} | {through_trainer['main_mib']:,.0f} | "
              f"{through_trainer['tree_mib']:,.0f} |",
              f"| `solution fit` (shipped layout_xla_random.yaml, {args.epochs} epochs, both files) | "
              f"{fit['seconds']:.1f} | - | {fit['main_mib']:,.0f} | {fit['tree_mib']:,.0f} |",
              f"| importing the Lightning CLI alone (`import solution.tools.lightning_cli`) | "
              f"{lightning['seconds']:.2f} | - | - | - |"]
    write_report(args.out, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
