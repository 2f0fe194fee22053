"""A group's ``max_in_flight`` against claimers racing on PostgreSQL, with real sessions.

Twelve sessions claim and ack one group that runs 3 at once as fast as they can, with a lapse
now and then (a lease given up to time) and nacks: a trigger counts the group's leases inside
each claim's own transaction (the claims of a group wait on its row, so the count is exact).
Never more than 3, claims in publish order once each, every message acked once.
"""

from __future__ import annotations

import threading
from collections import Counter

from harel_sa import Event, PostgresTransport
from harel_sa.rules import PARKED
from harel_sa.schema import Names
from tests.postgres.test_transport import sql

N = Names(prefix="windows")
MESSAGES, CLAIMERS = 300, 12


def test_twelve_claimers_never_lease_more_than_the_window(pg_url: str) -> None:
    q = PostgresTransport(pg_url, prefix="windows")
    leased = f"locked_by IS NOT NULL AND locked_by <> '{PARKED}'"
    for statement in (
        "CREATE TABLE windows_log (id BIGSERIAL PRIMARY KEY, seq BIGINT, leased BIGINT)",
        "CREATE FUNCTION windows_log() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "INSERT INTO windows_log (seq, leased) VALUES (NEW.seq, "
        f"(SELECT count(*) FROM {N.messages} WHERE group_id = NEW.group_id AND {leased})); "
        "RETURN NULL; END $$",
        f"CREATE TRIGGER windows_log AFTER UPDATE OF deliveries ON {N.messages} FOR EACH ROW "
        "WHEN (NEW.deliveries > OLD.deliveries) EXECUTE FUNCTION windows_log()",
    ):
        sql(pg_url, statement)
    q.publish_many([("g", Event(kind=str(i))) for i in range(MESSAGES)], max_in_flight=3)
    acked: list[str] = []
    lock = threading.Lock()
    failures: list[BaseException] = []

    def claimer(k: int) -> None:
        mine = PostgresTransport(pg_url, prefix="windows")
        try:
            turn = 0
            while True:
                lease = mine.claim(f"w{k}", 30.0)
                if lease is None:
                    if mine.stats().messages == 0:
                        return
                    continue
                turn += 1
                if turn % 7 == 0 and mine.nack(lease):  # back to the window's start
                    continue
                if mine.ack(lease):
                    with lock:
                        acked.append(lease.event.kind)
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(exc)
        finally:
            mine.close()

    threads = [threading.Thread(target=claimer, args=(k,)) for k in range(CLAIMERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    q.close()
    assert not failures
    assert Counter(acked) == Counter(str(i) for i in range(MESSAGES))
    rows = sql(pg_url, "SELECT seq, leased FROM windows_log ORDER BY id")
    assert max(leased for _, leased in rows) == 3  # reached, never passed
    # A nacked message goes again before later ones: first claims follow publish order.
    firsts: list[int] = []
    for seq, _ in rows:
        if seq not in firsts:
            firsts.append(seq)
    assert firsts == sorted(firsts)
