"""The PostgreSQL statements are numbered once (harel_sa.postgres.statements.positional) and
bound by position: every name becomes one ``$n``, in the order names first appear."""

from __future__ import annotations

import re

import pytest

from harel_sa.postgres.compiled import Statement, positional
from harel_sa.postgres.statements import statements_for
from harel_sa.schema import Names


def test_names_are_numbered_in_order_of_first_use_and_a_repeated_name_is_one_parameter() -> None:
    statement = positional("SELECT :b, :a ::int, :b WHERE x = :c")
    assert statement.sql == b"SELECT $1, $2 ::int, $1 WHERE x = $3"
    assert statement.names == ("b", "a", "c")


def test_bind_orders_the_values_and_ignores_names_the_statement_does_not_use() -> None:
    statement = positional("UPDATE t SET v = :value WHERE k = :key")
    assert tuple(statement.bind({"key": "k1", "value": 2, "now": 1.5})) == (2, "k1")
    with pytest.raises(KeyError):
        statement.bind({"key": "k1"})
    one, none = positional("SELECT :a"), positional("SELECT 1")
    assert tuple(one.bind({"a": [1, 2]})) == ([1, 2],) and tuple(none.bind({"a": 1})) == ()


def _every_statement(server_clock: bool) -> list[Statement]:
    st = statements_for(Names("jobs"), server_clock)
    found = [value for value in vars(st).values() if isinstance(value, Statement)]
    found += [st.claim(floor, keys) for floor in (0, 2) for keys in (0, 1, 3)]
    return found


@pytest.mark.parametrize("server_clock", [True, False], ids=["server-clock", "client-clock"])
def test_no_statement_keeps_a_named_parameter(server_clock: bool) -> None:
    statements = _every_statement(server_clock)
    assert len(statements) > 30
    for statement in statements:
        sql = statement.sql.decode()
        assert "%(" not in sql, sql
        used = sorted({int(n) for n in re.findall(r"\$(\d+)", sql)})
        assert used == list(range(1, len(statement.names) + 1)), sql
    # The client's clock is a parameter; the server's is spelled in the SQL.
    names = {name for statement in statements for name in statement.names}
    assert ("now" in names) is not server_clock
