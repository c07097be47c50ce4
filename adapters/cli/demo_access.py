"""Step 16 of ``memfabric demo`` (issue 33): an agent reads memory as a principal; one
recall is served, one denied, and the access log shows both."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from memfabric.domain.errors import AccessDenied

AGENT = "demo-support-agent"


def section(console: Console, fabric: Any, tenant: str) -> dict[str, Any]:
    """Define a principal that may read the facts of ``tenant/user-1/*``, recall as it
    from user-1's thread (served) and from user-2's scope (denied), print both access
    records; returns ``{"served", "denied_rule", "log"}``."""
    console.print()
    console.print(Text("16. governed access: a principal, one served and one denied recall", style="bold"))
    console.print(Text(f"profile of {AGENT}: read_kinds [fact], recall_scope [{tenant}/user-1/*]", style="dim"))
    fabric.scope(tenant, "user-1", "thread-1").remember(kind="fact", content="User prefers metric units")
    fabric.scope(tenant, "user-2").remember(kind="fact", content="User-2 pays with the card ending 4242",
                                            consent={"visibility": "tenant"})
    fabric.principals.define(AGENT, {"read_kinds": ["fact"], "recall_scope": [f"{tenant}/user-1/*"]})
    served = fabric.scope(tenant, "user-1", "thread-1").as_principal(AGENT).recall("units card")
    console.print(f"served: {[h.content for h in served.hits]}")
    rule = None
    try:
        fabric.scope(tenant, "user-2").as_principal(AGENT).recall("card")
    except AccessDenied as exc:
        rule = exc.rule
        console.print(f"denied: {exc}")
    log = [r for r in fabric.access_log(principal=AGENT) if r.tenant_id == tenant]
    table = Table("at", "operation", "outcome", "rule", "scope", "kinds", "served", "query_hash")
    for r in log:
        table.add_row(r.at.strftime("%H:%M:%S.%f")[:-3], r.operation, r.outcome, r.rule or "",
                      f"{r.tenant_id}/{r.resource_id}/{r.thread_id}", ",".join(r.kinds), str(r.served),
                      (r.query_hash or "")[:12])
    console.print(table)
    return {"served": len(served.hits), "denied_rule": rule, "log": [r.outcome for r in log]}
