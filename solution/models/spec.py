"""Modules that remember the arguments they were built with, and building one back from such a record: only
the package's own model classes (the registry), never a name read from a file."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import Any

from torch import nn


class Remembered(nn.Module):
    """A module whose `spec` is {class_path, init_args}: what the Lightning CLI's `class_path` / `init_args`
    settings hold, and what a checkpoint stores to rebuild it without pickled code."""

    spec: dict[str, Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__", cls.__init__)  # an inherited one too: the class must record its calls

        @functools.wraps(init)  # keeps the signature the CLI reads
        def remembering(self: nn.Module, *args: Any, **options: Any) -> None:
            init(self, *args, **options)
            if type(self) is cls:  # the outermost class records the call
                signature = inspect.signature(init)
                bound = signature.bind(self, *args, **options)
                bound.apply_defaults()
                init_args: dict[str, Any] = {}
                for name, value in list(bound.arguments.items())[1:]:
                    kind = signature.parameters[name].kind
                    if kind is inspect.Parameter.VAR_KEYWORD:
                        init_args.update(value)
                    elif kind is inspect.Parameter.VAR_POSITIONAL:
                        if value:
                            raise TypeError(f"{cls.__qualname__}: positional arguments {value!r} cannot be "
                                            "remembered by name")
                    else:
                        init_args[name] = value
                self.spec = {"class_path": f"{cls.__module__}.{cls.__qualname__}", "init_args": init_args}

        cls.__init__ = remembering
        if cls.__module__.startswith(f"{MODELS}."):
            REGISTRY[f"{cls.__module__}.{cls.__qualname__}"] = cls


MODELS = "solution.models"
REGISTRY: dict[str, type[Remembered]] = {}  # class path -> class, filled as solution.models imports its modules


class UnknownClass(ValueError):
    """A class path that names no model class of the package."""


def registered(class_path: object) -> type[Remembered]:
    """The package's model class a class path names, in full (`solution.models.losses.ListMLE`) or by its name
    alone (`ListMLE`, as the Lightning CLI accepts); anything else is refused without importing it."""
    if isinstance(class_path, str):
        if class_path in REGISTRY:
            return REGISTRY[class_path]
        by_name = [cls for path, cls in REGISTRY.items() if path.rsplit(".", 1)[-1] == class_path]
        if len(by_name) == 1:
            return by_name[0]
    raise UnknownClass(f"class path {class_path!r} is not one of the package's model classes; expected one of "
                       f"{', '.join(sorted(REGISTRY))}")


def unknown_arguments(cls: type, init_args: Mapping[str, Any]) -> list[str]:
    """The names in `init_args` that the constructor of `cls` does not take (an option of another version)."""
    parameters = inspect.signature(cls.__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return []
    return [name for name in init_args if name not in parameters]


def build(spec: Mapping[str, Any] | nn.Module) -> nn.Module:
    """The module a {class_path, init_args} mapping names (a module of a registered class passes through); the
    class must be in the registry."""
    if isinstance(spec, nn.Module):
        registered(getattr(spec, "spec", {}).get("class_path"))
        return spec
    if not isinstance(spec, Mapping):
        raise UnknownClass(f"{spec!r}; expected a mapping of class_path and init_args, or a model module")
    return registered(spec.get("class_path"))(**spec.get("init_args", {}))
