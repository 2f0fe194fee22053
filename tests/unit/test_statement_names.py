"""Both dialects' statements answer to one named interface (``seam.QueueStatements``): an
action renamed in one dialect only, or missing from it, fails here."""

from __future__ import annotations

import pytest

from harel_sa.schema import Names
from harel_sa.seam import QueueStatements


def _dialects() -> list[tuple[str, object]]:
    from harel_sa.postgres.statements import statements_for as postgres
    from harel_sa.sqlite.statements import statements_for as sqlite

    names = Names("q")
    return [
        ("sqlite", sqlite(names)),
        ("postgres, server clock", postgres(names, server_clock=True)),
        ("postgres, client clock", postgres(names, server_clock=False)),
    ]


@pytest.mark.parametrize(("dialect", "statements"), _dialects(), ids=lambda v: str(v)[:30])
def test_every_shared_action_has_its_one_name(dialect: str, statements: object) -> None:
    wanted = set(QueueStatements.__annotations__)
    missing = sorted(name for name in wanted if getattr(statements, name, None) is None)
    assert missing == [], f"{dialect} lacks {missing}"


def test_the_interface_is_not_empty() -> None:
    assert {"free", "end_parks", "return_parked_groups", "purge_dead"} <= set(
        QueueStatements.__annotations__
    )
