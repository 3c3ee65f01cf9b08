"""Modules that remember the arguments they were built with, and building one back from such a record."""

from __future__ import annotations

import functools
import importlib
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


def build(spec: Mapping[str, Any] | nn.Module) -> nn.Module:
    """The module a {class_path, init_args} mapping names (a module passes through)."""
    if isinstance(spec, nn.Module):
        return spec
    module, _, name = spec["class_path"].rpartition(".")
    return getattr(importlib.import_module(module), name)(**spec.get("init_args", {}))
