"""The one way tests start processes: multiprocessing's ``forkserver``.

Children fork from a server process that never opened a database, so no connection or lock
crosses a fork, and that imported harel_sa (with psycopg, and harel) once: a child costs a
fork, not the most of a second of CPU an interpreter takes to import them, which on a
two-core machine slows the very processes a test races.

One server serves the whole test session, and what it preloads is fixed when it starts: so
every test asks for the same list, here. The server is given module names, not pytest's
``sys.path`` (Python 3.11 passes the parent's path to it and never applies it), so only
installed packages are preloaded; a test's own module is imported after the fork, cheaply.
An import that fails (an extra not installed) is skipped by the server.
"""

from __future__ import annotations

import multiprocessing
from multiprocessing.context import BaseContext

#: The modules themselves, not the packages: ``import harel_sa`` alone imports only its errors,
#: ``import harel_sa.worker`` nothing of the workers.
PRELOAD = [
    "harel_sa.sqlite.transport",
    "harel_sa.sqlite.aio",
    "harel_sa.worker.threads",
    "harel_sa.worker.tasks",
    "harel_sa.postgres.transport",
    "harel.engine.transport",
]


def context() -> BaseContext:
    """The forkserver context, its server preloading :data:`PRELOAD`."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx
