"""The consolidation rule and LocalIndex, pure (no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from memfabric.domain.consolidation import (
    LocalIndex,
    Neighbour,
    NeighbourQuery,
    choose,
    decide,
    is_candidate,
    windows_disjoint,
)
from memfabric.domain.subjects import RuleSubjectExtractor, SubjectKey
from memfabric.domain.note import Note
from memfabric.domain.policy import normalized_tokens, token_hash
from memfabric.domain.scope import Scope

T0 = datetime(2025, 1, 1, tzinfo=UTC)
DIM = 4
SCOPE = Scope(tenant_id="acme")


def vec(*xs: float) -> np.ndarray:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


EXTRACT = RuleSubjectExtractor()


def key(text: str) -> SubjectKey:
    found = EXTRACT.extract(text)
    assert found is not None, text
    return found


def q(kind: str = "fact", text: str = "a b", v: np.ndarray | None = None, path: str | None = None,
      subject: str | None = None, inferred: SubjectKey | None = None) -> NeighbourQuery:
    return NeighbourQuery(kind, vec(1, 0, 0, 0) if v is None else v, token_hash(normalized_tokens(text)),
                          path, subject, inferred)


def nb(note_id: str = "n1", sim: float = 0.5, text: str = "other", path: str | None = None,
       subject: str | None = None, valid_from: datetime | None = None,
       valid_to: datetime | None = None, inferred: SubjectKey | None = None) -> Neighbour:
    return Neighbour(note_id, sim, token_hash(normalized_tokens(text)), path, subject, valid_from, valid_to,
                     inferred)


def note(note_id: str, text: str, *, kind: str = "fact", path: str | None = None,
         subject: str | None = None) -> Note:
    n = Note.remember(
        scope=SCOPE, note_id=note_id, kind=kind, content=text, path=path, block=None, subject=subject,
        t_ref=None, valid_from=None, valid_to=None, keywords=[], tags=[], source_entry_ids=[],
        context=None, links=[], supersedes=None, importance=0.5, consent=None, embedding=None,
        embedder_id=None, dim=DIM, token_count=1, cause="caller")
    n.collect_events()
    return n


# ------------------------------------------------------------------ is_candidate
def test_file_meets_only_same_path() -> None:
    assert is_candidate(q("file", path="a.py"), nb(path="a.py"))
    assert not is_candidate(q("file", path="a.py"), nb(path="b.py"))


def test_subject_meets_only_same_subject() -> None:
    assert is_candidate(q(subject="city"), nb(subject="city"))
    assert not is_candidate(q(subject="city"), nb(subject="job"))
    assert not is_candidate(q(subject="city"), nb())


def test_plain_meets_only_subjectless() -> None:
    assert is_candidate(q(), nb())
    assert not is_candidate(q(), nb(subject="city"))


# ------------------------------------------------------------------ choose
def test_choose_prefers_exact_tokens_then_a_changed_subject_and_never_similarity_alone() -> None:
    exact = nb("ex", sim=0.2, text="a b")
    near = nb("near", sim=0.99)
    far = nb("far", sim=0.1)
    assert choose(q(), [near, exact, far]) == exact
    assert choose(q(), [far, near]) is None  # cosine only proposes candidates
    assert choose(q(), [nb("s", sim=1.0, subject="x")]) is None
    assert choose(q(), []) is None
    munich = q(text="Alice moved to Munich", inferred=key("Alice moved to Munich"))
    berlin = nb("berlin", sim=0.3, inferred=key("Alice lives in Berlin"))
    bob = nb("bob", sim=0.9, inferred=key("Bob lives in Berlin"))
    assert choose(munich, [bob, near, berlin]) == berlin


def test_choose_ties_go_to_earlier() -> None:
    munich = q(text="Alice moved to Munich", inferred=key("Alice moved to Munich"))
    a = nb("a", sim=0.9, inferred=key("Alice lives in Berlin"))
    b = nb("b", sim=0.9, inferred=key("Alice lives in Paris"))
    assert choose(munich, [a, b]) == a


# ------------------------------------------------------------------ decide
def test_decide_basic_outcomes() -> None:
    assert decide(q(), None, threshold=0.85) == "insert"
    assert decide(q(), nb(text="a b", sim=0.1), threshold=0.85) == "fold"
    assert decide(q(), nb(sim=0.99), threshold=0.85) == "insert"  # similarity alone never supersedes
    munich = q(text="Alice moved to Munich", inferred=key("Alice moved to Munich"))
    assert decide(munich, nb(sim=0.3, inferred=key("Alice lives in Berlin")), threshold=0.85) == "supersede"
    assert decide(munich, nb(sim=0.9, inferred=key("Alice works at Siemens")), threshold=0.85) == "insert"


def test_decide_keyed_writes_supersede_at_any_similarity() -> None:
    assert decide(q(subject="city"), nb(sim=0.0, subject="city"), threshold=0.85) == "supersede"
    assert decide(q("file", path="a.py"), nb(sim=-0.5, path="a.py"), threshold=0.85) == "supersede"
    assert decide(q("file", path="a.py", text="x"), nb(text="x", path="a.py"), threshold=0.85) == "fold"


def test_decide_disjoint_repeat_is_recurrence() -> None:
    old = nb(text="a b", valid_from=T0, valid_to=T0 + timedelta(days=1))
    later = T0 + timedelta(days=5)
    assert decide(q(), old, threshold=0.85, valid_from=later, valid_to=later + timedelta(days=1)) == "insert"
    assert decide(q(), old, threshold=0.85, valid_from=T0, valid_to=T0 + timedelta(hours=1)) == "fold"


def test_decide_older_news_precedes() -> None:
    newer = nb(sim=0.95, valid_from=T0 + timedelta(days=10), inferred=key("Alice lives in Berlin"))
    munich = q(text="Alice moved to Munich", inferred=key("Alice moved to Munich"))
    assert decide(munich, newer, threshold=0.85, valid_from=T0) == "precede"
    assert decide(munich, newer, threshold=0.85, valid_from=T0 + timedelta(days=11)) == "supersede"
    assert decide(munich, newer, threshold=0.85) == "supersede"


# ------------------------------------------------------------------ windows
@pytest.mark.parametrize(("a", "b", "disjoint"), [
    ((None, None), (None, None), False),
    ((T0, T0 + timedelta(days=1)), (T0 + timedelta(days=2), None), True),
    ((T0 + timedelta(days=2), None), (T0, T0 + timedelta(days=1)), True),
    ((T0, T0 + timedelta(days=1)), (T0 + timedelta(days=1), None), False),  # touching
    ((T0, T0 + timedelta(days=3)), (T0 + timedelta(days=1), T0 + timedelta(days=2)), False),
    ((None, T0), (T0 + timedelta(seconds=1), None), True),
])
def test_windows_disjoint(a: tuple[datetime | None, datetime | None],
                          b: tuple[datetime | None, datetime | None], disjoint: bool) -> None:
    assert windows_disjoint(a, b) is disjoint
    assert windows_disjoint(b, a) is disjoint


# ------------------------------------------------------------------ LocalIndex
def _index(prepared: bool) -> tuple[LocalIndex, list[np.ndarray]]:
    vectors = [vec(1, 0, 0, 0), vec(0, 1, 0, 0), vec(1, 0.1, 0, 0)]
    idx = LocalIndex(DIM, 1)  # capacity 1: rows must grow
    if prepared:
        idx.prepare(np.stack(vectors), 0.85)
    return idx, vectors


@pytest.mark.parametrize("prepared", [False, True])
def test_local_index_finds_exact_and_similar(prepared: bool) -> None:
    idx, vectors = _index(prepared)
    a = note("aaaaaaaaaaaa", "alpha beta")
    idx.add(a, vectors[0], token_hash(normalized_tokens("alpha beta")), 0)
    b = note("bbbbbbbbbbbb", "gamma")
    idx.add(b, vectors[1], token_hash(normalized_tokens("gamma")), 1)
    assert "aaaaaaaaaaaa" in idx and "zzz" not in idx
    query = NeighbourQuery("fact", vectors[2], token_hash(normalized_tokens("delta")), None, None)
    found = idx.candidates(query, T0, threshold=0.85, item=2)
    assert [n.note_id for n in found] == ["aaaaaaaaaaaa"]
    assert found[0].similarity == pytest.approx(float(vectors[0] @ vectors[2]), abs=1e-6)
    repeat = NeighbourQuery("fact", vectors[1], token_hash(normalized_tokens("Gamma!")), None, None)
    got = idx.candidates(repeat, T0, threshold=0.85, item=None)
    assert got[0].note_id == "bbbbbbbbbbbb" and got[0].tokens == repeat.token_hash
    other_kind = NeighbourQuery("procedure", vectors[0], token_hash(normalized_tokens("alpha beta")), None, None)
    assert idx.candidates(other_kind, T0, threshold=0.85) == []


def test_local_index_keys_by_path_and_subject() -> None:
    idx = LocalIndex(DIM)
    f = note("cccccccccccc", "file a", kind="file", path="a.py")
    idx.add(f, vec(1, 0, 0, 0), "h1", None)
    s = note("dddddddddddd", "lives in paris", subject="city")
    idx.add(s, vec(0, 0, 1, 0), "h2", None)
    file_q = NeighbourQuery("file", vec(0, 1, 0, 0), "h9", "a.py", None)
    assert [n.note_id for n in idx.candidates(file_q, T0, threshold=0.85)] == ["cccccccccccc"]
    assert idx.candidates(NeighbourQuery("file", vec(0, 1, 0, 0), "h9", "b.py", None), T0, threshold=0.85) == []
    subj_q = NeighbourQuery("fact", vec(0, 1, 0, 0), "h9", None, "city")
    assert [n.note_id for n in idx.candidates(subj_q, T0, threshold=0.85)] == ["dddddddddddd"]
    # a plain write never meets the subject note, even when identical (the index
    # proposes a superset; choose applies the rule)
    plain = NeighbourQuery("fact", vec(0, 0, 1, 0), "h2", None, None)
    assert choose(plain, idx.candidates(plain, T0, threshold=0.5)) is None


def test_local_index_skips_superseded_and_closed() -> None:
    idx = LocalIndex(DIM)
    a = note("eeeeeeeeeeee", "x y")
    idx.add(a, vec(1, 0, 0, 0), "hx", None)
    a.supersede(successor_id="ffffffffffff", valid_to=T0, cause="supersession:ffffffffffff")
    idx.touch(a)
    query = NeighbourQuery("fact", vec(1, 0, 0, 0), "hx", None, None)
    assert idx.candidates(query, T0, threshold=0.5) == []


def test_local_index_rehash_on_fold() -> None:
    idx = LocalIndex(DIM)
    a = note("aaaaaaaaaaab", "old text")
    idx.add(a, vec(1, 0, 0, 0), "old", None)
    idx.add(a, vec(0, 1, 0, 0), "new", None)
    assert idx.candidates(NeighbourQuery("fact", vec(0, 0, 0, 1), "old", None, None), T0, threshold=0.9) == []
    got = idx.candidates(NeighbourQuery("fact", vec(0, 0, 0, 1), "new", None, None), T0, threshold=0.9)
    assert [n.note_id for n in got] == ["aaaaaaaaaaab"]
