"""harel_sa's Alembic history (``versions/``, frozen revisions) and the calls users make on it.

This folder ships inside the package as ``harel_sa.migrations`` (packaging maps it there; the
code behind these names lives in :mod:`harel_sa.history` and :mod:`harel_sa.alembic_env`).

- **Standalone** (harel_sa's own history): :func:`upgrade`, :func:`downgrade`, :func:`stamp`,
  :func:`current`, :func:`check`, or ``alembic -x url=... -x prefix=... upgrade heads``.
  Each prefix records its revision in a version table of its own
  (``<prefix>_transport_alembic_version``), so several prefixes share a file and move apart.
- **Integrated** (a host's history): the host adds :data:`VERSION_LOCATION` to its
  ``version_locations``, runs ``alembic upgrade heads``, and passes :func:`include_name` to
  ``context.configure`` so autogenerate leaves harel_sa's tables alone.

:func:`current` and :func:`check` read the revision wherever the file keeps it, as a
transport's start-up does. The recipe for hosts, and every command of both modes, is in
``docs/alembic.md``.
"""

from harel_sa.alembic_env import engine_for, prefix_of
from harel_sa.history import (
    BRANCH,
    VERSION_LOCATION,
    check,
    config,
    current,
    downgrade,
    heads,
    include_name,
    include_name_for,
    script_location,
    sql,
    stamp,
    upgrade,
    version_location,
)

__all__ = [
    "BRANCH",
    "VERSION_LOCATION",
    "check",
    "config",
    "current",
    "downgrade",
    "engine_for",
    "heads",
    "include_name",
    "include_name_for",
    "prefix_of",
    "script_location",
    "sql",
    "stamp",
    "upgrade",
    "version_location",
]
