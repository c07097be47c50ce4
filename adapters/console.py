"""``memfabric console``: a local web console for admins and auditors (Starlette +
Jinja2, served by uvicorn; no JavaScript, no CDN: one stylesheet ships in the package).

Pages (stable paths, plain HTML):

- ``/``: the scope tree, tenants → resources (users) → threads, each with its counts of
  live, superseded, held and forgotten notes (keyset pages of 50, ``?after=KEY``); at a
  scope (a thread, or ``-`` for an absent part: ``?tenant=T&resource=U&thread=-`` is the
  user-level scope itself), its notes (``Notes.list``: keyset pages, ``?cursor=``) filtered by kind, tag,
  subject and validity date, or a search (``?q=``: ``Notes.recall`` with each explain
  row drawn as a bar of its parts), its held notes and its tombstones.
- ``/notes/<id>``: a note's content, or its tombstone only once forgotten; its lineage as
  a timeline (every event of every note of the supersession chain with its recorded
  time, the validity it gives and the decision's reason in words), links, promotion.
  ``?tenant=&resource=&thread=`` name its scope; without them the scope is found from
  the note-scope index and the tombstones (a page lists the scopes when several hold
  the id).
- ``/log``: decoded events (:func:`memfabric.adapters.audit.read_log`), 50 per page after
  ``?after=POSITION``, filtered by ``tenant``, ``type`` and ``since``/``until`` times; each
  row's integrity (a tampered row is flagged, the others shown); the newest audit
  checkpoint and, with ``?verify=1``, an ``audit verify`` without checkpointing
  (:func:`memfabric.adapters.audit.verify_chain`), kept and shown until the next one.
- ``/projections``: status, lag and last error of each projection; rebuild and verify
  buttons only when the console is not read-only.

Access: the console binds to ``127.0.0.1`` by default and then answers only requests
whose ``Host`` is a loopback name (DNS-rebinding protection). Bound to any other
address it refuses to start without a token (``--token`` or ``$MEMFABRIC_CONSOLE_TOKEN``);
with a token every request must carry ``Authorization: Bearer <token>`` or the cookie
that visiting ``/?token=<token>`` once sets (HttpOnly, SameSite=Strict). Every form
that changes something carries a per-process form token. ``read_only`` (``--read-only``,
or a role that cannot write the log, such as the auditor of docs/roles.md) opens the
fabric with ``open_fabric(read_only=True)`` and offers no action. The console never
writes a note, and no page shows a forgotten note's content (it is crypto-shredded; the
pages show the tombstone's clear fields only).

Requires the optional extra: ``pip install 'memfabric[console]'``.
"""

from __future__ import annotations

import hmac
import json
import math
import os
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from memfabric.adapters import console_read as read
from memfabric.adapters.audit import AuditReport, verify_chain
from memfabric.adapters.mcp_server import is_loopback
from memfabric.domain.errors import (
    EventIntegrityError,
    FabricError,
    NoteNotFoundError,
    ProjectionError,
    SettingsError,
)
from memfabric.domain.inputs import NOTE_ID_RE, Scoring
from memfabric.domain.results import Explain, HistoryEntry
from memfabric.domain.scope import Scope
from memfabric.projections.rebuild import ProjectionAdmin

__all__ = ["ConsoleSettings", "build_app", "serve"]

TOKEN_ENV = "MEMFABRIC_CONSOLE_TOKEN"
COOKIE = "memfabric_console"
HERE = Path(__file__).parent
PAGE = 50
NONE = "-"
"""The URL value of an absent resource or thread (``resource=-``): no scope id starts
with ``-``."""
CSP = ("default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self';"
       " frame-ancestors 'none'; base-uri 'none'")
