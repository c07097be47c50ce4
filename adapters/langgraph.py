"""LangGraph ``BaseStore`` on memfabric (optional extra ``langgraph``): see ``docs/langgraph.md``.

``MemfabricStore(fabric)`` maps a namespace of 1-3 labels onto a scope
``(tenant, resource?, thread?)`` and an item onto ``fact`` notes of that scope:

- note id of the first version: blake2b (6 bytes, 12 hex) of ``[namespace, key, 0]``;
  a put of an existing key writes a new note (generation ``n``: the same hash of
  ``[namespace, key, n]``) that supersedes the previous one, so every version is in
  the log; all versions share the subject ``lg:`` + blake2b(namespace, key).
- content: the value as JSON (sorted keys) — what search matches; context: JSON
  ``{"key", "created_at", "gen"}``; tags: ``lg:item`` and ``FIELD=JSON`` for every
  top-level scalar field (so equality filters run in the recall / listing SQL).
- delete: every version tombstoned with crypto-shredding.
- ``ttl`` (minutes): the note's ``valid_to``; expired items are neither got nor found.
Writes bypass consolidation (items never fold or supersede across keys).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)
from langgraph.store.memory import _compare_values, _does_match

from memfabric.domain.errors import NamespaceError, NoteExistsError
from memfabric.domain.inputs import RecallInput
from memfabric.domain.ports import Candidate, ListQuery, NoteFilter
from memfabric.domain.scope import SCOPE_ID_RE, Scope

ITEM_TAG = "lg:item"
"""Tag every store note carries."""

_KINDS: tuple[Literal["fact"]] = ("fact",)
_MAX_GEN = 100_000


def _hash(parts: Any, size: int) -> str:
    raw = json.dumps(parts, ensure_ascii=False, separators=(",", ":")).encode()
    return hashlib.blake2b(raw, digest_size=size).hexdigest()


def note_id_for(namespace: tuple[str, ...], key: str, generation: int = 0) -> str:
    """The deterministic 12-hex note id of version ``generation`` of an item."""
    return _hash([list(namespace), key, generation], 6)


def subject_for(namespace: tuple[str, ...], key: str) -> str:
    """The subject shared by every version of an item."""
    return "lg:" + _hash([list(namespace), key], 16)


def scope_of(namespace: tuple[str, ...]) -> Scope:
    """The scope of a namespace of 1-3 scope ids (``NamespaceError`` otherwise)."""
    if not 1 <= len(namespace) <= 3:
        raise NamespaceError(f"namespace {namespace!r}: 1 to 3 labels (tenant, resource, thread)")
    for label in namespace:
        if not isinstance(label, str) or not SCOPE_ID_RE.match(label):
            raise NamespaceError(f"namespace label {label!r}: 1-128 characters of [A-Za-z0-9._:@-]")
    rest: list[str | None] = [*namespace[1:], None, None]
    return Scope(tenant_id=namespace[0], resource_id=rest[0], thread_id=rest[1])


def namespace_of(scope: Scope) -> tuple[str, ...]:
    return tuple(p for p in (scope.tenant_id, scope.resource_id, scope.thread_id) if p is not None)


def value_tags(value: Any) -> list[str]:
    """``FIELD=JSON`` tags of the top-level scalar fields (at most 63, each ≤ 512 chars)."""
    out: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, str | int | float | bool) or v is None:
                tag = f"{k}={json.dumps(v, ensure_ascii=False)}"
                if len(tag) <= 512 and tag.strip() and "\x00" not in tag and len(out) < 63:
                    out.append(tag)
    return out


def filter_tags(filt: dict[str, Any] | None) -> list[str]:
    """The tags an equality filter implies (operator filters are applied in Python)."""
    if not filt:
        return []
    return [t for t in value_tags({k: v for k, v in filt.items() if not isinstance(v, dict)})]


class MemfabricStore(BaseStore):
    """A LangGraph store on a memfabric fabric (``Fabric`` or an in-memory fabric)."""

    supports_ttl: bool = True

    def __init__(self, fabric: Any, *, requested_by: str = "langgraph") -> None:
        self.fabric = fabric
        self.service = fabric.service
        self.requested_by = requested_by

    # ------------------------------------------------------------------ batch
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        out: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                out.append(self._get(op.namespace, op.key))
            elif isinstance(op, PutOp):
                self._put(op)
                out.append(None)
            elif isinstance(op, SearchOp):
                out.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                out.append(self._namespaces(op))
            else:
                raise NotImplementedError(f"unknown store operation {type(op).__name__}")
        return out

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    # ------------------------------------------------------------------ items
    def _current(self, namespace: tuple[str, ...], key: str) -> Candidate | None:
        query = ListQuery(scope=scope_of(namespace), kinds=_KINDS,
                          filters=NoteFilter(tags=(ITEM_TAG,), subject=subject_for(namespace, key)),
                          valid_at=datetime.now(timezone.utc),
                          require_consent=self.service.require_consent)
        rows = self.service.store.list_notes(query, after=None, limit=1)
        return rows[0] if rows else None

    def _item(self, cand: Candidate, score: float | None = None, search: bool = False) -> Item:
        f = cand.fields
        meta = json.loads(f["context"])
        ns = namespace_of(Scope(tenant_id=f["tenant_id"], resource_id=f["resource_id"] or None,
                                thread_id=f["thread_id"] or None))
        created = datetime.fromisoformat(meta["created_at"])
        updated = f["ingested_at"]
        value = json.loads(f["content"])
        if search:
            return SearchItem(namespace=ns, key=meta["key"], value=value, created_at=created,
                              updated_at=updated, score=score)
        return Item(namespace=ns, key=meta["key"], value=value, created_at=created, updated_at=updated)

    def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        cand = self._current(namespace, key)
        return None if cand is None else self._item(cand)

    def _put(self, op: PutOp) -> None:
        scope = scope_of(op.namespace)
        if op.value is None:
            self._delete(op.namespace, op.key)
            return
        current = self._current(op.namespace, op.key)
        now = datetime.now(timezone.utc)
        meta = json.loads(current.fields["context"]) if current is not None else None
        created = meta["created_at"] if meta else now.isoformat()
        gen = int(meta["gen"]) + 1 if meta else 0
        value = dict(op.value)
        fields: dict[str, Any] = {
            "kind": "fact", "content": json.dumps(value, sort_keys=True, ensure_ascii=False),
            "subject": subject_for(op.namespace, op.key), "tags": [ITEM_TAG, *value_tags(value)],
            # an item belongs to its namespace alone (issue 16's resource default would
            # show it to sibling namespaces): thread visibility, as before that default
            "consent": {"visibility": "thread"},
        }
        if current is not None:
            fields["supersedes"] = current.note_id
        if op.ttl is not None:
            fields["valid_to"] = now + timedelta(minutes=float(op.ttl))
        while gen < _MAX_GEN:
            fields["id"] = note_id_for(op.namespace, op.key, gen)
            fields["context"] = json.dumps({"key": op.key, "created_at": created, "gen": gen})
            item = self.service.validate_remember(fields)
            try:
                self.service.remember(scope, item, consolidate=False)
                return
            except NoteExistsError:  # a deleted generation: take the next one
                gen += 1
        raise NoteExistsError(f"key {op.key!r}: no free generation")

    def _delete(self, namespace: tuple[str, ...], key: str) -> None:
        scope = scope_of(namespace)
        query = ListQuery(scope=scope, kinds=_KINDS, include_superseded=True,
                          filters=NoteFilter(tags=(ITEM_TAG,), subject=subject_for(namespace, key)),
                          require_consent=self.service.require_consent)
        for cand in self.service.store.list_notes(query, after=None, limit=10_000):
            self.service.forget(scope, cand.note_id, hold=False, requested_by=self.requested_by)

    # ----------------------------------------------------------------- search
    def _matches(self, item: Item, op: SearchOp) -> bool:
        if item.namespace[: len(op.namespace_prefix)] != tuple(op.namespace_prefix):
            return False
        return all(_compare_values(item.value.get(k), v) for k, v in (op.filter or {}).items())

    def _search(self, op: SearchOp) -> list[SearchItem]:
        tags = (ITEM_TAG, *filter_tags(op.filter))
        want = max(0, op.offset) + max(0, op.limit)
        found: list[SearchItem] = []
        if op.query:
            scope = scope_of(tuple(op.namespace_prefix))
            recall = RecallInput(query=op.query, kinds=_KINDS, top_k=min(1000, max(1, want)),
                                 tags=list(tags))
            res = self.service.recall(scope, recall)
            for hit, ex in zip(res.hits, res.explain, strict=True):
                item = self._from_note(hit, ex.score)
                if item is not None and self._matches(item, op):
                    found.append(item)
            return found[op.offset: op.offset + op.limit]
        prefix = tuple(op.namespace_prefix)
        tenants = ([prefix[0]] if prefix else
                   sorted({s.tenant_id for s in self.service.store.scopes_with(tenant_id=None, tags=[ITEM_TAG])}))
        now = datetime.now(timezone.utc)
        for tenant in tenants:
            scope = scope_of(prefix) if prefix else Scope(tenant_id=tenant)
            query = ListQuery(scope=scope, kinds=_KINDS, prefix=True, valid_at=now,
                              filters=NoteFilter(tags=tags), require_consent=self.service.require_consent)
            after = None
            while len(found) < want:
                rows = self.service.store.list_notes(query, after=after, limit=200)
                for cand in rows:
                    listed = self._item(cand, search=True)
                    if isinstance(listed, SearchItem) and self._matches(listed, op):
                        found.append(listed)
                if len(rows) < 200:
                    break
                after = (rows[-1].fields["ingested_at"], rows[-1].aggregate_id)
        return found[op.offset: op.offset + op.limit]

    def _from_note(self, note: Any, score: float) -> SearchItem | None:
        if note.context is None or ITEM_TAG not in note.tags:
            return None
        meta = json.loads(note.context)
        return SearchItem(namespace=namespace_of(note.scope), key=meta["key"],
                          value=json.loads(note.content), created_at=datetime.fromisoformat(meta["created_at"]),
                          updated_at=note.ingested_at, score=score)

    def _namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        spaces = [namespace_of(s) for s in self.service.store.scopes_with(tenant_id=None, tags=[ITEM_TAG])]
        if op.match_conditions:
            spaces = [ns for ns in spaces if all(_does_match(c, ns) for c in op.match_conditions)]
        if op.max_depth is not None:
            spaces = sorted({ns[: op.max_depth] for ns in spaces})
        else:
            spaces = sorted(set(spaces))
        return spaces[op.offset: op.offset + op.limit]
