"""kill -9 of every kind of process mid-operation (issue 28's attack figures), shared by
``tests/reliability/test_attacks.py`` (reduced size) and ``scripts/attack.py`` (full size).

Each scenario runs ``cycles`` cycles. A cycle clones a fresh database from the
scenario's template (tables made, prefilled notes for the rebuild and reembed kinds),
starts the *victim* (the process kind under attack) and, for the kinds that serve
writers, a *writer* beside it, waits until they are under way, sleeps a random
0.2..``seconds`` s, sends SIGKILL to the victim (then to the writer), and checks:

- the next open works (``open_fabric`` of the database; for ``runner``, a new runner
  catch-up, ``ProjectionAdmin.run(once=True)`` through the CLI's ``admin_fabric``), and
  for ``rebuild`` / ``reembed`` the next rebuild / the resumed migration finishes;
- every acknowledged operation is readable: an operation is acknowledged when the child
  wrote its id (``n <note id>`` or ``l <ledger entry id>``, one line, flushed) to its ack
  file after the call returned; a note by ``get`` and ``list``, an entry by paging the
  thread's ``entries``; each one that is not is counted ``lost``;
- ``projections verify`` finds 0 differences and ``audit verify`` is ok (else ``failures``).

Victims (:data:`KINDS`): ``bulk`` (``remember_many`` of ``batch`` notes in a loop),
``ledger`` (a conversation appender, ``extend`` of 10 entries in a loop), ``runner`` (the
``projections run`` command's function beside a writer opened with
``inline_projections=False``), ``rebuild`` (``ProjectionAdmin.rebuild(blue_green=True)``
in a loop beside a writer) and ``reembed`` (``Fabric.reembed`` between 384 and 256
dimensions in a loop beside a writer). Processes come from a ``forkserver`` that has
imported memfabric once, so a cycle costs its work, not an interpreter start.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import random
import re
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from memfabric.adapters import open_fabric
from memfabric.adapters.audit import verify_chain
from memfabric.adapters.embedders import HashEmbedder
from memfabric.domain.errors import FabricError
from memfabric.projections.rebuild import ProjectionAdmin

CTX = mp.get_context("forkserver")
CTX.set_forkserver_preload(["tests.reliability._kills"])
TENANT = "kill"
ACK = re.compile(r"^([nl]) ([0-9a-f]{12})$")
KINDS = ("bulk", "ledger", "runner", "rebuild", "reembed")
PREFILL = {"bulk": 0, "ledger": 0, "runner": 0, "rebuild": 1200, "reembed": 600}


# ------------------------------------------------------------------ children
def _acks(path: str) -> Any:
    return open(path, "a", buffering=1)  # line-buffered: each ack reaches the kernel at once


def _bulk(dsn: str, path: str, batch: int = 100) -> None:
    """remember_many of ``batch`` notes in a loop; acks every id after each call."""
    with open_fabric(dsn) as fabric, _acks(path) as acks:
        notes = fabric.scope(TENANT, "u", "bulk")
        for i in range(10**9):
            items = [{"kind": "fact", "content": f"bulk row {i} item {j} code{i}x{j}"} for j in range(batch)]
            made = notes.remember_many(items, consolidate=False)
            acks.write("".join(f"n {m.id}\n" for m in made))


def _ledger(dsn: str, path: str) -> None:
    """A conversation appender: ``extend`` of 10 entries in a loop; acks every entry id."""
    with open_fabric(dsn) as fabric, _acks(path) as acks:
        ledger = fabric.scope(TENANT, "u", "ledger").conversation()
        for i in range(10**9):
            got = ledger.extend([{"role": "user" if j % 2 else "assistant", "text": f"turn {i}.{j} of the talk"}
                                 for j in range(10)])
            acks.write("".join(f"l {e.id}\n" for e in got))


def _writer(dsn: str, path: str, inline: bool = True) -> None:
    """One ``remember`` at a time in a loop (``inline``: projections in the writer's
    transaction, else for a separate runner, not awaited); acks every id."""
    with open_fabric(dsn, inline_projections=inline, await_projections=False) as fabric, _acks(path) as acks:
        notes = fabric.scope(TENANT, "u", "writer")
        for i in range(10**9):
            acks.write(f"n {notes.remember(kind='fact', content=f'streamed {i} word{i}', consolidate=False).id}\n")


def _runner(dsn: str, path: str) -> None:
    """``memfabric projections run`` (its command function), output to /dev/null."""
    import sys

    from memfabric.adapters.cli.projections import run_command

    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - the child's whole life
    with _acks(path) as marks:
        marks.write("started\n")
    run_command(once=False, poll=0.2, interval=60.0, batch=50, dsn=dsn, data_dir=None, as_json=True)


def _rebuilder(dsn: str, path: str) -> None:
    """Blue-green rebuilds of every projection in a loop; a line per finished one."""
    with open_fabric(dsn) as fabric, _acks(path) as marks:
        admin = ProjectionAdmin.for_fabric(fabric)
        marks.write("started\n")
        while True:
            admin.rebuild(blue_green=True, batch=200)
            marks.write("rebuilt\n")


def _reembedder(dsn: str, path: str) -> None:
    """``reembed`` to the other of 384 / 256 dimensions in a loop; a line per switch."""
    with open_fabric(dsn) as fabric, _acks(path) as marks:
        marks.write("started\n")
        while True:
            dim = 256 if fabric.service.embedder.dim == 384 else 384
            fabric.reembed(HashEmbedder(dim), batch=64)
            marks.write(f"switched {dim}\n")


VICTIM: dict[str, Callable[..., None]] = {
    "bulk": _bulk, "ledger": _ledger, "runner": _runner, "rebuild": _rebuilder, "reembed": _reembedder}
WRITER: dict[str, bool | None] = {"bulk": None, "ledger": None, "runner": False, "rebuild": True, "reembed": True}


# ------------------------------------------------------------------ the parent
def read_acks(path: str) -> list[tuple[str, str]]:
    """The complete ack lines of ``path`` as ``(kind, id)`` pairs (``n`` note, ``l``
    ledger entry); a line cut by the kill is not an acknowledgement."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        text = f.read()
    return [(m[1], m[2]) for line in text.split("\n")[:-1] if (m := ACK.match(line))]


