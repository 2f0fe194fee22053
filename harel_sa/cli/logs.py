"""How ``harel-sa worker`` (and ``top``) configure logging: the library never does.

``text``: ``2026-12-01T09:40:00.123Z INFO harel_sa.worker: message``, one line each (a
traceback follows on its own lines). ``json``: one JSON object a line, with ``time``
(ISO-8601, UTC), ``level``, ``logger``, ``message``, the structured fields the worker adds
(``worker_id``, ``group_id``, ``seq``, ``deliveries`` ...) and ``exception`` when there is one.
Both go to stderr, as every log of the command does.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import TextIO

from harel_sa.present.format import utc_time

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
FORMATS = ("text", "json")

# The attributes every LogRecord has; anything else on a record came through ``extra=``.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        when = utc_time(record.created, millis=True)
        line = f"{when} {record.levelname} {record.name}: {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, object] = {
            "time": utc_time(record.created, millis=True),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        data.update((k, v) for k, v in record.__dict__.items() if k not in _STANDARD)
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


def configure(level: str, fmt: str, stream: TextIO | None = None) -> None:
    """One handler on the root logger, so the handler module's own logs show too."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
