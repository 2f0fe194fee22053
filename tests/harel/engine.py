"""A small harel workload, written with harel's public API: a machine with an action, a timer
and an orthogonal state (each region a child execution), started and sent events through
harel's runner and driven by harel's workers, on harel's SQLite store."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from string import Template
from typing import Any

from harel import Event, definition_from_dsl

MACHINE = Template("""
event Go { item: string }
event Finish {}

machine order {
  initial Idle
  state Idle {}
  orthogonal Work {
    state Picking {
      initial Pick
      state Pick { on enter tests.harel.actions.pick }
      final Picked success
      from Pick to Picked on Finish
    }
    state Waiting {
      initial Wait
      state Wait { timeout $timeout }
      final Waited success
      from Wait to Waited on Timeout
    }
  }
  final Done success { on enter tests.harel.actions.done }
  final Broken failed
  from Idle to Work on Go
  from Work join all to Done else to Broken
}
""")

EXECUTIONS = 6
#: What every execution ends as: (status, outcome, active path, the action's mark).
EXPECTED = ("DONE", "success", "Done", True)


def machine(timeout: int = 5) -> str:
    """The machine's DSL; its timer fires ``timeout`` seconds after the region starts."""
    return MACHINE.substitute(timeout=timeout)


def definitions() -> dict[str, Any]:
    defn = definition_from_dsl(machine(), "order")
    return {defn.id: defn}


def write_machine(folder: Path, timeout: int) -> Path:
    """The machine as a ``.stm`` file, for ``HAREL_DEFINITIONS_DIR``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "order.stm").write_text(machine(timeout))
    return folder


def summary(execution: Any) -> tuple[object, ...]:
    return (
        execution.status.name,
        execution.outcome,
        execution.active_path,
        execution.context.get("done"),
    )


def start(runner: Any) -> list[str]:
    """Create the executions (priorities 0-2) and send each its events, through ``runner``."""
    ids = []
    for n in range(EXECUTIONS):
        execution = runner.create("order", priority=n % 3)
        runner.send(execution.id, Event(kind="Go", data={"item": f"item-{n}"}))
        runner.send(execution.id, Event(kind="Finish"))
        ids.append(execution.id)
    return ids


def drive(worker: Any, clock: Any, finished: Callable[[], bool]) -> None:
    """Run ``worker`` (harel's sync ``Worker``) until ``finished()``: every claimable message,
    then the due timers; only when both are exhausted does the clock move on."""
    for _ in range(200):
        while worker.step():
            pass
        if worker.fire_due_timers():
            continue
        if finished():
            return
        clock.advance(1.0)
    raise AssertionError("the workload did not finish")


async def drive_async(worker: Any, clock: Any, finished: Callable[[], Awaitable[bool]]) -> None:
    """:func:`drive` for harel's ``AsyncWorker``."""
    for _ in range(200):
        while await worker.step():
            pass
        if await worker.fire_due_timers():
            continue
        if await finished():
            return
        clock.advance(1.0)
        await asyncio.sleep(0)
    raise AssertionError("the workload did not finish")
