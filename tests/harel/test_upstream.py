"""harel 0.9.0's own tests of its SQLite transports, run on harel_sa's.

The tests come from harel's source distribution on PyPI, downloaded when this module runs and
never kept in this repository. pytest runs them twice, in two processes at once, from the
distribution's folder as harel's developers run them: once as harel ships them, on harel's own
transports (the baseline, proving each runs green here), and once with ``-p swap``
(upstream/swap.py), which puts harel_sa's transports wherever harel hands out its own, in the
test process and in the worker processes harel's tests start (upstream/sitecustomize.py). Every
upstream test that passes on harel's transports passes on harel_sa's, but those listed in
NOT_APPLICABLE, each with its reason.

Both runs have two stand-ins for what harel's own development environment would bring:
upstream/asyncio_auto.py runs harel's ``async def`` tests (pytest-asyncio's job there), and
upstream/aiosqlite_stop.py lets harel's conftest stop aiosqlite threads on aiosqlite 0.22.0.
upstream/outcomes.py writes each test's outcome, which this compares.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

HAREL = "harel==0.9.0"
UPSTREAM = Path(__file__).parent / "upstream"

#: harel's test files that build a SQLite transport and need no server, each with the number of
#: its tests that pass on harel's own transports here (at least): no run can silently run nothing.
#: (Those of its tests that need Redis, MongoDB, libSQL or moto skip, or fail in both runs.)
FILES = {
    "test/unit/engine/test_transport.py": 18,
    "test/unit/engine/test_transport_contract.py": 4,
    "test/unit/engine/test_schema.py": 18,
    "test/unit/engine/test_distributed.py": 10,
    "test/unit/engine/test_control.py": 30,
    "test/unit/engine/test_idempotency.py": 7,
    "test/unit/engine/test_execution_models.py": 14,
    "test/unit/engine/aio/test_async_sqlite.py": 18,
    "test/unit/engine/aio/test_worker_async.py": 6,
    "test/integration/test_multiprocess_workers.py": 2,
    "test/integration/test_distributed_workers.py": 5,
}

#: Upstream tests that do not apply to harel_sa, and why.
NOT_APPLICABLE = {
    "test/unit/engine/test_schema.py"
    "::test_the_sqlite_backends_create_exactly_the_described_schema": (
        "compares the file's tables and indexes with harel's own DDL (sql_schema); harel_sa's "
        "schema is its own Alembic history (dead letters, routing keys, alembic_version)"
    ),
    "test/unit/engine/test_schema.py"
    "::test_without_create_schema_it_runs_on_the_schema_a_migration_applied": (
        "creates the tables with harel's own DDL (sql_schema) as the migration; harel_sa's "
        "come from its revisions (harel-sa db upgrade, or create_schema=True, which upgrade "
        "harel's tables in place, rows kept); on harel's tables a create_schema=False "
        "transport raises SchemaError naming the missing table and columns"
    ),
    "test/unit/engine/aio/test_async_sqlite.py"
    "::test_transport_ops_on_one_connection_do_not_interleave_transactions": (
        "takes every result of gather(claim, ack, claim) that is not None for a lease: "
        "harel's ack returns None, harel_sa's returns whether the lease still held (the "
        "fence an application rolls back on); tests/unit/test_async.py::test_gather_claim_ack_"
        "publish_claim_on_one_transport holds the serialization it checks"
    ),
}

#: harel's tests that start worker processes (test_multiprocess_workers.py).
TESTS_WITH_WORKER_PROCESSES = 2

#: Longest either run may take (each takes about 20 s on two busy CPUs).
RUN_TIMEOUT = 200


@dataclass(frozen=True)
class Run:
    """One pytest run of the upstream files: each test's outcome and error, and its output."""

    outcomes: dict[str, dict[str, str]]
    output: str

    def passed(self, file: str) -> set[str]:
        return {
            test
            for test, seen in self.outcomes.items()
            if test.startswith(f"{file}::") and seen["outcome"] == "passed"
        }

    def outcome(self, test: str) -> str:
        return self.outcomes.get(test, {"outcome": "not run"})["outcome"]

    def error(self, test: str) -> str:
        return self.outcomes.get(test, {"error": ""})["error"]


@dataclass(frozen=True, repr=False)  # a failure shows what failed, not every outcome
class Runs:
    baseline: Run  # harel's tests on harel's own transports
    swapped: Run  # the same tests on harel_sa's
    swap_log: list[str]  # the command line of each process that put harel_sa in harel's place


