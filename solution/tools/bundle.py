"""`solution kernel`: bundle the package, configs/*.yaml and its starts into the one-file Kaggle script
kaggle_kernel.py."""

from __future__ import annotations

import argparse
import ast
import base64
import importlib
import importlib.abc
import importlib.util
import inspect
import json
import pprint
import re
import sys
import textwrap
import types
from collections.abc import Mapping
from pathlib import Path

from ..atomic import atomic_write
from ..errors import OK
from ..training.module import shipped_starts
from .kernel import COMPETITION, DEFAULT_BUDGET
from .plan import training_shares
from .settings import configs_folder, read_settings

KERNEL_FILE = "kaggle_kernel.py"
METADATA_FILE = "kernel-metadata.json"
KERNEL_ID = "<username>/tpugraphs-solution"
TITLE = "TpuGraphs solution"  # Kaggle derives the slug of the id from the title


# ---------------------------------------------------------------- the kernel's start-up, copied into it verbatim


class Bundle(importlib.abc.MetaPathFinder, importlib.abc.InspectLoader):
    """Imports modules from their embedded sources (name -> text) ahead of any installed copy; each gets
    `__bundled__ = True`, and tracebacks show the embedded lines."""

    def __init__(self, sources: dict[str, str], packages: tuple[str, ...]) -> None:
        self.sources, self.packages = sources, packages

    def find_spec(self, name: str, path=None, target=None) -> importlib.machinery.ModuleSpec | None:
        if name not in self.sources:
            return None
        return importlib.util.spec_from_loader(name, self, is_package=self.is_package(name))

    def is_package(self, name: str) -> bool:
        return name in self.packages

    def get_source(self, name: str) -> str:
        return self.sources[name]

    def get_code(self, name: str) -> types.CodeType:
        filename = name.replace(".", "/") + ("/__init__.py" if self.is_package(name) else ".py")
        return compile(self.sources[name], f"bundled:{filename}", "exec", dont_inherit=True)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__bundled__ = True
        super().exec_module(module)


def alias_lightning(names: tuple[str, ...]) -> None:
    """Where the `lightning` package is missing (Kaggle's image has only pytorch_lightning), serve
    pytorch_lightning under the `lightning.pytorch` module names in `names`: the only place that knows both."""
    try:
        importlib.import_module("lightning.pytorch")
    except ImportError:
        sys.modules["lightning"] = types.ModuleType("lightning")
        for name in names:
            sys.modules[name] = importlib.import_module(name.replace("lightning.pytorch", "pytorch_lightning", 1))
        sys.modules["lightning"].pytorch = sys.modules["lightning.pytorch"]


# ---------------------------------------------------------------- the bundler: solution kernel


HEADER = """Kaggle script for "Google - Fast or Slow? Predict AI Model Runtime" (TpuGraphs): the `solution` package
bundled into one file that needs nothing but a stock Kaggle GPU image (torch, numpy, pytorch_lightning) and no
internet.

It trains one ranking model per collection within a time budget (or loads trained checkpoints), predicts every
test file, writes a checked submission.csv and prints a table of validation scores.

Settings (environment variables; on Kaggle all are optional):
  SOLUTION_DATA_ROOT       the competition data; default /kaggle/input/{competition}, else the first
                           attached input that holds npz_all/npz
  SOLUTION_OUTPUT_DIR      where submission.csv, collections/, rankers/<collection>.ranker and checkpoints/ go; default
                           /kaggle/working
  SOLUTION_TIME_BUDGET     wall-clock seconds of the whole job, start to checked submission.csv; default
                           {budget:.0f}; the job plans its steps from the files' sizes and trains each
                           collection for its share of what they leave:
                           {shares}
  SOLUTION_RANKERS         a folder of <collection>.ranker (an earlier run's rankers/, attached as a dataset):
                           those collections rank with them, as saved, and are not trained
  SOLUTION_CHECKPOINTS     a folder of <collection>.ckpt (e.g. an earlier run's checkpoints/, attached as a
                           dataset, or `solution fit` checkpoints renamed): those collections are not trained
  SOLUTION_INIT_FROM       a folder of <collection>.ckpt (e.g. `solution pretrain`'s output, attached as a dataset):
                           each collection's training starts from its weights, in place of the package's starts
                           (STARTS below) that settings with `model.init_from: shipped` start from
  SOLUTION_CACHE           preprocessed graphs; default <temp dir>/solution-cache (never the read-only input)
  SOLUTION_KERNEL_PROFILE  kaggle (default: the SETTINGS below, from configs/*.yaml) or smoke (a tiny model and
                           small batches on the CPU: a seconds-long check on synthetic data)

Run it on Kaggle as a script notebook (GPU on, internet off, the competition data attached), or anywhere:
  SOLUTION_DATA_ROOT=data/kaggle SOLUTION_OUTPUT_DIR=out python kaggle_kernel.py
Publish: `solution kernel --metadata --id <username>/tpugraphs-solution`, then `kaggle kernels push -p .`

Generated by `solution kernel` from the package's modules (SOURCES), configs/*.yaml (SETTINGS) and starts
(solution/starts, STARTS): do not edit, regenerate."""

PREAMBLE = """from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types"""

START = """sys.meta_path.insert(0, Bundle(SOURCES, PACKAGES))
alias_lightning(LIGHTNING_MODULES)

if __name__ == "__main__":
    from solution.tools.kernel import main

    sys.exit(main(SETTINGS, starts=STARTS))"""

PACKAGE = "solution"
_QUOTES = re.compile(r"'{3,}|'+\Z")  # what would end a '''-string early