def _wait_for(path: str, timeout: float, proc: Any) -> None:
    """Until ``path`` has a complete line (the child is under way) or ``proc`` died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.is_alive():
        with contextlib.suppress(FileNotFoundError), open(path) as f:
            if "\n" in f.read(4096):
                return
        time.sleep(0.02)


def _kill(proc: Any) -> bool:
    """SIGKILL ``proc`` and reap it; whether it was still running (a kill mid-operation)."""
    alive = proc.is_alive()
    if proc.pid is not None and alive:
        os.kill(proc.pid, signal.SIGKILL)
    proc.join(30)
    return alive


@contextlib.contextmanager
def template(dsn: str, kind: str, prefill: int | None = None) -> Iterator[str]:
    """A database on ``dsn``'s server made ready for ``kind`` (tables, ``prefill``
    notes: default :data:`PREFILL`), used as the template of each cycle's database;
    dropped afterwards. Yields its name."""
    server = make_conninfo(dsn, dbname="postgres")
    name = f"mf_kill_tpl_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {conninfo_to_dict(dsn)['dbname']}")
    try:
        with open_fabric(make_conninfo(dsn, dbname=name)) as fabric:
            n = PREFILL[kind] if prefill is None else prefill
            notes = fabric.scope(TENANT, "u", "base")
            for start in range(0, n, 200):
                notes.remember_many([{"kind": "fact", "content": f"base fact {i} topic{i % 97}"}
                                     for i in range(start, min(n, start + 200))], consolidate=False)
        yield name
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextlib.contextmanager
def cycle_database(dsn: str, template_name: str) -> Iterator[str]:
    """A fresh database cloned from ``template_name``; dropped afterwards."""
    server = make_conninfo(dsn, dbname="postgres")
    name = f"mf_kill_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {template_name}")
    try:
        yield make_conninfo(dsn, dbname=name)
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _ledger_ids(fabric: Any) -> set[str]:
    ledger = fabric.scope(TENANT, "u", "ledger").conversation()
    ids: set[str] = set()
    cursor = None
    while True:
        page = ledger.entries(cursor, limit=500)
        ids.update(e.id for e in page.entries)
        if page.next_cursor is None:
            return ids
        cursor = page.next_cursor


def _listed(fabric: Any) -> set[str]:
    ids: set[str] = set()
    for thread in ("bulk", "writer"):
        notes, cursor = fabric.scope(TENANT, "u", thread), None
        while True:
            page = notes.list(limit=1000, cursor=cursor)
            ids.update(n.id for n in page.items)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
    return ids


def check(dsn: str, acked: list[tuple[str, str]], kind: str) -> tuple[int, int]:
    """After a kill: ``(lost, failures)``. Opens the database (a failing open is a
    failure), for ``runner`` first catches up with a new runner (the CLI's admin open,
    ``once``); then each acknowledged id must be readable (``get`` and listed, or among
    the ledger's entries); for ``rebuild`` the next blue-green rebuild and for ``reembed``
    the resumed migration must finish; ``projections verify`` and ``audit verify`` must
    be clean. An exception is left to the caller (:func:`kill_cycle` counts it)."""
    failures = 0
    if kind == "runner":
        from memfabric.adapters.cli.fabric import admin_fabric

        with admin_fabric(dsn, None) as admin:
            ProjectionAdmin.for_fabric(admin).run(admin.dsn, once=True)
    with open_fabric(dsn) as fabric:
        entries = _ledger_ids(fabric) if any(k == "l" for k, _ in acked) else set()
        listed = _listed(fabric) if any(k == "n" for k, _ in acked) else set()
        lost = 0
        for k, nid in acked:
            if k == "l":
                lost += nid not in entries
                continue
            thread = "bulk" if kind == "bulk" else "writer"
            try:
                fabric.scope(TENANT, "u", thread).get(nid)
            except FabricError:
                lost += 1
                continue
            lost += nid not in listed
        if kind == "rebuild":  # the next rebuild finishes (left-over *_bg tables are rebuilt)
            ProjectionAdmin.for_fabric(fabric).rebuild(blue_green=True, batch=500)
        elif kind == "reembed":  # the interrupted migration resumes and switches
            fabric.reembed(HashEmbedder(256 if fabric.service.embedder.dim == 384 else 384), batch=256)
        failures += sum(1 for rep in ProjectionAdmin.for_fabric(fabric).verify() if not rep.ok)
        failures += not verify_chain(fabric).ok
    return lost, failures


def kill_cycle(dsn: str, tmp: str, kind: str, seconds: float, rng: random.Random) -> dict[str, int]:
    """One cycle of ``kind`` on the database ``dsn`` (see the module doc): the figures
    ``kills`` (0 or 1: whether the victim was still running when killed), ``acked``,
    ``lost``, ``failures``."""
    tag = uuid.uuid4().hex[:8]
    victim_path, writer_path = os.path.join(tmp, f"victim-{tag}"), os.path.join(tmp, f"writer-{tag}")
    open(victim_path, "w").close()
    open(writer_path, "w").close()
    procs = []
    inline = WRITER[kind]
    if inline is not None:
        procs.append(CTX.Process(target=_writer, args=(dsn, writer_path, inline)))
    victim = CTX.Process(target=VICTIM[kind], args=(dsn, victim_path))
    procs.insert(0, victim)
    for p in procs:
        p.start()
    try:
        _wait_for(victim_path, 120.0, victim)
        if inline is not None:
            _wait_for(writer_path, 120.0, procs[1])
        time.sleep(rng.uniform(0.2, max(0.2, seconds)))
    finally:
        alive = [_kill(p) for p in procs]
    acked = read_acks(victim_path) + read_acks(writer_path)
    try:
        lost, failures = check(dsn, acked, kind)
    except Exception as exc:  # noqa: BLE001 - a failing open or verify is a finding, reported
        print(f"kill {kind}: the check after the kill raised {exc!r}", file=sys.stderr)
        lost, failures = 0, 1
    return {"kills": int(alive[0]), "acked": len(acked), "lost": lost, "failures": failures + (not alive[0])}


def kill_kind(dsn: str, tmp: str, kind: str, cycles: int, seconds: float = 1.5,
              seed: int = 28, prefill: int | None = None) -> dict[str, int]:
    """``cycles`` kill cycles of ``kind`` (:data:`KINDS`), each on a fresh clone of the
    kind's template database on ``dsn``'s server; ``seconds``: the longest random delay
    before the kill; ``prefill``: notes in the template (default :data:`PREFILL`).
    Returns attempts (acknowledged operations), failures (a victim that had died before
    its kill, broken verifies, failed opens), leaks (0), lost, kills."""
    rng = random.Random(seed)
    total = {"attempts": 0, "failures": 0, "leaks": 0, "lost": 0, "kills": 0}
    with template(dsn, kind, prefill) as tpl:
        for _ in range(cycles):
            with cycle_database(dsn, tpl) as db:
                got = kill_cycle(db, tmp, kind, seconds, rng)
            total["attempts"] += got["acked"]
            total["kills"] += got["kills"]
            total["lost"] += got["lost"]
            total["failures"] += got["failures"]
    return total
