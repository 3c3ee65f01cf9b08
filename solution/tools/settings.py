"""Settings: where the package's configs live, how YAML files layer over them, and what a checkpoint fixes."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..constants import COLLECTIONS
from ..errors import SettingsError
from ..submission.files import collection_file_stem

# data settings a command may change for a trained model: where files are, how many at a time, which split
FREE_DATA = frozenset({
    "root", "cache_dir", "num_workers", "graphs_per_batch", "configs_per_graph", "sampling", "row_budget",
    "eval_chunk", "eval_graphs_per_batch", "predict_split", "test_split", "limit_graphs",
    "skip_bad_files", "folds", "fold", "family_pattern",
})
# training or speed only
FREE_MODEL = frozenset({"lr", "start_lr", "weight_decay", "warmup_steps", "compile", "inference_rows"})
DERIVED = frozenset({"node_feat_dim", "config_width", "task"})  # the model's, from the data settings


def configs_folder() -> Path:
    """The package's configs: base.yaml, one YAML per collection, demo.yaml (`configs/` at the top is this folder)."""
    return Path(__file__).resolve().parents[1] / "configs"


def class_name(class_path: object) -> str:
    """'solution.models.losses.ListMLE' -> 'ListMLE' (a short class_path is already one)."""
    return str(class_path).rsplit(".", 1)[-1]


def started_from(settings: Mapping[str, Mapping], init_from: str | Path,
                 collections: Sequence[str] | None = None) -> dict[str, Mapping]:
    """Each collection's settings with its fit starting from `init_from` (`model.init_from`): every collection's, or
    those of `collections`."""
    return {c: layered(s, {"model": {"init_from": str(init_from)}}) if collections is None or c in collections else s
            for c, s in settings.items()}


def layered(base: Mapping, override: Mapping) -> dict:
    """`override` merged into `base` at every depth, as the Lightning CLI reads config files in turn; a mapping
    that names another class (`class_path`) starts its `init_args` afresh."""
    out = dict(base)
    for key, value in override.items():
        below = out.get(key)
        if isinstance(value, Mapping) and isinstance(below, Mapping):
            if "class_path" in value and class_name(value["class_path"]) != class_name(below.get("class_path")):
                below = {k: v for k, v in below.items() if k != "init_args"}
            out[key] = layered(below, value)
        else:
            out[key] = value
    return out


def section(settings: Mapping, key: str, kind: type, collection: str) -> Any:
    """The `key:` mapping of a collection's settings as the dataclass `kind` (its defaults where absent); a key the
    dataclass does not have is a SettingsError naming the ones it has."""
    try:
        return kind(**settings.get(key, {}))
    except TypeError as error:
        keys = ", ".join(field.name for field in dataclasses.fields(kind))
        raise SettingsError(f"{collection}: {key}={settings.get(key)!r} ({error}); expected a mapping of some of "
                            f"{keys}") from None


def read_yaml(path: str | Path) -> dict:
    """One settings file as a mapping (empty for an empty file); a file that is not YAML of a mapping is refused."""
    import yaml  # only where settings are read from files (the kernel carries them inside itself)

    path = Path(path)
    try:
        loaded = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml: 8x
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise SettingsError(f"{path}{where}: not valid YAML ({getattr(error, 'problem', None) or error}); "
                            "expected settings such as configs/demo.yaml") from error
    except UnicodeDecodeError as error:
        raise SettingsError(f"{path}: not a text file; expected YAML settings") from error
    if loaded is None:
        return {}
    if not isinstance(loaded, Mapping):
        raise SettingsError(f"{path}: holds a {type(loaded).__name__}; expected a mapping of settings "
                            "(trainer:, model:, data:)")
    return dict(loaded)


def read_settings(folder: Path | None = None, layers: Sequence[str | Path] = ()) -> dict[str, dict]:
    """Collection -> its settings: base.yaml, then <collection>.yaml (from `folder`, default the package's
    configs), then each of `layers`."""
    folder = folder or configs_folder()
    base = read_yaml(folder / "base.yaml")
    settings = {c: layered(base, read_yaml(folder / f"{collection_file_stem(c)}.yaml")) for c in COLLECTIONS}
    for layer in [read_yaml(path) for path in layers]:
        settings = {c: layered(s, layer) for c, s in settings.items()}
    return settings


def leaves(config: Mapping, prefix: str = "") -> dict[str, Any]:
    """A nested config flattened to dotted keys."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, Mapping) and value:
            flat.update(leaves(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def fixed_by_checkpoint(saved: Mapping[str, Mapping]) -> dict[str, dict]:
    """What a checkpoint's settings ({'model', 'data'}) fix for every command that loads it: the model and the
    data settings that shape its inputs."""
    model = {k: v for k, v in saved["model"].items() if k not in FREE_MODEL | DERIVED}
    if isinstance(model.get("ranker"), Mapping):
        init_args = model["ranker"].get("init_args", {})
        model["ranker"] = {**model["ranker"],
                           "init_args": {k: v for k, v in init_args.items() if k not in FREE_MODEL | DERIVED}}
    data = {k: v for k, v in saved["data"].items() if k not in FREE_DATA}
    return {"model": model, "data": data}


def agree(key: str, one: Any, other: Any) -> bool:
    """Whether two values of a setting agree: classes by their name (a short class_path is the same class)."""
    return class_name(one) == class_name(other) if key.endswith("class_path") else one == other


def with_checkpoint(settings: Mapping, saved: Mapping[str, Mapping], defaults: Sequence[Mapping],
                    source: str) -> dict:
    """`settings` (a command's: configs, YAML layers, command line) with what the checkpoint `source` fixes put in
    place. A value the user set (one that differs from each of `defaults`, what the command gives when nothing is
    set) and that contradicts the checkpoint is a SettingsError naming both values."""
    fixed = fixed_by_checkpoint(saved)
    given, known = leaves(settings), [leaves(d) for d in defaults]
    same_class = agree("class_path", leaves(fixed).get("model.ranker.class_path"),
                       given.get("model.ranker.class_path"))
    clashes = []
    for key, value in leaves(fixed).items():
        if key.startswith("model.ranker.init_args.") and not same_class:
            continue  # the class itself clashes, or was left at a default: its arguments are the checkpoint's
        if key not in given or given[key] is None or agree(key, given[key], value):
            continue
        if any(key in d and agree(key, given[key], d[key]) for d in known):
            continue  # left at a default: the checkpoint's value is used
        clashes.append(f"{key} = {given[key]!r} (the checkpoint has {value!r})")
    if clashes:
        raise SettingsError(f"{source} was trained with other settings than these: {'; '.join(clashes)}; "
                            "leave them unset to use the checkpoint's, or train a new model")
    return layered(settings, fixed)
