"""One log line when a transport's database goes away, one when it is back: not psycopg's pool's
line per connection discarded and per attempt that failed (a failover or a restart made each
worker log a dozen).

A filter on the ``psycopg.pool`` logger holds back the records of harel_sa's own pools (named
``harel_sa:<prefix>#<n>``, their connections :mod:`~harel_sa.postgres.wire`'s); the first
failed attempt of an outage logs one WARNING of harel_sa's naming the database (as
:func:`~harel_sa.redact.display` shows it) and the error; the first connection made after it
logs one INFO with how long it lasted. Every other pool's records pass as they are.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time

log = logging.getLogger("harel_sa.postgres")

#: A harel_sa pool's name in psycopg's records (``error connecting in 'harel_sa:jobs#3': ...``).
_NAMED = re.compile(r"'(harel_sa:[^']*)'")
_numbers = itertools.count(1)


class _Outages(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._where: dict[str, str] = {}  # pool name -> the database, as output shows it
        self._since: dict[str, float] = {}  # pool name -> when its outage began (monotonic)

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if "harel_sa" not in text:
            return True
        named = _NAMED.search(text)
        if named is None:  # a broken connection of ours discarded: the next attempt tells
            return False
        name = named.group(1)
        with self._lock:
            where = self._where.get(name)
            first = where is not None and name not in self._since
            if first:
                self._since[name] = time.monotonic()
        if where is None:
            return True  # a pool this process no longer watches: as psycopg says it
        if first:
            why = text.split(": ", 1)[-1].splitlines()[0]
            log.warning("%s went away (%s); connecting again as the pool can", where, why)
        return False

    def back(self, name: str) -> None:
        if name not in self._since:  # the common case, without the lock
            return
        with self._lock:
            since, where = self._since.pop(name, None), self._where.get(name)
        if since is not None:
            log.info("%s is back after %.1f s", where, time.monotonic() - since)


_outages = _Outages()
logging.getLogger("psycopg.pool").addFilter(_outages)


def watch(prefix: str, where: str) -> str:
    """A name for a new pool of ``prefix`` on the database ``where`` (as output shows it),
    whose outages are logged once each."""
    name = f"harel_sa:{prefix}#{next(_numbers)}"
    with _outages._lock:
        _outages._where[name] = where
    return name


def connected(name: str) -> None:
    """A connection of pool ``name`` was made: an outage, if one ran, is over."""
    _outages.back(name)


def forget(name: str) -> None:
    """Pool ``name`` is closed."""
    with _outages._lock:
        _outages._where.pop(name, None)
        _outages._since.pop(name, None)
