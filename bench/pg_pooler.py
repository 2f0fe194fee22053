"""Workload "pooler": harel_sa's ``PostgresTransport`` through PgBouncer, against the same
transport connected to the server directly.

Behind a pooler every message is relayed, and a PgBouncer before 1.21 loses prepared
statements (the next transaction may run on another server connection): harel_sa then sends
them unprepared, each parsed and planned where it runs; PgBouncer 1.21 and later keeps them
prepared itself when ``max_prepared_statements`` is above 0 (set so here). This measures
what each costs: N messages over G groups (the pg workload's sizes), drained by 1 and 4
worker processes, by claim + ack and in batches of :data:`pg_peers.DRAIN_BATCH`, directly and
through each PgBouncer given (``tests/pgbouncer.py``, ``pool_mode = transaction``, 8 server
connections; the PATH's, and ``HAREL_SA_PGBOUNCER``'s when it names another) in front of the
run's own throw-away server. All queues are drained in turns by the same processes
(:mod:`pg_interleave`), each drain checked as the pg workload checks its drains; the fills are
published directly.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pg_peers
from common import Config, Row, fmt_ratio, ratios, summary
from pg_bench import checks_cell, group_drains
from pg_server import Server

from tests import pgbouncer

PROCS = (1, 4)
POOL_SIZE = 8  # PgBouncer's server connections: 4 worker processes and the harness's probes
DIRECT = ("harel_sa", "harel_sa batched")  # each is measured through every PgBouncer too


def _programs() -> list[Path]:
    """The PgBouncers to measure: the PATH's, and ``HAREL_SA_PGBOUNCER``'s if another."""
    found = [p for p in (pgbouncer.installed(), pgbouncer.program()) if p is not None]
    if not found:
        raise pgbouncer.Unavailable(pgbouncer.INSTALL_HINT)
    return list(dict.fromkeys(found))


def _version(binary: Path) -> str:
    return ".".join(map(str, pgbouncer.version(binary)))


def run(cfg: Config) -> dict[str, Any]:
    programs = {_version(binary): binary for binary in _programs()}
    server = Server(cfg.workdir)
    bouncers: list[pgbouncer.Bouncer] = []
    names = list(DIRECT)
    try:
        for version, binary in programs.items():
            bouncer = pgbouncer.start(server.cluster.url, "transaction", POOL_SIZE, binary)
            bouncers.append(bouncer)
            os.environ[pg_peers.pooler_variable(version)] = bouncer.url("/").split("?", 1)[1]
            names += [f"{name}{pg_peers.VIA}{version}" for name in DIRECT]
        kinds = {name: pg_peers.group_queue(name) for name in names}
        n, groups = cfg.size(2_000, 20_000), cfg.size(200, 2_000)
        out: dict[str, Any] = {"n": n, "groups": groups, "procs": list(PROCS)}
        out["pgbouncer"] = list(programs)
        out["impls"] = {
            name: {"label": kind.label, **{str(c): {"rate": [], "checks": []} for c in PROCS}}
            for name, kind in kinds.items()
        }
        for rep in range(cfg.reps):
            for c in PROCS:
                for name, d in group_drains(cfg, server, c, rep, n, groups, kinds).items():
                    slot = out["impls"][name][str(c)]
                    slot["rate"].append(n / d["seconds"])
                    slot["checks"].append(d["checks"])
                    cfg.log(f"  pooler {name} x{c}: {n / d['seconds']:,.0f} msgs/s {d['checks']}")
            cfg.log(f"  pooler rep {rep + 1}/{cfg.reps} done")
    finally:
        for version in programs:
            os.environ.pop(pg_peers.pooler_variable(version), None)
        for bouncer in bouncers:
            bouncer.stop()
        server.stop()
    return out


def _reference(name: str) -> str | None:
    """The direct queue a queue through a PgBouncer is measured against."""
    return name.split(pg_peers.VIA)[0] if pg_peers.VIA in name else None


def _against(w: dict[str, Any], name: str, c: str) -> list[float]:
    """Per repetition: ``name``'s drain over its reference's, with ``c`` processes."""
    reference = _reference(name)
    assert reference is not None
    return ratios(w["impls"][name][c]["rate"], w["impls"][reference][c]["rate"])


def targets(w: dict[str, Any]) -> list[Row]:
    """Per PgBouncer, its drains ÷ the same drains direct (reported: no bar)."""
    cells: dict[str, list[str]] = {}
    for name in w["impls"]:
        if _reference(name) is None:
            continue
        how = "batched" if "batched" in name else "claim + ack"
        per = ", ".join(f"{c}: {fmt_ratio(_against(w, name, c))}" for c in map(str, w["procs"]))
        cells.setdefault(name.split(pg_peers.VIA)[1], []).append(f"{how}: {per}")
    return [
        (f"PgBouncer {v} ÷ direct, by processes", "; ".join(c), "reported")
        for v, c in cells.items()
    ]


def section(w: dict[str, Any]) -> list[str]:
    checks = [v[c]["checks"] for v in w["impls"].values() for c in map(str, w["procs"])]
    return summary(
        "9. PostgreSQL through PgBouncer",
        f"{w['n']:,} messages over {w['groups']:,} groups drained by"
        f" {' or '.join(map(str, w['procs']))} processes, directly"
        " and through PgBouncer (`pool_mode = transaction`; before 1.21 unprepared), in turns;"
        " checks:"
        f" {checks_cell([c for cs in checks for c in cs])}.",
        targets(w),
    )
