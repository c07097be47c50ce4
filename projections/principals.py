"""The principals read model (issue 33): profiles and per-note read grants, a pure
function of ``Principal`` aggregate states (:mod:`memfabric.domain.principal`).

- ``mf_principals``: one row per principal (``agent_id``, ``profile`` jsonb, version,
  who changed it last and when);
- ``mf_principal_grants``: one row per ``(principal, note aggregate id)`` with the
  note's tenant. No note id, no content: a forgotten note's grant row names only its
  aggregate id, which no longer has a recall row.

Write side (projected in the writer's transaction): a grant holds from the next read.
Also the SQL a principal's read adds to recall, list and link queries
(:func:`access_condition`, parameters :func:`access_params`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from psycopg import Cursor, sql
from psycopg.types.json import Jsonb

from memfabric.domain.principal import AccessFilter, Principal
from memfabric.projections import tables
from memfabric.projections.base import copy_rows

NAME = "principals"
PRINCIPALS = "mf_principals"
GRANTS = "mf_principal_grants"

PRINCIPAL_COLUMNS = ("aggregate_id", "agent_id", "profile", "version", "updated_at", "updated_by")
_PRINCIPAL_TYPES = ("uuid", "text", "jsonb", "int4", "timestamptz", "text")
GRANT_COLUMNS = ("principal", "aggregate_id", "tenant_id")
_GRANT_TYPES = ("text", "uuid", "text")


def principal_row(p: Principal) -> tuple[Any, ...]:
    return (p.id, p.agent_id, Jsonb(p.profile), int(p.version), p.updated_at or p.created_on,
            p.updated_by)


def grant_rows(p: Principal) -> list[tuple[Any, ...]]:
    from uuid import UUID  # noqa: PLC0415
    return [(p.agent_id, UUID(note), tenant) for note, tenant in sorted(p.grants.items())]


def _principals(aggregates: Iterable[Any]) -> list[Principal]:
    return [a for a in aggregates if isinstance(a, Principal)]


class PrincipalsProjection:
    """The principals read model as a :class:`~memfabric.projections.base.NoteProjection`
    (its ``aggregate_types`` make the engine hand it ``Principal`` aggregates only)."""

    name = NAME
    tables: tuple[str, ...] = (PRINCIPALS, GRANTS)
    write_side = True
    aggregate_types: tuple[type, ...] = (Principal,)

    def create(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        s = table_suffix
        cur.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {t} (aggregate_id uuid PRIMARY KEY, agent_id text NOT NULL UNIQUE,"
            " profile jsonb NOT NULL, version integer NOT NULL, updated_at timestamptz NOT NULL,"
            " updated_by text NOT NULL)").format(t=sql.Identifier(PRINCIPALS + s)))
        cur.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {t} (principal text NOT NULL, aggregate_id uuid NOT NULL,"
            " tenant_id text NOT NULL, PRIMARY KEY (principal, tenant_id, aggregate_id))"
        ).format(t=sql.Identifier(GRANTS + s)))

    def create_indexes(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        """The primary keys are the indexes."""

    def apply(self, cur: Cursor[Any], notes: Iterable[Any]) -> None:
        for p in _principals(notes):
            cur.execute(sql.SQL(
                "INSERT INTO {t} (aggregate_id, agent_id, profile, version, updated_at, updated_by)"
                " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (aggregate_id) DO UPDATE SET"
                " profile = EXCLUDED.profile, version = EXCLUDED.version,"
                " updated_at = EXCLUDED.updated_at, updated_by = EXCLUDED.updated_by"
            ).format(t=sql.Identifier(PRINCIPALS)), principal_row(p))
            cur.execute(sql.SQL("DELETE FROM {t} WHERE principal = %s").format(t=sql.Identifier(GRANTS)),
                        (p.agent_id,))
            rows = grant_rows(p)
            if rows:
                cur.executemany(sql.SQL("INSERT INTO {t} (principal, aggregate_id, tenant_id)"
                                        " VALUES (%s, %s, %s)").format(t=sql.Identifier(GRANTS)), rows)

    def copy(self, cur: Cursor[Any], notes: Iterable[Any], *, table_suffix: str = "") -> int:
        ps = _principals(notes)
        n = copy_rows(cur, PRINCIPALS + table_suffix, PRINCIPAL_COLUMNS, _PRINCIPAL_TYPES,
                      (principal_row(p) for p in ps))
        return n + copy_rows(cur, GRANTS + table_suffix, GRANT_COLUMNS, _GRANT_TYPES,
                             (r for p in ps for r in grant_rows(p)))


_ACCESS = (
    # the tenant once at the top: both branches need it, and the planner does not factor a
    # conjunct out of an OR, so without it the tenant's btree indexes would go unused
    "{p}tenant_id = %(t)s AND {p}kind = ANY(%(a_kinds)s::text[]) AND (({scope}{vis} AND {home})"
    " OR {p}aggregate_id IN (SELECT ag.aggregate_id FROM {g} ag"
    " WHERE ag.principal = %(a_who)s AND ag.tenant_id = %(t)s))"
)
_EVERY_VISIBILITY = frozenset({"thread", "resource", "tenant"})


def _tenant_wide(access: AccessFilter) -> list[str | None]:
    """The tenants of ``access``'s patterns that cover a whole tenant (``acme/*``;
    ``None``: ``*``, every tenant)."""
    return [p.tenant for p in access.patterns if p.resource is None and p.thread is None]


def _home(access: AccessFilter) -> str:
    """The pattern test of :data:`_ACCESS` in its cheapest form for ``access`` (issue 33:
    the per-row concatenation and ``LIKE`` was most of a principal's recall overhead):
    tenant-wide patterns compare ``tenant_id`` alone, the others ``LIKE`` the row's
    ``tenant/resource/thread`` home; ``TRUE`` when a pattern covers every tenant (the
    top ``tenant_id`` condition decides), ``FALSE`` without patterns."""
    wide = _tenant_wide(access)
    if None in wide:
        return "TRUE"
    parts = []
    if wide:
        parts.append("{p}tenant_id = ANY(%(a_wide)s::text[])")
    if len(wide) < len(access.patterns):
        parts.append("({p}tenant_id || '/' || {p}resource_id || '/' || {p}thread_id) LIKE ANY(%(a_like)s::text[])")
    return "(" + " OR ".join(parts) + ")" if parts else "FALSE"


def access_condition(scope: sql.Composable, access: AccessFilter, alias: str = "") -> sql.Composable:
    """A principal's rule around the plain ``scope`` rule: the row's kind is readable,
    and either it passes ``scope``, its visibility is allowed and its home
    (``tenant/resource/thread``) matches one of the patterns, or it is a note of the
    reader's tenant granted to the principal (an uncorrelated sub-select of
    :data:`GRANTS`, one hashed lookup per query). The statement's shape follows
    ``access``: no visibility test when every level is allowed, the pattern test as
    :func:`_home` gives it. Parameters: those of ``scope`` and :func:`access_params`."""
    p = alias + "." if alias else ""
    vis = "" if _EVERY_VISIBILITY <= set(access.visibilities) else " AND {p}visibility = ANY(%(a_vis)s::text[])"
    return sql.SQL(_ACCESS.replace("{vis}", vis).replace("{home}", _home(access))).format(
        p=sql.SQL(p), scope=scope, g=sql.Identifier(GRANTS))


def access_params(access: AccessFilter) -> dict[str, Any]:
    """Parameters of :func:`access_condition`."""
    wide = {p for p in access.patterns if p.resource is None and p.thread is None}
    return {"a_kinds": list(access.kinds), "a_vis": list(access.visibilities),
            "a_wide": [p.tenant for p in wide],
            "a_like": [p.like() for p in access.patterns if p not in wide], "a_who": access.principal}


def select_principal(cur: Cursor[Any], agent_id: str | None) -> list[dict[str, Any]]:
    """The row of ``agent_id`` (``None``: every row, by agent id)."""
    where = sql.SQL(" WHERE agent_id = %(a)s" if agent_id is not None else "")
    return cur.execute(sql.SQL("SELECT agent_id, profile, version, updated_at, updated_by FROM {t}{w}"
                               " ORDER BY agent_id").format(t=sql.Identifier(PRINCIPALS), w=where),
                       {"a": agent_id}, prepare=agent_id is not None).fetchall()


def select_granted_homes(cur: Cursor[Any], agent_id: str, tenant_id: str, note_id: str) -> list[tuple[str, str, str]]:
    """``(tenant, resource, thread)`` of the un-forgotten notes ``note_id`` of ``tenant_id``
    granted to ``agent_id`` (joined with the note-scope index)."""
    rows = cur.execute(
        "SELECT n.tenant_id, n.resource_id, n.thread_id FROM " + GRANTS + " g"  # noqa: S608 - constants
        " JOIN " + tables.NOTE_SCOPE + " n ON n.aggregate_id = g.aggregate_id"
        " WHERE g.principal = %s AND g.tenant_id = %s AND n.tenant_id = %s AND n.note_id = %s"
        " ORDER BY 1, 2, 3", (agent_id, tenant_id, tenant_id, note_id)).fetchall()
    return [(r["tenant_id"], r["resource_id"], r["thread_id"]) for r in rows]
