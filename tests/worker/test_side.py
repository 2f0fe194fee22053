"""The side threads' lifecycle (``harel_sa.worker.side.SideThread``, the heartbeat's and the
ticker's): ``stop`` only asks, the thread ends after the call in progress, and ``join`` on a
thread never started returns at once (a run cancelled before its threads started)."""

from __future__ import annotations

import threading

from harel_sa.worker.side import SideThread

GUARD = 5.0  # a mutant fails here, never hangs


class Beats(SideThread):
    def __init__(self) -> None:
        super().__init__("test-side")
        self.beating = threading.Event()
        self.calls = 0

    def main(self) -> None:
        while not self.stopped.wait(0.001):
            self.calls += 1
            self.beating.set()


def test_join_on_a_thread_never_started_returns() -> None:
    Beats().join()


def test_stop_asks_the_thread_to_end_and_join_waits_for_it() -> None:
    side = Beats()
    side.start()
    assert side.beating.wait(GUARD)
    side.stop()
    side._thread.join(GUARD)
    assert not side._thread.is_alive()
    calls = side.calls
    side.join()  # ended: returns at once
    assert side.calls == calls
