"""``-p swap``: harel's own tests, run on harel_sa's SQLite transports instead of harel's.

harel hands its SQLite transports out from the packages its tests import them from
(``harel.engine.transport``, ``harel.engine.aio_transport``), from the modules that define them,
and from ``harel.worker``: its ``build_transport`` calls the ``SqliteTransport`` in the worker
module's own globals, while ``build_transport_async`` imports ``AsyncSqliteTransport`` from the
package when it runs. harel_sa's classes go into every one of these places before any test
module is imported, so a test that names harel's class gets harel_sa's.

The worker processes harel's tests start get the same swap from ``sitecustomize.py``, which acts
when ``HAREL_SA_SWAP`` is set (this plugin sets it, and the processes inherit it). pytest is not
imported here at run time, so that those workers do not pay for importing it.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

#: Set in a process whose harel should run on harel_sa's transports (inherited by its children).
SWAP = "HAREL_SA_SWAP"
#: Optional: a file to which each process that swapped appends its command line, so a harness
#: can see that the swap reached the worker processes too.
LOG = "HAREL_SA_SWAP_LOG"

#: Each (harel module, name) that hands out one of harel's SQLite transports, and harel_sa's class
#: that takes its place.
PLACES = {
    ("harel.engine.transport", "SqliteTransport"): "SqliteTransport",
    ("harel.engine.transport.sqlite", "SqliteTransport"): "SqliteTransport",
    ("harel.engine.aio_transport", "AsyncSqliteTransport"): "AsyncSqliteTransport",
    ("harel.engine.aio_transport.sqlite", "AsyncSqliteTransport"): "AsyncSqliteTransport",
    ("harel.worker", "SqliteTransport"): "SqliteTransport",
}


def swap_in_harel_sa() -> None:
    """Put harel_sa's transports in each of harel's places, and say so in ``$HAREL_SA_SWAP_LOG``."""
    import harel_sa

    for (module, name), ours in PLACES.items():
        setattr(importlib.import_module(module), name, getattr(harel_sa, ours))
    if log := os.environ.get(LOG):
        with open(log, "a", encoding="utf-8") as lines:
            lines.write(" ".join(sys.orig_argv) + "\n")


def pytest_load_initial_conftests() -> None:
    # Runs after pytest has put the rootdir's `pythonpath` (harel's src/) on sys.path, so the
    # harel that is swapped is the one the tests import, and before any conftest or test module.
    os.environ[SWAP] = "1"
    swap_in_harel_sa()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Refuse to run if a test module holds harel's own class (it imported it before the swap)."""
    import pytest

    import harel_sa

    stale = sorted(
        {
            f"{item.module.__name__}.{name}"
            for item in session.items
            if isinstance(item, pytest.Function)
            for name in ("SqliteTransport", "AsyncSqliteTransport")
            if getattr(item.module, name, None) not in (None, getattr(harel_sa, name))
        }
    )
    if stale:
        raise pytest.UsageError(f"harel's own transports escaped the swap: {', '.join(stale)}")
