"""Where a prefix's harel_sa revision is recorded in a file, and whether the file is at head.

One reading (:func:`read`) serves every tool, so they cannot disagree: the transport's start-up
(``create_schema=False`` refuses what is not ok, ``True`` upgrades what is behind),
``harel-sa db current`` / ``db check`` and ``harel_sa.migrations.current`` / ``check``. The
revision is recorded in **harel_sa's own** version table, ``<prefix>_transport_alembic_version``
(standalone), or in **the host's** (integrated: the application's own Alembic history runs
harel_sa's revisions and records ``harel_sa_NNNN`` next to its own). Two records that disagree
are an error, never "ok": no tool picks one.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

from harel_sa.schema import HEAD_REVISION, Names, on_dialect, schema_for

_MESSAGES_SUFFIX = "_transport_messages"
_OWN_SUFFIX = "_transport_alembic_version"
_HAREL_SA_ROWS = "WHERE version_num LIKE 'harel\\_sa\\_%' ESCAPE '\\'"


@dataclass(frozen=True)
class Record:
    """The harel_sa revisions one version table holds."""

    table: str
    revisions: tuple[str, ...]
    own: bool  # harel_sa's <prefix>_transport_alembic_version, else the host's table

    @property
    def kind(self) -> str:
        return "harel_sa's own" if self.own else "your Alembic history"

    @property
    def says(self) -> str:
        return ", ".join(self.revisions) or "(none)"

    def describe(self) -> str:
        return f"revision {self.says} (recorded in {self.table}, {self.kind})"


@dataclass(frozen=True)
class State:
    """A prefix's queue in one file: its tables, what is missing, and its revision records."""

    names: Names
    present: bool  # any of the prefix's tables exists
    missing: tuple[str, ...]  # the metadata's tables, columns and indexes the file lacks
    records: tuple[Record, ...]  # this prefix's records: none, one, or two
    others: tuple[str, ...]  # the other harel_sa prefixes with tables in the file

    @property
    def disagree(self) -> bool:
        return len({r.revisions for r in self.records}) > 1

    @property
    def record(self) -> Record | None:
        """The record tools go by (the host's when both agree); ``None`` when there is none
        or the records disagree."""
        if not self.records or self.disagree:
            return None
        return next((r for r in self.records if not r.own), self.records[0])

    @property
    def current(self) -> tuple[str, ...]:
        return self.record.revisions if self.record else ()

    @property
    def ahead(self) -> bool:
        # Revision ids are harel_sa_NNNN: they sort in history order.
        return any(rev > HEAD_REVISION for r in self.records for rev in r.revisions)

    @property
    def integrated(self) -> bool:
        """The host's Alembic history keeps this prefix's revision."""
        return any(not r.own for r in self.records)

    @property
    def ok(self) -> bool:
        """Exactly at head: every object present, one agreed record, and it says head."""
        return self.present and not self.missing and self.current == (HEAD_REVISION,)

    def problem(self, target: str) -> str | None:
        """Why a transport that creates nothing refuses the file (``None`` when it is ok).

        ``target`` names the file in the commands the message suggests (``--db q.db``).
        """
        p = self.names.prefix
        if not self.present:
            if self.others:
                found = ", ".join(self.others)
                return f"no harel_sa queue under prefix {p!r} here (found: {found})"
            return (
                f"no harel_sa queue under prefix {p!r} here: create it with "
                f"`harel-sa db upgrade {target} --prefix {p}` (or {PIPELINE} in your "
                "own pipeline), or open the transport with create_schema=True"
            )
        if self.disagree:
            own = next(r for r in self.records if r.own)
            host = next(r for r in self.records if not r.own)
            return (
                f"harel_sa's revision for prefix {p!r} is recorded twice, and the records "
                f"disagree: {own.table} ({own.kind}) says {own.says}, {host.table} ({host.kind}) "
                f"says {host.says}. If your Alembic history manages "
                f"this queue, drop harel_sa's own record with `harel-sa db stamp {target} "
                f"--prefix {p} --revision base`, then run `alembic upgrade heads`"
            )
        if self.ahead:
            return (
                f"harel_sa schema for prefix {p!r} is at revision {max(self.current)}, newer than "
                f"this harel_sa knows ({HEAD_REVISION}): upgrade the harel-sa package"
            )
        if self.ok:
            return None
        parts = ["missing " + ", ".join(self.missing)] if self.missing else []
        found = self.record.describe() if self.record else "revision (none recorded)"
        if self.current == (HEAD_REVISION,):
            # Recorded at head, yet objects are missing: changed outside the revisions.
            parts.append(f"database at {found}, but changed since")
            fix = "Open a transport once with create_schema=True: it re-creates what is missing"
            if not self.integrated:
                fix += (
                    f", or run `harel-sa db stamp {target} --prefix {p} --revision base` then "
                    f"`harel-sa db upgrade {target} --prefix {p}` (every revision is guarded, "
                    "so this re-creates only what is missing)"
                )
            return f"harel_sa schema for prefix {p!r} is not at head: {'; '.join(parts)}. {fix}."
        parts.append(f"database at {found}, this harel_sa needs {HEAD_REVISION}")
        if self.integrated:
            # Not create_schema=True: it would migrate outside the pipeline that owns the
            # schema, and rewrite the host's record.
            return (
                f"harel_sa schema for prefix {p!r} is not at head: {'; '.join(parts)}. Run "
                f"{PIPELINE} in your project's deploy pipeline (its history keeps this revision)."
            )
        return (
            f"harel_sa schema for prefix {p!r} is not at head: {'; '.join(parts)}. Run "
            f"`harel-sa db upgrade {target} --prefix {p}` (or {PIPELINE} in your own pipeline), "
            "or open the transport with create_schema=True."
        )


