"""Lazy package exports (PEP 562): a package names what it exports and the module that
defines each name, and imports that module only when the name is first used — so
importing one submodule (``uldp.collector.cli``, ``uldp.collector.central.huber``) does
not import its package's every neighbour (scipy, the simulation, the planner).
Used by ``uldp.collector`` and ``uldp.collector.central``."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str], names: Sequence[str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``exports`` maps a name to the
    submodule (relative to ``package``) that defines it; ``names`` is ``__all__``. A name
    once looked up is stored in the package, so later lookups do not come back here."""

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def dir_() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return getattr_, dir_
