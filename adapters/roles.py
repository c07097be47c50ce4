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

from psycopg import sql

from memfabric.projections import tables

OWNER = "memfabric_admin"
WRITER = "memfabric_writer"
AUDITOR = "memfabric_auditor"


def roles_sql(database: str = "memfabric", *, schema: str = "public", owner: str = OWNER,
              writer: str = WRITER, auditor: str = AUDITOR, checkpoints: bool = False) -> str:
    """The SQL that creates the three roles (``NOLOGIN`` groups: grant them to login
    roles) and their grants, run by a superuser or the database owner on ``database``,
    before or after the fabric's first open (:func:`secret_table_sql`)."""

    def q(name: str) -> str:
        return sql.Identifier(name).as_string(None)

    db, sch, o, w, a = q(database), q(schema), q(owner), q(writer), q(auditor)
    lines = [
        "-- memfabric roles (docs/roles.md). Run as a superuser or the database owner.",
        "-- 1. owner/admin: owns every memfabric table; the first open, rebuild, checkpoint, erase-scope",
        f"CREATE ROLE {o} NOLOGIN;",
        f"GRANT CONNECT, TEMPORARY ON DATABASE {db} TO {o};",
        f"GRANT USAGE, CREATE ON SCHEMA {sch} TO {o};",
        f"-- open the fabric once as {o} (SET ROLE {o}), or hand existing tables over:",
        f"-- ALTER TABLE {tables.EVENTS} OWNER TO {o};  -- ... for every memfabric table",
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
        lines += ["-- optional: the auditor may also write audit checkpoints ('audit verify' then checkpoints)",
                  f"GRANT INSERT ON {sch}.{q(tables.AUDIT_CHAIN)} TO {a};"]
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


__all__ = ["AUDITOR", "OWNER", "WRITER", "auditor_grants", "roles_sql"]
