"""docs/harel.md's recipe runs as written, in a fresh directory."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from harel.spec.states import Event as HarelEvent

from harel_sa import Event, SqliteTransport
from tests.conftest import FakeClock

ROOT = Path(__file__).resolve().parents[2]


def python_blocks(doc: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / doc).read_text(), flags=re.S)


def test_the_harel_recipe_runs_as_written(tmp_path: Path) -> None:
    (recipe,) = python_blocks("docs/harel.md")
    done = subprocess.run(
        [sys.executable, "-c", recipe], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "DONE success"
    assert (tmp_path / "queue.db").exists() and (tmp_path / "store.db").exists()


def test_event_type_harel_event_hands_out_harels_class(db: str, clock: FakeClock) -> None:
    with SqliteTransport(db, clock, event_type=HarelEvent) as queue:
        queue.publish("g", Event(kind="ours"))
        queue.publish("g", HarelEvent(kind="theirs"))
        kinds = []
        while (lease := queue.claim("w", 30)) is not None:
            assert type(lease.event) is HarelEvent
            kinds.append(lease.event.kind)
            queue.ack(lease)
        assert kinds == ["ours", "theirs"]
