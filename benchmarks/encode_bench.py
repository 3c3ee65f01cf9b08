"""HLO encoder speed: parse + encode a large synthetic module on one core, in instructions per second."""

# python benchmarks/encode_bench.py                       # ~20k instructions; writes benchmarks/results/encode.md
# python benchmarks/encode_bench.py --smoke --out /tmp/encode.md
#
# The module repeats a block of the ops the fixtures use (dot, convolution, reshape, reduce with a reducer, slice,
# pad, dynamic-slice, broadcast, transpose, a tuple) along one chain, with XLA-dump style metadata on every line.

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

from reports import write_report

from solution.programs.encode import encode_module
from solution.programs.hlo import parse_module

TARGET = 50_000  # instructions per second, the bar this encoder is held to
META = ', metadata={op_name="jit(f)/jit(main)/step" source_file="/tmp/model.py" source_line=12}'
REDUCER = """add_reducer {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT sum = f32[] add(a, b)
}
"""
BLOCK = [  # (name, line); {p} is the previous block's output, {i} the block number
    ("d", "f32[64,64]{{1,0}} dot({p}, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}"),
    ("r", "f32[1,64,64,1]{{3,2,1,0}} reshape(d{i})"),
    ("c", "f32[1,64,64,1]{{3,2,1,0}} convolution(r{i}, k), window={{size=3x3 pad=1_1x1_1}}, "
          "dim_labels=b01f_01io->b01f"),
    ("q", "f32[64,64]{{1,0}} reshape(c{i})"),
    ("t", "f32[64,64]{{0,1}} transpose(q{i}), dimensions={{1,0}}"),
    ("s", "f32[32,64]{{1,0}} slice(t{i}), slice={{[0:32], [0:64]}}"),
    ("p", "f32[64,64]{{1,0}} pad(s{i}, zero), padding=16_16x0_0"),
    ("y", "f32[64]{{0}} reduce(p{i}, zero), dimensions={{0}}, to_apply=add_reducer"),
    ("b", "f32[64,64]{{1,0}} broadcast(y{i}), dimensions={{1}}"),
    ("g", "f32[8,64]{{1,0}} dynamic-slice(b{i}, idx, idx), dynamic_slice_sizes={{8,64}}"),
    ("u", "(f32[64,64]{{1,0}}, f32[8,64]{{1,0}}) tuple(b{i}, g{i})"),
    ("e", "f32[64,64]{{1,0}} get-tuple-element(u{i}), index=0"),
    ("a", "f32[64,64]{{1,0}} add(e{i}, {p})"),
]


def synthetic_module(instructions: int) -> tuple[str, int]:
    """HLO text of about `instructions` instructions, and its exact count."""
    lines = ["  x = f32[64,64]{1,0} parameter(0)", "  w = f32[64,64]{1,0} parameter(1)",
             "  k = f32[3,3,1,1]{3,2,1,0} parameter(2)", "  zero = f32[] constant(0)", "  idx = s32[] constant(0)"]
    previous = "x"
    for i in range((instructions - len(lines) - 3) // len(BLOCK)):
        for name, text in BLOCK:
            lines.append(f"  {name}{i} = {text.format(p=previous, i=i)}{META}")
        previous = f"a{i}"
    lines[-1] = lines[-1].replace(f"  {previous} =", f"  ROOT {previous} =")
    text = "HloModule bench, entry_computation_layout={(f32[64,64]{1,0})->f32[64,64]{1,0}}\n\n"
    text += REDUCER + "\nENTRY main {\n" + "\n".join(lines) + "\n}\n"
    return text, len(lines) + 3


def measure(text: str, repeats: int) -> float:
    """Best seconds of `repeats` parse + encode runs."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        encode_module(parse_module(text, "bench.hlo"))
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instructions", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "encode.md")
    parser.add_argument("--smoke", action="store_true", help="one repeat of a small module: checks the script runs")
    args = parser.parse_args(argv)
    command, repeats = ("--smoke", 1) if args.smoke else (f"--instructions {args.instructions}", args.repeats)
    text, count = synthetic_module(2_000 if args.smoke else args.instructions)
    seconds = measure(text, repeats)
    rate = count / seconds
    report = (f"# HLO encoder speed\n\n`python benchmarks/encode_bench.py {command}` "
              f"(parse + encode, one core, best of {repeats}):\n\n"
              f"| instructions | seconds | instructions/s | target |\n|---|---|---|---|\n"
              f"| {count} | {seconds:.3f} | {rate:,.0f} | {TARGET:,} |\n\n"
              f"Python {platform.python_version()} on {platform.machine()} ({platform.processor() or 'cpu'}).\n")
    write_report(args.out, report)
    return 0 if rate >= TARGET or args.smoke else 1


if __name__ == "__main__":
    raise SystemExit(main())
