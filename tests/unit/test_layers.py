"""The layers, enforced (issue 58): which folders of ``harel_sa/`` may import which, followed
through every chain of imports, as import-linter's forbidden contracts are.

- The **core** (every top-level module but the entry points and integrations named in
  :data:`OUTSIDE_THE_CORE`) reaches no dialect, no worker, no command, no web view: a dialect
  is found by name (``outbox_plans.PLANS``, the transports' own folders).
- The **worker** reaches no dialect, no command and no web view: what it needs of a transport
  is the base classes' (``listens``, ``clock``, ``wait_for_messages``, ``sync_twin``).
- A **dialect** (``sqlite/``, ``postgres/``) reaches neither the other dialect, nor the worker,
  the commands, the web view or ``present/``.
- The **web view** reaches no command; what both show is ``present/``'s, which reaches none.

Imports under ``TYPE_CHECKING`` and inside functions count: a lazy import is still a layer
crossed when it runs.
"""

from __future__ import annotations

from functools import cache

import pytest

from tests.unit.test_architecture import MODULES, imports

#: Top-level modules that are not the core: the public face and entry points (they gather
#: everything), the schema's tools that open databases through a dialect's connect, and the
#: integrations.
OUTSIDE_THE_CORE = {
    "harel_sa": "the public face: re-exports the transports of both dialects and the worker",
    "__main__": "python -m harel_sa: the commands",
    "alembic_env": "Alembic's environment: opens the database through a dialect",
    "history": "migrations' history: opens the database through a dialect",
    "demo": "the demo: runs a worker on a transport",
    "harel_worker": "the harel engine's worker integration",
    "metrics": "Prometheus: observes the worker",
}
DIALECTS = ("sqlite", "postgres")


def folder(module: str) -> str:
    """``sqlite.aio`` -> ``sqlite``; a top-level module is its own name."""
    return module.split(".")[0]


def is_core(module: str) -> bool:
    return "." not in module and module not in OUTSIDE_THE_CORE and module not in _FOLDERS


_FOLDERS = {folder(m) for m in MODULES if "." in m}


@cache
def chains(module: str) -> dict[str, tuple[str, ...]]:
    """Every module ``module`` reaches through imports, each with one chain that gets there."""
    seen: dict[str, tuple[str, ...]] = {}
    todo = [(module, (module,))]
    while todo:
        at, chain = todo.pop()
        for nxt in sorted(imports(MODULES[at])):
            if nxt in MODULES and nxt not in seen and nxt != module:
                seen[nxt] = (*chain, nxt)
                todo.append((nxt, (*chain, nxt)))
    return seen


def crossings(modules: list[str], forbidden: set[str]) -> list[str]:
    """The chains from ``modules`` into the ``forbidden`` folders, as ``a -> b -> c``."""
    found = []
    for module in modules:
        for reached, chain in chains(module).items():
            if folder(reached) in forbidden and folder(reached) != folder(module):
                found.append(" -> ".join(chain))
    return found


def of(name: str) -> list[str]:
    """The modules of folder ``name`` (its ``__init__`` is ``name`` itself)."""
    return sorted(m for m in MODULES if folder(m) == name)


def test_the_core_reaches_no_dialect_worker_command_or_web_view() -> None:
    core = sorted(m for m in MODULES if is_core(m))
    assert {"seam", "transports", "outbox_plans", "validate", "schema"} <= set(core)
    forbidden = {*DIALECTS, "worker", "cli", "web", "present"}
    assert crossings(core, forbidden) == []


def test_the_worker_reaches_no_dialect_command_or_web_view() -> None:
    assert crossings(of("worker"), {*DIALECTS, "cli", "web"}) == []


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_dialect_reaches_no_other_dialect_nor_the_layers_above(dialect: str) -> None:
    others = {d for d in DIALECTS if d != dialect}
    assert crossings(of(dialect), {*others, "worker", "cli", "web", "present"}) == []


def test_the_web_view_reaches_no_command_and_present_reaches_neither() -> None:
    assert crossings(of("web"), {"cli"}) == []
    assert crossings(of("present"), {"cli", "web", "worker", *DIALECTS}) == []


def test_the_modules_outside_the_core_are_each_there() -> None:
    # A module left out of the core must exist (a stale name would exempt nothing, silently).
    assert set(OUTSIDE_THE_CORE) <= set(MODULES)


def test_a_crossing_is_found_through_a_chain() -> None:
    # The check itself: the public face reaches the worker through an import, and a chain
    # through a module that is allowed to cross is still a crossing.
    assert any(c.startswith("harel_sa -> worker") for c in crossings(["harel_sa"], {"worker"}))
    assert any(c.endswith("-> worker") for c in crossings(["demo"], {"worker"}))
