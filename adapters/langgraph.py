"""LangGraph ``BaseStore`` on memfabric (optional extra ``langgraph``): see ``docs/langgraph.md``.

``MemfabricStore(fabric)`` maps a namespace of 1-3 labels onto a scope
``(tenant, resource?, thread?)`` and an item onto ``fact`` notes of that scope:

- version ``n`` of an item is the note whose id is blake2b (6 bytes, 12 hex) of
  ``[namespace, key, n]``; a put writes version ``n + 1`` superseding the live version
  ``n`` (or the next free version when the key has none), so every version is in the
  log and all share the subject ``lg:`` + blake2b(namespace, key).
- concurrency (issue 26): a put writes on the recall index's view of the live version;
  the write's unit of work checks, under the scope's lock, that the version is free and
  the one it supersedes is still current (a compare-and-set), and a put that loses the
  race to another writer of the key reads the live version from the log and retries:
  the last write to commit wins and a key has at most one live version.
- content: the value as JSON (sorted keys) — what search matches; context: JSON
  ``{"key", "created_at", "gen"}``; both sealed with the note's key.
- tags: ``lg:item``; per top-level scalar field a keyed hash ``lg:f:`` + 32 hex of
  HMAC-SHA256 (fabric secret) of ``[field, value]`` (issue 28: never the value itself),
  so equality filters run in the recall / listing SQL; ``lg:noindex`` for
  ``index=False``; ``lg:wide`` when a value has more scalar fields than tags allow.
- delete: every version tombstoned with crypto-shredding.
- ``ttl`` (minutes, finite, > 0): the note's ``valid_to``; expired items are neither
  got, listed nor found.
Writes bypass consolidation (items never fold or supersede across keys).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterable, Iterator
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
from langgraph.store.memory import _does_match

from memfabric.domain.errors import (
    ConflictError,
    NoteExistsError,
    NoteForgottenError,
    NoteNotFoundError,
    SupersessionError,
)
from memfabric.adapters.langgraph_access import Access, GovernedOps, plain
from memfabric.adapters.langgraph_values import (
    FIELD_TAG_PREFIX,
    MAX_DEPTH,
    MAX_FIELD_TAGS,
    MAX_TTL_MINUTES,
    WIDE_TAG,
    ItemFilter,
    check_labels,
    namespace_of,
    scope_of,
    field_tags,
    checked_ttl,
    field_tag,
    value_json,
)
from memfabric.domain.access import Governor
from memfabric.domain.inputs import RecallInput
from memfabric.domain.note import Note, note_uuid
from memfabric.domain.ports import Candidate, ListQuery, NoteFilter
from memfabric.domain.scope import Scope

__all__ = [  # the values' names, importable from here as before they moved
    "FIELD_TAG_PREFIX", "ITEM_TAG", "MAX_DEPTH", "MAX_FIELD_TAGS", "MAX_RECALL", "MAX_TTL_MINUTES",
    "NOINDEX_TAG", "WIDE_TAG", "ItemFilter", "MemfabricStore", "checked_ttl", "field_tag", "field_tags",
    "namespace_of", "note_id_for", "scope_of", "subject_for", "value_json",
]

ITEM_TAG = "lg:item"
"""Tag every store note carries."""
NOINDEX_TAG = "lg:noindex"
"""Tag of an item put with ``index=False``: never returned by a query search."""
MAX_RECALL = 1000
"""Most recall candidates a query search asks one scope for (``RecallInput.top_k``)."""

_KINDS: tuple[Literal["fact"]] = ("fact",)
_ATTEMPTS = 200
_RACES = (NoteExistsError, SupersessionError, NoteForgottenError, NoteNotFoundError, ConflictError)


def _hash(parts: Any, size: int) -> str:
    raw = json.dumps(parts, ensure_ascii=False, separators=(",", ":")).encode()
    return hashlib.blake2b(raw, digest_size=size).hexdigest()


def note_id_for(namespace: tuple[str, ...], key: str, generation: int = 0) -> str:
    """The deterministic 12-hex note id of version ``generation`` of an item."""
    return _hash([list(namespace), key, generation], 6)


def subject_for(namespace: tuple[str, ...], key: str) -> str:
    """The subject shared by every version of an item."""
    return "lg:" + _hash([list(namespace), key], 16)


# ------------------------------------------------------------------- items
def _parsed(content: str | None, context: str | None) -> tuple[str, dict[str, Any], datetime, int] | None:
    """``(key, value, created_at, gen)`` of a store note, or ``None`` for a note tagged
    ``lg:item`` that a store did not write (issue 28: skipped, never an error)."""
    try:
        meta = json.loads(context or "")
        value = json.loads(content or "")
        created = datetime.fromisoformat(meta["created_at"]).astimezone(timezone.utc)
        key, gen = meta["key"], int(meta["gen"])
    except (TypeError, ValueError, KeyError, AttributeError):
        return None
    if not isinstance(value, dict) or not isinstance(key, str):
        return None
    return key, value, created, gen


def _generation(cand: Candidate) -> int:
    parsed = _parsed(cand.fields["content"], cand.fields["context"])
    return parsed[3] if parsed is not None else -1


def _utc(at: datetime) -> datetime:
    return at.astimezone(timezone.utc)


class MemfabricStore(BaseStore):
    """A LangGraph store on a memfabric fabric (``Fabric`` or an in-memory fabric)."""

    supports_ttl: bool = True

    def __init__(self, fabric: Any, *, requested_by: str = "langgraph", principal: str | None = None) -> None:
        """``requested_by``: who the tombstones of a delete name. ``principal`` (issue
        33, default ``None``: no checks, no access log): every operation is a call of
        that principal, checked against its memory profile with the profile's rule in
        the store's query and recorded once in the access log
        (:mod:`memfabric.adapters.langgraph_access`); ``PrincipalNotFoundError`` when
        the fabric has no principal registry or ``principal`` was never defined."""
        self.fabric = fabric
        self.service = fabric.service
        self.requested_by = requested_by
        self.governor = Governor(self.service.access, principal) if principal is not None else None
        """The principal's governed calls (``None``: no principal)."""

    # ------------------------------------------------------------------ batch
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order. With a principal each op is one governed call and a
        write the profile refuses refuses the batch before any op runs."""
        ops = list(ops)
        if self.governor is None:
            return [self._apply(op, plain)[0] for op in ops]
        governed = GovernedOps(self.governor, self._apply)
        governed.check_writes(ops)
        return [governed.run(op) for op in ops]

    def _apply(self, op: Op, access: Access) -> tuple[Result, list[str]]:
        """The result of ``op`` and the ids of the notes it returned or wrote; every
        read from a scope carries ``access(scope)`` in its query."""
        if isinstance(op, GetOp):
            found = self._get(op.namespace, op.key, access)
            return (None, []) if found is None else (found[0], [found[1]])
        if isinstance(op, PutOp):
            return None, self._put(op, access)
        if isinstance(op, SearchOp):
            pairs = self._search(op, access)
            return [item for item, _ in pairs], [note_id for _, note_id in pairs]
        if isinstance(op, ListNamespacesOp):
            return self._namespaces(op, access), []
        raise NotImplementedError(f"unknown store operation {type(op).__name__}")

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    def _hmac(self, text: str) -> str:
        return str(self.service.store.content_hmac(text))

    # ------------------------------------------------------------------ items
    def _current(self, namespace: tuple[str, ...], key: str, access: Access) -> Candidate | None:
        """The live, valid version of an item from the recall index (``None``: none);
        of several (a store written before issue 26 could leave them), the newest."""
        scope = scope_of(namespace)
        query = ListQuery(scope=scope, kinds=_KINDS,
                          filters=NoteFilter(tags=(ITEM_TAG,), subject=subject_for(namespace, key),
                                             access=access(scope)),
                          valid_at=datetime.now(timezone.utc),
                          require_consent=self.service.require_consent)
        rows = self.service.store.list_notes(query, after=None, limit=16)
        return max(rows, key=_generation, default=None)

    def _item(self, cand: Candidate, cls: type[Item] = Item, **extra: Any) -> Item | None:
        f = cand.fields
        parsed = _parsed(f["content"], f["context"])
        if parsed is None:
            return None
        key, value, created, _ = parsed
        ns = namespace_of(Scope(tenant_id=f["tenant_id"], resource_id=f["resource_id"] or None,
                                thread_id=f["thread_id"] or None))
        return cls(namespace=ns, key=key, value=value, created_at=created,
                   updated_at=_utc(f["ingested_at"]), **extra)

    def _get(self, namespace: tuple[str, ...], key: str, access: Access) -> tuple[Item, str] | None:
        """``(item, id of the note holding it)``, or ``None``."""
        cand = self._current(namespace, key, access)
        item = None if cand is None else self._item(cand)
        return None if item is None or cand is None else (item, cand.note_id)

    def _head(self, scope: Scope, namespace: tuple[str, ...], key: str, gen: int) -> tuple[int, Note | None]:
        """From version ``gen`` on, in the log, up to the last version written:
        ``(n, note)`` when that last version ``n`` is live and current, else ``(n,
        None)`` for the first version no note has (the key was deleted or never put)."""
        last: tuple[int, Note] | None = None
        while (note := self.service.store.load(note_uuid(scope, note_id_for(namespace, key, gen)))) is not None:
            last = (gen, note)
            gen += 1
        if last is not None and last[1].live and last[1].superseded_by is None:
            return last
        return gen, None

    def _put(self, op: PutOp, access: Access) -> list[str]:
        """Write the next version of the item (see the module doc): first on the recall
        index's view of the live version; when another writer moved the key first (or
        the index is behind), on the log's, read again before every retry. Returns the
        id written (a delete: the ids forgotten)."""
        if op.value is None:
            return self._delete(op.namespace, op.key, access)
        scope = scope_of(op.namespace)
        value, content = value_json(op.value)
        ttl = checked_ttl(op.ttl)
        tags = [ITEM_TAG, *field_tags(self._hmac, value), *([NOINDEX_TAG] if op.index is False else [])]
        current = self._current(op.namespace, op.key, access)
        parsed = _parsed(current.fields["content"], current.fields["context"]) if current is not None else None
        # (version to write, note it supersedes, created_at) as the index sees the key
        target: tuple[int, str | None, str | None] = (
            (parsed[3] + 1, current.note_id, parsed[2].isoformat()) if parsed is not None and current is not None
            else (0, None, None))
        for _ in range(_ATTEMPTS):
            if self._write(scope, op, target, content, tags, ttl):
                return [note_id_for(op.namespace, op.key, target[0])]
            target = self._target(scope, op.namespace, op.key, target[0] - 1 if target[1] else target[0])
        raise ConflictError(f"key {op.key!r}: {_ATTEMPTS} concurrent writers won first; retry")

    def _target(self, scope: Scope, namespace: tuple[str, ...], key: str,
                gen: int) -> tuple[int, str | None, str | None]:
        """``(version to write, note it supersedes, created_at)`` from the log
        (:meth:`_head` from version ``gen``)."""
        gen, head = self._head(scope, namespace, key, max(0, gen))
        if head is None:
            return gen, None, None
        meta = _parsed(head.content, head.context)
        return gen + 1, head.note_id, meta[2].isoformat() if meta is not None else None

    def _write(self, scope: Scope, op: PutOp, target: tuple[int, str | None, str | None], content: str,
               tags: list[str], ttl: float | None) -> bool:
        """Remember version ``target``; ``False`` when another writer of the key
        committed first (the version was taken, or the one it supersedes changed)."""
        gen, supersedes, created = target
        now = datetime.now(timezone.utc)
        fields: dict[str, Any] = {
            "kind": "fact", "content": content, "subject": subject_for(op.namespace, op.key),
            "tags": tags, "id": note_id_for(op.namespace, op.key, gen),
            "context": json.dumps({"key": op.key, "created_at": created or now.isoformat(), "gen": gen}),
            # an item belongs to its namespace alone (issue 16's resource default would
            # show it to sibling namespaces)
            "consent": {"visibility": "thread"},
        }
        if supersedes is not None:
            fields["supersedes"] = supersedes
        if ttl is not None:
            fields["valid_to"] = now + timedelta(minutes=ttl)
        item = self.service.validate_remember(fields)
        try:
            self.service.remember(scope, item, consolidate=False)
        except _RACES:
            return False
        return True

    def _delete(self, namespace: tuple[str, ...], key: str, access: Access) -> list[str]:
        """Forget every version of the item; returns their ids."""
        scope = scope_of(namespace)
        query = ListQuery(scope=scope, kinds=_KINDS, include_superseded=True,
                          filters=NoteFilter(tags=(ITEM_TAG,), subject=subject_for(namespace, key),
                                             access=access(scope)),
                          require_consent=self.service.require_consent)
        found = self.service.store.list_notes(query, after=None, limit=10_000)
        for cand in found:
            self.service.forget(scope, cand.note_id, hold=False, requested_by=self.requested_by)
        return [cand.note_id for cand in found]

    # ----------------------------------------------------------------- search
    def _scopes_under(self, prefix: tuple[str, ...]) -> list[Scope]:
        """The scopes of the namespaces holding items that start with ``prefix``."""
        if len(prefix) == 3:
            return [scope_of(prefix)]
        found = self.service.store.scopes_with(tenant_id=prefix[0] if prefix else None, tags=[ITEM_TAG])
        return [s for s in found if namespace_of(s)[: len(prefix)] == prefix]

    def _sql_tags(self, prefix: tuple[str, ...], flt: ItemFilter) -> tuple[str, ...]:
        """``lg:item`` plus the filter's field hashes, unless an item under ``prefix``
        is too wide to carry them all (then the filter runs in Python only)."""
        if not flt.tags:
            return (ITEM_TAG,)
        scope = scope_of(prefix) if prefix else None
        wide = (self.service.store.count_notes(ListQuery(scope=scope, kinds=_KINDS, prefix=True,
                                                         filters=NoteFilter(tags=(ITEM_TAG, WIDE_TAG))))
                if scope is not None else
                len(self.service.store.scopes_with(tenant_id=None, tags=[ITEM_TAG, WIDE_TAG])))
        return (ITEM_TAG,) if wide else (ITEM_TAG, *flt.tags)

    def _search(self, op: SearchOp, access: Access) -> list[tuple[SearchItem, str]]:
        """``(item, its note id)`` of the page ``op`` asks for."""
        prefix = tuple(op.namespace_prefix)
        if len(prefix) > 3:
            return []
        check_labels(prefix)
        flt = ItemFilter.of(op.filter, self._hmac)
        want = max(0, op.offset) + max(0, op.limit)
        if want == 0:
            return []
        tags = self._sql_tags(prefix, flt)
        if op.query:
            found = self._query_search(prefix, op.query, tags, flt, want, access)
        else:
            found = list(self._listed(prefix, tags, flt, want, access))
        return found[max(0, op.offset): want]

    def _query_search(self, prefix: tuple[str, ...], query: str, tags: tuple[str, ...],
                      flt: ItemFilter, want: int, access: Access) -> list[tuple[SearchItem, str]]:
        """Recall in every namespace under ``prefix``, merged by score (highest first)."""
        found: list[tuple[SearchItem, str]] = []
        for scope in self._scopes_under(prefix):
            found += self._recalled(scope, query, tags, flt, want, access)
        found.sort(key=lambda pair: -(pair[0].score or 0.0))
        return found[:want]

    def _recalled(self, scope: Scope, query: str, tags: tuple[str, ...], flt: ItemFilter,
                  want: int, access: Access) -> list[tuple[SearchItem, str]]:
        """Up to ``want`` items of exactly ``scope`` a recall of ``query`` finds that pass
        ``flt``: asking for 4x more candidates until enough pass or recall has no more
        (at most :data:`MAX_RECALL`)."""
        top_k = min(MAX_RECALL, max(10, 2 * want))
        while True:
            res = self.service.recall(scope, RecallInput(query=query, kinds=_KINDS, top_k=top_k,
                                                         tags=list(tags), expand_links=False),
                                      access=access(scope))
            out: list[tuple[SearchItem, str]] = []
            for hit, ex in zip(res.hits, res.explain, strict=True):
                if hit.scope != scope or NOINDEX_TAG in hit.tags or ITEM_TAG not in hit.tags:
                    continue
                parsed = _parsed(hit.content, hit.context)
                if parsed is not None and flt.admits(parsed[1]):
                    key, value, created, _ = parsed
                    out.append((SearchItem(namespace=namespace_of(scope), key=key, value=value,
                                           created_at=created, updated_at=_utc(hit.ingested_at),
                                           score=ex.score), hit.id))
            if len(out) >= want or len(res.hits) < top_k or top_k >= MAX_RECALL:
                return out[:want]
            top_k = min(MAX_RECALL, top_k * 4)

    def _listed(self, prefix: tuple[str, ...], tags: tuple[str, ...], flt: ItemFilter,
                want: int, access: Access) -> Iterator[tuple[SearchItem, str]]:
        """Up to ``want`` valid items under ``prefix`` passing ``flt``, oldest first
        per tenant (keyset pages of 200)."""
        tenants = ([prefix[0]] if prefix else
                   sorted({s.tenant_id for s in self.service.store.scopes_with(tenant_id=None, tags=[ITEM_TAG])}))
        now = datetime.now(timezone.utc)
        n = 0
        for tenant in tenants:
            scope = scope_of(prefix) if prefix else Scope(tenant_id=tenant)
            query = ListQuery(scope=scope, kinds=_KINDS, prefix=True, valid_at=now,
                              filters=NoteFilter(tags=tags, access=access(scope)),
                              require_consent=self.service.require_consent)
            after = None
            while True:
                rows = self.service.store.list_notes(query, after=after, limit=200)
                for cand in rows:
                    item = self._item(cand, SearchItem)
                    if isinstance(item, SearchItem) and flt.admits(item.value):
                        yield item, cand.note_id
                        n += 1
                        if n >= want:
                            return
                if len(rows) < 200:
                    break
                after = (rows[-1].fields["ingested_at"], rows[-1].aggregate_id)

    def _namespaces(self, op: ListNamespacesOp, access: Access) -> list[tuple[str, ...]]:
        """Namespaces holding at least one valid (unexpired) item (readable: counted
        with ``access``)."""
        now = datetime.now(timezone.utc)
        spaces = [namespace_of(s) for s in self.service.store.scopes_with(tenant_id=None, tags=[ITEM_TAG])]
        if op.match_conditions:
            spaces = [ns for ns in spaces if all(_does_match(c, ns) for c in op.match_conditions)]
        spaces = [ns for ns in spaces if self.service.store.count_notes(ListQuery(
            scope=scope_of(ns), kinds=_KINDS, valid_at=now,
            filters=NoteFilter(tags=(ITEM_TAG,), access=access(scope_of(ns))),
            require_consent=self.service.require_consent))]
        if op.max_depth is not None:
            spaces = sorted({ns[: op.max_depth] for ns in spaces})
        else:
            spaces = sorted(set(spaces))
        return spaces[op.offset: op.offset + op.limit]
