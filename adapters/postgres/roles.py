"""Least-privilege PostgreSQL roles for memfabric: the exact grants, as SQL.

Three roles (see ``docs/roles.md``):

- **owner / admin** (``memfabric_admin``): owns memfabric's tables, runs the first open
  (DDL), ``projections rebuild``, ``audit checkpoint``, ``erase-scope``.
- **writer** (``memfabric_writer``): the application. Opening a fabric runs idempotent
  DDL (``CREATE TABLE/INDEX IF NOT EXISTS``), which PostgreSQL checks against the
  table owner, so today a writer is a member of the owner role.
- **auditor** (``memfabric_auditor``): ``SELECT`` only (and ``TEMPORARY`` on the
  database for ``projections verify``'s scratch tables). Every read-only command
  (``audit verify``, ``log``, ``export``, ``projections status/verify``, ``lineage``,
  ``get``, ``history``, ``list``) detects that the role cannot write the log and opens
  with ``open_fabric(read_only=True)``. The auditor is denied the fabric secret (it
  keys tombstone hashes). ``checkpoints=True`` adds ``INSERT`` on the audit chain so
  that ``audit verify`` may also checkpoint.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from memfabric.projections import tables

OWNER = "memfabric_admin"
WRITER = "memfabric_writer"
AUDITOR = "memfabric_auditor"


def hand_over_query(schema: str, owner: str) -> str:
    """A query whose rows are the ``ALTER ... OWNER TO owner`` statements that give
    ``owner`` every memfabric object of ``schema``: its tables (``mf_*``,
    ``memfabric_*``), eventsourcing's insert function (``es_*``, replaced on every
    open, which only its owner may do) and its stored-event type."""
    sch, o = sql.Literal(schema).as_string(None), sql.Literal(owner).as_string(None)
    return (
        f"SELECT format('ALTER TABLE %I.%I OWNER TO %I', n.nspname, c.relname, {o}) FROM pg_class c"  # noqa: S608
        f" JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = {sch} AND c.relkind IN ('r', 'p')"
        " AND (c.relname LIKE 'mf\\_%' OR c.relname LIKE 'memfabric\\_%')"
        f" UNION ALL SELECT format('ALTER FUNCTION %s OWNER TO %I', p.oid::regprocedure, {o}) FROM pg_proc p"
        f" JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = {sch} AND p.proname LIKE 'es\\_%'"
        f" UNION ALL SELECT format('ALTER TYPE %I.%I OWNER TO %I', n.nspname, t.typname, {o}) FROM pg_type t"
        " JOIN pg_namespace n ON n.oid = t.typnamespace JOIN pg_class c ON c.oid = t.typrelid"
        f" WHERE n.nspname = {sch} AND c.relkind = 'c' AND t.typname LIKE 'stored\\_event\\_%'"
    )


def roles_sql(database: str = "memfabric", *, schema: str = "public", owner: str = OWNER,
              writer: str = WRITER, auditor: str = AUDITOR, checkpoints: bool = False) -> str:
    """The SQL that creates the three roles (``NOLOGIN`` groups: grant them to login
    roles) and their grants, run by a superuser or the database owner on ``database``,
    before or after the fabric's first open (:func:`secret_table_sql`): the owner role
    is given every memfabric table that exists, so that tables the admin creates later
    (``SET ROLE`` or not, see :func:`share_new_tables` and :func:`copy_privileges`) keep
    the auditor's grants."""

    def q(name: str) -> str:
        return sql.Identifier(name).as_string(None)

    def lit(value: str) -> str:
        return sql.Literal(value).as_string(None)

    db, sch, o, w, a = q(database), q(schema), q(owner), q(writer), q(auditor)
    lines = [
        "-- memfabric roles (docs/roles.md). Run as a superuser, before or after the fabric's first open.",
        "-- 1. owner/admin: owns every memfabric table; the first open, rebuild, checkpoint, erase-scope",
        f"CREATE ROLE {o} NOLOGIN;",
        f"GRANT CONNECT, TEMPORARY ON DATABASE {db} TO {o};",
        f"GRANT USAGE, CREATE ON SCHEMA {sch} TO {o};",
        f"-- hand every memfabric table, function and type (created by the first open) over to {o}:",
        f"DO $$ DECLARE s text; BEGIN FOR s IN {hand_over_query(schema, owner)}",
        "  LOOP EXECUTE s; END LOOP; END $$;",
        "",
        "-- 2. writer: the application. Opening runs idempotent DDL checked against the table",
        "--    owner, so the writer has the owner's privileges (a member of the owner role).",
        f"CREATE ROLE {w} NOLOGIN IN ROLE {o};",
        "",
        "-- 3. auditor: read only. SELECT on every table but the fabric secret; TEMPORARY for",
        "--    the scratch tables of 'projections verify'. No CREATE, no INSERT/UPDATE/DELETE.",
        f"CREATE ROLE {a} NOLOGIN;",
        f"GRANT CONNECT, TEMPORARY ON DATABASE {db} TO {a};",
        f"GRANT USAGE ON SCHEMA {sch} TO {a};",
        f"GRANT SELECT ON ALL TABLES IN SCHEMA {sch} TO {a};",
        *secret_table_sql(schema, owner),
        f"REVOKE SELECT ON {sch}.{q(tables.FABRIC_SECRET)} FROM {a};",  # noqa: S608 - quoted identifiers
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {o} IN SCHEMA {sch} GRANT SELECT ON TABLES TO {a};",
    ]
    if checkpoints:
        from memfabric.adapters.postgres.event_rows import CHAIN_DDL  # noqa: PLC0415

        lines += ["-- optional: the auditor may also write audit checkpoints ('audit verify' then checkpoints)",
                  f"SET search_path = {sch};",
                  CHAIN_DDL + ";", f"ALTER TABLE {sch}.{q(tables.AUDIT_CHAIN)} OWNER TO {o};",
                  f"GRANT SELECT, INSERT ON {sch}.{q(tables.AUDIT_CHAIN)} TO {a};"]
    lines += ["", "-- a login for a person or a service, e.g.:",
              f"-- CREATE ROLE alice LOGIN PASSWORD '...' IN ROLE {a};"]
    return "\n".join(lines) + "\n"


