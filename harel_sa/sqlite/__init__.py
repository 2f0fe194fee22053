"""SQLite's room: its statements, driver, operations, connection, start-up and watch, and the
two transports over them (``transport.SqliteTransport``, ``aio.AsyncSqliteTransport``).

The rules every backend shares (options, argument checks, events, errors, models) live above,
in :mod:`harel_sa.seam` and its neighbours; this room plugs into them through
:class:`harel_sa.sqlite.backend.SqliteBackend`. Nothing is imported here, so importing one module of
the room does not import the others.
"""
