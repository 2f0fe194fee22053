"""docs/cli.md's ``db`` transcript, run as written: each ``$ harel-sa ...`` line in order, its
output and exit code exactly as the page shows them."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from harel_sa import Event, SqliteTransport, migrations
from tests.cli.conftest import ROOT, Cli


def transcript(name: str) -> list[tuple[list[str], str, int]]:
    text = (ROOT / "docs" / "cli.md").read_text()
    (block,) = re.findall(rf"<!-- transcript: {name} -->\n```\n(.*?)\n```", text, re.S)
    steps = []
    for chunk in block.split("$ harel-sa ")[1:]:
        command, *output = chunk.rstrip("\n").split("\n")
        code = re.fullmatch(r"\(exit (\d+)\)", output.pop())
        assert code is not None, chunk
        steps.append((shlex.split(command), "\n".join(output), int(code[1])))
    return steps


def test_the_db_transcript(cli: Cli, tmp_path: Path) -> None:
    # the files of the page's own setup script: queue.db at head, old.db behind, mail.db
    migrations.upgrade(tmp_path / "queue.db")
    migrations.upgrade(tmp_path / "old.db", revision="harel_sa_0002")
    with SqliteTransport(tmp_path / "mail.db") as q:
        q.publish("g", Event(kind="bounce"))
        lease = q.claim("w", 30.0)
        assert lease is not None and q.dead_letter(lease, "no such mailbox")
    steps = transcript("db")
    assert len(steps) >= 10
    for argv, output, code in steps:
        done = cli(*argv)
        assert (done.stdout + done.stderr).rstrip("\n") == output, argv
        assert done.returncode == code, argv