def secret_table_sql(schema: str, owner: str) -> list[str]:
    """Issue 28, defect 10: the statements (a ``DO`` block) that make the fabric secret's
    table, owned by ``owner``, when the fabric's first open has not made it yet, so the
    roles' SQL runs before or after the first open alike (the ``REVOKE`` of the
    auditor's ``SELECT`` needs the table; the first open then fills it). Its DDL is the
    first open's own (:data:`memfabric.adapters.postgres.SECRETS_DDL`)."""
    from memfabric.adapters.postgres import SECRETS_DDL, SECRETS_FORMAT_DDL  # noqa: PLC0415

    def lit(value: str) -> str:
        return sql.Literal(value).as_string(None)

    table = f"{sql.Identifier(schema).as_string(None)}.{sql.Identifier(tables.FABRIC_SECRET).as_string(None)}"
    return [
        "-- the fabric secret's table (made here, owned by the owner, when the first open has not run yet)",
        f"DO $$ BEGIN PERFORM set_config('search_path', {lit(sql.Identifier(schema).as_string(None))}, true);"
        f" IF to_regclass({lit(table)}) IS NULL THEN EXECUTE {lit(SECRETS_DDL)};"
        f" EXECUTE {lit(SECRETS_FORMAT_DDL)};"
        f" EXECUTE {lit(f'ALTER TABLE {table} OWNER TO ' + sql.Identifier(owner).as_string(None))};"
        " END IF; END $$;",
    ]


def auditor_grants(schema: str = "public", role: str = AUDITOR, *, checkpoints: bool = False) -> list[str]:
    """Only the auditor's grants on existing tables (for tests and scripts)."""
    sch, a = sql.Identifier(schema).as_string(None), sql.Identifier(role).as_string(None)
    out = [
        f"GRANT USAGE ON SCHEMA {sch} TO {a}",
        f"GRANT SELECT ON ALL TABLES IN SCHEMA {sch} TO {a}",
        f"REVOKE SELECT ON {sch}.{sql.Identifier(tables.FABRIC_SECRET).as_string(None)} FROM {a}",  # noqa: S608 - quoted identifiers
    ]
    if checkpoints:
        out.append(f"GRANT INSERT ON {sch}.{sql.Identifier(tables.AUDIT_CHAIN).as_string(None)} TO {a}")
    return out




# ------------------------------------------------------------ privileges that survive DDL
_ACL_SQL = (
    "SELECT a.grantee = 0 AS public, pg_get_userbyid(a.grantee) AS grantee, a.privilege_type,"
    " a.is_grantable FROM pg_class c, aclexplode(c.relacl) a"
    " WHERE c.oid = to_regclass(%s) AND a.grantee <> c.relowner"
)
"""Every grant of a table except its owner's own: (to PUBLIC?, grantee, privilege, grantable)."""


