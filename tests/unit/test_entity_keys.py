"""Issue 32: the pure lookup keys of entities (normalisation, identifiers, tiers)."""

from __future__ import annotations

import pytest

from memfabric.domain.entities import keys as ek


@pytest.mark.parametrize(("raw", "norm"), [
    ("José García", "jose garcia"), ("Dr. Aiko Tanaka", "aiko tanaka"), ("Acme Corp.", "acme"),
    ("Siobhan O'Connor", "siobhan o connor"), ("The Inc", "the inc"), ("  ", ""),
])
def test_norm_name(raw: str, norm: str) -> None:
    assert ek.norm_name(raw) == norm


@pytest.mark.parametrize(("kind", "a", "b"), [
    ("email", "Maria@Acme.Example", "maria@acme.example"),
    ("phone", "+1 (415) 555-0142", "+14155550142"),
    ("handle", "@MLopez", "mlopez"),
    ("url", "https://www.acme.example/", "acme.example"),
])
def test_identifier_spellings_meet(kind: str, a: str, b: str) -> None:
    assert ek.norm_identifier(kind, a) == ek.norm_identifier(kind, b) == b


@pytest.mark.parametrize(("surface", "kind"), [
    ("maria@acme.example", "email"), ("@mlopez", "handle"), ("https://x.example", "url"),
    ("+34 600 123 456", "phone"), ("Maria Lopez", None), ("john.smith", None), ("1234", None),
])
def test_parse_identifier_is_strict_for_storage(surface: str, kind: str | None) -> None:
    got = ek.parse_identifier(surface)
    assert (got[0] if got else None) == kind
    assert ek.parse_identifier("globex.example", strict=False) == ("url", "globex.example")


def _tier(surface: str, name: str, aliases: tuple[str, ...] = ()) -> str | None:
    p = ek.probe(surface)
    keys = ek.name_keys(name, 0) + [k for i, a in enumerate(aliases, 1) for k in ek.name_keys(a, i)]
    hits = [("e", k.digest_input(), k.source, k.ntok) for k in keys if k.digest_input() in p.keys]
    m = ek.collect(p, hits).get("e")
    got = ek.score(p, m) if m else None
    return got[0] if got else None


def test_tiers() -> None:
    assert _tier("maria lopez", "Maria Lopez") == "exact_name"
    assert _tier("Mia", "Maria Lopez", ("Mia",)) == "exact_alias"
    assert _tier("Lopez, Maria", "Maria Lopez") == "normalised"
    assert _tier("Maria Lopes", "Maria Lopez") == "fuzzy"
    assert _tier("M. Lopez", "Maria Lopez") == "fuzzy"
    assert _tier("Olga Petrova", "Maria Lopez") is None
    assert _tier("maria.lopez@else.example", "Maria Lopez") == "normalised"  # never exact


def test_auto_pick_refuses_ambiguity() -> None:
    assert ek.auto_pick([("a", "exact_name", 0.95)]) == "a"
    assert ek.auto_pick([("a", "exact_name", 0.95), ("b", "exact_name", 0.95)]) is None
    assert ek.auto_pick([("a", "identifier", 1.0), ("b", "exact_name", 0.95)]) == "a"
    assert ek.auto_pick([("a", "normalised", 0.8)]) is None


@pytest.mark.parametrize("surface", [
    "Maria Lopez", "maria@acme.example", "@MLopez", "https://www.globex.example/x", "+1 (415) 555-0142",
    "customer 7", "Dr. Aiko Tanaka", "Acme Corp.", "",
])
def test_an_exact_only_probe_has_the_full_probes_exact_keys(surface: str) -> None:
    """Issue 24: a subject's entity lookup builds only the exact keys first (the fuzzy
    ones when one is found); they must be the full probe's, entry for entry."""
    full = ek.probe(surface, [("email", "x@y.example")])
    exact = ek.probe(surface, [("email", "x@y.example")], exact_only=True)
    assert exact.keys == {t: v for t, v in full.keys.items() if v[0] in ("id", "name", "alias")}
    assert (exact.ntok, exact.identifier) == (full.ntok, full.identifier)