#: What a pipeline that keeps harel_sa's revisions in its own history runs.
PIPELINE = "`alembic upgrade heads` (`flask db upgrade heads` with Flask-Migrate)"


class Catalog(Protocol):
    """What :func:`read` asks of a database: the names in it, lowercased."""

    dialect: str

    def tables(self) -> dict[str, bool]:
        """Every table, and whether it has Alembic's shape (a ``version_num`` column)."""
        ...

    def indexes(self) -> set[str]: ...

    def columns(self, tables: list[str]) -> dict[str, set[str]]: ...

    def versions(self, table: str) -> tuple[str, ...] | None:
        """The harel_sa revisions in ``table`` (``None``: not of Alembic's shape after all)."""
        ...


class SqliteCatalog:
    """The catalog of a SQLite file (``sqlite_master``, ``pragma_table_info``)."""

    dialect = "sqlite"

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def tables(self) -> dict[str, bool]:
        return {
            str(name): "version_num" in str(sql or "").lower()
            for name, sql in self.conn.execute(
                "SELECT lower(name), sql FROM sqlite_master WHERE type = 'table'"
            )
        }

    def indexes(self) -> set[str]:
        rows = self.conn.execute("SELECT lower(name) FROM sqlite_master WHERE type = 'index'")
        return {str(name) for (name,) in rows}

    def columns(self, tables: list[str]) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {name: set() for name in tables}
        if tables:  # every column of every present table in one statement
            marks = ", ".join("?" * len(tables))
            for table, column in self.conn.execute(
                f"SELECT lower(m.name), lower(p.name) FROM sqlite_master AS m, "
                f"pragma_table_info(m.name) AS p WHERE m.type = 'table' "
                f"AND lower(m.name) IN ({marks})",
                tables,
            ):
                found[str(table)].add(str(column))
        return found

    def versions(self, table: str) -> tuple[str, ...] | None:
        try:
            rows = self.conn.execute(f"SELECT version_num FROM {table} {_HAREL_SA_ROWS}")
            return tuple(sorted(str(r[0]) for r in rows.fetchall()))
        except sqlite3.OperationalError:  # not of Alembic's shape after all
            return None


class PostgresCatalog:
    """The catalog of a PostgreSQL schema: the connection's ``current_schema()``.

    ``conn`` is a psycopg connection (or anything with its ``execute``); only reads. The
    statements never fail on a database harel_sa did not make, so they can run inside the
    caller's transaction (a failed statement would abort it).
    """

    dialect = "postgresql"
    _IN_SCHEMA = "c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())"

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def tables(self) -> dict[str, bool]:
        rows = self.conn.execute(
            "SELECT c.relname, EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid "
            "AND a.attname = 'version_num' AND NOT a.attisdropped) "
            f"FROM pg_class c WHERE c.relkind IN ('r', 'p') AND {self._IN_SCHEMA}"
        ).fetchall()
        return {str(name): bool(shaped) for name, shaped in rows}

    def indexes(self) -> set[str]:
        # An index a broken CONCURRENTLY build left invalid is never used: it is missing.
        rows = self.conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid "
            f"WHERE i.indisvalid AND {self._IN_SCHEMA}"
        ).fetchall()
        return {str(name) for (name,) in rows}

    def columns(self, tables: list[str]) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {name: set() for name in tables}
        if tables:
            for table, column in self.conn.execute(
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_schema = current_schema() AND table_name = ANY(%s)",
                (tables,),
            ).fetchall():
                found[str(table)].add(str(column))
        return found

    def versions(self, table: str) -> tuple[str, ...] | None:
        if not self.tables().get(table):
            return None
        rows = self.conn.execute(f"SELECT version_num FROM {table} {_HAREL_SA_ROWS}").fetchall()
        return tuple(sorted(str(r[0]) for r in rows))