def _owner(cur: Any, table: str) -> str | None:
    row = cur.execute("SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = to_regclass(%s)",
                      (table,)).fetchone()
    return None if row is None else str(row[0] if not isinstance(row, dict) else next(iter(row.values())))


def _take_owner(cur: Any, table: str, owner: str | None) -> None:
    """``ALTER TABLE table OWNER TO owner`` when it differs and the current role may
    (it is a member of ``owner`` or a superuser); otherwise the table keeps its owner."""
    if owner is None or owner == _owner(cur, table):
        return
    row = cur.execute("SELECT pg_has_role(current_user, %s, 'MEMBER')", (owner,)).fetchone()
    if row is None or not (row[0] if not isinstance(row, dict) else next(iter(row.values()))):
        return
    cur.execute(sql.SQL("ALTER TABLE {t} OWNER TO {o}").format(t=sql.Identifier(table), o=sql.Identifier(owner)))


def _grant(cur: Any, table: str, grants: list[Any]) -> None:
    for grant in grants:
        public, grantee, privilege, grantable = (tuple(grant.values()) if isinstance(grant, dict) else grant)
        cur.execute(sql.SQL("GRANT {p} ON {t} TO {g}{w}").format(
            p=sql.SQL(str(privilege)), t=sql.Identifier(table),
            g=sql.SQL("PUBLIC") if public else sql.Identifier(str(grantee)),
            w=sql.SQL(" WITH GRANT OPTION" if grantable else "")))


def copy_privileges(cur: Any, source: str, target: str) -> None:
    """Give table ``target`` the owner and exactly the grants of table ``source`` (run
    in the transaction that replaces ``source`` by ``target``, e.g. a blue-green switch,
    so that no role ever sees the new table without its privileges). ``cur``: a psycopg
    cursor in that transaction. The owner is changed only when the current role may
    (a member of the old owner, or a superuser)."""
    _take_owner(cur, target, _owner(cur, source))
    _grant(cur, target, list(cur.execute(_ACL_SQL, (source,)).fetchall()))


_NEW_TABLES_SQL = (
    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND c.relacl IS NULL"
    " AND (c.relname LIKE 'mf\\_%%' OR c.relname LIKE 'memfabric\\_%%') AND c.relname <> %s"
    " AND EXISTS (SELECT 1 FROM pg_class e WHERE e.oid = to_regclass(%s) AND e.relacl IS NOT NULL)"
    " ORDER BY 1"
)


def share_new_tables(cur: Any) -> list[str]:
    """Tables memfabric created after the roles were granted (a table with no grant at
    all, while the event log has some: e.g. ``mf_audit_chain`` or a projection added
    by a later version) get the log's owner and its ``SELECT`` grants, so an auditor
    keeps reading every table but the fabric secret (never shared). Returns the names
    of the tables shared. ``cur``: a psycopg cursor (any transaction)."""
    names = [str(r[0] if not isinstance(r, dict) else r["relname"])
             for r in cur.execute(_NEW_TABLES_SQL, (tables.FABRIC_SECRET, tables.EVENTS)).fetchall()]
    if not names:
        return []
    owner = _owner(cur, tables.EVENTS)
    readers = [g for g in cur.execute(_ACL_SQL, (tables.EVENTS,)).fetchall()
               if (tuple(g.values()) if isinstance(g, dict) else g)[2] == "SELECT"]
    for name in names:
        _take_owner(cur, name, owner)
        _grant(cur, name, readers)
    return names


# ------------------------------------------------------------------ logins
KINDS = {"auditor": AUDITOR, "writer": WRITER, "admin": OWNER}
"""``memfabric roles create KIND NAME``: the group role a new login joins."""


def _one(cur: Any, query: str, params: tuple[Any, ...] = ()) -> Any:
    row = cur.execute(query, params).fetchone()
    return None if row is None else (next(iter(row.values())) if isinstance(row, dict) else row[0])


