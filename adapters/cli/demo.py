"""``memfabric demo``: the main job on the embedded default, printed as rich tables."""

from __future__ import annotations

import json
import tempfile
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

from rich import box
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from memfabric.adapters.bootstrap import open_fabric
from memfabric.domain.attach import NotAttachedError
from memfabric.domain.inputs import Kind
from memfabric.domain.notes import Notes

ACME_FACTS: list[tuple[Kind, str, dict[str, Any]]] = [
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
GLOBEX_FACTS: list[tuple[Kind, str, dict[str, Any]]] = [
    ("fact", "User prefers imperial units", {"tags": ["prefs"]}),
    ("fact", "Globex billing contact is Bob in Springfield", {"tags": ["billing"]}),
]


class _DemoSession:
    """A host's agent session: anything with a string ``id``."""

    id = "demo-agent"


def _tool_session(console: Console, notes: Notes) -> list[str]:
    """Step 12: an agent's turn through the five governed tools, in a file jail."""
    _section(console, "12. agent tools: nothing runs until the host attaches a session",
             "memory.insert / memory.recall / memory.view / memory.read, then a refused jail escape")
    session = _DemoSession()
    with tempfile.TemporaryDirectory() as root:
        tools = notes.tools(root)
        table = _table("call", "result")
        try:
            tools.call("memory.recall", {"query": "units"}, session=session)
        except NotAttachedError as exc:
            table.add_row("memory.recall (not attached)", f"refused: {type(exc).__name__}")
        outcomes = ["refused before attach"]
        with notes.attach(session):
            steps: list[tuple[str, dict[str, Any]]] = [
                ("memory.insert", {"path": "notes/oncall.md", "text": "Pager rotation: Alice this week"}),
                ("memory.recall", {"query": "who is on the pager rotation", "top_k": 1}),
                ("memory.view", {}),
                ("memory.read", {"path": "notes/oncall.md"}),
            ]
            for name, args in steps:
                result = tools.call(name, args, session=session)
                table.add_row(name, _clip(json.dumps(result, default=str), 90))
                outcomes.append(name)
            result, is_error = tools.call_or_error("memory.read", {"path": "../etc/passwd"}, session=session)
            table.add_row("memory.read ../etc/passwd", _clip(json.dumps(result), 90))
            outcomes.append("escape refused" if is_error else "escape allowed")
        console.print(table)
    return outcomes


def _conversation(console: Console, notes: Notes) -> dict[str, Any]:
    """Step 13: the conversation ledger: a short chat, a search hit with its page, an
    observation read back as an episode, and a reflection promoted to a procedure."""
    _section(console, "13. conversation ledger: entries, search with pages, episodes, promotion",
             "the conversation is event-sourced and sealed; episodes are views over observations")
    chat = notes.conversation()
    turns = [("user", "Can you book the staging database maintenance for Saturday?"),
             ("assistant", "Booked: staging maintenance Saturday 06:00 UTC, ticket OPS-88."),
             ("user", "Thanks. Next time, always post maintenance bookings in #ops first.")]
    entries = [chat.append(role, text) for role, text in turns]
    hit = notes.search_conversation("staging maintenance booking", top_k=1).hits[0]
    obs = chat.observe("Staging maintenance is booked for Saturday 06:00 UTC",
                       source_entry_ids=[entries[1].id])
    episode = notes.remember(kind="episode", id=obs)
    ref = chat.reflect("Post maintenance bookings in #ops before confirming them",
                       source_ids=[entries[2].id])
    work = chat.open_work_scope("maintenance-booking")
    chat.bind(ref, work)
    chat.close_work_scope(work)
    promoted = notes.remember(kind="procedure", reflection_id=ref)
    table = _table("step", "result")
    table.add_row("search 'staging maintenance booking'",
                  f"entry {hit.entry_id} score {hit.score:.2f}\n{_clip(hit.page.text, 160)}")
    table.add_row("episode (a view, nothing copied)", f"{episode.id}: {episode.content}")
    table.add_row("promotion from a closed work scope", f"procedure {promoted.id}: {promoted.content}")
    console.print(table)
    return {"entries": len(entries), "hit": hit.entry_id in {e.id for e in entries},
            "episode": episode.content, "promoted": promoted.kind}


def _links(console: Console, notes: Notes) -> dict[str, Any]:
    """Step 14: a link between two notes and a recall that follows it (1-hop expansion
    in the recall statement), with the explain rows (``link`` True for the added note)."""
    _section(console, "14. links: notes.link, then a recall expanded one hop",
             "the linked note shares no word with the query; it comes in through its link")
    cause = notes.remember(kind="fact", content="The payments outage on Friday came from an expired TLS certificate")
    fix = notes.remember(kind="fact", content="Alice renewed it and added a renewal alert, due again in 90 days")
    notes.remember(kind="fact", content="The Springfield office printer is on the second floor")
    notes.link(cause.id, fix.id, relation="fixed_by", weight=0.9)
    query = "payments outage"
    res = notes.recall(query, mode="lexical", top_k=3)
    table = _table("#", "id", "score", "link", "link_score", "lex", "content")
    for i, (hit, ex) in enumerate(zip(res.hits, res.explain, strict=True), 1):
        table.add_row(str(i), hit.id, f"{ex.score:.3f}", "true" if ex.link else "false",
                      f"{ex.link_score:.3f}", "-" if ex.lexical is None else f"{ex.lexical:.3f}",
                      _clip(hit.content or "", 60))
    console.print(Text(f"link {cause.id} -> {fix.id} (fixed_by, 0.9); "
                       f"recall '{query}' mode=lexical top_k=3:"))
    console.print(table)
    linked = [ex.id for ex in res.explain if ex.link]
    return {"linked": linked, "fix_id": fix.id, "cause_first": bool(res.hits) and res.hits[0].id == cause.id,
            "hit_links": [link.id for link in res.hits[0].links] if res.hits else []}


def _retention(console: Console, fabric: Any, tenant: str) -> dict[str, Any]:
    """Step 15 (issue 30): notes of three retention classes, one held, one with a
    ``valid_to``, then one sweep on a fake clock two days ahead (its own tenant only)."""
    _section(console, "15. retention: classes, then one sweep two days ahead (a fake clock)",
             "ephemeral notes are forgotten (tombstone, key destroyed), held ones untouched, "
             "passed windows expired")
    notes = fabric.scope(tenant, "user-1")
    now = datetime.now(timezone.utc)
    notes.remember(kind="fact", content="The user is in a hurry today", retention="ephemeral")
    held = notes.remember(kind="fact", content="Draft of the dispute letter", retention="ephemeral")
    notes.forget(id=held.id, hold=True, requested_by="demo-legal")
    notes.remember(kind="fact", content="Promo code SPRING is valid until tonight", valid_to=now + timedelta(hours=6))
    notes.remember(kind="fact", content="The user's company is Acme Corp")
    later = now + timedelta(days=2)
    dry = fabric.sweep(later, tenant=tenant, dry_run=True)
    result = fabric.sweep(later, tenant=tenant)
    table = _table("class", *(outcome.replace("_", " ") for outcome in result.totals))
    for cls, counts in result.counts.items():
        table.add_row(cls, *(str(n) for n in counts.values()))
    console.print(table)
    console.print(f"dry run first: {dry.totals}; then {result.changed} notes changed in {result.batches} batch(es)")
    return {"dry": dry.totals, "totals": result.totals, "again": fabric.sweep(later, tenant=tenant).changed}


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _section(console: Console, title: str, note: str | None = None) -> None:
    """A section heading (kept under 80 columns) and an optional dim explanation."""
    console.print()
    console.print(Text(title, style="bold"))
    if note:
        console.print(Text(note, style="dim"))


def _table(*columns: str) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    for col in columns:
        table.add_column(col, overflow="fold")
    return table


def run_demo(console: Console, *, dsn: str | None = None, data_dir: str | None = None,
             embedder: Any = None) -> dict[str, Any]:
    """Run the demo; returns a summary dict (used by tests). Each run uses a fresh user
    and thread."""
    from memfabric.adapters.cli.render import lineage_summary, lineage_table, recall_table

    run = uuid.uuid4().hex[:6]
    thread = f"demo-{run}"
    summary: dict[str, Any] = {}
    with open_fabric(dsn, data_dir=data_dir, embedder=embedder) as fabric:
        where = "embedded PostgreSQL" if fabric._embedded else "PostgreSQL at the given DSN"  # noqa: SLF001
        console.print(Panel.fit(f"memfabric demo · {where} · thread {thread}", style="bold"))
        # a fresh user per run too: facts follow their user across threads (issue 16),
        # so a rerun in the same user would fold into the previous run's notes
        acme = fabric.scope("acme", f"user-1-{run}", thread)
        globex = fabric.scope("globex", f"user-9-{run}", thread)

        _section(console, "1. remember: notes for tenant acme, then globex")
        table = _table("tenant", "id", "kind", "outcome", "content / path")
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
        recorded = datetime.now(timezone.utc)  # issue 31: what the fabric knew before the change
        # The inferred subject key (user|preference:unit) decides, not cosine similarity.
        changed = acme.remember(kind="fact", content="User prefers imperial units", tags=["prefs"])
        _section(console, "2. consolidation: a repeat folds, a changed fact supersedes")
        t2 = _table("write", "id", "outcome", "supersedes", "tags")
        t2.add_row("'user prefers metric units.'", again.id, again.outcome, "-", ", ".join(again.tags))
        t2.add_row("'User prefers imperial units'", changed.id, changed.outcome, changed.supersedes or "-",
                   ", ".join(changed.tags))
        console.print(t2)
        summary["fold_same_id"] = again.id == first
        summary["superseded"] = changed.supersedes == first

        units = "which units does the user prefer?"
        res = acme.recall(units, top_k=10, budget=400)
        _section(console, f"3. recall '{units}' top_k=10 budget=400",
                 "score = relevance (from sim: cosine, lex: full-text) + recency + importance")
        console.print(recall_table(res))
        summary["top_hit_is_successor"] = bool(res.hits) and res.hits[0].id == changed.id

        before = changed.valid_from - timedelta(microseconds=1) if changed.valid_from else datetime.now(timezone.utc)
        past = acme.recall(units, as_of=before, top_k=3)
        _section(console, f"4. recall '{units}' top_k=3 as of {before:%H:%M:%S.%f}"[:-3],
                 "the same question just before the change: the first fact answers")
        console.print(recall_table(past))
        summary["as_of_returns_first"] = bool(past.hits) and past.hits[0].id == first
        known = acme.recall(units, known_at=recorded, top_k=3)
        console.print(f"known_at {recorded:%H:%M:%S.%f}"[:-3] + f" (what was recorded then): top hit "
                      f"{known.hits[0].id if known.hits else '-'}, superseded_by "
                      f"{(known.hits[0].superseded_by or '-') if known.hits else '-'}; as_of answers the valid time, "
                      "known_at the transaction time")
        summary["known_at_returns_first"] = bool(known.hits) and known.hits[0].id == first

        query = "billing invoices database payments"
        budget = acme.recall(query, top_k=10, budget=25)
        _section(console, f"5. recall '{query}' top_k=10 budget=25",
                 "a tight budget: ranking stops at the first hit that does not fit")
        console.print(recall_table(budget))
        summary["budget_hits"] = len(budget.hits)

        query = "how do I rotate the API key?"
        untyped = acme.recall(query, top_k=5)
        typed = acme.recall(query, kinds=("procedure",), top_k=1)
        _section(console, f"6a. recall '{query}' top_k=5", "an untyped recall (fact, file): procedures stay out")
        console.print(recall_table(untyped))
        _section(console, f"6b. recall '{query}' kinds=procedure top_k=1")
        console.print(recall_table(typed))
        summary["procedure_excluded"] = all(h.kind != "procedure" for h in untyped.hits)
        summary["procedure_when_asked"] = bool(typed.hits) and typed.hits[0].kind == "procedure"

        query = "user prefers metric units"
        iso = globex.recall(query, top_k=10)
        _section(console, f"7. tenant globex: recall '{query}' top_k=10",
                 "tenant isolation: globex never sees acme's notes")
        console.print(recall_table(iso))
        summary["isolated"] = all(h.scope.tenant_id == "globex" for h in iso.hits)

        lin = acme.lineage(changed.id)
        history = {nid: acme.history(nid) for nid in [*lin.predecessors, changed.id, *lin.successors]}
        _section(console, f"8. {lineage_summary(lin)}", "▶ marks the note asked for; every event stays in the log")
        console.print(lineage_table(lin, history))

        victim = acme_ids[3]
        result = acme.forget(id=victim, requested_by="demo-user")
        tomb = acme.history(victim)[-1]
        _section(console, f"9. forget {victim}: its key is destroyed, the log keeps a tombstone")
        t9 = _table("event", "reason", "requested by", "content hmac", "content now reads")
        t9.add_row(tomb.type, str(tomb.fields.get("reason")), str(tomb.fields.get("requested_by")),
                   str(tomb.fields.get("content_hmac"))[:16] + "…",
                   str(acme.history(victim)[0].fields.get("content")))
        console.print(t9)
        console.print(f"deleted={result.deleted} held={result.held}; "
                      f"verify_content(original text) = "
                      f"{acme.verify_content(victim, ACME_FACTS[3][1])}")
        summary["forgotten"] = result.deleted == 1
        summary["erased"] = acme.history(victim)[0].fields.get("content") == "<erased>"

        acme.remember(kind="working", block="persona", content="Concise assistant for the acme ops team.")
        acme.append_block("task", "Migrate the staging database")
        block = acme.append_block("task", "then rotate the API key")
        _section(console, "10. working memory: labelled blocks, read every turn",
                 "event-sourced like notes: each write or append is an event")
        t10 = _table("block", "version", "content")
        for label, entry in acme.working_value()["_fabric"]["blocks"].items():
            t10.add_row(label, str(entry["version"]), entry["content"])
        console.print(t10)
        context = acme.context_provider(top_k=3)(units)
        _section(console, f"11. context_provider(top_k=3)('{units}')",
                 "what an agent gets each turn: working blocks, then recalled notes")
        t11 = _table("type", "text")
        for item in context:
            t11.add_row(item["type"], item["text"])
        console.print(t11)
        summary["working_block"] = block.content == "Migrate the staging database\nthen rotate the API key"
        summary["context_types"] = [item["type"] for item in context]
        summary["tool_session"] = _tool_session(console, acme)
        summary["conversation"] = _conversation(console, acme)
        summary["links"] = _links(console, fabric.scope("acme", "user-1", f"{thread}-links"))
        summary["retention"] = _retention(console, fabric, f"retention-{run}")
        from memfabric.adapters.cli.demo_access import section as access_section  # noqa: PLC0415 - issue 33
        summary["access"] = access_section(console, fabric, f"access-{run}")
        from memfabric.adapters.cli.demo_entities import entities_step  # noqa: PLC0415 - issue 32
        summary["entities"] = entities_step(console, fabric.scope("acme", f"user-1-{run}", f"{thread}-entities"))
    console.print()
    console.print("[green]demo finished[/green]")
    return summary
