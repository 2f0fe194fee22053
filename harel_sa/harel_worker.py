"""``python -m harel_sa.harel_worker``: the harel engine's worker process, on harel_sa's queue.

harel's own worker (``python -m harel.worker``) builds its transport from a fixed list of
backends and offers no hook for another. This launcher is the same process, built from harel's
public pieces and configured by the same ``HAREL_*`` variables; only the transport differs: with
``HAREL_TRANSPORT_BACKEND=sqlite`` it opens harel_sa's :class:`~harel_sa.AsyncSqliteTransport`
on ``HAREL_TRANSPORT_DB`` (a path or a ``sqlite:///`` URL, with ``HAREL_PREFIX`` and
``HAREL_CREATE_SCHEMA``); any other backend is built by harel, exactly as its worker would.
SIGTERM and SIGINT stop it cleanly (in-flight events finish), and it exits 0. It needs the harel
engine installed (``pip install harel``); nothing else in harel_sa does.
"""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import Mapping
from typing import Any

from harel_sa.sqlite.aio import AsyncSqliteTransport


async def open_transport(config: Any) -> Any:
    """The transport harel's worker would build from ``config``, harel_sa's for ``sqlite``."""
    from harel.config import require
    from harel.worker import build_transport_async

    if config.transport_backend != "sqlite":
        return await build_transport_async(config)
    return await AsyncSqliteTransport.create(
        require(config.transport_db, "HAREL_TRANSPORT_DB"),
        prefix=config.prefix,
        create_schema=config.create_schema,
    )


async def serve(env: Mapping[str, str] | None = None) -> None:
    """Run harel's ``AsyncWorker`` until SIGTERM or SIGINT, as ``python -m harel.worker`` does."""
    from harel.config import Config, require
    from harel.engine.aio.distributed import AsyncWorker
    from harel.worker import build_store_async, load_definitions

    config = Config.from_env(env)
    definitions = load_definitions(require(config.definitions_dir, "HAREL_DEFINITIONS_DIR"))
    store = await build_store_async(config)
    try:
        transport = await open_transport(config)
        try:
            if config.trace and hasattr(store, "trace_max"):
                store.trace_max = config.trace_max
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, stop.set)
            worker = AsyncWorker(
                store,
                transport,
                definitions,
                worker_id=config.worker_id or socket.gethostname(),
                visibility=config.visibility,
                concurrency=config.concurrency,
                trace=config.trace,
            )
            await worker.run(stop)
        finally:
            await transport.close()
    finally:
        await store.close()


def main() -> None:
    asyncio.run(serve())


if __name__ == "__main__":
    main()
