"""The ``memfabric`` command line (typer + rich).

Every command takes ``--dsn`` (default ``$MEMFABRIC_DSN``; with neither, the embedded
PostgreSQL in ``--data-dir`` or ``$MEMFABRIC_HOME``).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from datetime import datetime
from typing import Annotated, Any, Optional

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from memfabric.adapters.bootstrap import Fabric, open_fabric
from memfabric.domain.errors import FabricError

app = typer.Typer(
    name="memfabric",
    help="memfabric: an event-sourced memory fabric for AI agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
console = Console()

DsnOpt = Annotated[Optional[str], typer.Option("--dsn", help="PostgreSQL DSN (default $MEMFABRIC_DSN, else embedded).")]
DataDirOpt = Annotated[Optional[str], typer.Option("--data-dir", help="Embedded server data directory.")]
TenantOpt = Annotated[str, typer.Option("--tenant", "-t", help="Tenant id.")]
ResourceOpt = Annotated[Optional[str], typer.Option("--resource", "-r", help="Resource id.")]
ThreadOpt = Annotated[Optional[str], typer.Option("--thread", help="Thread id.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _open(dsn: str | None, data_dir: str | None, **kwargs: Any) -> Fabric:
    return open_fabric(dsn, data_dir=data_dir, **kwargs)


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return value


def _fail(exc: Exception) -> None:
    console.print(f"[red]error:[/red] {exc}")
    raise typer.Exit(code=2)


@app.command()
def remember(
    content: Annotated[str, typer.Argument(help="The note's text.")],
    tenant: TenantOpt,
    resource: ResourceOpt = None,
    thread: ThreadOpt = None,
    kind: Annotated[str, typer.Option(help="fact | procedure | file")] = "fact",
    path: Annotated[Optional[str], typer.Option(help="Path of a file note.")] = None,
    tag: Annotated[Optional[list[str]], typer.Option("--tag", help="A tag (repeatable).")] = None,
    subject: Annotated[Optional[str], typer.Option(help="Subject key for exact supersession.")] = None,
    importance: Annotated[Optional[float], typer.Option(help="Importance in [0, 1].")] = None,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Remember one note and print its id and outcome (inserted, folded, superseding)."""
    fields: dict[str, Any] = {"kind": kind, "content": content, "tags": tag or []}
    for key, value in (("path", path), ("subject", subject), ("importance", importance)):
        if value is not None:
            fields[key] = value
    try:
        with _open(dsn, data_dir) as fabric:
            note = fabric.scope(tenant, resource, thread).remember(**fields)
    except (ValidationError, FabricError) as exc:
        _fail(exc)
        return
    if as_json:
        print(json.dumps(_jsonable({k: v for k, v in asdict(note).items() if k != "scope"} | {"scope": note.scope.key})))
    else:
        console.print(f"{note.id} {note.outcome}" + (f" (supersedes {note.supersedes})" if note.supersedes else ""))


