"""Who may see the page and who may change the queue.

Every request must name the bound address in its ``Host`` (a DNS-rebinding page cannot), and a
``POST`` from a browser must come from the page's own origin. A write needs the server started
with writes allowed and the token, compared in constant time; the token is never shown.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable, Mapping


class Secret:
    """A token that never shows itself (``repr``, ``str``, f-strings, logs)."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value.encode()

    def matches(self, given: str) -> bool:
        return hmac.compare_digest(self._value, given.encode())

    def __repr__(self) -> str:
        return "Secret(***)"

    __str__ = __repr__


def authorities(host: str, port: int, more: Iterable[str] = ()) -> frozenset[str]:
    """The ``Host`` values that name the bound address (every loopback name for loopback, and
    for a wildcard ``0.0.0.0``/``::``), and the names in ``more`` (``NAME`` or ``NAME:PORT``;
    a bare name with and without the port, as a proxy in front may send it)."""
    names = {host}
    if host in ("localhost", "", "0.0.0.0", "::") or _loopback(host):
        names |= {"127.0.0.1", "localhost", "::1"}
    found = {f"[{n}]:{port}" if ":" in n else f"{n}:{port}" for n in names}
    for name in more:
        found.add(name)
        if not name.rpartition(":")[2].isdigit() or name.endswith("]"):
            found.add(f"{name}:{port}")
    return frozenset(found)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Guard:
    """The checks of one server: its authorities, and the token when writes are allowed."""

    def __init__(self, allowed: Iterable[str], token: Secret | None) -> None:
        self.allowed = frozenset(a.lower() for a in allowed)
        self.token = token

    @property
    def writes(self) -> bool:
        return self.token is not None

    def refusal(self, method: str, headers: Mapping[str, str]) -> str | None:
        """Why a request is refused by its headers alone, or ``None``."""
        if headers.get("host", "").lower() not in self.allowed:
            return (
                "unknown Host header: use the address the server printed, or start it with "
                "--allow-host NAME"
            )
        if method not in ("GET", "HEAD"):
            origin = headers.get("origin")
            if origin is not None and origin.lower() not in {f"http://{a}" for a in self.allowed}:
                return "cross-origin request refused"
        return None

    def write_refusal(self, given: str | None) -> str | None:
        """Why a write with token ``given`` is refused, or ``None`` when it may go ahead."""
        if self.token is None:
            return "writes are off: start harel-sa web with --allow-writes and a token"
        if not given or not self.token.matches(given):
            return "wrong token: nothing changed"
        return None
