"""A soak (issue 28's attack figures), shared by ``tests/reliability`` (reduced size) and
``scripts/attack.py`` (full size): ``threads`` threads on one fabric in this process and
``procs`` processes (one fabric each) write, recall and forget for ``seconds`` seconds;
then every acknowledged write that no worker forgot must be readable and ``projections
verify`` and ``audit verify`` must be clean. (Facts are resource-visible by default, so
a worker's ``remember`` may fold into the note of another worker of its resource, which
that worker may forget: the ids any worker forgot are left out of the check.)

Every worker writes to its own thread of one of :data:`TENANTS` (workers share tenants
and resources, so their writes contend for the tenant's and the resource's locks) and
reads the tenant through resource-level recall. Operations, at random: ``remember``
(consolidating, so repeats fold and updates supersede), ``remember_many`` of 5,
``recall``, ``list``, ``get`` and ``forget`` of one of its own notes.

Expected typed errors (:data:`EXPECTED`), counted but not failures:
``LockTimeoutError`` (a lock wait past the fabric's ``lock_timeout``, 30 s: nothing
written) and ``NoteForgottenError`` / ``NoteNotFoundError`` (a ``get`` or ``forget`` of
one of its notes that a consolidating write of the same scope folded away or that it
forgot before). ``LockTimeoutError`` includes an ``open_fabric`` that waited past it for
the open lock, which every open holds for its whole duration (about 1 s each with 8
writers on 2 cores: many processes opening at once queue behind each other). Any other
error is a failure.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from typing import Any

from memfabric.adapters import open_fabric
from memfabric.adapters.audit import verify_chain
from memfabric.domain.errors import LockTimeoutError, NoteForgottenError, NoteNotFoundError
from memfabric.projections.rebuild import ProjectionAdmin
from tests.reliability._kills import CTX

TENANTS = ("sa", "sb", "sc", "sd")
EXPECTED = (LockTimeoutError, NoteForgottenError, NoteNotFoundError)
SUBJECTS = ("coffee", "tea", "the office", "the launch", "metric units", "the budget", "berlin", "rust")


def _one(notes: Any, rng: random.Random, mine: list[str], forgotten: set[str], n: int) -> int:
    """One random operation; returns the operations it counts (5 for a bulk write)."""
    roll = rng.random()
    subject = rng.choice(SUBJECTS)
    if roll < 0.35:
        mine.append(notes.remember(kind="fact", content=f"User now prefers {subject} option {n % 7}").id)
    elif roll < 0.45:
        made = notes.remember_many([{"kind": "fact", "content": f"note {n}.{j} about {subject}"} for j in range(5)])
        mine.extend(m.id for m in made)
        return 5
    elif roll < 0.65:
        notes.recall(f"what about {subject}", top_k=5)
    elif roll < 0.75:
        notes.list(limit=20)
    elif roll < 0.85 and mine:
        notes.get(rng.choice(mine))
    elif mine:
        nid = mine.pop(rng.randrange(len(mine)))
        forgotten.add(nid)
        notes.forget(id=nid)
    return 1


def work(fabric: Any, worker: int, seconds: float) -> dict[str, Any]:
    """One worker's loop on ``fabric`` for ``seconds``: ``ops``, ``errors`` (type name ->
    count, expected ones prefixed ``typed:``), ``kept`` (the ids its writes acknowledged),
    ``forgotten`` (the ids it forgot) and ``scope``."""
    rng = random.Random(worker)
    scope = (TENANTS[worker % len(TENANTS)], f"r{worker % 3}", f"w{worker}")
    notes = fabric.scope(*scope)
    mine: list[str] = []
    forgotten: set[str] = set()
    errors: Counter[str] = Counter()
    ops = n = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        n += 1
        try:
            ops += _one(notes, rng, mine, forgotten, n)
        except EXPECTED as exc:
            errors["typed:" + type(exc).__name__] += 1
        except Exception as exc:  # noqa: BLE001 - any other error is a finding
            errors[f"{type(exc).__name__}: {str(exc)[:120]}"] += 1
    return {"ops": ops, "errors": dict(errors), "kept": mine, "forgotten": sorted(forgotten), "scope": scope}


def _process(dsn: str, worker: int, seconds: float, out: Any) -> None:
    """One worker process; a failed open is reported as its error (typed or not)."""
    try:
        with open_fabric(dsn) as fabric:
            out.put(work(fabric, worker, seconds))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, never lost
        kind = ("typed:" if isinstance(exc, EXPECTED) else "") + f"open: {type(exc).__name__}"
        out.put({"ops": 0, "errors": {kind: 1}, "kept": [], "forgotten": [], "scope": ("sa", "r0", "w0")})


def soak(dsn: str, seconds: float = 60.0, threads: int = 16, procs: int = 8) -> dict[str, Any]:
    """The soak of the module doc. Returns attempts (operations), failures (unexpected
    errors, broken verifies), leaks (0), lost (acknowledged notes no worker forgot that
    are not readable), ``typed`` (expected typed errors) and ``errors`` (type -> count)."""
    out = CTX.Queue()
    with open_fabric(dsn):  # tables made once, before the workers race to open
        pass
    ps = [CTX.Process(target=_process, args=(dsn, threads + i, seconds, out)) for i in range(procs)]
    for p in ps:
        p.start()
    results: list[dict[str, Any]] = []
    with open_fabric(dsn, pool_size=4, max_overflow=16) as fabric:
        ts = [threading.Thread(target=lambda w=w: results.append(work(fabric, w, seconds))) for w in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    results += [out.get(timeout=seconds + 300) for _ in ps]
    for p in ps:
        p.join(60)
    return _check(dsn, results)


def _check(dsn: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    errors: Counter[str] = Counter()
    for r in results:
        errors.update(r["errors"])
    typed = sum(v for k, v in errors.items() if k.startswith("typed:"))
    fig: dict[str, Any] = {"attempts": sum(r["ops"] for r in results), "failures": sum(errors.values()) - typed,
                           "leaks": 0, "lost": 0, "typed": typed, "errors": dict(errors)}
    forgotten = {nid for r in results for nid in r["forgotten"]}
    with open_fabric(dsn) as fabric:
        for r in results:
            notes = fabric.scope(*r["scope"])
            for nid in set(r["kept"]) - forgotten:
                try:
                    notes.get(nid)
                except NoteNotFoundError:
                    fig["lost"] += 1
        fig["failures"] += sum(1 for rep in ProjectionAdmin.for_fabric(fabric).verify() if not rep.ok)
        fig["failures"] += not verify_chain(fabric).ok
    return fig
