"""Step 16 of ``memfabric demo`` (issue 32): an alias resolving to one person, a change
stated under it superseding, and a merge in a note's history."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text
from rich import box

from memfabric.domain.notes import Notes


def entities_step(console: Console, notes: Notes) -> dict[str, Any]:
    """Run the step on ``notes``; returns what the demo's test checks."""
    console.print()
    console.print(Text("17. entities: an alias resolves to one person; a merge shows in lineage", style="bold"))
    console.print(Text("names live only in the entity's sealed events; the index keeps keyed digests",
                       style="dim"))
    maria = notes.entities.upsert("Maria Lopez", type="person", identifiers=[("email", "maria@acme.example")])
    alias = notes.entities.upsert("Maria", identifiers=[("email", "maria@acme.example")])
    lisbon = notes.remember(kind="fact", content="Maria Lopez lives in Lisbon")
    porto = notes.remember(kind="fact", content="Maria moved to Porto")
    other = notes.entities.upsert("M. Lopez", type="person")
    age = notes.remember(kind="fact", content="M. Lopez is 34")
    merged = notes.entities.merge(maria.entity.id, other.entity.id, reason="same person (demo)")
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    for col in ("step", "result"):
        table.add_column(col, overflow="fold")
    table.add_row("upsert 'Maria' + her email", f"{alias.outcome} at tier {alias.tier}: {alias.entity.id}")
    table.add_row("'Maria moved to Porto'", f"{porto.outcome} {porto.supersedes} (key {porto.decision and porto.decision.get('subject_key')})")
    table.add_row("upsert 'M. Lopez'", f"{other.outcome}; merge candidates: "
                  + ", ".join(f"{c.display_name} ({c.tier})" for c in other.candidates))
    table.add_row(f"merge {merged.merge_id}", f"{merged.repointed} note(s) re-pointed in {merged.batches} batch(es)")
    history = notes.history(age.id)
    table.add_row(f"history of {age.id}", " → ".join(f"{h.type} ({h.cause})" for h in history))
    console.print(table)
    return {"alias": alias.outcome == "resolved" and alias.entity.id == maria.entity.id,
            "superseded": porto.supersedes == lisbon.id,
            "merge_in_history": history[-1].cause == f"merge:{merged.merge_id}"}
