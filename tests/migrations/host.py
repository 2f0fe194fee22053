"""A throw-away host application that folds harel_sa's revisions into its own Alembic history.

It starts as a real project does: ``alembic init migrations`` with the Alembic under test, then
exactly the edits of docs/alembic.md (its ``diff`` recipe blocks, applied to the generated
``alembic.ini`` and ``env.py``), its models and the documented revision: the documentation is
what the tests run.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from harel_sa import HEAD_REVISION, Names
from tests.migrations.helpers import (
    ALEMBIC,
    REPO,
    assert_schema_is_metadata,
    names_of,
    run,
    version,
)

DOC = REPO / "docs" / "alembic.md"

MODELS = '''"""The host application's own tables."""

from sqlalchemy import Column, Integer, MetaData, Table, Text

metadata = MetaData()
items = Table(
    "items",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", Text, nullable=False),
)
'''

#: Run by the host's Python: the transport on the file Alembic made, creating nothing.
TRANSPORT_CHECK = """
import json, sys
import harel_sa
from harel_sa import Event, SqliteTransport
from harel_sa import migrations

path, prefix = sys.argv[1], sys.argv[2]
with SqliteTransport(path, prefix=prefix, create_schema=False) as q:
    q.publish("g", Event(kind="hello"), priority=2, routing_key="edge")
    lease = q.claim("w", 30.0, routing_keys=["edge"])
    assert lease is not None and lease.event.kind == "hello", lease
    assert q.ack(lease)
    assert q.claim("w", 30.0) is None
print(json.dumps({
    "package": harel_sa.__file__,
    "version_location": migrations.version_location(),
    "head": harel_sa.HEAD_REVISION,
}))
"""

FILTER_LINE = "include_name=harel_sa.migrations.include_name,"


def recipe(name: str) -> str:
    """The fenced block that follows ``<!-- recipe: NAME -->`` in docs/alembic.md."""
    found = re.findall(
        rf"<!-- recipe: {re.escape(name)} -->\n```[a-z]*\n(.*?)\n```", DOC.read_text(), re.S
    )
    assert len(found) == 1, f"recipe {name!r} must appear once in {DOC}"
    return str(found[0]) + "\n"


def apply_diff(text: str, diff: str) -> str:
    """Apply a recipe's ``diff`` block to ``text``: hunks start at ``@@``; within one, lines
    marked `` `` and ``-`` must stand in ``text`` exactly once, as whole consecutive lines, and
    become the lines marked `` `` and ``+``."""
    hunks: list[list[str]] = []
    for line in diff.splitlines():
        if line.startswith("@@"):
            hunks.append([])
        else:
            assert line[:1] in (" ", "-", "+"), f"not a diff line: {line!r}"
            assert hunks, "a diff recipe starts with @@"
            hunks[-1].append(line)
    for hunk in hunks:
        old = "".join(ln[1:] + "\n" for ln in hunk if ln[0] in " -")
        new = "".join(ln[1:] + "\n" for ln in hunk if ln[0] in " +")
        lines = "\n" + text
        assert lines.count("\n" + old) == 1, f"{old!r} must appear once in:\n{text}"
        text = lines.replace("\n" + old, "\n" + new, 1)[1:]
    return text


@dataclass(frozen=True)
class Tools:
    """The Python and ``alembic`` a host project runs with, and their environment."""

    python: Path
    alembic: Path
    env: dict[str, str] | None = None


#: The environment running the tests (the repository's editable install).
DEV = Tools(Path(sys.executable), ALEMBIC)


@dataclass
class Host:
    root: Path
    tools: Tools
    prefix: str = "harel"
    env_variant: str = "default"

    @property
    def db(self) -> Path:
        return self.root / "app.db"

    @property
    def versions(self) -> Path:
        return self.root / "migrations" / "versions"

    def alembic(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        return run([self.tools.alembic, *args], cwd=self.root, env=self.tools.env, ok=ok)

    def python(self, code: str, *args: str) -> subprocess.CompletedProcess[str]:
        return run([self.tools.python, "-c", code, *args], cwd=self.root, env=self.tools.env)

    @property
    def env_py(self) -> Path:
        return self.root / "migrations" / "env.py"

    def set_ini(self, old: str, new: str) -> None:
        ini = self.root / "alembic.ini"
        text = ini.read_text()
        assert old in text
        ini.write_text(text.replace(old, new))


def make_host(
    root: Path, tools: Tools = DEV, *, prefix: str | None = None, env: str = "default"
) -> Host:
    """``alembic init`` a host project under ``root`` (outside the repository), then apply the
    documented edits: ``env`` is ``default``, ``prefix`` (with ``prefix``) or
    ``transactional``."""
    assert REPO not in root.resolve().parents
    root.mkdir(parents=True)
    run([tools.alembic, "init", "migrations"], cwd=root, env=tools.env)
    ini = root / "alembic.ini"
    edited = apply_diff(ini.read_text(), recipe("host-ini"))
    if prefix is not None:
        edited = apply_diff(edited, recipe("host-ini-prefix").replace("jobs", prefix))
    ini.write_text(edited)
    env_py = root / "migrations" / "env.py"
    text = apply_diff(env_py.read_text(), recipe("host-env"))
    assert text.count(FILTER_LINE) == 2
    if env == "prefix":
        text = apply_diff(text, recipe("host-env-prefix"))
        text = text.replace(FILTER_LINE, "include_name=harel_sa_filter,")
    elif env == "transactional":
        text = apply_diff(text, recipe("host-env-transactional"))
    else:
        assert env == "default", env
    env_py.write_text(text)
    (root / "myapp").mkdir()
    (root / "myapp" / "__init__.py").write_text("")
    (root / "myapp" / "models.py").write_text(MODELS)
    (root / "migrations" / "versions").mkdir(exist_ok=True)
    (root / "migrations" / "versions" / "app_0001_items.py").write_text(recipe("host-revision"))
    return Host(root, tools, prefix or "harel", env)


def assert_upgrade_heads(host: Host) -> dict[str, str]:
    """``alembic upgrade heads`` builds the host's table and harel_sa's, harel_sa_0002 before
    the host revision that depends on it; the transport then works on the file."""
    heads = host.alembic("heads").stdout
    assert "app_0001 (app) (head)" in heads and f"{HEAD_REVISION} (harel_sa) (head)" in heads
    log = host.alembic("upgrade", "heads").stderr
    assert log.index("-> harel_sa_0002") < log.index("-> app_0001"), log
    assert version(host.db, table="alembic_version") == ["app_0001", HEAD_REVISION]
    assert "items" in names_of(host.db, "table")
    assert_schema_is_metadata(host.db, host.prefix)
    assert not names_of(host.db, "table") & {Names(host.prefix).version_table}
    out = host.python(TRANSPORT_CHECK, str(host.db), host.prefix).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def assert_check_needs_the_filter(host: Host) -> None:
    """``alembic check``: clean with the filter; without it, it proposes to drop the queue."""
    done = host.alembic("check")
    assert "No new upgrade operations detected" in done.stdout + done.stderr
    kept = host.env_py.read_text()
    host.env_py.write_text(
        "".join(ln for ln in kept.splitlines(True) if "include_name=harel_sa" not in ln)
    )
    try:
        done = host.alembic("check", ok=False)
    finally:
        host.env_py.write_text(kept)
    assert done.returncode != 0
    for table in Names(host.prefix).tables:
        assert f"('remove_table', Table('{table}'" in done.stderr
    assert "items" not in done.stderr.split("New upgrade operations detected", 1)[1]


def assert_day_to_day_commands(host: Host) -> None:
    """The rest of the documented commands."""
    current = host.alembic("current").stdout
    assert "app_0001 (head)" in current and f"{HEAD_REVISION} (head)" in current

    done = host.alembic("revision", "--autogenerate", "-m", "nothing new", "--head", "app@head")
    made = [p for p in host.versions.glob("*.py") if p.name != "app_0001_items.py"]
    assert len(made) == 1, done.stdout  # in the host's own versions directory
    text = made[0].read_text()
    assert re.search(r"^down_revision\b.*= 'app_0001'$", text, re.M), text  # on the app branch
    assert "harel_transport" not in text and "op." not in text  # autogenerate found nothing
    made[0].unlink()

    offline = host.alembic("upgrade", "heads", "--sql").stdout
    assert "CREATE TABLE items (" in offline
    assert f"CREATE TABLE IF NOT EXISTS {Names(host.prefix).messages} (" in offline

    host.alembic("downgrade", "harel_sa@-1")
    assert version(host.db, table="alembic_version") == ["app_0001", "harel_sa_0009"]
    host.alembic("upgrade", "heads")
    assert version(host.db, table="alembic_version") == ["app_0001", HEAD_REVISION]