def group_statements(cur: Any, kind: str, *, schema: str = "public") -> list[sql.Composable]:
    """The statements that create group role ``KINDS[kind]`` when missing and (again,
    idempotently) give it its grants on the current database: the grants of
    :func:`roles_sql`. The admin group is given ownership of every memfabric table
    (``ALTER TABLE ... OWNER``); the writer group is a member of the admin group."""
    group, db, sch = sql.Identifier(KINDS[kind]), sql.Identifier(_one(cur, "SELECT current_database()")), \
        sql.Identifier(schema)
    out: list[sql.Composable] = []
    if _one(cur, "SELECT 1 FROM pg_roles WHERE rolname = %s", (KINDS[kind],)) is None:
        out.append(sql.SQL("CREATE ROLE {g} NOLOGIN").format(g=group))
    if kind == "writer":
        out += group_statements(cur, "admin", schema=schema)
        out.append(sql.SQL("GRANT {o} TO {g}").format(o=sql.Identifier(OWNER), g=group))
        return out
    out.append(sql.SQL("GRANT CONNECT, TEMPORARY ON DATABASE {d} TO {g}").format(d=db, g=group))
    if kind == "admin":
        out.append(sql.SQL("GRANT USAGE, CREATE ON SCHEMA {s} TO {g}").format(s=sch, g=group))
        out += [sql.SQL(str(next(iter(r.values())) if isinstance(r, dict) else r[0]))
                for r in cur.execute(hand_over_query(schema, OWNER)).fetchall()]
        return out
    owner = _owner(cur, f"{schema}.{tables.EVENTS}")
    out += [sql.SQL("GRANT USAGE ON SCHEMA {s} TO {g}").format(s=sch, g=group),
            sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {s} TO {g}").format(s=sch, g=group),
            sql.SQL("REVOKE SELECT ON {s}.{t} FROM {g}").format(s=sch, t=sql.Identifier(tables.FABRIC_SECRET), g=group)]
    if owner is not None:
        out.append(sql.SQL("ALTER DEFAULT PRIVILEGES FOR ROLE {o} IN SCHEMA {s} GRANT SELECT ON TABLES TO {g}")
                   .format(o=sql.Identifier(owner), s=sch, g=group))
    return out


def create_login(conn: Any, kind: str, name: str, password: str, *, schema: str = "public") -> None:
    """Create login role ``name`` (password ``password``, stored as a SCRAM-SHA-256
    verifier computed here, so the password itself never reaches the server) in group
    ``KINDS[kind]``, creating the group with its grants when missing; one transaction.
    ``conn``: a psycopg connection of a superuser (or a role with ``CREATEROLE`` that
    owns the tables) to the fabric's database, after the fabric's first open.
    Errors: ``FabricError`` for an unknown kind, a name that is not 1-63 printable
    characters, a role that exists already, a database without a memfabric log, or the
    server's refusal (its primary message only: the statement, which carries the
    verifier, is never quoted)."""
    from memfabric.domain.errors import FabricError  # noqa: PLC0415

    if kind not in KINDS:
        raise FabricError(f"kind: {kind!r} is not one of {', '.join(KINDS)}")
    if not 1 <= len(name.encode()) <= 63 or not name.isprintable():
        raise FabricError(f"name: {name!r} is not a role name (1-63 bytes, printable characters)")
    try:
        _create_login(conn, kind, name, password, schema)
    except psycopg.Error as exc:
        primary = exc.diag.message_primary or type(exc).__name__
        raise FabricError(f"roles create: the server refused: {primary}") from None


def _create_login(conn: Any, kind: str, name: str, password: str, schema: str) -> None:
    """:func:`create_login` after its checks of ``kind`` and ``name``."""
    from memfabric.domain.errors import FabricError  # noqa: PLC0415

    with conn.transaction(), conn.cursor() as cur:
        if _one(cur, "SELECT to_regclass(%s)", (f"{schema}.{tables.EVENTS}",)) is None:
            raise FabricError(f"no memfabric log ({tables.EVENTS}) in schema {schema!r} of this database: "
                              "open the fabric once first")
        if _one(cur, "SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)) is not None:
            raise FabricError(f"name: role {name!r} exists already")
        for stmt in group_statements(cur, kind, schema=schema):
            cur.execute(stmt)
        verifier = conn.pgconn.encrypt_password(password.encode(), name.encode(), b"scram-sha-256").decode()
        cur.execute(sql.SQL("CREATE ROLE {n} LOGIN PASSWORD {p} IN ROLE {g}").format(
            n=sql.Identifier(name), p=sql.Literal(verifier), g=sql.Identifier(KINDS[kind])))


__all__ = ["AUDITOR", "OWNER", "WRITER", "KINDS", "auditor_grants", "hand_over_query", "create_login", "group_statements", "copy_privileges", "roles_sql", "share_new_tables"]