ASGIApp = Callable[[MutableMapping[str, Any], Any, Any], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    """How the console serves: ``host``/``port`` (default ``127.0.0.1:8765``),
    ``token`` (required off loopback), ``read_only`` (no rebuild/verify actions)."""

    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    read_only: bool = True


def check_settings(settings: ConsoleSettings) -> ConsoleSettings:
    """``settings`` with the token from ``$MEMFABRIC_CONSOLE_TOKEN`` when not given;
    ``SettingsError`` for a non-loopback host without a token or a bad port."""
    token = settings.token or os.environ.get(TOKEN_ENV) or None
    if token is not None and (not token.isprintable() or any(ch.isspace() for ch in token)):
        # a token of spaces was accepted and then matched by ``/?token=%20``: no guard at all
        raise SettingsError("token: must be printable characters without spaces")
    if not is_loopback(settings.host) and not token:
        raise SettingsError(f"token: listening on {settings.host} needs --token or ${TOKEN_ENV}")
    if not 0 < settings.port < 65536:
        raise SettingsError("port: must be between 1 and 65535")
    return ConsoleSettings(host=settings.host, port=settings.port, token=token, read_only=settings.read_only)


# ---------------------------------------------------------------- access
def token_guard(app: ASGIApp, token: str | None) -> ASGIApp:
    """ASGI middleware: with a ``token``, answer 401 unless the request carries
    ``Authorization: Bearer <token>`` or the console cookie; ``?token=<token>`` sets the
    cookie and redirects to the same path without it. Comparisons are constant-time."""
    if not token:
        return app
    bearer, cookie_value = f"Bearer {token}".encode(), token.encode()

    async def guarded(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await app(scope, receive, send)
            return
        request = Request(scope)
        given = request.query_params.get("token")
        if given is not None and hmac.compare_digest(given.encode(), cookie_value):
            rest = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "token"])
            response: Response = RedirectResponse(request.url.path + (f"?{rest}" if rest else ""), 303)
            response.set_cookie(COOKIE, token, httponly=True, samesite="strict")
            await response(scope, receive, send)
            return
        header = request.headers.get("authorization", "").encode()
        cookie = request.cookies.get(COOKIE, "").encode()
        if hmac.compare_digest(header, bearer) or hmac.compare_digest(cookie, cookie_value):
            await app(scope, receive, send)
            return
        response = HTMLResponse("<h1>401</h1><p>This console needs its token: open /?token=…</p>", 401,
                                headers={"www-authenticate": 'Bearer realm="memfabric-console"'})
        await response(scope, receive, send)

    return guarded


def allowed_hosts(host: str) -> list[str]:
    """``Host`` names accepted: the loopback names when bound to loopback, else any."""
    return ["127.0.0.1", "localhost", "::1", "[::1]"] if is_loopback(host) else ["*"]


