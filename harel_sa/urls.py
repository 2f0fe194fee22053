"""Database URLs as harel_sa reads them: SQLAlchemy's, and libpq's multi-host form.

``postgresql://u@h1:5432,h2:5433/app?target_session_attrs=read-write`` (how libpq, Patroni and
the managed services write a primary and its standbys) is read as SQLAlchemy's own spelling of
the same hosts, ``postgresql://u@/app?host=h1:5432&host=h2:5433&...``, which SQLAlchemy's
psycopg dialects connect to; :func:`libpq_hosts` gives libpq's ``host``/``port`` lists back.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:
    from sqlalchemy import URL

#: A URL whose authority names several hosts: scheme, user info, hosts, the rest.
_MULTI_HOST = re.compile(
    r"^(?P<scheme>[A-Za-z0-9+.-]+://)(?P<userinfo>[^/?#@]*@)?"
    r"(?P<hosts>[^/?#@]*,[^/?#@]*)(?P<rest>[/?#].*)?$",
    re.DOTALL,
)


def parse(text: str) -> URL:
    """``text`` as a SQLAlchemy URL (what :func:`sqlalchemy.make_url` raises, this raises:
    ``ArgumentError``, or ``ValueError`` for a bad port), a multi-host authority as
    repeated ``host`` query parameters."""
    from sqlalchemy import make_url

    found = _MULTI_HOST.match(text)
    if found is None:
        return make_url(text)
    for item in found["hosts"].split(","):
        split_host(item)  # a bad port raises here, as make_url raises for one host
    rest = found["rest"] or "/"
    path, _, query = rest.partition("?")
    hosts = "&".join(f"host={quote(h, safe=':[]')}" for h in found["hosts"].split(","))
    return make_url(
        f"{found['scheme']}{found['userinfo'] or ''}{path or '/'}?{hosts}"
        + (f"&{query}" if query else "")
    )


def split_host(item: str) -> tuple[str, str]:
    """A ``host[:port]`` item (``[v6]:port``, a bare IPv6 address, a socket directory
    ``/path``) as (host, port); port ``""`` when none is given. A port that is not a number
    raises ``ValueError`` (as SQLAlchemy's parser does for one host)."""
    if item.startswith("/") or (item.count(":") > 1 and not item.startswith("[")):
        return item, ""
    if item.startswith("["):
        end = item.find("]")
        tail = item[end + 1 :] if end > 0 else ""
        host, port = (item[1:end], tail[1:]) if end > 0 else (item, "")
    else:
        host, _, port = item.partition(":")
    if port and not port.isdigit():
        raise ValueError(f"not a port number: {port!r}")
    return host, port


def libpq_hosts(url: URL) -> dict[str, str]:
    """The ``host`` and ``port`` libpq takes for ``url``: its authority's host and port, or
    its ``host`` query parameters, each ``host[:port]`` (several: libpq's comma lists, in
    order, a port for each; one missing is the URL's ``port`` parameter, else 5432)."""
    given = url.query.get("host")
    if given is None:
        out = {"host": url.host, "port": url.port}
        return {key: str(value) for key, value in out.items() if value is not None}
    items = [given] if isinstance(given, str) else list(given)
    split = [split_host(item) for item in items]
    port = url.query.get("port")
    default = str(url.port or (port if isinstance(port, str) else (port[-1] if port else "")))
    if len(split) == 1 and not split[0][1]:
        return {"host": split[0][0], **({"port": default} if default else {})}
    ports = [p or default or "5432" for _, p in split]
    if default and "," in default and not any(p for _, p in split):
        ports = default.split(",")  # ?host=a,b&port=p,q: libpq's own lists, as given
    return {"host": ",".join(h for h, _ in split), "port": ",".join(ports)}
