"""`solution predict` without a trainer: on one CPU process, in float32 or (--trainer.precision bf16-mixed) under
bfloat16 autocast, a checkpoint ranks every file of a split and writes the collection's submission part, with the
settings the Lightning CLI resolves (configs/base.yaml, then --config files and --key value flags in their order,
then what the checkpoint fixes). Importing Lightning is most of a short predict's start-up; a command this does not
cover goes to the Lightning CLI."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..allocator import keep_freed_buffers
from ..data.splits import SPLIT_DEFAULTS, split_graphs
from ..submission.ensemble import write_scores
from ..training.inference import CPU_PRECISIONS
from ..training.ranker_file import SavedRanker, describe, read_ranker
from .ranking import ranked_split, resolved, split_metrics
from .settings import configs_folder, layered, read_yaml

TOP_LEVEL = ("ckpt_path", "ranker", "seed_everything")
NAME = re.compile(r"[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*")  # a dotted setting
SECTIONS = ("data", "model", "trainer", "submission", "checkpoint", "lr_monitor")  # those of the Lightning CLI
# trainer settings under which predict runs in this process, on the CPU (float32 or bf16-mixed); the others
# concern training
ON_CPU = {"accelerator": ("cpu", "auto"), "devices": (1, "1", "auto"), "num_nodes": (1, None),
          "precision": CPU_PRECISIONS, "strategy": ("auto", None), "callbacks": (None, []),
          "limit_predict_batches": (None, 1, 1.0)}
DEFAULT_OUT = "submissions"  # SubmissionWriter's out_dir


def command_line(args: list[str]) -> list[tuple[str, str]] | None:
    """(key, value) of each `--key value` / `--key=value` in order (`config` for --config and -c), or None for a
    command line that holds anything else (a bare flag such as --print_config, an unknown key)."""
    pairs, rest = [], list(args)
    while rest:
        arg = rest.pop(0)
        if not arg.startswith("-"):
            return None
        if "=" in arg:
            key, value = arg.split("=", 1)
        elif rest and not rest[0].startswith("--"):
            key, value = arg, rest.pop(0)
        else:
            return None
        key = key.lstrip("-")
        key = "config" if key == "c" else key
        if not NAME.fullmatch(key) or key != "config" and key not in TOP_LEVEL and key.split(".")[0] not in SECTIONS:
            return None  # another key, or an operator such as `--trainer.callbacks+=`
        pairs.append((key, value))
    return pairs


def with_flag(settings: dict, key: str, text: str) -> dict:
    """`settings` with the dotted `key` set from the command line's `text`: a string where the setting is one, else
    read as YAML (2, false, null)."""
    import yaml  # as settings.read_yaml does: only where settings are read from text

    *path, last = key.split(".")
    out = node = dict(settings)
    for part in path:
        below = node.get(part)
        node[part] = dict(below) if isinstance(below, Mapping) else {}
        node = node[part]
    node[last] = text if isinstance(node.get(last), str) else yaml.safe_load(text)
    return out


def resolved_command(pairs: list[tuple[str, str]]) -> dict:
    """The settings of a command line: configs/base.yaml, then each --config file and flag in turn."""
    settings = read_yaml(configs_folder() / "base.yaml")
    for key, value in pairs:
        settings = layered(settings, read_yaml(value)) if key == "config" else with_flag(settings, key, value)
    return settings


def runs_here(settings: Mapping) -> bool:
    """Whether a predict with these settings runs in this process: a checkpoint file, an integer seed, and a
    trainer of one CPU process in float32."""
    trainer = settings.get("trainer") or {}
    on_cpu = all(trainer.get(key, allowed[0]) in allowed for key, allowed in ON_CPU.items())
    gpu = torch.cuda.is_available() or torch.backends.mps.is_available()
    seed = settings.get("seed_everything", 0)
    return (on_cpu and not (trainer.get("accelerator", "auto") == "auto" and gpu)
            and isinstance(seed, int) and not isinstance(seed, bool)
            and isinstance(ranker_source(settings), str) and Path(ranker_source(settings)).is_file())


def ranker_source(settings: Mapping) -> str | None:
    """The ranker a command ranks with: --ranker (a ranker file), else --ckpt_path (a ranker of one network)."""
    return settings.get("ranker") or settings.get("ckpt_path")


def command_ranker(settings: Mapping[str, Any]) -> tuple[SavedRanker, str, dict]:
    """The ranker a command names (--ranker, else --ckpt_path), the flag that named it (for errors), and the data
    settings it ranks under (the command's, with what the ranker fixes put in place)."""
    source = ranker_source(settings)
    flag = f"--{'ranker' if settings.get('ranker') else 'ckpt_path'} {source}"
    ranker = read_ranker(source)
    return ranker, flag, {**SPLIT_DEFAULTS, **resolved(ranker, settings, flag)["data"]}


def predict(settings: Mapping[str, Any]) -> tuple[Path, Path]:
    """Rank every file of data.predict_split with the ranker (--ranker) or checkpoint (--ckpt_path) and write
    <out_dir>/<collection>.csv and its raw scores, as `solution run` and the Lightning CLI's predict write them."""
    ranker, flag, data = command_ranker(settings)
    graphs = split_graphs(data, data["predict_split"])
    if graphs.skipped:  # a submission needs every file of the split it ranks
        raise graphs.skipped[0]
    _, scores = ranked_split(ranker, settings, data["predict_split"], flag, graphs)
    out_dir = (settings.get("submission") or {}).get("out_dir", DEFAULT_OUT)
    return write_scores(graphs, scores, out_dir, ranker.collection, data["predict_split"])


def scored(settings: Mapping[str, Any], command: str) -> dict[str, float]:
    """The mean metrics of the split with runtimes that `command` scores (validate: valid, test: data.test_split)
    ranked by the ranker, printed; returns them."""
    ranker, flag, data = command_ranker(settings)
    split = data["test_split"] if command == "test" else "valid"
    graphs, scores = ranked_split(ranker, settings, split, flag)
    means = split_metrics(graphs, scores, ranker.collection)
    print(f"{split} split of {ranker.collection}, {len(graphs)} files, ranked by {ranker_source(settings)} "
          f"({describe(ranker)}):\n" + "\n".join(f"  {name} {value:.4f}" for name, value in means.items()))
    return means


def rank_here(command: str, args: list[str]) -> int | None:
    """`solution predict ARGS` in this process, or None where it needs the Lightning CLI (a trainer on another
    device or precision, callbacks, flags such as --print_config or --help); `solution validate/test --ranker FILE`
    too (with a checkpoint they go to the Lightning CLI)."""
    pairs = command_line(args)
    settings = resolved_command(pairs) if pairs is not None else None
    if settings is None or not runs_here(settings) or command != "predict" and not settings.get("ranker"):
        return None
    keep_freed_buffers()
    if command == "predict":
        csv_path, scores_path = predict(settings)
        print(f"wrote {csv_path} and {scores_path}")
    else:
        scored(settings, command)
    return 0
