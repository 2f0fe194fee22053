"""A relay in front of the test server that passes every byte on both ways, but holds the
server's close back from the client until the relay ends: the moment between a server's last
words to a session (a FATAL error) and its end of the stream, made to last. The server is the
real one; only its close is late."""

from __future__ import annotations

import contextlib
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit


@dataclass
class Relay:
    """``url``: the test server's URL through the relay; ``server_closed``: set once the
    server closed a relayed session (the client still holds it open)."""

    url: str
    server_closed: threading.Event = field(default_factory=threading.Event)


def _pump(source: socket.socket, sink: socket.socket, at_end: Callable[[], None]) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    at_end()


@contextlib.contextmanager
def holding_the_close(pg_url: str) -> Iterator[Relay]:
    """A relay to ``pg_url``'s server (its Unix socket, or its TCP address) for the block."""
    parts = urlsplit(pg_url)
    query = dict(parse_qsl(parts.query))
    host, port = query.get("host") or parts.hostname or "localhost", query.get("port") or "5432"
    folder = tempfile.mkdtemp(prefix="harel-sa-relay-")
    if host.startswith("/"):
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(f"{folder}/.s.PGSQL.{port}")
        target: str | tuple[str, int] = f"{host}/.s.PGSQL.{port}"
        through = {"host": folder, "port": port}
    else:
        listener = socket.socket(socket.AF_INET)
        listener.bind(("127.0.0.1", 0))
        target = (host, int(port))
        through = {"host": "127.0.0.1", "port": str(listener.getsockname()[1])}
    # libpq's host and port parameters win over the URL's authority.
    url = urlunsplit(parts._replace(query=urlencode({**query, **through})))
    listener.listen()
    relay = Relay(url)
    opened: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.socket(listener.family)
            server.connect(target)
            opened.extend((client, server))
            to_server = threading.Thread(
                target=_pump, args=(client, server, server.close), daemon=True
            )
            to_client = threading.Thread(
                target=_pump, args=(server, client, relay.server_closed.set), daemon=True
            )
            to_server.start()
            to_client.start()

    accepting = threading.Thread(target=serve, daemon=True)
    accepting.start()
    try:
        yield relay
    finally:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() in the relay's thread
        listener.close()
        for sock in opened:
            with contextlib.suppress(OSError):
                sock.close()
        accepting.join(5)
        shutil.rmtree(folder, ignore_errors=True)
