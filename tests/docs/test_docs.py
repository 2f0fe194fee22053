"""Every code block of README.md and docs/*.md runs as written.

The rule:

- Each document runs top to bottom in a fresh directory of its own, its blocks in order, as a
  reader following the page would: a block may use what an earlier block of the page made.
  Setup a block needs is itself a block of the page, run before it, and the text says so
  (docs/cli.md opens with the script that makes its example queue).
- A ``python`` block runs with this environment's Python (``python -c BLOCK``) in that
  directory and must exit 0; its own ``assert``\\ s check what it claims.
- A block whose lines start with ``$ `` is a shell session: each ``$`` line runs with bash
  (stdout and stderr together, unbuffered); the lines after it, up to the next ``$``, are what
  it prints, and a line ``(exit N)`` is the status it ends with (0 when none is shown). The
  shown output is compared where it is stable: line by line, with every duration, every
  number, every hex id and every run of spaces read as "some duration", "some number", "some
  id", "some spacing" (ages, times, counts, ids and column widths change from run to run;
  words, columns, states and line counts do not). A line ``...`` stands for any lines.
- A ``sh`` block without prompts is a list of commands, each run in order; each must exit 0.
- A block right after ``<!-- file: NAME -->`` is written to NAME in the directory (the text
  says "save it as NAME"), and run as well when it is Python.
- A block right after ``<!-- illustrative: REASON -->`` is not run; the text says why (the
  block is this very test's command, or shows a screen or a long-running service).
- A block right after ``<!-- transcript: NAME -->`` runs here like any session, and also in
  tests/cli/test_docs_transcripts.py (``transcript("NAME")``; checked here), which compares its
  output exactly.
- docs/alembic.md belongs to the migration tests, which run its blocks verbatim: each
  ``<!-- recipe: NAME -->`` block is read by ``recipe("NAME")`` in tests/migrations (checked
  here), and its command blocks run in :func:`test_alembic_md_command_blocks` below.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.migrations.host import make_host, recipe

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
OWN_RULES = {"docs/alembic.md"}  # run by the migration tests (see the module docstring)
TIMEOUT = 300.0


@dataclass(frozen=True)
class Block:
    doc: str
    line: int  # where the fence opens, 1-based
    lang: str
    text: str
    mark: str  # the ``<!-- ... -->`` line right before the fence, or ""

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def blocks(doc: str) -> list[Block]:
    lines = (ROOT / doc).read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opened = re.fullmatch(r"```(\w*)\s*", lines[i])
        if opened is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        before = lines[i - 1].strip() if i else ""
        mark = before if before.startswith("<!--") else ""
        found.append(Block(doc, i + 1, opened[1], "\n".join(lines[i + 1 : end]) + "\n", mark))
        i = end + 1
    return found


def environment() -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)  # harel-sa, alembic: this environment's
    return {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONUNBUFFERED": "1",
        "COLUMNS": "200",
    }


def normal(line: str) -> str:
    """A line as compared: ids, numbers and spacing abstracted (see the module docstring)."""
    # first: an age's units depend on how long the page took to run (0.5s, 1m41s, 2h3m)
    line = re.sub(r"\b(?:\d+(?:\.\d+)?[dhms])+\b", "<t>", line)
    line = re.sub(r"\d+\.\d+", "<n>", line)  # then: a long fraction is not an id
    line = re.sub(r"[0-9a-f]{12,}", "<id>", line)
    line = re.sub(r"\d+", "<n>", line)
    return " ".join(line.split())


def matches(shown: list[str], printed: list[str]) -> bool:
    """``printed`` is ``shown``, line for line once normalized; ``...`` stands for any lines."""
    want = [normal(s) for s in shown if s.strip()]
    got = [normal(p) for p in printed if p.strip()]

    def fit(w: int, g: int) -> bool:
        if w == len(want):
            return g == len(got)
        if want[w] == "...":
            return any(fit(w + 1, k) for k in range(g, len(got) + 1))
        return g < len(got) and want[w] == got[g] and fit(w + 1, g + 1)

    return fit(0, 0)


def session(block: Block) -> list[tuple[str, list[str], int]]:
    """``(command, shown output, expected status)`` for each ``$`` line of a session."""
    steps: list[tuple[str, list[str], int]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], [], 0))
        elif (status := re.fullmatch(r"\(exit (\d+)\)", line.strip())) is not None:
            command, shown, _ = steps[-1]
            steps[-1] = (command, shown, int(status[1]))
        else:
            steps[-1][1].append(line)
    return steps


def shell(command: str, cwd: Path, *, merged: bool = False) -> subprocess.CompletedProcess[str]:
    """``command`` run by bash in ``cwd``; ``merged``: stderr into stdout, no stdin."""
    return subprocess.run(
        ["bash", "-c", ("exec 2>&1\n" if merged else "") + command],
        cwd=cwd,
        env=environment(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def run_block(block: Block, cwd: Path) -> None:
    env = environment()
    if block.mark.startswith("<!-- file:"):
        name = block.mark.removeprefix("<!-- file:").removesuffix("-->").strip()
        (cwd / name).write_text(block.text)
    if block.lang == "python":
        done = subprocess.run(
            [sys.executable, "-c", block.text],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode == 0, f"{block.where}: {done.stderr}"
    elif block.text.startswith("$ "):
        for command, shown, status in session(block):
            done = shell(command, cwd, merged=True)
            printed = done.stdout.splitlines()
            assert done.returncode == status, f"{block.where}: $ {command}\n{done.stdout}"
            assert matches(shown, printed), (
                f"{block.where}: $ {command} printed\n{done.stdout}\nnot\n" + "\n".join(shown)
            )
    elif block.lang == "sh":
        for command in commands(block.text):
            done = shell(command, cwd)
            assert done.returncode == 0, f"{block.where}: {command}\n{done.stderr}"
    elif not block.mark.startswith("<!-- file:"):
        pytest.fail(f"{block.where}: a {block.lang or 'plain'} block that no rule runs")


def commands(text: str) -> list[str]:
    return [c for c in (re.sub(r"\s+#.*$", "", ln).strip() for ln in text.splitlines()) if c]


#: The documents whose examples also run on PostgreSQL: ``DATABASE_URL`` names a fresh database.
ON_POSTGRESQL = {"docs/outbox.md"}


@pytest.mark.parametrize("doc", [d for d in DOCS if d not in OWN_RULES])
def test_every_block_of_the_document_runs_as_written(
    doc: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    if doc in ON_POSTGRESQL:
        monkeypatch.setenv("DATABASE_URL", str(request.getfixturevalue("pg_url")))
    found = blocks(doc)
    for block in found:
        if block.mark.startswith("<!-- illustrative:"):
            assert len(block.mark) > len("<!-- illustrative:  -->"), f"{block.where}: why?"
            continue
        run_block(block, tmp_path)


def test_transcript_blocks_are_run_by_the_transcript_test() -> None:
    runner = (ROOT / "tests" / "cli" / "test_docs_transcripts.py").read_text()
    for doc in DOCS:
        for block in blocks(doc):
            name = re.fullmatch(r"<!-- transcript: (\S+) -->", block.mark)
            if name is not None:
                assert f'transcript("{name[1]}")' in runner, f"{block.where}: no test runs it"


def test_the_shown_output_is_really_compared() -> None:
    """The comparison abstracts what varies, and nothing else."""
    assert matches(["in 28.4s   billing-1"], ["in 3599.9s billing-1"])
    assert matches(["a", "...", "z"], ["a", "b", "c", "z"])
    assert not matches(["ready 1"], ["leased 1"])
    assert not matches(["a", "b"], ["a"])
    assert not matches(["a"], ["a", "b"])


def test_alembic_md_recipes_are_read_by_the_migration_tests() -> None:
    sources = "".join(p.read_text() for p in (ROOT / "tests" / "migrations").glob("*.py"))
    for block in blocks("docs/alembic.md"):
        name = re.fullmatch(r"<!-- recipe: (\S+) -->", block.mark)
        if name is not None:
            assert f'recipe("{name[1]}")' in sources, f"{block.where}: no test reads it"
            assert recipe(name[1]) == block.text


def test_alembic_md_command_blocks(tmp_path: Path) -> None:
    """Its ``sh`` blocks: the host project's commands run in the host project of the recipe
    (built from the page's recipe blocks), the installed package's command next to the
    two-line ini of its recipe; the ``harel-sa db`` block and the repository's commands run in
    tests/migrations/test_docs_recipes.py (the latter with the URL moved to a temporary file)."""
    sh = [b for b in blocks("docs/alembic.md") if b.lang == "sh"]
    host_commands, db_commands, repository_commands, package_commands = sh
    assert "alembic upgrade heads " in host_commands.text
    # run by tests/migrations/test_docs_recipes.py, from an empty directory:
    assert "harel-sa db upgrade --db queue.db" in db_commands.text
    assert "alembic -x url=sqlite:///queue.db upgrade heads" in repository_commands.text
    assert "alembic -c harel_sa.ini" in package_commands.text
    host = make_host(tmp_path / "host")
    for command in commands(host_commands.text):
        done = shell(command, host.root)
        assert done.returncode == 0, f"{command}\n{done.stderr}"
    standalone = tmp_path / "standalone"
    standalone.mkdir()
    (standalone / "harel_sa.ini").write_text(recipe("standalone-ini"))
    for command in commands(package_commands.text):
        done = shell(command, standalone)
        assert done.returncode == 0, f"{command}\n{done.stderr}"
    assert (standalone / "queue.db").exists()


def test_the_documents_stay_at_human_size() -> None:
    """README.md, ARCHITECTURE.md and bench/RESULTS.md are read in one sitting; the rest goes
    to docs/ (raw figures: bench/results.json)."""
    limits = {"README.md": 15_000, "ARCHITECTURE.md": 12_000, "bench/RESULTS.md": 15_000}
    for doc, limit in limits.items():
        size = len((ROOT / doc).read_text())
        assert size <= limit, f"{doc} is {size} characters, over {limit}: move detail to docs/"