# ---------------------------------------------------------------- the app
class Console:
    """The console's state: the open ``fabric``, its tombstones, the last audit result
    and the Jinja2 environment. Page methods return HTML responses."""

    def __init__(self, fabric: Any, settings: ConsoleSettings) -> None:
        self.fabric = fabric
        self.settings = settings
        self.read_only = settings.read_only or bool(getattr(fabric, "read_only", False))
        self.tombs = read.Tombstones(fabric)
        self.form_token = secrets.token_urlsafe(24)
        self.audit: tuple[datetime, AuditReport] | None = None
        self.action: dict[str, Any] | None = None
        self._actions = threading.Lock()
        self.env = Environment(loader=FileSystemLoader(HERE / "console_templates"),
                               autoescape=select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)
        self.env.globals.update(url=_url, when=_when, NONE=NONE)
        self.env.filters.update(num=_num, clip=_clip, part=_part, field=_field)

    def render(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        """Template ``name`` with ``context``, sent with the console's security headers."""
        html = self.env.get_template(name).render(read_only=self.read_only, section=name.split(".")[0],
                                                  **context)
        return HTMLResponse(html, status, headers={"content-security-policy": CSP,
                                                   "x-content-type-options": "nosniff",
                                                   "referrer-policy": "no-referrer",
                                                   "cache-control": "no-store"})

    # ------------------------------------------------------------ scopes
    def scopes(self, request: Request) -> HTMLResponse:
        """``GET /``: a level of the scope tree, or a full scope's notes (see module doc)."""
        q = request.query_params
        prefix, scope = _prefix(q)
        self.tombs.refresh()
        rows, more = ([], None) if len(prefix) == 3 else read.scope_rows(
            self.fabric, self.tombs, prefix, after=q.get("after") or None, limit=PAGE)
        ctx: dict[str, Any] = {"prefix": prefix, "scope": scope, "rows": rows, "more": more,
                               "q": q, "level": ("tenant", "resource", "thread")[min(len(prefix), 2)]}
        if scope is not None and len(prefix) == 3:  # a tree level links to its own scope's notes
            ctx.update(self._scope_notes(scope, prefix, q))
        return self.render("scopes.html", **ctx)

    def _scope_notes(self, scope: Scope, prefix: tuple[str, ...], q: Any) -> dict[str, Any]:
        """The notes panel of ``scope``: a search (``hits``: note, explain row, bars) or a
        list page (``listed``, ``next_cursor``), its held ids and its tombstones."""
        notes = self.fabric.scope(scope.tenant_id, scope.resource_id, scope.thread_id)
        kind = q.get("kind") or None
        tags = [q["tag"]] if q.get("tag") else None
        subject = q.get("subject") or None
        valid_at = _time(q.get("valid_at"), "valid_at")
        out: dict[str, Any] = {"held": read.held_ids(self.fabric, scope),
                               "tombstones": self.tombs.matching(prefix)[:PAGE]}
        if q.get("q"):
            kinds = (kind,) if kind else ("fact", "procedure", "file")
            res = notes.recall(q["q"], kinds=kinds, as_of=valid_at, top_k=20, tags=tags, subject=subject)
            top = max((e.score for e in res.explain), default=0.0)
            out["hits"] = [(h, e, _bars(e, top)) for h, e in zip(res.hits, res.explain, strict=True)]
            return out
        page = notes.list(kinds=kind, tags=tags, subject=subject, valid_at=valid_at,
                          include_superseded=bool(q.get("superseded")), limit=PAGE,
                          cursor=q.get("cursor") or None)
        out["listed"] = page.items
        out["next_cursor"] = page.next_cursor
        return out

    # ------------------------------------------------------------ a note
    def note(self, request: Request) -> HTMLResponse:
        """``GET /notes/<id>``: content or tombstone, chain, links and timeline."""
        note_id = request.path_params["note_id"]
        if not NOTE_ID_RE.fullmatch(note_id):
            raise FabricError("id: must be 12 lowercase hex digits")
        q = request.query_params
        if q.get("tenant"):
            _, scope = _prefix(q)
            assert scope is not None
        else:
            self.tombs.refresh()
            found = read.homes(self.fabric, self.tombs, note_id)
            if not found:
                raise NoteNotFoundError(f"no note {note_id!r} in any scope")
            if len(found) > 1:
                return self.render("choose.html", note_id=note_id, scopes=found)
            scope = found[0]
        notes = self.fabric.scope(scope.tenant_id, scope.resource_id, scope.thread_id)
        note = notes.get(note_id)
        lin = notes.lineage(note_id)
        history: dict[str, list[HistoryEntry]] = {}
        gone = {row["id"] for row in lin.chain if row.get("forgotten")} | ({note_id} if note.forgotten else set())
        for nid in [*lin.predecessors, note_id, *lin.successors]:
            history[nid] = notes.history(nid)
        rows = read.timeline(lin, history, gone)
        return self.render("note.html", note=note, scope=scope, lineage=lin, timeline=rows,
                           chain=[_chain_row(r) for r in lin.chain],
                           reason=None if note.forgotten else read.decision_words(note.decision))

    # ------------------------------------------------------------ the log
    def log(self, request: Request) -> HTMLResponse:
        """``GET /log``: a page of decoded events with their integrity, the newest audit
        checkpoint and the last ``audit verify`` (run now with ``verify=1``)."""
        q = request.query_params
        tenant = q.get("tenant") or None
        if tenant is not None:
            Scope(tenant_id=tenant)  # a ValidationError names the field
        types = frozenset(q.getlist("type")) - {""}
        unknown = types - set(read.EVENT_TYPES)
        if unknown:
            raise FabricError(f"type: unknown event type {sorted(unknown)[0]!r}")
        since, until = _time(q.get("since"), "since"), _time(q.get("until"), "until")
        after = _int(q.get("after"), "after")
        if after is None:
            after = read.position_at(self.fabric, since) if since is not None else 0
        if q.get("verify"):
            self.audit = (datetime.now(UTC), verify_chain(self.fabric, checkpoint=False))
        page = read.log_page(self.fabric, after=after, tenant=tenant, types=types, until=until, limit=PAGE)
        head = self.fabric.engine.head()
        return self.render("log.html", page=page, after=after, head=head, q=q, types=read.EVENT_TYPES,
                           chosen=types, chain=read.chain_head(self.fabric), audit=self.audit,
                           failed=sum(1 for e in page.entries if e.integrity == "failed"),
                           newest=max(0, head - PAGE))

    # ------------------------------------------------------------ projections
    def projections(self, request: Request) -> HTMLResponse:
        """``GET /projections``: status of each projection and the last action's result."""
        rows = ProjectionAdmin.for_fabric(self.fabric).status()
        return self.render("projections.html", rows=rows, action=self.action, form_token=self.form_token,
                           names=[s.name for s in rows])

    async def act(self, request: Request) -> Response:
        """``POST /projections``: ``do`` = ``rebuild`` or ``verify`` of ``projection``
        (a name or ``all``); 403 when read-only or without the form token."""
        form = await request.form()
        token = str(form.get("form_token", ""))
        if self.read_only or not hmac.compare_digest(token.encode(), self.form_token.encode()):
            return self.render("error.html", 403, lines=["this console is read-only" if self.read_only
                                                         else "the form token is missing or wrong"])
        do, name = str(form.get("do", "")), str(form.get("projection", "all"))
        if do not in ("rebuild", "verify"):
            raise FabricError("do: must be rebuild or verify")
        self.action = await run_in_threadpool(self._run_action, do, name)
        return RedirectResponse("/projections", 303)

    def _run_action(self, do: str, name: str) -> dict[str, Any]:
        """Run one action at a time: ``{do, projection, ok, lines, at, seconds}``."""
        admin = ProjectionAdmin.for_fabric(self.fabric)
        with self._actions:
            t0 = time.perf_counter()
            try:
                ok, lines = self._replay(admin, do, name)
            except ProjectionError as exc:  # a changed row stops the replay: say where
                ok, lines = False, [f"stopped at notification {exc.notification_id} ({exc.topic}):"
                                    f" {_clip(' '.join(str(exc.cause).split()), 300)}; see /log"]
        return {"do": do, "projection": name, "ok": ok, "lines": lines, "at": datetime.now(UTC),
                "seconds": time.perf_counter() - t0}

    @staticmethod
    def _replay(admin: ProjectionAdmin, do: str, name: str) -> tuple[bool, list[str]]:
        """Rebuild or verify ``name``: ``(ok, lines in words)``."""
        if do == "rebuild":
            report = admin.rebuild(name)
            return True, [f"rebuilt {', '.join(report.projections)}: {report.events} events, {report.notes} notes,"
                          f" position {report.position}"]
        reports = admin.verify(name, show=5)
        return all(r.ok for r in reports), [
            f"{r.projection} {r.table}: " + (f"{r.live_rows} rows identical at position {r.position}" if r.ok
                                             else f"{r.differences} rows differ (live {r.live_rows}, replay "
                                                  f"{r.replayed_rows})") for r in reports]


def _chain_row(row: dict[str, Any]) -> dict[str, Any]:
    """A lineage chain row for display: never the content of a forgotten note."""
    shown = dict(row)
    if row.get("forgotten"):
        shown["content"] = None
    shown["reason_words"] = None if row.get("forgotten") else read.decision_words(row.get("reason"))
    return shown


"""The default weights the console's search uses (``Notes.recall`` without ``scoring``)."""


def _bars(e: Explain, top: float) -> list[tuple[str, float, float]]:
    """The parts of an explain row's score as ``(name, value, share of the best score)``:
    relevance, recency and importance (times the default weights of
    :class:`~memfabric.domain.inputs.Scoring`, which the console's recall uses), link."""
    weights = Scoring()
    parts = [("relevance", e.relevance), ("recency", weights.recency_weight * e.recency),
             ("importance", weights.importance_weight * e.importance), ("link", e.link_score)]
    scale = top if top > 0 else 1.0
    return [(name, value, max(0.0, value) / scale) for name, value in parts]


def _prefix(q: Any) -> tuple[tuple[str, ...], Scope | None]:
    """The scope prefix named by ``tenant``/``resource``/``thread`` (``-``: absent part)
    and its :class:`Scope` (``None`` at the top); ``ValidationError`` for a bad id."""
    parts: list[str] = []
    for key in ("tenant", "resource", "thread"):
        value = q.get(key)
        if value is None or (key == "tenant" and value == ""):
            break
        parts.append("" if value in ("", NONE) else value)
    if not parts:
        return (), None
    scope = Scope(tenant_id=parts[0], resource_id=(parts[1] or None) if len(parts) > 1 else None,
                  thread_id=(parts[2] or None) if len(parts) > 2 else None)
    return tuple(parts), scope


def _time(value: str | None, name: str) -> datetime | None:
    from memfabric.adapters.serialize import parse_time

    return parse_time(value or None, name)


def _int(value: str | None, name: str) -> int | None:
    if value in (None, ""):
        return None
    try:
        n = int(value)
    except ValueError:
        raise FabricError(f"{name}: must be a whole number") from None
    if n < 0:
        raise FabricError(f"{name}: must not be negative")
    return n


def _url(path: str, **params: Any) -> str:
    """``path?k=v...`` without the ``None`` and empty values (lists repeat the key)."""
    items: list[tuple[str, str]] = []
    for k, v in params.items():
        for one in (v if isinstance(v, list | tuple | set | frozenset) else [v]):
            if one not in (None, ""):
                items.append((k, str(one)))
    return path + (f"?{urlencode(items)}" if items else "")


def _when(ts: Any) -> str:
    return f"{ts:%Y-%m-%d %H:%M:%S}" if isinstance(ts, datetime) else "—"


def _num(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.{digits}f}"


def _clip(text: Any, n: int = 200) -> str:
    s = "" if text is None else str(text)
    return s if len(s) <= n else s[: n - 1] + "…"


def _field(value: Any, n: int = 80) -> str:
    """A decoded event field for a table cell: JSON for lists and dicts, clipped."""
    text = json.dumps(value, ensure_ascii=False, default=str) if isinstance(value, dict | list) else str(value)
    return _clip(text, n)


def _part(share: float, width: int = 240) -> int:
    """A bar's width in pixels for ``share`` of the best score (a positive share is at
    least one pixel wide, so every part that counts is seen)."""
    share = max(0.0, min(1.0, share))
    return max(1, round(share * width)) if share > 0 else 0


def _errors(exc: BaseException) -> list[str]:
    from memfabric.adapters.serialize import error_lines

    return error_lines(exc)


def build_app(fabric: Any, settings: ConsoleSettings | None = None) -> Starlette:
    """The console as an ASGI app over an open ``fabric`` (``settings`` default:
    loopback, read-only). Bad input answers 400, an unknown note 404, each with the
    error in words."""
    settings = check_settings(settings or ConsoleSettings())
    console = Console(fabric, settings)

    def handled(page: Callable[[Request], Response]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                return await run_in_threadpool(page, request)
            except NoteNotFoundError as exc:
                return console.render("error.html", 404, lines=_errors(exc))
            except EventIntegrityError as exc:  # a changed row: the log page flags it
                return console.render("error.html", 409, lines=[*_errors(exc), "see /log and run audit verify"])
            except (ValidationError, FabricError, ValueError) as exc:
                return console.render("error.html", 400, lines=_errors(exc))
        return endpoint

    async def act(request: Request) -> Response:
        try:
            return await console.act(request)
        except (ValidationError, FabricError, ValueError) as exc:
            return console.render("error.html", 400, lines=_errors(exc))

    routes = [
        Route("/", handled(console.scopes)),
        Route("/notes/{note_id}", handled(console.note)),
        Route("/log", handled(console.log)),
        Route("/projections", handled(console.projections), methods=["GET", "HEAD"]),
        Route("/projections", act, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "console_static"), name="static"),
    ]
    app = Starlette(routes=routes, middleware=[
        Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts(settings.host)),
        Middleware(TokenGuard, token=settings.token)])
    app.state.console = console
    return app


class TokenGuard:
    """:func:`token_guard` as a Starlette middleware class."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.guarded = token_guard(app, token)

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        await self.guarded(scope, receive, send)


def serve(fabric: Any, settings: ConsoleSettings) -> None:
    """Serve the console over ``fabric`` until the process is stopped (uvicorn);
    ``SettingsError`` for a non-loopback host without a token."""
    import uvicorn

    settings = check_settings(settings)
    uvicorn.run(build_app(fabric, settings), host=settings.host, port=settings.port, log_level="warning")
