"""Issue 15, the shared-term linker and the link term of list candidates: pure parts
(no database): the terms of a note, the edges of a new note, and the ranking rule that
lets a list candidate linked to a seed hit displace a weak seed."""

from __future__ import annotations

import dataclasses
import math

from memfabric.domain import link_terms
from memfabric.domain.inputs import Scoring
from memfabric.domain.ranking import Ranking, rank
from tests.unit.test_ranking import AS_OF, cand, ids


def test_terms_are_stemmed_rare_words_without_stop_words_fillers_or_numbers() -> None:
    terms = link_terms.note_terms("Melanie: Wow, we went camping at the beach in 2023! It was awesome.")
    assert terms == ("beach", "camp", "melani", "went")
    assert link_terms.note_terms(None) == () and link_terms.note_terms("ok, yes, 42") == ()
    assert link_terms.note_terms("Camping, CAMPING, campers") == ("camp", "camper")


def test_terms_are_capped_and_deterministic() -> None:
    text = " ".join(f"word{chr(97 + i % 26)}{chr(97 + i // 26)}x" for i in range(200))
    terms = link_terms.note_terms(text)
    assert len(terms) == link_terms.MAX_TERMS
    assert terms == tuple(sorted(terms)) == link_terms.note_terms(text)


def test_edges_sum_the_idf_of_rare_shared_terms() -> None:
    earlier = {"camp": ["a", "b"], "beach": ["a"], "melani": [f"n{i}" for i in range(5)]}
    order = {"a": 1.0, "b": 2.0, **{f"n{i}": 0.0 for i in range(5)}}
    got = link_terms.term_edges(["camp", "beach", "melani"], earlier, n=100, k=3, order=order)
    w_camp, w_beach = link_terms.idf(100, 3), link_terms.idf(100, 2)
    assert got == [("a", round(min(1.0, (w_camp + w_beach) / link_terms.WEIGHT_SCALE), 6)),
                   ("b", round(w_camp / link_terms.WEIGHT_SCALE, 6))]
    # "melani" is in 5 earlier notes (> DF_CAP): it links nothing
    assert all(nid not in {f"n{i}" for i in range(5)} for nid, _ in got)
    assert math.isclose(link_terms.idf(100, 3), math.log(1 + 97.5 / 3.5))


def test_edges_are_capped_at_k_newer_first_on_ties_and_bounded_by_one() -> None:
    earlier = {"camp": ["a", "b", "c"]}
    got = link_terms.term_edges(["camp"], earlier, n=4, k=2, order={"a": 1.0, "b": 3.0, "c": 2.0})
    assert [nid for nid, _ in got] == ["b", "c"]
    many = {f"t{i}": ["a"] for i in range(30)}
    assert link_terms.term_edges(list(many), many, n=1000, k=1, order={}) == [("a", 1.0)]
    assert link_terms.term_edges(["camp"], {}, n=1, k=3, order={}) == []


def _how(expand: int, top_k: int = 2) -> Ranking:
    return Ranking(mode="hybrid", as_of=AS_OF, scoring=Scoring(recency_weight=0.0, importance_weight=0.0),
                   vector_weight=0.5, top_k=top_k, budget=None, expand=expand)


def test_a_list_candidate_linked_to_a_seed_hit_displaces_a_weak_seed() -> None:
    strong, weak, linked = cand("strong", sim=0.9, lex=1.0), cand("weak", sim=0.5), cand("linked", sim=0.45)
    linked = dataclasses.replace(linked, link_from=((strong.aggregate_id, 0.8),))
    strong = dataclasses.replace(strong, link_from=((linked.aggregate_id, 0.8),))
    assert ids(rank([strong, weak, linked], _how(expand=0))) == ["strong", "weak"]
    res = rank([strong, weak, linked], _how(expand=2))
    assert ids(res) == ["strong", "linked"]
    by_id = {e.id: e for e in res.explain}
    # link term = link_weight (default 0.7) · edge weight (0.8) · relevance of the seed hit
    seed_rel = by_id["strong"].relevance
    assert Scoring().link_weight == 0.7
    assert math.isclose(by_id["linked"].link_score, round(0.7 * 0.8 * seed_rel, 6), abs_tol=1e-6)
    assert by_id["linked"].link is False  # a list candidate, not added by expansion
    # "weak" had been a seed: the strong hit keeps its own score (its seed "linked" is
    # not a seed hit), and the best hit is still first
    assert by_id["strong"].link_score == 0.0 and res.hits[0].id == "strong"


def test_note_terms_are_the_same_under_concurrent_threads() -> None:
    """A snowball stemmer keeps the current word in its state; shared across threads it
    mixed concurrent writers' words into each other's terms (seen as a projection verify
    difference during a reembed with writers running)."""
    import threading

    from memfabric.domain.link_terms import note_terms

    texts = [f"w{i} item{i} note about topic{i} meanwhile travelling organisations" for i in range(200)]
    expected = [note_terms(t) for t in texts]
    wrong: list[int] = []

    def work() -> None:
        for _ in range(5):
            for i, t in enumerate(texts):
                if note_terms(t) != expected[i]:
                    wrong.append(i)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
