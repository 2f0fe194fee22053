"""What travels through the queue: the event model, the lease that hands it to a worker, and
the tokens that fence each lease (one source per process, for every backend)."""

from __future__ import annotations

import itertools
import os
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypeVar


def _new_id() -> str:
    return uuid.uuid4().hex


class Event(BaseModel):
    """The harel engine's event (``harel.spec.states.Event``), stored as its JSON.

    The same fields, types, defaults and order as the engine's, so a row either side writes
    decodes on the other and re-encodes to the same bytes. Fields this model does not know are
    kept, so a round trip loses nothing. ``created_time`` and ``received_time`` are optional
    datetimes (``null`` when absent); a number there (as harel_sa 0.1 wrote ``created_time``)
    reads as that many seconds since the epoch, in UTC. ``data`` is any ``dict``, keys of any
    type included, as harel's ``dict`` field (JSON writes its keys as strings).
    """

    model_config = ConfigDict(extra="allow")

    id: str = Field(default_factory=_new_id)
    kind: str
    created_time: datetime | None = None
    received_time: datetime | None = None
    data: dict[Any, Any] = Field(default_factory=dict)


E = TypeVar("E", bound=BaseModel, default=Event)


@dataclass(frozen=True, slots=True, init=False)
class Lease(Generic[E]):
    """A claimed message, held by one worker until ``ack``, ``nack`` or its lease lapses.

    ``token`` fences the lease: ``ack``/``nack``/``extend`` act only while the row still holds
    ``worker_id#token``, so a worker whose lease lapsed and was re-claimed changes nothing.
    ``deliveries`` counts the claims of this message, this one included.
    """

    seq: int
    group_id: str
    event: E
    worker_id: str
    token: str
    deliveries: int = 1

    def __init__(
        self, seq: int, group_id: str, event: E, worker_id: str, token: str, deliveries: int = 1
    ) -> None:
        # The generated ``__init__`` of a frozen dataclass, made cheaper (a batch makes one per
        # message): each field set through its slot's own descriptor, not through
        # ``object.__setattr__``.
        _set_seq(self, seq)
        _set_group_id(self, group_id)
        _set_event(self, event)
        _set_worker_id(self, worker_id)
        _set_token(self, token)
        _set_deliveries(self, deliveries)

    @property
    def locked_by(self) -> str:
        """The value the row's ``locked_by`` holds while this lease is live."""
        return f"{self.worker_id}#{self.token}"


_set_seq, _set_group_id, _set_event, _set_worker_id, _set_token, _set_deliveries = (
    getattr(Lease, name).__set__
    for name in ("seq", "group_id", "event", "worker_id", "token", "deliveries")
)


class Tokens:
    """Lease tokens: a random prefix per process and a counter; re-seeded in a forked child."""

    def __init__(self) -> None:
        self.reseed()

    def reseed(self) -> None:
        self.prefix = secrets.token_hex(6)
        self.counter = itertools.count()

    def next(self) -> str:
        return f"{self.prefix}{next(self.counter):x}"


tokens = Tokens()
os.register_at_fork(after_in_child=tokens.reseed)
