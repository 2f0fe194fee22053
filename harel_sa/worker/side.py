"""A daemon thread beside a run's slots: the lifecycle the heartbeat and the ticker share."""

from __future__ import annotations

import threading


class SideThread:
    """:meth:`start` runs :meth:`main` on a daemon thread named ``name``. :meth:`stop` only
    asks it to end (``main`` watches ``stopped`` and ends after the call in progress);
    :meth:`join` waits, and does nothing for a thread never started."""

    def __init__(self, name: str) -> None:
        self.stopped = threading.Event()
        self._thread = threading.Thread(target=self.main, name=name, daemon=True)

    def main(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.stopped.set()

    def join(self) -> None:
        if self._thread.is_alive():
            self._thread.join()
