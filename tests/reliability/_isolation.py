"""Isolation reads (issue 28's attack figures), shared by ``tests/reliability`` (reduced
size) and ``scripts/attack.py`` (full size).

:func:`seed` writes, in every scope of :data:`TENANTS` x :data:`RESOURCES` x
:data:`THREADS`, notes of each visibility (``thread``, ``resource``, ``tenant``), one
note that supersedes a thread-only note with a tenant-visible successor, and a short
conversation; each note's and entry's text carries a canary word of its own
(``cx<tenant><n>q``). :func:`isolation_reads` then reads ``reads`` times from readers in
every scope (thread, resource and tenant level) through ``recall``, ``list``, ``get``,
``history``, ``lineage`` (of every seeded id, visible or not) and
``search_conversation``, and checks each result's ``repr``:

- an id leak: a seeded id the reader may not see (the visibility model :func:`visible`)
  appears anywhere in the result (a ``get``/``history``/``lineage`` of such an id must
  raise a ``FabricError``: then nothing is returned);
- a content leak: a canary of a note or entry the reader may not see appears;
- cross-tenant: either of them belongs to another tenant (counted in both).

``failures``: an untyped error, or ``list`` not giving exactly the reader's visible live
notes (so the checks never pass on empty results).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

from memfabric.adapters import open_fabric
from memfabric.domain.errors import FabricError

TENANTS = ("ta", "tb", "tc")
RESOURCES = ("r1", "r2")
THREADS = ("h1", "h2")
VISIBILITIES = ("thread", "resource", "tenant")
HEX12 = re.compile(r"[0-9a-f]{12}")
CANARY = re.compile(r"cx(t[a-z])\d+q")
Where = tuple[str, str, str]


@dataclass(frozen=True)
class Item:
    """One seeded note or ledger entry (``entry``): its scope, visibility, canary, and
    whether it is a live note that ``list`` shows (not superseded, not an entry)."""

    tenant: str
    resource: str
    thread: str
    visibility: str
    canary: str
    listed: bool
    entry: bool = False


def visible(item: Item, reader: Where) -> bool:
    """Whether a reader at ``reader`` = (tenant, resource or "", thread or "") may see
    ``item`` (the rule of tests/reliability/test_attacks.py's model: same tenant, and the
    same scope, or tenant-visible, or resource-visible within the same resource)."""
    t, r, th = reader
    if item.tenant != t:
        return False
    return ((item.resource, item.thread) == (r, th) or item.visibility == "tenant"
            or (item.visibility == "resource" and item.resource == r and r != ""))


def readers() -> list[Where]:
    """Every thread, resource and tenant scope of the seeded tenants."""
    out: list[Where] = [(t, "", "") for t in TENANTS]
    out += [(t, r, "") for t in TENANTS for r in RESOURCES]
    out += [(t, r, th) for t in TENANTS for r in RESOURCES for th in THREADS]
    return out


def seed(fabric: Any, per_visibility: int = 2) -> dict[str, Item]:
    """Write the notes and conversations of the module doc; returns id -> :class:`Item`."""
    model: dict[str, Item] = {}
    n = 0
    for t in TENANTS:
        for r in RESOURCES:
            for th in THREADS:
                notes = fabric.scope(t, r, th)
                for vis in VISIBILITIES:
                    for _ in range(per_visibility):
                        n += 1
                        canary = f"cx{t}{n}q"
                        m = notes.remember(kind="fact", content=f"{canary} shared topic {vis} item{n}",
                                           consent={"visibility": vis}, consolidate=False)
                        model[m.id] = Item(t, r, th, vis, canary, True)
                n += 2
                old = notes.remember(kind="fact", content=f"cx{t}{n - 1}q shared topic first value",
                                     consent={"visibility": "thread"}, consolidate=False)
                new = notes.remember(kind="fact", content=f"cx{t}{n}q shared topic second value",
                                     consent={"visibility": "tenant"}, supersedes=old.id, consolidate=False)
                model[old.id] = Item(t, r, th, "thread", f"cx{t}{n - 1}q", False)
                model[new.id] = Item(t, r, th, "tenant", f"cx{t}{n}q", True)
                for e in notes.conversation().extend(
                        [{"role": "user", "text": f"cx{t}{n + i}q talk about the shared topic"} for i in (1, 2)]):
                    model[e.id] = Item(t, r, th, "thread", e.text.split()[0], False, entry=True)
                n += 2
    return model


def _operations(model: dict[str, Item]) -> list[tuple[Where, str, str]]:
    """One full round of (reader, operation, argument)."""
    ops: list[tuple[Where, str, str]] = []
    note_ids = sorted(i for i, it in model.items() if not it.entry)
    for reader in readers():
        ops += [(reader, "recall", "shared topic"), (reader, "list", "")]
        if reader[2]:
            ops.append((reader, "search_conversation", "talk shared topic"))
        ops += [(reader, op, i) for i in note_ids for op in ("get", "history", "lineage")]
    return ops


def _read(notes: Any, op: str, arg: str) -> Any:
    if op == "recall":
        return notes.recall(arg, top_k=50)
    if op == "list":
        return notes.list(limit=1000)
    if op == "search_conversation":
        return notes.search_conversation(arg, top_k=20)
    return getattr(notes, op)(arg)


def check_result(text: str, reader: Where, model: dict[str, Item], canaries: dict[str, Item]) -> dict[str, int]:
    """The leaks in one result's text: ``ids`` (seeded ids the reader may not see),
    ``content`` (canaries of such items), ``cross_tenant`` (either, of another tenant)."""
    out = {"ids": 0, "content": 0, "cross_tenant": 0}
    for nid in set(HEX12.findall(text)):
        item = model.get(nid)
        if item is not None and not visible(item, reader):
            out["ids"] += 1
            out["cross_tenant"] += item.tenant != reader[0]
    for word in {m.group(0) for m in CANARY.finditer(text)}:
        item = canaries.get(word)
        if item is not None and not visible(item, reader):
            out["content"] += 1
            out["cross_tenant"] += item.tenant != reader[0]
    return out


def run_reads(dsn: str, model: dict[str, Item], reads: int, seed_: int = 28) -> dict[str, int]:
    """``reads`` reads (rounds of :func:`_operations`, shuffled) on ``dsn``; the figures
    of the module doc."""
    canaries = {it.canary: it for it in model.values()}
    notes_model = {i: it for i, it in model.items() if not it.entry}
    ops = _operations(model)
    rng = random.Random(seed_)
    fig = {"attempts": 0, "failures": 0, "leaks": 0, "lost": 0, "ids": 0, "content": 0, "cross_tenant": 0}
    with open_fabric(dsn) as fabric:
        handles = {r: fabric.scope(r[0], r[1] or None, r[2] or None) for r in readers()}
        while fig["attempts"] < reads:
            rng.shuffle(ops)
            for reader, op, arg in ops[: reads - fig["attempts"]]:
                fig["attempts"] += 1
                try:
                    result = _read(handles[reader], op, arg)
                except FabricError:
                    if op in ("get", "history", "lineage") and visible(model[arg], reader):
                        fig["failures"] += 1  # a visible note must be readable
                    continue
                except Exception:  # noqa: BLE001 - an untyped error is a failure
                    fig["failures"] += 1
                    continue
                if op == "list":
                    want = {i for i, it in notes_model.items() if it.listed and visible(it, reader)}
                    fig["failures"] += {n.id for n in result.items} != want
                leaks = check_result(repr(result), reader, model, canaries)
                for k, v in leaks.items():
                    fig[k] += v
    fig["leaks"] = fig["ids"] + fig["content"]
    return fig


def isolation_reads(dsn: str, reads: int = 2000, per_visibility: int = 2) -> dict[str, int]:
    """Seed (:func:`seed`) and read ``reads`` times (:func:`run_reads`); returns
    attempts (reads), failures, leaks (id + content leaks), lost (0) and the parts
    ``ids``, ``content``, ``cross_tenant``."""
    with open_fabric(dsn) as fabric:
        model = seed(fabric, per_visibility)
    return run_reads(dsn, model, reads)
