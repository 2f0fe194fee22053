"""The page reads as ``harel-sa stats`` does: a SQLite file's bytes untouched, a PostgreSQL
role that may only ``SELECT`` enough to see it (its writes refused by the server, nothing
changed), and PgBouncer's transaction pooler in between."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from harel_sa import PostgresTransport, SqliteTransport
from harel_sa.cli.common import Target
from harel_sa.cli.web import app_for
from tests.web.conftest import TOKEN, fill
from tests.web.test_app import BASE, TestClient


def client(url: str) -> Any:
    t = Target(url, None, "harel", is_url=True)
    return TestClient(app_for(t, ("127.0.0.1", 8642), TOKEN), base_url=BASE)


def test_the_page_leaves_a_sqlite_file_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    with SqliteTransport(str(path)) as q:
        fill(q)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    t = Target(str(path), str(path), "harel")
    c = TestClient(app_for(t, ("127.0.0.1", 8642), None), base_url=BASE)
    for _ in range(3):
        assert c.get("/").status_code == 200
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_a_role_that_may_only_select_sees_the_page(pg_url: str) -> None:
    import psycopg
    from sqlalchemy import make_url

    with PostgresTransport(pg_url) as q:
        fill(q)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS harel_sa_web_reader")
        conn.execute("CREATE ROLE harel_sa_web_reader LOGIN")
        conn.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO harel_sa_web_reader")
    reader = make_url(pg_url).set(username="harel_sa_web_reader").render_as_string()
    try:
        c = client(reader)
        page = c.get("/")
        assert page.status_code == 200 and "Dead letters (2)" in page.text
        refused = c.post("/action", data={"action": "purge-dead", "token": TOKEN})
        assert refused.status_code == 500 and "permission denied" in refused.text
        with PostgresTransport(pg_url) as q:
            assert q.stats().dead == 2
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DROP OWNED BY harel_sa_web_reader")
            conn.execute("DROP ROLE harel_sa_web_reader")


def test_through_a_transaction_pooler(pg_url: str, transaction_pooler: Any) -> None:
    with PostgresTransport(pg_url) as q:
        fill(q)
    c = client(transaction_pooler.url(pg_url))
    page = c.get("/")
    assert page.status_code == 200 and "Dead letters (2)" in page.text
    done = c.post("/action", data={"action": "requeue", "token": TOKEN})
    assert done.status_code == 200 and "requeued 2 dead messages" in done.text
