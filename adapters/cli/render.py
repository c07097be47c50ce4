"""The rich tables of the ``memfabric`` commands: recall hits and a note's lineage
(``memfabric recall``, ``memfabric lineage`` and the demo print them)."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from memfabric.adapters.serialize import jsonable


def _when(ts: datetime) -> str:
    return f"{ts:%Y-%m-%d %H:%M:%S}"


def _validity(lo: datetime | None, hi: datetime | None) -> str | None:
    if lo and hi:
        return f"valid {_when(lo)} to {_when(hi)}"
    if lo:
        return f"valid from {_when(lo)}"
    if hi:
        return f"valid until {_when(hi)}"
    return None


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _num(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.3f}"


def recall_table(res: Any, title: str | None = None) -> Table:
    """A rich table of hits: rank, id, score, similarity, lexical score and content (with
    the kind, path and validity in dim when they are not the default fact/always)."""
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, title_justify="left")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("id", no_wrap=True)
    for col in ("score", "sim", "lex"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("content", overflow="fold", min_width=20)
    for i, (hit, ex) in enumerate(zip(res.hits, res.explain, strict=True), 1):
        cell = Text(_clip(hit.content or hit.path or "", 400))
        meta = [] if hit.kind == "fact" else [hit.kind]
        if hit.path and hit.content:
            meta.append(hit.path)
        if valid := _validity(*ex.valid):
            meta.append(valid)
        if meta:
            cell.append("\n" + " · ".join(meta), style="dim")
        table.add_row(str(i), hit.id, _num(ex.score), _num(ex.similarity), _num(ex.lexical), cell)
    return table


def _detail(h: Any) -> str:
    f = h.fields
    if h.type in ("Remembered", "Folded"):
        return _clip(str(f.get("content")), 200)
    if h.type == "Superseded":
        valid_to = f.get("valid_to")
        until = _when(valid_to) if isinstance(valid_to, datetime) else str(valid_to)
        return f"by {f.get('successor_id')}, valid until {until}"
    if h.type == "Forgotten":
        return f"{f.get('reason')} by {f.get('requested_by')}, hmac {str(f.get('content_hmac'))[:16]}…"
    if h.type == "Repointed":
        return f"{f.get('from_path')} → {f.get('to_path')}"
    return _clip(", ".join(f"{k}={jsonable(v)}" for k, v in f.items() if k != "cause"), 200)


def lineage_summary(lin: Any) -> str:
    """``lineage of ID: 1 predecessor(s), 0 successor(s), 1 fold(s)``."""
    return (f"lineage of {lin.id}: {len(lin.predecessors)} predecessor(s), "
            f"{len(lin.successors)} successor(s), {len(lin.folds)} fold(s)")


def lineage_table(lin: Any, history: dict[str, list[Any]], title: str | None = None) -> Table:
    """Timeline of every event along a note's supersession chain (▶ marks the note asked
    for); the event's cause is shown in dim unless it is the caller or already named."""
    rows = sorted(((h.timestamp, nid, h) for nid, entries in history.items() for h in entries),
                  key=lambda r: r[0])
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, title_justify="left")
    table.add_column("time (UTC)", no_wrap=True)
    table.add_column("note", no_wrap=True)
    table.add_column("event", no_wrap=True)
    table.add_column("detail", overflow="fold", min_width=20)
    for ts, nid, h in rows:
        detail = Text(_detail(h))
        if h.cause and h.cause != "caller" and h.cause.rpartition(":")[2].strip() not in detail.plain:
            detail.append(f"\ncause: {h.cause}", style="dim")
        marker = "▶ " if nid == lin.id else "  "
        table.add_row(f"{ts:%Y-%m-%d}\n{ts:%H:%M:%S.%f}"[:-3], marker + nid, h.type, detail)
    return table
