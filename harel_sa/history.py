"""harel_sa's Alembic history driven from Python: the functions ``harel_sa.migrations`` exports.

Standalone mode: each prefix records its revision in its own version table. Reading
(:func:`current`, :func:`check`, :func:`state`) opens the file read-only (``mode=ro``) and goes
through :func:`harel_sa.revision_state.read`, exactly as a transport's start-up does.
"""

from __future__ import annotations

import importlib.util
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from alembic.script.revision import RevisionError
from alembic.util import CommandError

from harel_sa.alembic_env import FORCE_OPTION, PREFIX_OPTION, migration_url, sync_url
from harel_sa.errors import InvalidArgumentError
from harel_sa.postgres.connect import is_postgresql
from harel_sa.revision_state import State
from harel_sa.schema import DEFAULT_PREFIX, Names
from harel_sa.sqlite.startup import read_target

#: Where the revisions are, as a package resource for a host's ``version_locations``.
VERSION_LOCATION = "harel_sa.migrations:versions"
#: The branch label of harel_sa's root revision.
BRANCH = "harel_sa"


def script_location() -> str:
    """The filesystem path of harel_sa's Alembic environment (``env.py``), installed or
    editable alike."""
    spec = importlib.util.find_spec("harel_sa.migrations")
    assert spec is not None and spec.submodule_search_locations, "harel_sa.migrations missing"
    return str(Path(next(iter(spec.submodule_search_locations))).resolve())


def version_location() -> str:
    """The filesystem path of the revisions."""
    return str(Path(script_location()) / "versions")


def config(target: object, *, prefix: str = DEFAULT_PREFIX) -> Config:
    """An Alembic :class:`Config` for harel_sa's own history on ``target`` (path, URL, Engine).

    An Engine is used for its URL only: the migration opens harel_sa's own engine on the same
    file and installs nothing on the caller's.
    """
    cfg = Config()
    cfg.set_main_option("script_location", script_location())
    cfg.set_main_option("path_separator", "space")
    cfg.set_main_option("sqlalchemy.url", migration_url(target).replace("%", "%%"))
    cfg.attributes[PREFIX_OPTION] = Names(prefix).prefix
    return cfg


def upgrade(target: object, *, prefix: str = DEFAULT_PREFIX, revision: str = "heads") -> None:
    """Bring ``prefix``'s tables on ``target`` to ``revision``, keeping every row.

    Works on an empty file, on one written by the original stdlib transport (with or without
    ``routing_key``, orphaned messages included) and on one created by a transport's start-up,
    without a manual ``stamp``, while workers run. On SQLite the whole upgrade is one ``BEGIN
    IMMEDIATE`` transaction: it applies completely or not at all. On PostgreSQL each step runs
    online (docs/alembic.md, "Upgrading a live queue") and a run that stopped resumes. Concurrent
    upgrades serialize.
    """
    command.upgrade(config(target, prefix=prefix), revision)


def downgrade(
    target: object, revision: str, *, prefix: str = DEFAULT_PREFIX, force: bool = False
) -> None:
    """Step ``prefix``'s tables back to ``revision`` (``"-1"``, an id, or ``"base"``).

    A step that would destroy rows (messages below ``harel_sa_0001``, routing keys below
    ``0002``, dead letters and delivery counts below ``0003``) refuses, changing nothing,
    unless ``force``. Every other row is kept.
    """
    cfg = config(target, prefix=prefix)
    cfg.attributes[FORCE_OPTION] = force
    command.downgrade(cfg, revision)


def stamp(target: object, revision: str, *, prefix: str = DEFAULT_PREFIX) -> None:
    """Record ``revision`` for ``prefix`` without running anything (adoption and repair);
    ``"base"`` removes harel_sa's own record."""
    command.stamp(config(target, prefix=prefix), revision)


def sql(*, prefix: str = DEFAULT_PREFIX, revision: str = "heads", url: object | None = None) -> str:
    """The DDL of an upgrade from nothing to ``revision`` (or ``start:end``), for review.

    SQLite's by default; ``url`` chooses the dialect (a ``postgresql://`` URL: PostgreSQL's) and
    is never connected to."""
    buffer = io.StringIO()
    cfg = config("offline.db" if url is None else url, prefix=prefix)
    cfg.output_buffer = buffer
    command.upgrade(cfg, revision, sql=True)
    return buffer.getvalue()


def script() -> ScriptDirectory:
    return ScriptDirectory(script_location())


def heads() -> tuple[str, ...]:
    """The head revision(s) of harel_sa's history."""
    return tuple(script().get_heads())


@dataclass(frozen=True)
class Revision:
    """One revision of harel_sa's history."""

    revision: str
    down_revision: str | None
    doc: str


def revisions() -> list[Revision]:
    """Every revision, oldest first."""
    found = [
        Revision(r.revision, r.down_revision if isinstance(r.down_revision, str) else None, r.doc)
        for r in script().walk_revisions()
    ]
    return found[::-1]


def resolve(revision: str) -> str:
    """``revision`` if it names a point of harel_sa's history (an id, ``heads``, ``base``, a
    relative step such as ``-1``, ``harel_sa@head``); else :class:`InvalidArgumentError`."""
    try:
        script().revision_map.get_revisions(revision)
    except (CommandError, RevisionError) as exc:
        known = ", ".join(r.revision for r in revisions())
        raise InvalidArgumentError(
            f"unknown revision {revision!r}: harel_sa's revisions are {known} "
            "(also heads, base, and steps such as -1)"
        ) from exc
    return revision


def state(
    target: object, *, prefix: str = DEFAULT_PREFIX, version_table: str | None = None
) -> State:
    """:func:`harel_sa.sqlite.startup.read_target` of ``target`` (an Engine: of its URL); on
    PostgreSQL, the same reading through a read-only psycopg connection."""
    if is_postgresql(target):
        from harel_sa.postgres.connect import read_state

        return read_state(target, prefix=prefix, version_table=version_table)
    return read_target(sync_url(target), prefix=prefix, version_table=version_table)


def current(target: object, *, prefix: str = DEFAULT_PREFIX) -> tuple[str, ...]:
    """The revision(s) recorded for ``prefix`` on ``target``, wherever the file keeps them
    (harel_sa's own version table, or the host's); empty when none is, or the records
    disagree."""
    return state(target, prefix=prefix).current


def check(target: object, *, prefix: str = DEFAULT_PREFIX) -> bool:
    """Whether ``prefix``'s queue on ``target`` is exactly at head, as a transport opened with
    ``create_schema=False`` checks it: every object present and one agreed record of head."""
    return state(target, prefix=prefix).ok


def include_name_for(
    prefix: str = DEFAULT_PREFIX, *more: str
) -> Callable[[str | None, str, Any], bool]:
    """An autogenerate ``include_name`` filter that leaves harel_sa's objects out.

    It covers ``prefix`` (and every prefix in ``more``): its tables, their columns, indexes and
    constraints, and the version table harel_sa's standalone mode keeps for it. Names are
    compared lowercased, as SQLite compares them.
    """
    owned: set[str] = set()
    for each in (prefix, *more):
        names = Names(each)
        owned |= {*names.tables, names.version_table}

    def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
        if type_ == "table":
            return (name or "").lower() not in owned
        if type_ in ("index", "column", "unique_constraint", "foreign_key_constraint"):
            return str(parent_names.get("table_name") or "").lower() not in owned
        return True

    return include_name


#: The host's filter for the default prefix: autogenerate neither drops nor re-creates
#: harel_sa's tables and indexes. Use :func:`include_name_for` for another prefix.
include_name = include_name_for(DEFAULT_PREFIX)
