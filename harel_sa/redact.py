"""A database as people see it: every message, log line, JSON field and advice line that names
a database renders it with :func:`display`, so a password given in any form libpq takes never
reaches output (a terminal, a log collector, a CI transcript)."""

from __future__ import annotations

import re

from sqlalchemy import URL, Engine
from sqlalchemy.exc import ArgumentError

from harel_sa.urls import parse

#: What a credential is shown as.
MASK = "***"

#: A secret parameter in a URL's query (libpq's ``password`` and ``sslpassword``; any case, so a
#: key libpq would refuse is masked too), its value up to the next parameter.
_QUERY_SECRET = re.compile(r"(?i)([?&](?:ssl)?password=)[^&#]*")

#: A secret parameter's name.
_SECRET_KEY = re.compile(r"(?i)(?:ssl)?password")

#: A secret ``key = value`` pair of a libpq conninfo string: the value bare, or quoted with
#: ``\\'`` inside (an unclosed quote runs to the end, as libpq would read it).
_CONNINFO_SECRET = re.compile(r"(?i)(?<!\S)((?:ssl)?password\s*=\s*)(?:'(?:\\.|[^'\\])*'?|\S*)")

#: The ``user:password@`` of a URL SQLAlchemy cannot parse: up to its last ``@``, so an
#: unencoded ``@`` in the password hides the rest too (more masked, never less).
_USERINFO = re.compile(r"(://[^:/?#@]*:).*@")


def display(target: object) -> str:
    """``target`` (a path, a URL string, a SQLAlchemy ``URL`` or ``Engine``, a libpq
    ``key=value`` conninfo string) as output shows it, every credential as ``***``: the
    ``user:password@`` of a URL, and a ``password``/``sslpassword`` parameter (any case) in
    its query or in a conninfo string. A SQLite path, and a URL with no credential, reads as
    given (a ``URL`` object as SQLAlchemy renders it). Never raises; an object that is none of these
    shows only its type."""
    if isinstance(target, Engine):
        target = target.url
    if isinstance(target, URL):
        return _QUERY_SECRET.sub(r"\1" + MASK, target.render_as_string(hide_password=True))
    if not isinstance(target, str):
        return f"<{type(target).__name__}>"
    if "://" not in target:  # a path, or a conninfo string
        return _CONNINFO_SECRET.sub(r"\1" + MASK, target)
    try:
        url = parse(target)
    except (ArgumentError, ValueError):  # a bad port is a ValueError
        url = None
    if url is None or "@" in (url.host or ""):
        # Not parsed, or parsed with part of the password (an unencoded "@") as the host.
        return _QUERY_SECRET.sub(r"\1" + MASK, _USERINFO.sub(r"\1" + MASK + "@", target))
    if url.password is None and not any(_SECRET_KEY.fullmatch(key) for key in url.query):
        return target  # nothing to hide: as the user wrote it
    return display(url)
