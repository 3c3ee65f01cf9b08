"""Reading a checkpoint as data: plain tensors and settings only, every class it names checked against the
package's registry before anything is imported or built."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from ..constants import COLLECTIONS
from ..models.spec import UnknownClass, registered, unknown_arguments

SETTINGS_KEYS = ("hyper_parameters", "datamodule_hyper_parameters")  # where a checkpoint keeps its settings


class CheckpointError(Exception):
    """A file that is not a usable checkpoint of this package; the message names the file and the key."""


def class_specs(settings: Any, key: str) -> Iterator[tuple[str, Mapping]]:
    """(dotted key, mapping) of every mapping that holds a `class_path` inside nested settings."""
    if isinstance(settings, Mapping):
        if "class_path" in settings:
            yield key, settings
        for name, value in settings.items():
            yield from class_specs(value, f"{key}.{name}")
    elif isinstance(settings, (list, tuple)):
        for index, value in enumerate(settings):
            yield from class_specs(value, f"{key}[{index}]")


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """A checkpoint's contents, loaded with `weights_only` (no pickled code runs), after checking that every class
    its settings name is one of the package's model classes."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint file")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except OSError:
        raise  # a file that cannot be read: told as such
    except Exception as error:  # noqa: BLE001 -- whatever the unpickler meets in a file that is not a checkpoint
        words = str(error).strip().splitlines()[0].split(". ")[0] if str(error).strip() else ""
        raise CheckpointError(f"{path}: not a readable checkpoint ({type(error).__name__}: {words[:200]}); expected "
                              "a file written by `solution fit` or `solution run`") from error
    if not isinstance(saved, Mapping) or not isinstance(saved.get("state_dict"), Mapping) \
            or not isinstance(saved.get("hyper_parameters"), Mapping):
        raise CheckpointError(f"{path}: keys state_dict and hyper_parameters missing; expected a checkpoint "
                              "written by `solution fit` or `solution run`")
    for section in SETTINGS_KEYS:
        for key, spec in class_specs(saved.get(section, {}), section):
            try:
                cls = registered(spec["class_path"])
            except UnknownClass as error:
                raise CheckpointError(f"{path}: {key}.class_path = {spec['class_path']!r} is not one of the "
                                      "package's model classes; refused (a checkpoint may name only solution.models "
                                      "classes)") from error
            unknown = unknown_arguments(cls, spec.get("init_args") or {})
            if unknown:
                raise CheckpointError(f"{path}: {key}.init_args.{unknown[0]}: {cls.__name__} takes no such argument "
                                      "(an option of another version of the package); expected a checkpoint "
                                      "written by this version")
    return dict(saved)


def saved_settings(saved: Mapping[str, Any]) -> dict[str, dict]:
    """A checkpoint's settings as the configs' sections: {'model': ..., 'data': ...} (without the entries
    Lightning's CLI adds, such as `_instantiator`)."""
    def public(section: Mapping) -> dict:
        return {key: value for key, value in section.items() if not key.startswith("_")}

    return {"model": public(saved["hyper_parameters"]), "data": public(saved.get("datamodule_hyper_parameters", {}))}


def checkpoint_collection(saved: Mapping[str, Any], source: str | Path) -> str:
    """The collection a checkpoint read by `read_checkpoint` was trained on; one it does not name is refused."""
    collection = saved_settings(saved)["data"].get("collection")
    if collection not in COLLECTIONS:
        raise CheckpointError(f"{source}: datamodule_hyper_parameters.collection = {collection!r}; expected one of "
                              f"{', '.join(COLLECTIONS)}")
    return collection
