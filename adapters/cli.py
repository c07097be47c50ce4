"""The ``memfabric`` command line (typer + rich).

Every command takes ``--dsn`` (default ``$MEMFABRIC_DSN``; with neither, the embedded
PostgreSQL in ``--data-dir`` or ``$MEMFABRIC_HOME``).

Errors print one line each, ``error: <field>: <message>``, on stderr; with ``--json``
an error is one JSON object on stderr, ``{"error": "<message>", "type": "<class>"}``.
Exit codes: 0 success; 1 a check failed; 2 bad input or another named error.

Times given without a timezone (``--as-of 2026-01-01``, ``2026-01-01T12:00``) mean UTC.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Annotated, Any, NoReturn

import psycopg
import typer
from eventsourcing import persistence as es_persistence
from pydantic import ValidationError
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

try:  # typer >= 0.20 carries its own copy of click
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - an older typer on click
    from click import exceptions as click_exceptions  # type: ignore[no-redef]

from memfabric.adapters.bootstrap import Fabric, open_fabric
from memfabric.adapters.embedded import require_database
from memfabric.domain.errors import FabricError
from memfabric.adapters.serialize import jsonable
from memfabric.domain.inputs import BLOCK_LABEL_RE, NOTE_ID_RE
from memfabric.domain.scope import SCOPE_ID_RE


def _plain_flags(params: Iterable[Any]) -> None:
    """Blank the ``<bool>`` type typer shows after every flag (``--json <bool>``)."""
    for param in params:
        if getattr(param, "is_flag", False) and getattr(param, "metavar", "") is None:
            param.metavar = ""


class HelpGroup(TyperGroup):
    """A typer group whose help shows flags (``--json``, ``--help``) without a type."""

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)
        _plain_flags(params)
        return params

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None:
            _plain_flags(cmd.get_params(ctx))
        return cmd

    def main(self, args: Sequence[str] | None = None, *pargs: Any, **kwargs: Any) -> Any:
        """Click's entry point; with ``--json`` among the arguments a usage error (a
        missing option, a bad value, an unknown command) is one JSON object on stderr,
        ``{"error": ..., "type": "UsageError"}``, exit code 2, like every other error."""
        argv = list(sys.argv[1:] if args is None else args)
        if "--json" not in argv or not kwargs.get("standalone_mode", True):
            return super().main(args, *pargs, **kwargs)
        kwargs["standalone_mode"] = False
        try:
            code = super().main(argv, *pargs, **kwargs)
        except click_exceptions.ClickException as exc:
            sys.stderr.write(json.dumps({"error": " ".join(exc.format_message().split()),
                                         "type": type(exc).__name__}) + "\n")
            sys.exit(exc.exit_code)
        except typer.Abort:
            sys.stderr.write(json.dumps({"error": "aborted", "type": "Abort"}) + "\n")
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    name="memfabric",
    cls=HelpGroup,
    help=(
        "memfabric: an event-sourced memory fabric for AI agents.\n\n"
        "Every command uses the PostgreSQL server given by --dsn or $MEMFABRIC_DSN; with "
        "neither, it starts an embedded server whose data lives in --data-dir or "
        "$MEMFABRIC_HOME/pg. Try 'memfabric demo'."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

DsnOpt = Annotated[str | None, typer.Option(
    "--dsn", metavar="URL", help="PostgreSQL URL (default $MEMFABRIC_DSN, else the embedded server).")]
DataDirOpt = Annotated[str | None, typer.Option(
    "--data-dir", metavar="DIR", help="Data directory of the embedded server (default $MEMFABRIC_HOME/pg).")]
TenantOpt = Annotated[str, typer.Option("--tenant", "-t", metavar="ID", help="Tenant id.")]
ResourceOpt = Annotated[str | None, typer.Option(
    "--resource", "-r", metavar="ID", help="Resource id (e.g. a user).")]
ThreadOpt = Annotated[str | None, typer.Option("--thread", metavar="ID", help="Thread id (e.g. a conversation).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
EmbedderOpt = Annotated[str | None, typer.Option(
    "--embedder", metavar="NAME",
    help="hash, hash:<dim>, wordllama or minilm (default: the one the database records).")]

PATTERNS = {
    SCOPE_ID_RE.pattern: "must be 1-128 letters, digits or ._:@- starting with a letter or digit",
    NOTE_ID_RE.pattern: "must be 12 lowercase hex digits",
    BLOCK_LABEL_RE.pattern: "must be 1-64 lowercase letters, digits or ._- starting with a letter or digit",
}
"""Plain words for the regular expressions of the input models."""

HANDLED = (ValidationError, FabricError, psycopg.Error, es_persistence.PersistenceError)
"""Errors a command reports in one line each (exit 2) instead of a traceback (eventsourcing
re-raises psycopg's ``DataError``, ``OperationalError`` ... as its own ``PersistenceError``s)."""


def make_embedder(name: str | None) -> Any:
    """The embedder ``--embedder NAME`` names (``None``: the database's recorded one);
    ``FabricError`` for an unknown name or a missing extra."""
    if name is None:
        return None
    from memfabric.adapters.embedders import embedder_from_name

    try:
        return embedder_from_name(name)
    except (ValueError, ImportError) as exc:
        raise FabricError(f"embedder: {' '.join(str(exc).split())}") from None


def env_read_only() -> bool:
    """``$MEMFABRIC_READ_ONLY`` is 1, yes or true: every command opens read-only."""
    return os.environ.get("MEMFABRIC_READ_ONLY", "").lower() in ("1", "yes", "true")


@contextmanager
def quiet_fallback() -> Iterator[None]:
    """Silence ``open_fabric``'s read-only fallback warning: a command reports a role
    that may only read itself (a write is one ``error:`` line naming the privilege)."""
    logger = logging.getLogger("memfabric.adapters.bootstrap")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _open(dsn: str | None, data_dir: str | None, embedder: str | None = None, **kwargs: Any) -> Fabric:
    """``open_fabric`` for a command: read-only under ``$MEMFABRIC_READ_ONLY`` or for a
    role that may not write the log (issue 27: an auditor's ``recall`` works)."""
    if env_read_only():
        kwargs["read_only"] = True
    with quiet_fallback():
        return open_fabric(dsn, data_dir=data_dir, embedder=make_embedder(embedder), **kwargs)


def parse_time(value: str | None, field: str = "as_of") -> datetime | None:
    """An ISO 8601 instant; without a timezone it means UTC (``2026-01-01`` is midnight UTC)."""
    if value is None:
        return None
    try:
        ts = datetime.fromisoformat(value.strip())
    except ValueError:
        raise FabricError(f"{field}: {value!r} is not an ISO 8601 time (e.g. 2026-01-31 or "
                          "2026-01-31T12:00:00+01:00)") from None
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def error_lines(exc: BaseException | str) -> list[str]:
    """One readable line per error: ``field: message`` for each pydantic error (no URL,
    no input dump), else the exception's text on one line."""
    if isinstance(exc, str):
        return [exc]
    if isinstance(exc, ValidationError):
        lines = []
        for e in exc.errors(include_url=False, include_input=False):
            msg = str(e["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
            msg = PATTERNS.get(str(e.get("ctx", {}).get("pattern")), msg)
            field = ".".join(str(part) for part in e["loc"])
            # a model-level (cross-field) error has no loc; its message names the field
            lines.append(f"{field}: {msg}" if field else msg)
        return lines
    text = " ".join(str(exc).split())
    if isinstance(exc, psycopg.OperationalError | es_persistence.OperationalError):
        text = f"cannot use the database: {text}"
    return [text or type(exc).__name__]


def fail(exc: BaseException | str, code: int = 2, *, as_json: bool = False) -> NoReturn:
    """Print ``error: ...`` lines on stderr (with ``as_json`` one JSON object
    ``{"error": ..., "type": ...}``) and exit with ``code``."""
    lines = error_lines(exc)
    if as_json:
        kind = "Error" if isinstance(exc, str) else type(exc).__name__
        sys.stderr.write(json.dumps({"error": "; ".join(lines), "type": kind}) + "\n")
        sys.stderr.flush()
        raise typer.Exit(code=code)
    for line in lines:
        err_console.print(Text(f"error: {line}", style="red"))
    raise typer.Exit(code=code)


@app.command()
def remember(
    content: Annotated[str, typer.Argument(metavar="CONTENT", help="The note's text.")],
    tenant: TenantOpt,
    resource: ResourceOpt = None,
    thread: ThreadOpt = None,
    kind: Annotated[str, typer.Option(metavar="KIND", help="fact, procedure, file or working.")] = "fact",
    block: Annotated[str | None, typer.Option(
        metavar="LABEL", help="Label of the working-memory block (required with --kind working).")] = None,
    path: Annotated[str | None, typer.Option(
        metavar="PATH", help="Path of the file (required with --kind file).")] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", metavar="TAG", help="A tag (repeatable).")] = None,
    subject: Annotated[str | None, typer.Option(
        metavar="KEY", help="Subject key: a new note with the same key supersedes the old one.")] = None,
    importance: Annotated[float | None, typer.Option(
        metavar="0..1", help="Importance between 0 and 1 (default 0.5).")] = None,
    embedder: EmbedderOpt = None,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the note as JSON.")] = False,
) -> None:
    """Remember one note and print its id and outcome (inserted, folded, superseding, preceding)."""
    if importance is not None and not (0.0 <= importance <= 1.0):  # also rejects nan
        fail("importance: must be a number between 0 and 1", as_json=as_json)
    fields: dict[str, Any] = {"kind": kind, "content": content}
    for key, value in (("block", block), ("path", path), ("tags", tag or None), ("subject", subject),
                       ("importance", importance)):
        if value is not None:
            fields[key] = value
    try:
        with _open(dsn, data_dir, embedder) as fabric:
            note = fabric.scope(tenant, resource, thread).remember(**fields)
    except HANDLED as exc:
        fail(exc, as_json=as_json)
    if as_json:
        print(json.dumps(jsonable({k: v for k, v in asdict(note).items() if k != "scope"} | {"scope": note.scope.key})))
    else:
        console.print(f"{note.id} {note.outcome}" + (f" (supersedes {note.supersedes})" if note.supersedes else ""))


@app.command()
def recall(
    query: Annotated[str, typer.Argument(metavar="QUERY", help="What to look for.")],
    tenant: TenantOpt,
    resource: ResourceOpt = None,
    thread: ThreadOpt = None,
    kind: Annotated[list[str] | None, typer.Option(
        "--kind", metavar="KIND", help="Kind to search: fact, procedure or file (repeatable; default fact and file).")] = None,
    top_k: Annotated[int, typer.Option("--top-k", metavar="N", help="Most hits to return.")] = 10,
    budget: Annotated[int | None, typer.Option(
        metavar="TOKENS", help="Token budget: stop at the first hit that does not fit.")] = None,
    as_of: Annotated[str | None, typer.Option(
        "--as-of", metavar="TIME",
        help="Recall as of this instant (ISO 8601, e.g. 2026-01-31 or 2026-01-31T12:00:00+01:00; no timezone means UTC).")] = None,
    mode: Annotated[str, typer.Option(metavar="MODE", help="hybrid, vector or lexical.")] = "hybrid",
    known_at: Annotated[str | None, typer.Option(
        "--known-at", metavar="TIME",
        help="Recall what the fabric had recorded at this instant (issue 31; ISO 8601, no timezone means UTC).")] = None,
    embedder: EmbedderOpt = None,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    replica: ReplicaOpt = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print hits and explain rows (with recency and importance) as JSON.")] = False,
) -> None:
    """Recall the notes that best match QUERY, with their scores."""
    try:
        options: dict[str, Any] = {"top_k": top_k, "budget": budget, "as_of": parse_time(as_of), "mode": mode,
                                   "known_at": parse_time(known_at, "known_at")}
        if kind:
            options["kinds"] = tuple(kind)
        if not dsn:
            require_database(data_dir)
        with _open(dsn, data_dir, embedder, replicas=replica or None) as fabric:
            res = fabric.scope(tenant, resource, thread).recall(query, **options)
            hint = None
            if not res.hits:  # an unknown tenant says so (as `log` does), exit 2
                from memfabric.adapters.cli_admin import require_tenant

                require_tenant(fabric, tenant)
                hint = recall_hint(fabric, tenant, resource)
    except HANDLED as exc:
        fail(exc, as_json=as_json)
    if as_json:
        out = {
            "hits": [{k: v for k, v in asdict(h).items() if k != "scope"} | {"scope": h.scope.key} for h in res.hits],
            "explain": [asdict(e) for e in res.explain],
        } | ({"hint": hint} if hint else {})
        print(json.dumps(jsonable(out)))
    elif res.hits:
        console.print(recall_table(res))
    else:
        console.print("no matching notes" + (f"\nhint: {hint}" if hint else ""))


def recall_hint(fabric: Fabric, tenant: str, resource: str | None) -> str | None:
    """Why a tenant-level recall (no ``--resource``) found nothing although the tenant
    has notes: they belong to resources, which a tenant-level scope does not see (unless
    shared tenant-wide). Names up to three of them and how to ask; ``None`` otherwise."""
    if resource is not None:
        return None
    from memfabric.projections import tables

    with psycopg.connect(fabric.dsn) as conn:
        rows = conn.execute(
            f"SELECT resource_id, count(*) FROM {tables.NOTE_SCOPE} WHERE tenant_id = %s AND resource_id <> ''"  # noqa: S608
            " AND NOT held GROUP BY resource_id ORDER BY count(*) DESC, resource_id", (tenant,)).fetchall()
    if not rows:
        return None
    named = ", ".join(f"{r} ({n})" for r, n in rows[:3]) + (", ..." if len(rows) > 3 else "")
    return (f"tenant {tenant!r} has no tenant-level notes that match; its notes belong to {len(rows)} "
            f"resource(s): {named}. A tenant-level scope sees only notes shared tenant-wide: "
            f"pass --resource ID (and --thread ID) to recall as that resource, or 'memfabric list --tenant "
            f"{tenant} --content' to browse the whole tenant")


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


@app.command()
def lineage(
    note_id: Annotated[str, typer.Argument(metavar="ID", help="Note id (12 hex digits).")],
    tenant: Annotated[str | None, typer.Option(
        "--tenant", "-t", metavar="ID", help="Tenant id (default: found from the log when the id is unambiguous).")] = None,
    resource: ResourceOpt = None,
    thread: ThreadOpt = None,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    replica: ReplicaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a note's lineage as a timeline: supersession chain, folds, links, tombstone.

    The note can be given by id alone when only one scope has a note of that id."""
    from memfabric.adapters.cli_admin import note_scope, notes_fabric

    try:
        with notes_fabric(dsn, data_dir, read=True, replicas=replica) as fabric:
            notes = note_scope(fabric, note_id, tenant, resource, thread)
            lin = notes.lineage(note_id)
            history = {nid: notes.history(nid) for nid in [*lin.predecessors, note_id, *lin.successors]}
    except HANDLED as exc:
        fail(exc, as_json=as_json)
    if as_json:
        print(json.dumps(jsonable({
            "lineage": asdict(lin),
            "history": {k: [asdict(h) for h in v] for k, v in history.items()},
        })))
        return
    console.print(lineage_table(lin, history, title=lineage_summary(lin)))


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


@app.command()
def demo(
    embedder: EmbedderOpt = None,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print only the summary, as JSON.")] = False,
) -> None:
    """Walk through the main job: remember, fold, supersede, recall, forget, working memory.

    Each run uses a fresh thread and writes demo notes for the tenants acme and globex, to the embedded server \
or to the --dsn database. Recall is shown with its scores, a token budget, as of an earlier instant and across \
tenants; lineage shows the supersession chain."""
    from memfabric.adapters.demo import run_demo

    import io

    try:
        out = Console(file=io.StringIO(), width=100) if as_json else console
        summary = run_demo(out, dsn=dsn, data_dir=data_dir, embedder=make_embedder(embedder))
    except HANDLED as exc:
        fail(exc, as_json=as_json)
    if as_json:
        print(json.dumps(jsonable(summary)))


def _register_optional() -> None:
    """Attach the admin/auditor commands when their module is present."""
    try:
        from memfabric.adapters import cli_admin
    except ImportError:
        return
    cli_admin.register(app)


_register_optional()

from memfabric.adapters.cli_replica import ReplicaOpt, register as _register_replica  # noqa: E402

_register_replica(app)

from memfabric.adapters.cli_mcp import register as _register_mcp  # noqa: E402 - imports mcp lazily

_register_mcp(app)

from memfabric.adapters.cli_console import register as _register_console  # noqa: E402 - imports starlette lazily

_register_console(app)

from memfabric.adapters.cli_access import register as _register_access  # noqa: E402 - issue 33

_register_access(app)

from memfabric.adapters.cli_entities import register as _register_entities  # noqa: E402 - issue 32

_register_entities(app)


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
