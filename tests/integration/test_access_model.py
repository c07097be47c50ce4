"""Issue 33: a model-based test of governed access on both backends.

Random notes (kinds, visibilities, homes), random principals (profiles), random grants
and revokes, random calls (recall, list, count, get, remember, profile changes) from
random scopes; after every call the result is compared with a plain Python model of the rule
(:func:`expected`): **no read outside a profile, no grant ignored** (a recall that asks
for more hits than exist returns exactly the readable notes), and **every governed
call is recorded exactly once**, with the outcome the model predicts; a write is served
exactly when the profile allows it, and a refused one writes nothing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from memfabric.domain import visibility
from memfabric.domain.errors import AccessDenied, NoteNotFoundError
from memfabric.domain.principal import MemoryProfile
from memfabric.domain.scope import Scope

SCOPES = [Scope(tenant_id=t, resource_id=r, thread_id=th)
          for t in ("acme", "globex") for r in ("u1", "u2", None) for th in ("t1", "t2", None)
          if not (r is None and th is not None)]
PATTERNS = ["acme/*", "acme/u1/*", "acme/u2/*", "acme/u1", "acme/u1/t1", "acme/*/t2", "globex/*", "acme", "*"]
KINDS = ["fact", "procedure", "file"]
VIS = ["thread", "resource", "tenant"]
AGENTS = ["a1", "a2", "a3"]


@dataclass
class Model:
    notes: dict[str, tuple[Scope, str, str]] = field(default_factory=dict)
    """id -> (home, kind, visibility)."""
    profiles: dict[str, MemoryProfile] = field(default_factory=dict)
    grants: set[tuple[str, str]] = field(default_factory=set)
    """(agent, note id)."""
    calls: dict[str, list[str]] = field(default_factory=dict)
    """agent -> the outcomes of its governed calls, in order."""

    def readable(self, agent: str, reader: Scope, note_id: str, kinds: list[str]) -> bool:
        home, kind, vis = self.notes[note_id]
        p = self.profiles[agent]
        if kind not in kinds or kind not in p.read_kinds or home.tenant_id != reader.tenant_id:
            return False
        if (agent, note_id) in self.grants:
            return True
        return (visibility.visible(home, vis, reader) and vis in p.visibility  # type: ignore[arg-type]
                and any(pt.matches(*home.sql()) for pt in p.patterns()))

    def expected(self, agent: str, reader: Scope, kinds: list[str]) -> set[str] | None:
        """The ids a read of ``kinds`` from ``reader`` serves, ``None`` when it is denied."""
        p = self.profiles[agent]
        if not p.covers(reader) or not set(kinds) <= set(p.read_kinds):
            return None
        return {i for i in self.notes if self.readable(agent, reader, i, kinds)}


def random_profile(rng: random.Random) -> dict[str, Any]:
    return {"read_kinds": rng.sample(KINDS, rng.randint(1, 3)),
            "recall_scope": rng.sample(PATTERNS, rng.randint(1, 3)),
            "visibility": rng.sample(VIS, rng.randint(1, 3)),
            "writes": rng.choice(["none", "commit", "commit"]),
            "write_kinds": rng.sample(KINDS, rng.randint(1, 3))}


def may_write(p: MemoryProfile, scope: Scope, kind: str, vis: str) -> bool:
    """The write rule, stated independently: the kind and visibility allowed, and every
    scope whose notes the write may consolidate with inside one pattern."""
    if p.writes != "commit" or kind not in p.write_kinds or vis not in p.visibility:
        return False
    t, r, _ = scope.sql()
    if vis == "tenant":
        return any(pt.tenant in (None, t) and pt.resource is None and pt.thread is None for pt in p.patterns())
    if vis == "resource" and r:
        return any(pt.tenant in (None, t) and pt.resource in (None, r) and pt.thread is None
                   for pt in p.patterns())
    return p.covers(scope)


def _write_notes(fab: Any, rng: random.Random, model: Model, n: int) -> None:
    for i in range(n):
        home, kind, vis = rng.choice(SCOPES), rng.choice(KINDS), rng.choice(VIS)
        fields: dict[str, Any] = {"kind": kind, "content": f"zebra crossing number {i} w{i}x",
                                  "consent": {"visibility": vis}}
        if kind == "file":
            fields["path"] = f"docs/f{i}.md"
        note = fab.scope(home.tenant_id, home.resource_id, home.thread_id).remember(consolidate=False, **fields)
        model.notes[note.id] = (home, kind, vis)


def _read(fab: Any, rng: random.Random, model: Model, agent: str) -> None:
    reader = rng.choice(SCOPES)
    handle = fab.scope(reader.tenant_id, reader.resource_id, reader.thread_id).as_principal(agent)
    kinds = rng.sample(KINDS, rng.randint(1, 3))
    want = model.expected(agent, reader, kinds)
    op = rng.choice(["recall", "list", "count"])
    try:
        if op == "recall":
            got = {h.id for h in handle.recall("zebra crossing", kinds=kinds, top_k=100, min_relevance=0,
                                               expand_links=False).hits}
        elif op == "list":
            got = {n.id for n in handle.list(kinds=kinds, limit=1000).items}
        else:
            got = set(range(handle.count(kinds=kinds)))  # type: ignore[arg-type]
            want = None if want is None else set(range(len(want)))  # type: ignore[arg-type]
    except AccessDenied:
        assert want is None, (op, agent, reader, kinds)
        model.calls.setdefault(agent, []).append("denied")
        return
    assert want is not None, (op, agent, reader, kinds, "served a denied call")
    assert got == want, (op, agent, reader.key, kinds, sorted(got ^ want))
    model.calls.setdefault(agent, []).append("served")


def _get(fab: Any, rng: random.Random, model: Model, agent: str) -> None:
    reader = rng.choice(SCOPES)
    note_id = rng.choice(list(model.notes))
    handle = fab.scope(reader.tenant_id, reader.resource_id, reader.thread_id).as_principal(agent)
    p = model.profiles[agent]
    allowed = p.covers(reader) and model.readable(agent, reader, note_id, list(p.read_kinds))
    try:
        assert handle.get(note_id).id == note_id
    except AccessDenied:
        assert not allowed, (agent, reader, note_id)
        model.calls.setdefault(agent, []).append("denied")
        return
    except NoteNotFoundError:
        assert not allowed, (agent, reader, note_id)
        model.calls.setdefault(agent, []).append("error")
        return
    assert allowed, (agent, reader.key, note_id, model.notes[note_id], "served outside the profile")
    model.calls.setdefault(agent, []).append("served")


def _write(fab: Any, rng: random.Random, model: Model, agent: str) -> None:
    p = model.profiles[agent]
    covered = [s for s in SCOPES if p.covers(s)]
    fair = rng.random() < 0.6  # mostly calls the profile might allow, so both outcomes are exercised
    scope = rng.choice(covered) if fair and covered else rng.choice(SCOPES)
    kind = rng.choice(list(p.write_kinds) or KINDS) if fair else rng.choice(KINDS)
    vis = rng.choice(list(p.visibility)) if fair and rng.random() < 0.7 else rng.choice(VIS)
    handle = fab.scope(scope.tenant_id, scope.resource_id, scope.thread_id).as_principal(agent)
    allowed = may_write(model.profiles[agent], scope, kind, vis)
    i = len(model.notes)
    fields: dict[str, Any] = {"content": f"zebra crossing written {i} w{i}y", "consent": {"visibility": vis}}
    if kind == "file":
        fields["path"] = f"docs/w{i}.md"
    before = {n.id for n in fab.scope(scope.tenant_id, scope.resource_id, scope.thread_id).list(limit=1000).items}
    try:
        note = handle.remember(kind=kind, consolidate=False, **fields)
    except AccessDenied:
        assert not allowed, (agent, scope.key, kind, vis, "a write the profile allows was refused")
        after = {n.id for n in fab.scope(scope.tenant_id, scope.resource_id, scope.thread_id).list(limit=1000).items}
        assert after == before  # nothing written
        model.calls.setdefault(agent, []).append("denied")
        return
    assert allowed, (agent, scope.key, kind, vis, "a write outside the profile was served")
    model.notes[note.id] = (scope, kind, vis)
    model.calls.setdefault(agent, []).append("served")


def _grant(fab: Any, rng: random.Random, model: Model, agent: str) -> None:
    note_id = rng.choice(list(model.notes))
    home = model.notes[note_id][0]
    owner = fab.scope(home.tenant_id, home.resource_id, home.thread_id)
    if rng.random() < 0.6:
        assert owner.grant(note_id, agent) is ((agent, note_id) not in model.grants)
        model.grants.add((agent, note_id))
    else:
        assert owner.revoke(note_id, agent) is ((agent, note_id) in model.grants)
        model.grants.discard((agent, note_id))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_profiles_grants_and_calls(fab: Any, seed: int) -> None:
    rng = random.Random(seed)
    model = Model()
    _write_notes(fab, rng, model, 24)
    for agent in AGENTS:
        model.profiles[agent] = fab.principals.define(agent, random_profile(rng)).profile
    for _ in range(90):
        agent = rng.choice(AGENTS)
        step = rng.random()
        if step < 0.4:
            _read(fab, rng, model, agent)
        elif step < 0.6:
            _get(fab, rng, model, agent)
        elif step < 0.75:
            _write(fab, rng, model, agent)
        elif step < 0.93:
            _grant(fab, rng, model, agent)
        else:
            model.profiles[agent] = fab.principals.define(agent, random_profile(rng)).profile
    for agent in AGENTS:
        log = fab.access_log(principal=agent, limit=100_000)
        assert [r.outcome for r in log] == model.calls.get(agent, []), agent
