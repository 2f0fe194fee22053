"""A package's public names, each imported from its module when first asked for (PEP 562).

So a program pays for what it uses: ``harel_sa.schema`` alone costs no pydantic, and the
``harel-sa`` commands that run no worker load none of the worker's machinery.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def importer(namespace: dict[str, Any], homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for the package whose globals are ``namespace``: a name of
    ``homes`` is imported from the module ``homes`` names when first asked for, then kept
    in ``namespace``; any other name is an ``AttributeError``."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        value = getattr(import_module(home), name)
        namespace[name] = value
        return value

    return __getattr__


def lister(namespace: dict[str, Any]) -> Callable[[], list[str]]:
    """A module ``__dir__`` for the package whose globals are ``namespace``: what it holds
    and its ``__all__``, imported or not yet."""
    return lambda: sorted({*namespace, *namespace["__all__"]})
