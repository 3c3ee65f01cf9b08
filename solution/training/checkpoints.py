"""Reading a checkpoint as data: plain tensors and settings only, every class it names checked against the
package's registry before anything is imported or built."""

from __future__ import annotations

import errno
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from ..constants import COLLECTIONS
from ..models.spec import UnknownClass, registered, unknown_arguments

SETTINGS_KEYS = ("hyper_parameters", "datamodule_hyper_parameters")  # where a checkpoint keeps its settings
# data settings that earlier versions saved and this one removed (CHANGELOG.md): a checkpoint that names one is
# refused, as one whose model names an argument its class no longer takes
REMOVED_DATA = ("traffic", "predict_repeats")
UNREADABLE = {errno.EACCES, errno.EPERM, errno.EIO, errno.EISDIR, errno.ENOENT}  # OSErrors of reading, not of contents


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
    saved = load_as_data(path, "checkpoint", "`solution fit` or `solution run`")
    check_contents(saved, path)
    return dict(saved)


def load_as_data(path: str | Path, kind: str, writers: str) -> Any:
    """A file saved by torch.save, loaded with `weights_only` (tensors and plain values: no pickled code runs); one
    that is missing, or that holds anything else (a pickle, a cut-short file), is refused in one line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such {kind} file")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except OSError as error:
        if error.errno in UNREADABLE:
            raise  # a file that cannot be read: told as such
        reason = error  # the zip reader's EINVAL: a file cut short
    except Exception as error:  # noqa: BLE001 -- whatever the unpickler meets in a file that is not of this kind
        reason = error
    words = str(reason).strip().splitlines()[0].split(". ")[0] if str(reason).strip() else ""
    raise CheckpointError(f"{path}: not a readable {kind} ({type(reason).__name__}: {words[:200]}); expected "
                          f"a file written by {writers}") from reason


def check_contents(saved: Any, source: str | Path, where: str = "") -> None:
    """Refuse checkpoint contents without state_dict and hyper_parameters, or whose settings name a class outside
    the package's model classes, an argument its class does not take or a removed data setting (`where`: the key
    that holds them)."""
    if not isinstance(saved, Mapping) or not isinstance(saved.get("state_dict"), Mapping) \
            or not isinstance(saved.get("hyper_parameters"), Mapping):
        raise CheckpointError(f"{source}: keys {where}state_dict and {where}hyper_parameters missing; expected a "
                              "checkpoint written by `solution fit` or `solution run`")
    for section in SETTINGS_KEYS:
        for key, spec in class_specs(saved.get(section, {}), f"{where}{section}"):
            try:
                cls = registered(spec["class_path"])
            except UnknownClass as error:
                raise CheckpointError(f"{source}: {key}.class_path = {spec['class_path']!r} is not one of the "
                                      "package's model classes; refused (a checkpoint may name only solution.models "
                                      "classes)") from error
            unknown = unknown_arguments(cls, spec.get("init_args") or {})
            if unknown:
                raise CheckpointError(f"{source}: {key}.init_args.{unknown[0]}: {cls.__name__} takes no such argument "
                                      "(an option of another version of the package); expected a checkpoint "
                                      "written by this version")
    data = saved.get("datamodule_hyper_parameters")
    removed = [key for key in REMOVED_DATA if isinstance(data, Mapping) and key in data]
    if removed:
        raise CheckpointError(f"{source}: {where}datamodule_hyper_parameters.{removed[0]}: a data setting this version "
                              "removed (CHANGELOG.md); expected a checkpoint written by this version")


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
