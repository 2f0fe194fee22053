"""Start-up policy: a transport that creates nothing (``create_schema=False``) refuses a
database that is not at head, with a :class:`harel_sa.SchemaError` naming what is wrong (the
revision recorded and the one needed, or the missing objects) and the command that fixes it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from alembic import command

from harel_sa import HEAD_REVISION, Names, SchemaError, SqliteTransport
from harel_sa import migrations as mig
from tests.checks import first_call
from tests.conftest import FakeClock
from tests.migrations.helpers import connect, names_of, run
from tests.migrations.starts import STARTS

NAMES = Names()


def refusal(path: Path, prefix: str = "harel") -> str:
    with pytest.raises(SchemaError) as err:
        first_call(SqliteTransport(path, prefix=prefix, create_schema=False))
    message = str(err.value)
    assert "upgrade" in message and "alembic upgrade heads" in message  # the command to run
    return message


@pytest.mark.parametrize("behind", ["harel_sa_0001", "harel_sa_0002", "harel_sa_0003"])
def test_a_database_behind_head_names_both_revisions_and_the_command(
    behind: str, tmp_path: Path
) -> None:
    path = tmp_path / "queue.db"
    mig.upgrade(path, revision=behind)
    message = refusal(path)
    assert f"database at revision {behind}" in message
    assert f"needs {HEAD_REVISION}" in message
    assert f"sqlite:///{path}" in message and "--prefix harel" in message
    assert mig.check(path) is False


def test_a_complete_schema_recorded_behind_head_is_refused_too(tmp_path: Path) -> None:
    """Every object present, but the version table says 0003: the revision decides."""
    path = tmp_path / "queue.db"
    mig.upgrade(path)
    command.stamp(mig.config(path), "harel_sa_0003", purge=True)
    message = refusal(path)
    assert "harel_sa_0003" in message and HEAD_REVISION in message
    assert "missing" not in message


def test_a_host_history_behind_head_is_refused(tmp_path: Path) -> None:
    """In a host's pipeline harel_sa's revision sits in the host's ``alembic_version``."""
    path = tmp_path / "queue.db"
    mig.upgrade(path, revision="harel_sa_0002")
    with connect(path) as conn:
        conn.execute(f"ALTER TABLE {NAMES.version_table} RENAME TO alembic_version")
        conn.execute("INSERT INTO alembic_version VALUES ('host_0001')")
    message = refusal(path)
    assert "harel_sa_0002" in message and "host_0001" not in message


def test_an_empty_database_says_there_is_no_queue_and_how_to_make_one(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    path.touch()
    message = refusal(path)
    assert message.startswith("no harel_sa queue under prefix 'harel' here: create it with")
    assert not names_of(path, "table")  # it created nothing
    assert path.stat().st_size == 0


def test_a_missing_file_is_named_and_not_created(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    assert f"no database at {path}" in refusal(path)
    assert not path.exists()


def test_a_file_of_the_original_transport_names_the_missing_columns_and_indexes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "queue.db"
    STARTS["stdlib3"](path, FakeClock())
    message = refusal(path)
    assert f"column {NAMES.groups}.routing_key" in message
    assert f"column {NAMES.messages}.deliveries" in message
    assert f"table {NAMES.dead}" in message
    assert f"index {NAMES.groups_by_routing_key}" in message
    assert f"index {NAMES.groups_by_priority}" in message


@pytest.mark.parametrize("prefix", ["jobs", "harel_typo"])
def test_a_prefix_with_no_queue_beside_another_is_told_so_and_not_to_create_one(
    tmp_path: Path, prefix: str
) -> None:
    """A typo'd prefix must not be told to `db upgrade`: that would make an empty queue."""
    path = tmp_path / "queue.db"
    mig.upgrade(path)  # harel is at head; the other prefix is not there at all
    with pytest.raises(SchemaError) as err:
        first_call(SqliteTransport(path, prefix=prefix, create_schema=False))
    assert str(err.value) == f"no harel_sa queue under prefix '{prefix}' here (found: harel)"


@pytest.mark.parametrize("start", ["behind", "stdlib3", "missing", "empty"])
def test_the_command_the_error_names_brings_the_database_to_head(
    start: str, tmp_path: Path
) -> None:
    path = tmp_path / "queue.db"
    if start == "behind":
        mig.upgrade(path, revision="harel_sa_0002")
    elif start == "stdlib3":
        STARTS["stdlib3"](path, FakeClock())
    if start == "empty":
        path.touch()
    command_line = re.findall(r"`(harel-sa [^`]+)`", refusal(path))
    assert len(command_line) == 1
    argv = command_line[0].split()
    run([Path(sys.executable).parent / argv[0], *argv[1:]])
    assert mig.check(path)
    with SqliteTransport(path, create_schema=False) as q:
        q.claim("w", 30.0)


def test_at_head_the_transport_opens_and_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    mig.upgrade(path)
    schema = names_of(path, "table") | names_of(path, "index")
    with SqliteTransport(path, create_schema=False) as q:
        assert q.claim("w", 30.0) is None
    assert names_of(path, "table") | names_of(path, "index") == schema
