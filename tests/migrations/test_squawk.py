"""squawk, the PostgreSQL migration linter, over every revision's PostgreSQL SQL (the golden
``upgrade --sql`` files, the very text the revisions run): clean, with the short ignore list in
``squawk.toml`` (each entry says why its rule cannot apply)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.migrations.test_revision_sql import GOLDEN

SQUAWK = Path(sys.executable).with_name("squawk")
CONFIG = Path(__file__).with_name("squawk.toml")


def squawk(*files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SQUAWK), "--config", str(CONFIG), "--reporter", "gcc", *map(str, files)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_every_revision_is_squawk_clean() -> None:
    files = sorted(GOLDEN.glob("*.postgresql.sql"))
    assert len(files) == 20
    done = squawk(*files)
    assert done.returncode == 0, done.stdout + done.stderr


def test_squawk_sees_what_made_a_revision_unsafe(tmp_path: Path) -> None:
    """The lint is live with this configuration: the statements 0006 ran before it was made
    online (an index built and one dropped inside the transaction, no timeouts) are flagged."""
    unsafe = tmp_path / "unsafe.sql"
    unsafe.write_text(
        "BEGIN;\n"
        "CREATE INDEX IF NOT EXISTS g_by_floor1 ON g (last_claimed_at) WHERE priority >= 1;\n"
        "DROP INDEX IF EXISTS g_by_priority;\n"
        "ALTER TABLE m ADD COLUMN IF NOT EXISTS deliveries INTEGER NOT NULL DEFAULT 0;\n"
        "COMMIT;\n"
    )
    done = squawk(unsafe)
    assert done.returncode != 0
    for rule in (
        "require-concurrent-index-creation",
        "require-concurrent-index-deletion",
        "require-lock-timeout",
        "require-statement-timeout",
        "prefer-bigint-over-int",
    ):
        assert rule in done.stdout, rule