def package_dir() -> Path:
    return Path(__file__).resolve().parent.parent


def module_files(package: Path) -> dict[str, Path]:
    """Dotted module name -> file of every module of the package (a folder's __init__.py names the folder)."""
    files = {}
    for path in sorted(package.rglob("*.py")):
        parts = (PACKAGE, *path.relative_to(package).with_suffix("").parts)
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def imported(source: str, module: str = PACKAGE, is_package: bool = True) -> set[str]:
    """Absolute names of the modules a source imports, relative imports resolved from `module` (a package
    when `is_package`)."""
    here = module.split(".") if is_package else module.split(".")[:-1]
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(filter(None, [".".join(here[:len(here) - node.level + 1]) if node.level else None,
                                          node.module]))
            names.add(base)
            if node.level:  # `from . import data` names a module; `from lightning.pytorch import Trainer` does not
                names |= {f"{base}.{alias.name}" for alias in node.names}
    return names


def bundled_sources(package: Path, entry: str = f"{PACKAGE}.tools.kernel") -> tuple[dict[str, str], tuple[str, ...]]:
    """(module name -> source, package names) of `entry`, every package module it needs and their parent
    packages, sorted by name."""
    files = module_files(package)
    packages = {name for name, path in files.items() if path.name == "__init__.py"}
    sources: dict[str, str] = {}
    pending = [entry]
    while pending:
        name = pending.pop()
        if name not in sources:
            sources[name] = files[name].read_text(encoding="utf-8")
            parents = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
            pending += sorted((imported(sources[name], name, name in packages) | parents) & files.keys())
    return dict(sorted(sources.items())), tuple(sorted(packages & sources.keys()))


def lightning_modules(sources: Mapping[str, str]) -> tuple[str, ...]:
    """The `lightning.pytorch` modules the sources import: those the kernel aliases when `lightning` is missing."""
    names = sorted({n for s in sources.values() for n in imported(s) if n.split(".")[0] == "lightning"})
    other = [n for n in names if n != "lightning.pytorch" and not n.startswith("lightning.pytorch.")]
    if other:
        raise ValueError(f"the package imports {other}; the kernel can alias only lightning.pytorch modules")
    return tuple(names)


def literal(text: str) -> str:
    """`text` as a '''-string literal whose lines read as the text's own."""
    body = _QUOTES.sub(lambda m: "\\'" * len(m.group()), text.replace("\\", "\\\\"))
    code = f"'''\\\n{body}'''"
    if ast.literal_eval(code) != text:
        raise ValueError(f"cannot embed {text[:60]!r}... as a string literal")
    return code


def render() -> str:
    """The text of kaggle_kernel.py: deterministic (sorted modules, no timestamps), so that it can be checked."""
    sources, packages = bundled_sources(package_dir())
    shipped = read_settings(configs_folder())
    shares = "\n".join(textwrap.wrap(", ".join(f"{c}={share:.0%}" for c, share in training_shares(shipped).items()),
                                      80, subsequent_indent=" " * 27))
    header = HEADER.format(competition=COMPETITION, budget=DEFAULT_BUDGET, shares=shares)
    settings = pprint.pformat(shipped, width=110, sort_dicts=False)
    embedded = [f"# {'-' * 40} {name}\nSOURCES[{name!r}] = {literal(text)}" for name, text in sources.items()]
    starts = [f"STARTS[{path.name!r}] = {literal(base64.encodebytes(path.read_bytes()).decode())}"
              for path in sorted(shipped_starts().glob("*.ckpt"))]
    data = [f"SETTINGS = {settings}", f"LIGHTNING_MODULES = {lightning_modules(sources)!r}",
            f"PACKAGES = {packages!r}", "SOURCES = {}", *embedded, "STARTS = {}", *starts]
    code = [inspect.getsource(Bundle).rstrip(), inspect.getsource(alias_lightning).rstrip()]
    return "\n\n\n".join([f'"""{header}"""', PREAMBLE, *code, "\n\n".join(data), START]) + "\n"


def metadata(kernel_id: str, code_file: str) -> dict:
    """kernel-metadata.json for `kaggle kernels push`: a private GPU script with the competition data, offline."""
    return {"id": kernel_id, "title": TITLE, "code_file": code_file, "language": "python", "kernel_type": "script",
            "is_private": True, "enable_gpu": True, "enable_internet": False, "dataset_sources": [],
            "competition_sources": [COMPETITION], "kernel_sources": []}


def main(argv: list[str] | None = None) -> int:
    """`solution kernel`: write kaggle_kernel.py (and its metadata) and say where."""
    parser = argparse.ArgumentParser(prog="solution kernel", description="Bundle the package into one Kaggle script.")
    parser.add_argument("--out", type=Path, default=Path(KERNEL_FILE), help="the script to write")
    parser.add_argument("--metadata", action="store_true", help=f"also write {METADATA_FILE} beside it")
    parser.add_argument("--id", default=KERNEL_ID, help="the kernel's <username>/<slug> on Kaggle")
    args = parser.parse_args(argv)
    text = render()
    with atomic_write(args.out) as handle:
        handle.write(text)
    print(f"wrote {args.out} ({len(text) // 1024} KiB)")
    if args.metadata:
        with atomic_write(args.out.parent / METADATA_FILE) as handle:
            handle.write(json.dumps(metadata(args.id, args.out.name), indent=2) + "\n")
        print(f"wrote {args.out.parent / METADATA_FILE}; publish with: kaggle kernels push -p {args.out.parent}")
    return OK
