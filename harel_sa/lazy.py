"""A package's public names, each imported from its module when first asked for (PEP 562).

So a program pays for what it uses: ``harel_sa.schema`` alone costs no pydantic, and the
``harel-sa`` commands that run no worker load none of the worker's machinery.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def importer(
    namespace: dict[str, Any], homes: Mapping[str, str], extras: Mapping[str, str] | None = None
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for the package whose globals are ``namespace``: a name of
    ``homes`` is imported from the module ``homes`` names when first asked for, then kept
    in ``namespace``; any other name is an ``AttributeError``.

    A module in ``extras`` (home: the extra that installs what it imports) whose driver is
    missing yields a stand-in that raises :func:`missing_extra`'s error when called or used:
    so ``from harel_sa import *`` and ``import harel_sa`` work on a base install."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        try:
            module = import_module(home)
        except ModuleNotFoundError as exc:
            extra = (extras or {}).get(home)
            if extra is None or (exc.name or "").startswith(namespace["__name__"]):
                raise
            driver, needed = exc.name, extra
            return _stand_in(name, lambda: missing_extra(name, needed, driver))
        value = getattr(module, name)
        namespace[name] = value
        return value

    return __getattr__


def missing_extra(what: str, extra: str, module: str | None) -> ModuleNotFoundError:
    """The error for ``what`` used without the ``extra`` that installs ``module``."""
    error = ModuleNotFoundError(
        f"{what} needs harel-sa's {extra!r} extra ({module} is not installed): "
        f"pip install 'harel-sa[{extra}]'"
    )
    error.name = module
    return error


def _stand_in(name: str, error: Callable[[], ModuleNotFoundError]) -> type:
    """A class named ``name`` that raises ``error()`` when built or asked for anything."""

    class _Meta(type):
        def __getattr__(cls, attribute: str) -> Any:
            if attribute.startswith("__"):
                raise AttributeError(attribute)
            raise error()

        def __call__(cls, *args: Any, **kwargs: Any) -> Any:
            raise error()

    return _Meta(name, (), {"__doc__": str(error())})


def lister(namespace: dict[str, Any]) -> Callable[[], list[str]]:
    """A module ``__dir__`` for the package whose globals are ``namespace``: what it holds
    and its ``__all__``, imported or not yet."""
    return lambda: sorted({*namespace, *namespace["__all__"]})
