"""The attack suite's scenarios, shared by ``tests/reliability`` (reduced size) and
``scripts/attack.py`` (full size). Each returns a dict of figures: attempts,
failures (unexpected errors or broken invariants), leaks, lost writes."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from typing import Any

import psycopg

from memfabric.adapters import open_fabric
from memfabric.adapters.audit import verify_chain
from memfabric.domain.errors import FabricError
from memfabric.projections.rebuild import ProjectionAdmin

CTX = mp.get_context("spawn")


def _racer(dsn: str, mode: str, n: int, out: Any, tenant: str = "race") -> None:
    with open_fabric(dsn) as fabric:
        notes = fabric.scope(tenant, "u", "t")
        try:
            if mode == "same":
                notes.remember(kind="fact", content="the launch date is 5 May")
            elif mode == "id":
                notes.remember(kind="fact", content=f"claim {n}", id="000000000001")
            else:
                notes.remember(kind="fact", content=f"new value {n}", supersedes="0000000000ba")
            out.put("ok")
        except FabricError as exc:
            out.put(type(exc).__name__)
        except Exception as exc:  # noqa: BLE001 - an untyped error is a failure
            out.put("UNTYPED " + repr(exc))


def concurrent_same_fact(dsn: str, rounds: int = 1, procs: int = 4) -> dict[str, int]:
    """``procs`` processes write the same fact / the same explicit id / a successor of
    the same note: one live note or typed errors, never two live notes."""
    failures = attempts = 0
    with open_fabric(dsn) as fabric:
        for r in range(rounds):
            for mode in ("same", "id", "supersedes"):
                tenant = f"race{r}{mode}"  # a fresh scope per round and mode
                admin = fabric.scope(tenant, "u", "t")
                if mode == "supersedes":
                    admin.remember(kind="fact", content=f"old value round {r}", id="0000000000ba", consolidate=False)
                q = CTX.Queue()
                ps = [CTX.Process(target=_racer, args=(dsn, mode, i, q, tenant)) for i in range(procs)]
                for p in ps:
                    p.start()
                outcomes = [q.get(timeout=120) for _ in ps]
                for p in ps:
                    p.join()
                attempts += procs
                failures += sum(1 for o in outcomes if o.startswith("UNTYPED"))
                live = [n for n in admin.list(limit=100).items if n.valid_to is None]
                if len(live) != 1:
                    failures += 1
    return {"attempts": attempts, "failures": failures, "leaks": 0, "lost": 0}


def _stream(dsn: str, path: str) -> None:
    with open_fabric(dsn) as fabric, open(path, "a") as acks:
        notes = fabric.scope("stream", "u", "t")
        i = 0
        while True:
            n = notes.remember(kind="fact", content=f"streamed fact {i} item{i}", consolidate=False)
            acks.write(n.id + "\n")
            acks.flush()
            os.fsync(acks.fileno())
            i += 1


def _await_first_ack(path: str, timeout: float) -> None:
    """Wait until the writer has acknowledged a write (a line in ``path``), so the kill
    lands mid-stream rather than during its open."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path) as f:
            if f.readline().strip():
                return
        time.sleep(0.05)


def kill_writer(dsn: str, tmp: str, runs: int = 1, seconds: float = 1.5) -> dict[str, int]:
    """kill -9 a writer mid-stream; every acknowledged write must be readable and the
    projections and the audit chain must verify."""
    lost = failures = attempts = 0
    for r in range(runs):
        path = os.path.join(tmp, f"acks-{r}")
        open(path, "w").close()
        p = CTX.Process(target=_stream, args=(dsn, path))
        p.start()
        _await_first_ack(path, timeout=120.0)  # spawn + open take a while on a busy machine
        time.sleep(seconds)
        assert p.pid is not None
        os.kill(p.pid, signal.SIGKILL)
        p.join()
        acked = [line.strip() for line in open(path) if line.strip()]
        attempts += len(acked)
        with open_fabric(dsn) as fabric:
            notes = fabric.scope("stream", "u", "t")
            for nid in acked:
                try:
                    notes.get(nid)
                except FabricError:
                    lost += 1
            if not all(rep.ok for rep in ProjectionAdmin.for_fabric(fabric).verify()):
                failures += 1
            if not verify_chain(fabric).ok:
                failures += 1
    return {"attempts": attempts, "failures": failures, "leaks": 0, "lost": lost}


def text_tables(dsn: str, needle: str) -> list[str]:
    """Columns (every user table) whose values contain ``needle``: as text, and for
    ``bytea`` columns as raw bytes (the event states)."""
    hits = []
    with psycopg.connect(dsn) as conn:
        cols = conn.execute(
            "SELECT table_schema, table_name, column_name, data_type FROM information_schema.columns"
            " WHERE table_schema NOT IN ('pg_catalog', 'information_schema')").fetchall()
        for schema, table, col, typ in cols:
            if typ == "bytea":
                cond, arg = f'position(%s::bytea in "{col}") > 0', needle.encode()
            else:
                cond, arg = f'"{col}"::text LIKE %s', f"%{needle}%"
            q = f'SELECT count(*) FROM "{schema}"."{table}" WHERE {cond}'  # noqa: S608
            found = conn.execute(q, (arg,)).fetchone()
            if found and found[0]:
                hits.append(f"{schema}.{table}.{col}")
    return hits


def erasure_dump(dsn: str, notes_n: int = 20) -> dict[str, int]:
    """Forget notes, then scan every table's text for their content."""
    leaks = 0
    with open_fabric(dsn) as fabric:
        notes = fabric.scope("erase", "u", "t")
        made = [notes.remember(kind="fact", content=f"canary{i}xq secret about topic {i}", consolidate=False)
                for i in range(notes_n)]
        for n in made:
            notes.forget(id=n.id)
    for i in range(notes_n):
        leaks += len(text_tables(dsn, f"canary{i}xq"))
    return {"attempts": notes_n, "failures": 0, "leaks": leaks, "lost": 0}