def catalog(conn: Any) -> Catalog:
    """The :class:`Catalog` of a sqlite3 or psycopg connection."""
    if isinstance(conn, sqlite3.Connection):
        return SqliteCatalog(conn)
    if type(conn).__module__.startswith("psycopg"):
        return PostgresCatalog(conn)
    raise TypeError(f"no catalog for a {type(conn).__name__}")


def read(conn: Any, names: Names, version_table: str | None = None) -> State:
    """The state of ``names``'s queue in the database behind ``conn`` (a sqlite3 or psycopg
    connection); only reads.

    harel_sa's own version table is made by ``harel-sa db upgrade``, ``harel_sa.migrations``
    or a transport's start-up. ``version_table`` names the host's version table; else it is any
    table of Alembic's shape (a ``version_num`` column) other than a harel_sa own table. Such a
    record names no prefix: it is taken as this prefix's when this is the only queue in the file
    without a record of its own, or the only queue in the file. Every name is compared
    lowercased, as SQLite compares them (PostgreSQL folds unquoted names to lower case).
    """
    cat = catalog(conn)
    shapes = cat.tables()
    tables = set(shapes)
    prefixes = {t[: -len(_MESSAGES_SUFFIX)] for t in tables if t.endswith(_MESSAGES_SUFFIX)}
    present = bool(tables & set(names.tables))

    records = []
    own = _record(cat, tables, names.version_table, own=True)
    if own is not None:
        records.append(own)
    if version_table is not None:
        named = version_table.lower()
        host = _record(cat, tables, named, own=False) or Record(named, (), own=False)
        records.append(host)
    else:
        if own is None:  # the host's record is this prefix's if no other queue lacks one
            others = prefixes - {names.prefix}
            mine = names.prefix in prefixes and not any(
                _record(cat, tables, f"{p}{_OWN_SUFFIX}", own=True) is None for p in others
            )
        else:  # or, beside an own record, if this is the file's only queue (then compared)
            mine = prefixes == {names.prefix}
        if mine:
            shaped = sorted(t for t, has in shapes.items() if has and not t.endswith(_OWN_SUFFIX))
            records += [r for t in shaped if (r := _record(cat, tables, t, own=False))]
    return State(
        names=names,
        present=present,
        missing=tuple(_missing(cat, names, tables)),
        records=tuple(records),
        others=tuple(sorted(prefixes - {names.prefix})),
    )


def _record(cat: Catalog, tables: set[str], table: str, own: bool) -> Record | None:
    if table not in tables:
        return None
    revisions = cat.versions(table)
    return Record(table, revisions, own) if revisions else None


@lru_cache(maxsize=128)
def _expected(
    prefix: str, dialect: str
) -> tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]:
    """Each table of the metadata with the columns and indexes ``dialect`` has (built once
    per prefix and dialect)."""
    return tuple(
        (
            t.name,
            tuple(c.name for c in t.c if on_dialect(c, dialect)),
            tuple(str(ix.name) for ix in t.indexes if on_dialect(ix, dialect)),
        )
        for t in schema_for(prefix).metadata.sorted_tables
    )


def _missing(cat: Catalog, names: Names, tables: set[str]) -> list[str]:
    expected = _expected(names.prefix, cat.dialect)
    columns = cat.columns([name for name, _, _ in expected if name in tables])
    indexes = cat.indexes()
    missing: list[str] = []
    for table, cols, idxs in expected:
        if table not in tables:
            missing.append(f"table {table}")
            continue
        missing += [f"column {table}.{c}" for c in cols if c not in columns[table]]
        missing += [f"index {ix}" for ix in sorted(set(idxs)) if ix not in indexes]
    return missing
