"""Per-statement profile of one ``remember`` (issue 18): where a single write's time goes.

Every SQL statement the write path sends is timed from the client (psycopg's
``Cursor.execute`` / ``executemany`` / ``copy`` wrapped, so a statement's time includes
its round trip and the server's work, e.g. index maintenance of an upsert). The writes
are ``--n`` synthetic facts (``_bench_common``; the first ``--warm`` are not counted)
into one scope, one ``remember`` each; the report gives per statement (normalised text:
literals and the table-specific part kept, whitespace folded) its calls per write and
its mean ms per write, then the SQL total, the whole write and the rest (Python:
validation, policy, embedding, sealing, row building, psycopg adaptation).

Run (from the repository root)::

    python scripts/profile_write.py                       # consolidation off, 300 writes
    python scripts/profile_write.py --consolidate         # the consolidating path
    python scripts/profile_write.py --consolidate --subjects   # with subject inference
    python scripts/profile_write.py --json /tmp/profile.json

Default: a fresh embedded server in a temporary directory (``--dsn`` for another one).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _bench_common as data  # noqa: E402
import psycopg  # noqa: E402

from memfabric.adapters import open_fabric  # noqa: E402

STATS: dict[str, list[float]] = defaultdict(list)
"""Normalised statement -> client-side ms of each call (while recording)."""
RECORDING = [False]


def normalise(query: Any) -> str:
    """A statement's text, short: bytes/Composed as str, whitespace folded, 110 chars."""
    if isinstance(query, bytes):
        text = query.decode()
    elif isinstance(query, str):
        text = query
    else:
        text = getattr(query, "_obj", None) and str(query) or repr(query)
        try:
            text = query.as_string(None)
        except Exception:  # noqa: BLE001 - a composable that needs a connection
            pass
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= 110 else text[:107] + "..."


def _wrap(cls: type, name: str) -> None:
    orig = getattr(cls, name)

    def timed(self: Any, query: Any, *a: Any, **k: Any) -> Any:
        if not RECORDING[0]:
            return orig(self, query, *a, **k)
        t0 = time.perf_counter()
        try:
            return orig(self, query, *a, **k)
        finally:
            STATS[f"{name}: {normalise(query)}"].append((time.perf_counter() - t0) * 1e3)

    setattr(cls, name, timed)


def _wrap_copy() -> None:
    orig = psycopg.Cursor.copy

    @contextmanager
    def timed(self: Any, statement: Any, *a: Any, **k: Any) -> Iterator[Any]:
        t0 = time.perf_counter()
        with orig(self, statement, *a, **k) as cp:
            yield cp
        if RECORDING[0]:
            STATS[f"copy: {normalise(statement)}"].append((time.perf_counter() - t0) * 1e3)

    psycopg.Cursor.copy = timed  # type: ignore[method-assign]


def _wrap_commit() -> None:
    """Time the COMMIT (psycopg's Transaction exit, not a cursor statement)."""
    orig = psycopg.Transaction.__exit__

    def timed(self: Any, *a: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return orig(self, *a)
        finally:
            if RECORDING[0]:
                STATS["commit: COMMIT (transaction block exit)"].append((time.perf_counter() - t0) * 1e3)

    psycopg.Transaction.__exit__ = timed  # type: ignore[method-assign]


_wrap_commit()
_wrap(psycopg.Cursor, "execute")
_wrap(psycopg.Cursor, "executemany")
_wrap_copy()


SUITE = Path(__file__).resolve().parent.parent / "tests" / "data" / "supersession" / "positive.jsonl"


def stream(kind: str, n: int) -> list[str]:
    """``facts``: ``n`` distinct synthetic facts; ``updates``: the positive supersession
    suite's (old, new) pairs in order, repeated up to ``n`` texts (each new one
    supersedes its old one when inference is on)."""
    if kind == "facts":
        return data.make_dataset(n, 1).texts
    pairs = [json.loads(x) for x in SUITE.read_text().splitlines() if x.strip()]
    texts = [p[k] for p in pairs for k in ("old", "new")]
    return (texts * (n // len(texts) + 1))[:n]


def profile(dsn: str, n: int, warm: int, consolidate: bool, subjects: bool,
            kind: str = "facts") -> dict[str, Any]:
    """Run ``n`` writes (``warm`` of them uncounted) and return the per-statement table."""
    facts = stream(kind, n)
    kw: dict[str, Any] = {"consolidate": consolidate}
    if not subjects:
        kw["subjects"] = None
    with open_fabric(dsn, **kw) as fab:
        notes = fab.scope("profile")
        totals = []
        for i, text in enumerate(facts):
            if kind == "updates" and i % 2 == 0:
                notes = fab.scope(f"profile-{i}")  # one scope per (old, new) pair
            counted = i >= warm
            RECORDING[0] = counted
            t0 = time.perf_counter()
            notes.remember(kind="fact", content=text)
            if counted:
                totals.append((time.perf_counter() - t0) * 1e3)
        RECORDING[0] = False
    writes = len(totals)
    rows = sorted(({"statement": s, "calls_per_write": len(v) / writes, "ms_per_write": sum(v) / writes}
                   for s, v in STATS.items()), key=lambda r: -r["ms_per_write"])
    sql_ms = sum(r["ms_per_write"] for r in rows)
    total_ms = sum(totals) / writes
    totals.sort()
    return {"writes": writes, "stream": kind, "consolidate": consolidate, "subjects": subjects,
            "write_mean_ms": total_ms, "write_p50_ms": totals[writes // 2],
            "sql_ms_per_write": sql_ms, "python_ms_per_write": total_ms - sql_ms,
            "statements_per_write": sum(r["calls_per_write"] for r in rows), "statements": rows}


def render(r: dict[str, Any]) -> str:
    out = [f"# one remember(): stream={r['stream']} consolidate={r['consolidate']} subjects={r['subjects']},"
           f" {r['writes']} writes; mean {r['write_mean_ms']:.3f} ms, p50 {r['write_p50_ms']:.3f} ms", "",
           "| ms/write | calls/write | statement |", "|---:|---:|---|"]
    for s in r["statements"]:
        out.append(f"| {s['ms_per_write']:.3f} | {s['calls_per_write']:.2f} | `{s['statement']}` |")
    out += ["", f"SQL {r['sql_ms_per_write']:.3f} ms in {r['statements_per_write']:.1f} statements;"
            f" Python (everything else) {r['python_ms_per_write']:.3f} ms per write"]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--warm", type=int, default=50)
    ap.add_argument("--consolidate", action="store_true")
    ap.add_argument("--subjects", action="store_true", help="subject inference on (default off)")
    ap.add_argument("--stream", choices=("facts", "updates"), default="facts")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    server = None
    dsn = a.dsn
    if dsn is None:
        from memfabric.adapters.postgres.embedded import EmbeddedPostgres
        server = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="mf-profile-")) / "pg")
        dsn = server.dsn
    try:
        r = profile(dsn, a.n + a.warm, a.warm, a.consolidate, a.subjects, a.stream)
    finally:
        if server is not None:
            server.close()
    print(render(r))
    if a.json:
        Path(a.json).write_text(json.dumps(r, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
