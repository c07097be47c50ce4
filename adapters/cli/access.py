"""The ``memfabric access-log`` command (issue 33): the access records of principals.

Registered by :mod:`memfabric.adapters.cli.app`. Records are printed oldest first, one
table row (or, with ``--json``, one JSON object per line: ``at``, ``principal``,
``operation``, ``outcome``, ``rule``, ``scope``, ``kinds``, ``served``, ``query_hash``).
"""

# No ``from __future__ import annotations``: typer evaluates the option annotations.
import json
from dataclasses import asdict
from typing import Annotated, Any, Optional

import typer


def record_json(record: Any) -> dict[str, Any]:
    """One access record as a JSON-ready dict (no ids, no query text unless recorded)."""
    from memfabric.adapters.serialize import jsonable  # noqa: PLC0415
    out = {k: v for k, v in asdict(record).items() if k not in ("ids", "tenant_id", "resource_id", "thread_id")}
    out["scope"] = f"{record.tenant_id}/{record.resource_id}/{record.thread_id}"
    return dict(jsonable(out))


def register(app: typer.Typer) -> None:
    """Add the ``access-log`` command to ``app``."""
    from memfabric.adapters.cli.common import HANDLED, DataDirOpt, DsnOpt, JsonOpt, console, fail, parse_time
    from memfabric.adapters.cli.common import open_for_command as _open

    @app.command("access-log")
    def access_log(
        principal: Annotated[Optional[str], typer.Option(  # noqa: UP045 - typer needs Optional
            "--principal", metavar="ID", help="Only this principal's calls (default every principal).")] = None,
        since: Annotated[Optional[str], typer.Option(  # noqa: UP045
            "--since", metavar="TIME", help="Only calls at or after this instant (ISO 8601; no timezone means UTC).")] = None,
        until: Annotated[Optional[str], typer.Option(  # noqa: UP045
            "--until", metavar="TIME", help="Only calls before this instant.")] = None,
        outcome: Annotated[Optional[str], typer.Option(  # noqa: UP045
            "--outcome", metavar="OUTCOME", help="served, denied or error.")] = None,
        limit: Annotated[int, typer.Option("--limit", metavar="N", help="Most records to print (1-100000).")] = 1000,
        dsn: DsnOpt = None,
        data_dir: DataDirOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Print the access log: one record per governed call (served, denied or error)."""
        try:
            start, end = parse_time(since, "since"), parse_time(until, "until")
            with _open(dsn, data_dir) as fabric:
                records = fabric.access_log(principal=principal, since=start, until=end,
                                            outcome=outcome, limit=limit)
        except HANDLED as exc:
            fail(exc, as_json=as_json)
        if as_json:
            for r in records:
                print(json.dumps(record_json(r)))
            return
        from rich.table import Table  # noqa: PLC0415
        table = Table("at", "principal", "operation", "outcome", "rule", "scope", "kinds", "served")
        for r in records:
            d = record_json(r)
            table.add_row(d["at"], r.principal, r.operation, r.outcome, r.rule or "", d["scope"],
                          ",".join(r.kinds), str(r.served))
        console.print(table if records else "no access records")
