"""Issue 16: the pure visibility rules (``memfabric.domain.visibility``), checked
exhaustively over a small universe of scopes."""

from __future__ import annotations

import itertools

from memfabric.domain.scope import Scope
from memfabric.domain.visibility import (
    DEFAULT_VISIBILITY,
    lock_scope,
    meets,
    of_consent,
    stored_consent,
    visible,
    write_locks,
)

VIS = ("thread", "resource", "tenant")
SCOPES = [Scope(tenant_id=t, resource_id=r, thread_id=th)
          for t in ("acme", "globex") for r in (None, "alice", "bob") for th in (None, "t1", "t2")]


def test_stored_consent_is_explicit_and_old_consent_reads_thread() -> None:
    assert stored_consent("fact", None) == {"visibility": "resource", "granted": None, "purposes": []}
    assert stored_consent("procedure", None)["visibility"] == "resource"  # type: ignore[index]
    assert stored_consent("file", None)["visibility"] == "thread"  # type: ignore[index]
    assert stored_consent("working", None) is None
    assert stored_consent("fact", {"visibility": None, "granted": True, "purposes": ["x"]}) == {
        "visibility": "resource", "granted": True, "purposes": ["x"]}
    assert stored_consent("fact", {"visibility": "thread", "granted": None, "purposes": []})["visibility"] == "thread"  # type: ignore[index]
    assert of_consent(None) == of_consent({}) == of_consent({"granted": True}) == "thread"
    assert set(DEFAULT_VISIBILITY) == {"fact", "procedure", "file", "working", "episode"}


def test_visibility_table() -> None:
    home = Scope(tenant_id="acme", resource_id="alice", thread_id="t1")
    readers = [home, Scope(tenant_id="acme", resource_id="alice", thread_id="t2"),
               Scope(tenant_id="acme", resource_id="alice"), Scope(tenant_id="acme", resource_id="bob", thread_id="t1"),
               Scope(tenant_id="globex", resource_id="alice", thread_id="t1")]
    table = {v: [visible(home, v, r) for r in readers] for v in VIS}  # type: ignore[arg-type]
    assert table == {"thread": [True, False, False, False, False],
                     "resource": [True, True, True, False, False],
                     "tenant": [True, True, True, True, False]}


def test_a_write_meets_only_visible_notes_under_a_lock_every_modifier_takes() -> None:
    """Whatever may change a note (home h, visibility nv) holds ``lock_scope(h, nv)``:
    so two writers that may both fold into or insert the same fact are serialised."""
    for w, h in itertools.product(SCOPES, SCOPES):
        for v, nv in itertools.product(VIS, VIS):
            if not meets(w, v, h, nv):  # type: ignore[arg-type]
                continue
            assert visible(h, nv, w), (w, v, h, nv)  # type: ignore[arg-type]
            assert lock_scope(h, nv) in write_locks(w, v), (w, v, h, nv)  # type: ignore[arg-type]
            assert v == nv or h == w  # another scope's note only at the same visibility
    # two writers of one group (different threads) share the group lock
    a, b = (Scope(tenant_id="acme", resource_id="alice", thread_id=t) for t in ("t1", "t2"))
    assert write_locks(a, "resource") & write_locks(b, "resource") == {Scope(tenant_id="acme", resource_id="alice")}
    assert write_locks(a, "thread") & write_locks(b, "thread") == set()