@app.command()
def recall(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    tenant: TenantOpt,
    resource: ResourceOpt = None,
    thread: ThreadOpt = None,
    kind: Annotated[Optional[list[str]], typer.Option("--kind", help="Kinds (repeatable; default fact, file).")] = None,
    top_k: Annotated[int, typer.Option("--top-k", help="Hits to return.")] = 10,
    budget: Annotated[Optional[int], typer.Option(help="Token budget.")] = None,
    as_of: Annotated[Optional[datetime], typer.Option("--as-of", help="Instant (ISO 8601 with offset).")] = None,
    mode: Annotated[str, typer.Option(help="hybrid | vector | lexical")] = "hybrid",
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Recall notes with their explain rows."""
    try:
        with _open(dsn, data_dir) as fabric:
            res = fabric.scope(tenant, resource, thread).recall(
                query, kinds=tuple(kind) if kind else ("fact", "file"), top_k=top_k,
                budget=budget, as_of=as_of, mode=mode,
            )
    except (ValidationError, FabricError) as exc:
        _fail(exc)
        return
    if as_json:
        out = {
            "hits": [{k: v for k, v in asdict(h).items() if k != "scope"} | {"scope": h.scope.key} for h in res.hits],
            "explain": [asdict(e) for e in res.explain],
        }
        print(json.dumps(_jsonable(out)))
        return
    console.print(recall_table(res))


def recall_table(res: Any, title: str | None = None) -> Table:
    """A rich table of hits and their explain rows."""
    table = Table(title=title, show_lines=False)
    for col in ("#", "id", "kind", "content", "score", "sim", "lex", "recency", "imp", "valid"):
        table.add_column(col, overflow="fold", no_wrap=col in ("#", "id", "kind", "score"),
                         ratio=4 if col == "content" else None)
    for i, (hit, ex) in enumerate(zip(res.hits, res.explain, strict=True), 1):
        lo, hi = ex.valid
        valid = f"[{lo:%Y-%m-%d} .. {hi:%Y-%m-%d})" if lo and hi else (
            f"[{lo:%Y-%m-%d} ..)" if lo else (f"[.. {hi:%Y-%m-%d})" if hi else "always"))
        table.add_row(
            str(i), hit.id, hit.kind, (hit.content or "")[:70], f"{ex.score:.3f}",
            "-" if ex.similarity is None else f"{ex.similarity:.3f}",
            "-" if ex.lexical is None else f"{ex.lexical:.3f}",
            f"{ex.recency:.2f}", f"{ex.importance:.2f}", valid,
        )
    return table


@app.command()
def lineage(
    note_id: Annotated[str, typer.Argument(metavar="ID", help="12-hex note id.")],
    tenant: TenantOpt,
    resource: ResourceOpt = None,
    thread: ThreadOpt = None,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a note's lineage as a timeline: supersession chain, folds, links, tombstone."""
    try:
        with _open(dsn, data_dir) as fabric:
            notes = fabric.scope(tenant, resource, thread)
            lin = notes.lineage(note_id)
            history = {nid: notes.history(nid) for nid in [*lin.predecessors, note_id, *lin.successors]}
    except (ValidationError, FabricError) as exc:
        _fail(exc)
        return
    if as_json:
        print(json.dumps(_jsonable({
            "lineage": asdict(lin),
            "history": {k: [asdict(h) for h in v] for k, v in history.items()},
        })))
        return
    console.print(lineage_table(lin, history))


def lineage_table(lin: Any, history: dict[str, list[Any]]) -> Table:
    """Timeline of every event along a note's supersession chain."""
    rows = []
    for nid, entries in history.items():
        for h in entries:
            rows.append((h.timestamp, nid, h))
    rows.sort(key=lambda r: r[0])
    table = Table(title=f"lineage of {lin.id}: {len(lin.predecessors)} predecessor(s), "
                        f"{len(lin.successors)} successor(s), {len(lin.folds)} fold(s)")
    for col in ("time (UTC)", "note", "event", "cause", "detail"):
        table.add_column(col, overflow="fold", no_wrap=col in ("note", "event"))
    for ts, nid, h in rows:
        f = h.fields
        if h.type in ("Remembered", "Folded"):
            detail = str(f.get("content"))[:60]
        elif h.type == "Superseded":
            detail = f"by {f.get('successor_id')}, valid_to {f.get('valid_to')}"
        elif h.type == "Forgotten":
            detail = f"{f.get('reason')} by {f.get('requested_by')}, hmac {str(f.get('content_hmac'))[:16]}…"
        elif h.type == "Repointed":
            detail = f"{f.get('from_path')} → {f.get('to_path')}"
        else:
            detail = ", ".join(f"{k}={v}" for k, v in f.items() if k != "cause")[:60]
        marker = "▶ " if nid == lin.id else "  "
        table.add_row(f"{ts:%Y-%m-%d %H:%M:%S.%f}"[:-3], marker + nid, h.type, h.cause, detail)
    return table


@app.command()
def demo(
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Run the main job on the embedded default: remember, fold, supersede, recall with
    explain and a budget, tenant isolation, lineage and forget."""
    from memfabric.adapters.demo import run_demo

    try:
        run_demo(console, dsn=dsn, data_dir=data_dir)
    except (ValidationError, FabricError) as exc:
        _fail(exc)


def _register_optional() -> None:
    """Attach the admin/auditor commands when their module is present."""
    try:
        from memfabric.adapters import cli_admin
    except ImportError:
        return
    cli_admin.register(app)


_register_optional()


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
