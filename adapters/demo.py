"""``memfabric demo``: the main job on the embedded default, printed as rich tables."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from memfabric.adapters.bootstrap import open_fabric

ACME_FACTS = [
    ("fact", "User prefers metric units", {"tags": ["prefs"], "importance": 0.7}),
    ("fact", "Billing runs on the first business day of each month", {"tags": ["billing"]}),
    ("fact", "The staging database is Postgres 16 on db-staging-2", {"tags": ["infra"]}),
    ("fact", "Alice is the on-call engineer for the payments service this week", {"tags": ["people"]}),
    ("fact", "Customer Globex asked for invoices in EUR", {"tags": ["billing"], "importance": 0.8}),
    ("procedure", "To rotate the API key: create a new key, deploy it, then revoke the old key after 24 hours",
     {"tags": ["runbook"]}),
    ("file", "Payments service entry point and HTTP routes", {"path": "services/payments/app.py"}),
    ("file", "Terraform module for the staging database", {"path": "infra/staging/db.tf"}),
]
GLOBEX_FACTS = [
    ("fact", "User prefers imperial units", {"tags": ["prefs"]}),
    ("fact", "Globex billing contact is Bob in Springfield", {"tags": ["billing"]}),
]


def run_demo(console: Console, *, dsn: str | None = None, data_dir: str | None = None) -> dict[str, Any]:
    """Run the demo; returns a summary dict (used by tests). Each run uses a fresh thread."""
    run = uuid.uuid4().hex[:6]
    thread = f"demo-{run}"
    summary: dict[str, Any] = {}
    with open_fabric(dsn, data_dir=data_dir) as fabric:
        where = "embedded PostgreSQL" if fabric._embedded else "PostgreSQL at the given DSN"  # noqa: SLF001
        console.print(Panel.fit(f"memfabric demo · {where} · thread {thread}", style="bold"))
        acme = fabric.scope("acme", "user-1", thread)
        globex = fabric.scope("globex", "user-9", thread)

        table = Table(title="1. remember (tenant acme, then globex)")
        for col in ("tenant", "id", "kind", "outcome", "content / path"):
            table.add_column(col, overflow="fold")
        acme_ids = []
        for kind, content, extra in ACME_FACTS:
            n = acme.remember(kind=kind, content=content, **extra)
            acme_ids.append(n.id)
            table.add_row("acme", n.id, kind, n.outcome, n.path or content)
        for kind, content, extra in GLOBEX_FACTS:
            n = globex.remember(kind=kind, content=content, **extra)
            table.add_row("globex", n.id, kind, n.outcome, content)
        console.print(table)

        first = acme_ids[0]
        again = acme.remember(kind="fact", content="user prefers metric units.", tags=["ui"])
        changed = acme.remember(kind="fact", content="User prefers metric units and Celsius", tags=["prefs"])
        t2 = Table(title="2. consolidation: a repeat folds, a changed fact supersedes")
        for col in ("write", "id", "outcome", "supersedes", "tags"):
            t2.add_column(col)
        t2.add_row("'user prefers metric units.'", again.id, again.outcome, "-", ", ".join(again.tags))
        t2.add_row("'... metric units and Celsius'", changed.id, changed.outcome, changed.supersedes or "-",
                   ", ".join(changed.tags))
        console.print(t2)
        summary["fold_same_id"] = again.id == first
        summary["superseded"] = changed.supersedes == first

        from memfabric.adapters.cli import lineage_table, recall_table

        res = acme.recall("which units does the user prefer?", budget=400)
        console.print(recall_table(res, "3. recall 'which units does the user prefer?' (budget 400 tokens)"))
        summary["top_hit_is_successor"] = bool(res.hits) and res.hits[0].id == changed.id

        before = changed.valid_from - timedelta(microseconds=1) if changed.valid_from else datetime.now(timezone.utc)
        past = acme.recall("which units does the user prefer?", as_of=before, top_k=3)
        console.print(recall_table(past, f"4. the same recall as of {before:%H:%M:%S.%f} (before the change)"))
        summary["as_of_returns_first"] = bool(past.hits) and past.hits[0].id == first

        budget = acme.recall("billing invoices database payments", top_k=10, budget=25)
        console.print(recall_table(budget, "5. a tight budget (25 tokens): ranking stops at the first hit that does not fit"))
        summary["budget_hits"] = len(budget.hits)

        untyped = acme.recall("how do I rotate the API key?", top_k=5)
        typed = acme.recall("how do I rotate the API key?", kinds=("procedure",), top_k=1)
        console.print(recall_table(untyped, "6a. untyped recall: procedures stay out"))
        console.print(recall_table(typed, "6b. kinds=('procedure',)"))
        summary["procedure_excluded"] = all(h.kind != "procedure" for h in untyped.hits)
        summary["procedure_when_asked"] = bool(typed.hits) and typed.hits[0].kind == "procedure"

        iso = globex.recall("user prefers metric units", top_k=10)
        console.print(recall_table(iso, "7. tenant globex asks the same: it never sees acme's notes"))
        summary["isolated"] = all(h.scope.tenant_id == "globex" for h in iso.hits)

        lin = acme.lineage(changed.id)
        history = {nid: acme.history(nid) for nid in [*lin.predecessors, changed.id, *lin.successors]}
        console.print(lineage_table(lin, history))

        victim = acme_ids[3]
        result = acme.forget(id=victim, requested_by="demo-user")
        tomb = acme.history(victim)[-1]
        t8 = Table(title="8. forget: the key is destroyed; the log keeps a tombstone")
        for col in ("event", "reason", "requested_by", "content_hmac", "content now reads"):
            t8.add_column(col, overflow="fold")
        t8.add_row(tomb.type, str(tomb.fields.get("reason")), str(tomb.fields.get("requested_by")),
                   str(tomb.fields.get("content_hmac"))[:24] + "…",
                   str(acme.history(victim)[0].fields.get("content")))
        console.print(t8)
        console.print(f"deleted={result.deleted} held={result.held}; "
                      f"verify_content(original text) = "
                      f"{acme.verify_content(victim, ACME_FACTS[3][1])}")
        summary["forgotten"] = result.deleted == 1
        summary["erased"] = acme.history(victim)[0].fields.get("content") == "<erased>"

        acme.remember(kind="working", block="persona", content="Concise assistant for the acme ops team.")
        acme.append_block("task", "Migrate the staging database")
        block = acme.append_block("task", "then rotate the API key")
        t9 = Table(title="9. working memory: labelled blocks, event-sourced, read every turn")
        for col in ("block", "version", "content"):
            t9.add_column(col, overflow="fold")
        for label, entry in acme.working_value()["_fabric"]["blocks"].items():
            t9.add_row(label, str(entry["version"]), entry["content"])
        console.print(t9)
        context = acme.context_provider(top_k=3)("which units does the user prefer?")
        t10 = Table(title="10. context_provider(top_k=3)('which units does the user prefer?')")
        for col in ("type", "text"):
            t10.add_column(col, overflow="fold")
        for item in context:
            t10.add_row(item["type"], item["text"])
        console.print(t10)
        summary["working_block"] = block.content == "Migrate the staging database\nthen rotate the API key"
        summary["context_types"] = [item["type"] for item in context]
    console.print("[green]demo finished[/green]")
    return summary
