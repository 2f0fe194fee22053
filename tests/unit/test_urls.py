"""libpq's multi-host URLs (issue 59), read everywhere a URL is taken: the authority's hosts
become SQLAlchemy's repeated ``host`` parameters, and libpq's ``host``/``port`` lists again;
a password in one never reaches output."""

from __future__ import annotations

import pytest
from sqlalchemy import make_url

from harel_sa.postgres.connect import conninfo, is_postgresql, postgres_url, read_only
from harel_sa.redact import display
from harel_sa.urls import libpq_hosts, parse, split_host


def libpq(url: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in conninfo(url).split())


@pytest.mark.parametrize(
    ("url", "host", "port"),
    [
        ("postgresql://u@h1:5432,h2:5433/app", "h1,h2", "5432,5433"),
        ("postgresql://u@h1,h2:5433/app", "h1,h2", "5432,5433"),
        ("postgresql://u@h1,h2/app?port=6000", "h1,h2", "6000,6000"),
        ("postgresql://u@[::1]:5432,[fe80::1]/app", "::1,fe80::1", "5432,5432"),
        ("postgresql://u@/app?host=h1:5432&host=h2:5433", "h1,h2", "5432,5433"),
        ("postgresql://u@/app?host=/tmp/a,/tmp/b&port=5432,5433", "/tmp/a,/tmp/b", "5432,5433"),
        ("postgresql://u@h1:6543/app", "h1", "6543"),
    ],
)
def test_every_form_of_several_hosts_reaches_libpq_whole(url: str, host: str, port: str) -> None:
    assert is_postgresql(url)
    got = libpq(url)
    assert (got["host"], got["port"], got["dbname"], got["user"]) == (host, port, "app", "u")


def test_the_query_and_its_session_attributes_stay() -> None:
    url = "postgresql://u:pw@h1:5432,h2:5433/app?target_session_attrs=read-write&sslmode=require"
    got = libpq(url)
    assert got["target_session_attrs"] == "read-write" and got["sslmode"] == "require"
    assert got["password"] == "pw"
    assert postgres_url(url).query["host"] == ("h1:5432", "h2:5433")
    # The reading commands' read-only sessions keep to the primary libpq's way.
    assert read_only(url).query["target_session_attrs"] == "primary"
    assert "-c default_transaction_read_only=on" in read_only(url).query["options"]


def test_a_password_in_a_multi_host_url_never_shows() -> None:
    for url in (
        "postgresql://u:s3cret@h1:5432,h2:5433/app",
        "postgresql://u@h1,h2/app?password=s3cret",
        "postgresql://u:s3cret@h1,h2:bad/app",  # not even a URL: masked all the same
    ):
        assert "s3cret" not in display(url), url


def test_one_host_reads_as_before() -> None:
    url = "postgresql://u@db.example:5433/app"
    assert parse(url) == make_url(url)
    assert libpq_hosts(parse(url)) == {"host": "db.example", "port": "5433"}


def test_a_bad_port_among_several_is_a_typed_error() -> None:
    from harel_sa import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="not a database URL"):
        conninfo("postgresql://u:s3cret@h1:5432,h2:x/app")
    assert not is_postgresql("postgresql://u@h1:5432,h2:x/app")
    assert split_host("::1") == ("::1", "") and split_host("[::1]:7") == ("::1", "7")