@pytest.fixture(scope="module")
def harel_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """harel's source distribution, downloaded from PyPI and unpacked."""
    into = tmp_path_factory.mktemp("harel-sdist")
    download = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "download", "--disable-pip-version-check"),
            *("--no-binary", ":all:", "--no-deps", HAREL, "-d", str(into)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    archives = list(into.glob("harel-*.tar.gz"))
    if download.returncode != 0 or len(archives) != 1:
        pytest.fail(
            f"could not download {HAREL}'s source distribution from PyPI, whose tests this runs "
            f"(pip exited {download.returncode}):\n{download.stdout}{download.stderr}",
            pytrace=False,
        )
    with tarfile.open(archives[0]) as archive:
        archive.extractall(into, filter="data")
    root = into / archives[0].name.removesuffix(".tar.gz")
    # harel's multi-process tests give their workers PYTHONPATH=src:test and nothing else, so
    # the swap for those workers goes in that `test` folder (it acts only with HAREL_SA_SWAP set).
    (root / "test" / "sitecustomize.py").symlink_to(UPSTREAM / "sitecustomize.py")
    return root


@pytest.fixture(scope="module")
def runs(harel_source: Path, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """The upstream files run on harel's transports and on harel_sa's, both at once."""
    work = tmp_path_factory.mktemp("upstream-runs")
    swap_log = work / "swap.log"
    # Nothing of this run's own configuration reaches harel's: no HAREL_* variable (harel's and
    # harel_sa's own), no PYTEST_* one; only these plugins on the path.
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("HAREL_", "PYTEST_"))
    }
    env["PYTHONPATH"] = str(UPSTREAM)
    started: dict[str, subprocess.Popen[bytes]] = {}
    for name, plugins, extra in (
        ("baseline", [], {}),
        ("swapped", ["-p", "swap"], {"HAREL_SA_SWAP_LOG": str(swap_log)}),
    ):
        output = (work / f"{name}.out").open("w")
        started[name] = subprocess.Popen(
            [
                *(sys.executable, "-m", "pytest", *FILES, "-q", "-rfE", "-p", "no:cacheprovider"),
                # harel's async tests on our stand-in for pytest-asyncio, and never on both
                *("-p", "no:asyncio", "-p", "asyncio_auto"),
                # harel's conftest on aiosqlite 0.22.0 too (our lowest: a CI run's)
                *("-p", "aiosqlite_stop"),
                *("-p", "outcomes", "--outcomes", str(work / f"{name}.json")),
                *("--basetemp", str(work / f"{name}-tmp"), *plugins),
            ],
            cwd=harel_source,
            env={**env, **extra},
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # so a run that hangs goes with its worker processes
        )
        output.close()
    ran = {name: _finish(name, process, work) for name, process in started.items()}
    log = swap_log.read_text().splitlines() if swap_log.exists() else []
    return Runs(baseline=ran["baseline"], swapped=ran["swapped"], swap_log=log)


def _finish(name: str, process: subprocess.Popen[bytes], work: Path) -> Run:
    try:
        code = process.wait(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        code = None
    output = (work / f"{name}.out").read_text(errors="replace")
    outcomes = work / f"{name}.json"
    # pytest exits 0 when every test passed and 1 when some failed; anything else (a crash, a
    # usage error such as swap.py refusing a module that kept harel's class) is no comparison.
    if code not in (0, 1) or not outcomes.exists():
        pytest.fail(
            f"the {name} run of harel's tests did not finish (exit {code}):\n{output[-6000:]}",
            pytrace=False,
        )
    return Run(outcomes=json.loads(outcomes.read_text()), output=output)


@pytest.mark.parametrize("file", FILES)
def test_harels_tests_that_pass_on_its_transports_pass_on_harel_sa(file: str, runs: Runs) -> None:
    passed = runs.baseline.passed(file)
    assert len(passed) >= FILES[file], (
        f"only {len(passed)} of {file}'s tests passed on harel's own transports, "
        f"expected at least {FILES[file]}:\n{runs.baseline.output[-6000:]}"
    )
    for test in NOT_APPLICABLE:
        if test.startswith(f"{file}::"):
            assert test in passed, f"{test}, not applicable, no longer passes on harel itself"
    failing = sorted(
        test for test in passed - NOT_APPLICABLE.keys() if runs.swapped.outcome(test) != "passed"
    )
    assert not failing, f"{len(failing)} of {file}'s tests pass on harel but not on harel_sa:\n" + (
        "\n".join(
            f"- {test}: {runs.swapped.outcome(test)}\n{_last_lines(runs.swapped.error(test))}"
            for test in failing
        )
    )


def test_the_swap_reaches_harels_worker_processes(runs: Runs) -> None:
    """harel's multi-process tests ran their workers on harel_sa's transport too.

    Each of those tests starts three workers and stops them once its work is done, maybe
    before the last one has started: every test, not every worker, must show up in the log.
    """
    test_processes = [line for line in runs.swap_log if "-p swap" in line]
    # a worker's command line: python .../_worker_main.py STORE_DB sqlite QUEUE_DB ...; the
    # databases are in the folder of the test that started it
    tests = {Path(line.split()[2]).parent for line in runs.swap_log if "_worker_main.py" in line}
    assert len(test_processes) == 1, runs.swap_log
    assert len(tests) == TESTS_WITH_WORKER_PROCESSES, runs.swap_log


def test_harels_worker_builds_harel_sa_transports(tmp_path: Path) -> None:
    """``harel.worker``'s transport builders, sync and async, in a process told to swap."""
    program = textwrap.dedent("""
        import asyncio
        from harel import worker

        async def build_async():
            transport = await worker.build_transport_async()
            await transport.close()
            return type(transport)

        transport = worker.build_transport()
        transport.close()
        for built in (type(transport), asyncio.run(build_async())):
            print(f"{built.__module__}.{built.__name__}")
    """)
    env = {
        **{name: value for name, value in os.environ.items() if not name.startswith("HAREL_")},
        "PYTHONPATH": str(UPSTREAM),  # for sitecustomize.py
        "HAREL_SA_SWAP": "1",
        "HAREL_TRANSPORT_BACKEND": "sqlite",
        "HAREL_TRANSPORT_DB": str(tmp_path / "queue.db"),
    }
    built = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60
    )
    assert built.returncode == 0, built.stderr
    assert built.stdout.split() == [
        "harel_sa.sqlite.transport.SqliteTransport",
        "harel_sa.sqlite.aio.AsyncSqliteTransport",
    ]


def _last_lines(text: str, count: int = 25) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines()[-count:])
