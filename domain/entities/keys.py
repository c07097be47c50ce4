"""Entity names and identifiers as lookup keys, and how a surface scores against an
entity (issue 32). Pure: stdlib only, no model, no storage.

Every lookup key is a plain string derived from a normalised name or identifier; the
storage never sees it, only its keyed digest (:func:`digest_input`, hashed with the
fabric secret by the unit of work / store, ``content_hmac``). Tiers, strongest first:

``identifier``  ``id``: ``kind:normalised value`` (email lower-cased, phone digits,
                handle without ``@``, url without scheme / ``www.`` / trailing ``/``);
``exact_name``  ``name``: the normalised display name;
``exact_alias`` ``alias``: a normalised alias;
``normalised``  ``sorted``: the name's tokens sorted ("Lopez, Maria" = "Maria Lopez"),
                ``concat``: the tokens joined ("Acme Corp" ~ "AcmeCorp"), ``init``: first
                initial + last token ("M. Lopez", the handle ``mlopez``);
``fuzzy``       ``ndel``: the joined name and its one-letter deletions (a typo anywhere
                in a multi-word name), ``tok``: each token, ``del``: each token and its
                one-letter deletions (symmetric-delete typo matching, tokens of 4+ letters).

Normalisation: NFKD accent folding, case folding, punctuation to spaces, honorifics
(mr, dr, ...) and legal suffixes (inc, ltd, gmbh, ...) dropped.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

TIERS: tuple[str, ...] = ("identifier", "exact_name", "exact_alias", "normalised", "fuzzy")
"""Match tiers, strongest first."""

TIER_SCORE: dict[str, float] = {"identifier": 1.0, "exact_name": 0.95, "exact_alias": 0.9,
                                "normalised": 0.8, "fuzzy": 0.75}
"""The score ceiling of each tier (a fuzzy match scores ``0.75 x`` its token overlap)."""

AUTO_TIERS: frozenset[str] = frozenset({"identifier", "exact_name", "exact_alias"})
"""Tiers an ``upsert`` (and the write path) may resolve to without asking: only these,
and only when one entity holds the match (see :func:`auto_pick`)."""

NAME_DEL_MAX = 40
"""Names (tokens joined) up to this many letters also get whole-name deletion keys
(``ndel``: a typo anywhere in a multi-word name, specific enough for a large scope)."""

FUZZY_KINDS = frozenset({"tok", "del", "init"})
"""Key kinds shared by many entities (one token, an initial + surname): read with a
smaller per-key cap."""

CANDIDATE_FLOOR = 0.45
"""Candidates below this score are not reported."""

_HONORIFICS = frozenset({"mr", "mrs", "ms", "miss", "mx", "dr", "prof", "sir", "madam", "the"})
_SUFFIXES = frozenset({"inc", "incorporated", "ltd", "limited", "llc", "llp", "gmbh", "corp",
                       "corporation", "co", "plc", "sa", "ag", "bv", "nv", "srl", "oy", "ab"})
_NON_WORD = re.compile(r"[^0-9a-z]+")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$", re.IGNORECASE)
_HANDLE = re.compile(r"^@[A-Za-z0-9_.-]{1,64}$")
_URL = re.compile(r"^(https?://|www\.)\S+$", re.IGNORECASE)
_DOMAIN = re.compile(r"^[a-z0-9-]{2,}(\.[a-z0-9-]+)*\.[a-z]{2,12}(/\S*)?$", re.IGNORECASE)
_PHONE = re.compile(r"^\+?[0-9 ()./-]{7,24}$")
_HANDLE_VALUE = re.compile(r"^@?[A-Za-z0-9_.-]{1,64}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
IDENTIFIER_KIND = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
"""What an identifier kind may be: ``email``, ``phone``, ``handle``, ``url`` or a host's."""


def fold(text: str) -> str:
    """``text`` accent-folded and case-folded (NFKD, combining marks dropped)."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def name_tokens(text: str) -> list[str]:
    """The normalised tokens of a name: folded, punctuation split, honorifics and legal
    suffixes dropped (a name made only of them keeps its tokens)."""
    raw = [t for t in _NON_WORD.split(fold(text)) if t]
    kept = [t for t in raw if t not in _HONORIFICS and t not in _SUFFIXES]
    return kept or raw


def norm_name(text: str) -> str:
    """The normalised form of a name (tokens joined by one space; ``""`` for none)."""
    return " ".join(name_tokens(text))


def norm_identifier(kind: str, value: str) -> str:
    """``value`` of identifier ``kind`` normalised: email lower-cased; phone digits (a
    leading ``+`` kept); handle lower-cased without ``@``; url lower-cased without scheme,
    ``www.`` and trailing ``/``; any other kind folded and stripped."""
    v = value.strip()
    if kind == "email":
        return v.lower()
    if kind == "phone":
        digits = re.sub(r"\D", "", v)
        return ("+" if v.startswith("+") else "") + digits
    if kind == "handle":
        return v.lstrip("@").lower()
    if kind == "url":
        v = re.sub(r"^https?://", "", v.lower())
        return re.sub(r"^www\.", "", v).rstrip("/")
    return fold(v)


def identifier_problem(kind: str, value: str) -> str | None:
    """What is wrong with ``value`` as an identifier of ``kind`` (surrounding blanks
    ignored), ``None`` when nothing: a built-in kind's value must look like one (email
    ``name@domain.tld``; phone 7+ digits among ``+ ( ) . / -`` and spaces, at most 24
    characters; handle ``@name`` or ``name`` of letters, digits, ``_ . -``, at most 64;
    url with a scheme or ``www.``, or a bare domain ``acme.example/path``); any kind's
    value has no control character and something left once normalised."""
    v = value.strip()
    if _CONTROL.search(v):
        return "a control character"
    if kind == "email" and not _EMAIL.match(v):
        return "not an email address (name@domain.tld)"
    if kind == "phone" and not (_PHONE.match(v) and sum(c.isdigit() for c in v) >= 7):
        return "not a phone number (7 or more digits, + ( ) . / - and spaces, at most 24 characters)"
    if kind == "handle" and not _HANDLE_VALUE.match(v):
        return "not a handle (@name: letters, digits, _ . -, at most 64)"
    if kind == "url" and not (_URL.match(v) or _DOMAIN.match(v)):
        return "not a url (https://..., www.... or a domain such as acme.example)"
    if not norm_identifier(kind, v):
        return "nothing left once normalised"
    return None


def parse_identifier(surface: str, *, strict: bool = True) -> tuple[str, str] | None:
    """The ``(kind, value)`` a surface *is* when it looks like an email, handle, url (with
    a scheme or ``www.``; ``strict=False``: also a bare domain such as ``globex.example``,
    for lookups only, since "john.smith" looks like one too) or phone number, else ``None``."""
    s = surface.strip()
    if _EMAIL.match(s):
        return "email", s
    if _HANDLE.match(s):
        return "handle", s
    if _URL.match(s) or (not strict and _DOMAIN.match(s)):
        return "url", s
    if _PHONE.match(s) and sum(c.isdigit() for c in s) >= 7:
        return "phone", s
    return None


def _deletions(token: str) -> set[str]:
    """``token`` and its one-letter deletions (tokens of 4+ letters; else just itself)."""
    if len(token) < 4:
        return {token}
    return {token, *(token[:i] + token[i + 1:] for i in range(len(token)))}


@dataclass(frozen=True, slots=True)
class Key:
    """One lookup key of an entity: ``kind`` (id, name, alias, sorted, concat, init, tok,
    del), the plain ``text`` (never stored: only its digest), ``source`` (0: the display
    name, 1..: an alias, -1: an identifier) and ``ntok`` (tokens of that source)."""

    kind: str
    text: str
    source: int = 0
    ntok: int = 0

    def digest_input(self) -> str:
        """What is hashed with the fabric secret for this key."""
        return digest_input(self.kind, self.text)


def digest_input(kind: str, text: str) -> str:
    """The string whose keyed digest names a key of ``kind`` and ``text``."""
    return f"mf-entity\x1f{kind}\x1f{text}"


def name_keys(name: str, source: int, *, alias: bool | None = None) -> list[Key]:
    """Every key of one name (``alias``: whether it is an alias, default ``source != 0``;
    ``source`` numbers the name): exact, sorted, concatenated, initial+surname, tokens
    and their deletions (deduplicated)."""
    toks = name_tokens(name)
    if not toks:
        return []
    n = len(toks)
    is_alias = source != 0 if alias is None else alias
    keys = [Key("alias" if is_alias else "name", " ".join(toks), source, n)]
    if n > 1:
        keys += [Key("sorted", " ".join(sorted(toks)), source, n), Key("concat", "".join(toks), source, n),
                 Key("init", toks[0][0] + toks[-1], source, n)]
    if n > 1 and len("".join(toks)) <= NAME_DEL_MAX:
        keys += [Key("ndel", d, source, n) for d in sorted(_deletions("".join(toks)))]
    seen: set[tuple[str, str]] = set()
    for t in toks:
        keys.append(Key("tok", t, source, n))
        keys += [Key("del", d, source, n) for d in sorted(_deletions(t))]
    out = []
    for k in keys:
        if (k.kind, k.text) not in seen:
            seen.add((k.kind, k.text))
            out.append(k)
    return out


def identifier_key(kind: str, value: str) -> Key:
    """The key of identifier ``(kind, value)``."""
    return Key("id", f"{kind}:{norm_identifier(kind, value)}", -1, 0)


@dataclass(frozen=True, slots=True)
class Probe:
    """A surface's lookup keys: ``keys`` maps each key's digest input to ``(kind, token
    index or -1)``; ``ntok``: the surface's token count; ``identifier``: what it parses as."""

    keys: dict[str, tuple[str, int]]
    ntok: int
    identifier: tuple[str, str] | None = None


def probe(surface: str, identifiers: Iterable[tuple[str, str]] = (), *, exact_only: bool = False) -> Probe:
    """The keys a resolution looks up for ``surface`` (and explicit ``identifiers``);
    ``exact_only``: only its ``id``, ``name`` and ``alias`` keys (the same entries the
    full probe has for them), without the fuzzy ones (a subject's entity lookup asks
    for those alone, and needs the rest only when one of them is found)."""
    keys: dict[str, tuple[str, int]] = {}
    ident = parse_identifier(surface, strict=False)
    for kind, value in ([ident] if ident else []) + list(identifiers):
        keys[identifier_key(kind, value).digest_input()] = ("id", -1)
    toks = name_tokens(_local_part(surface, ident))
    if toks and ident is None:  # a name read out of an identifier is never an exact match
        keys[digest_input("name", " ".join(toks))] = ("name", -1)
        keys[digest_input("alias", " ".join(toks))] = ("alias", -1)
    if toks and not exact_only:
        for kind, text in (("sorted", " ".join(sorted(toks))), ("concat", "".join(toks)),
                           ("init", "".join(toks) if len(toks) == 1 else toks[0][0] + toks[-1])):
            keys.setdefault(digest_input(kind, text), (kind, -1))
        if len(toks) > 1 and len("".join(toks)) <= NAME_DEL_MAX:
            for d in _deletions("".join(toks)):
                keys.setdefault(digest_input("ndel", d), ("ndel", -1))
        for i, t in enumerate(toks):
            keys.setdefault(digest_input("tok", t), ("tok", i))
            for d in _deletions(t):
                keys.setdefault(digest_input("del", d), ("del", i))
    return Probe(keys, len(toks), ident)


def _local_part(surface: str, ident: tuple[str, str] | None) -> str:
    """The name-like part of a surface: an email's local part ("maria.lopez"), a handle
    without ``@``, a url's first host label ("globex" of ``www.globex.example/x``), the
    surface itself otherwise (a phone: nothing)."""
    if ident is None:
        return surface
    kind, value = ident
    if kind == "email":
        return value.split("@", 1)[0]
    if kind == "handle":
        return value.lstrip("@")
    if kind == "url":
        return norm_identifier("url", value).split("/", 1)[0].split(".", 1)[0]
    return ""


KINDS: tuple[str, ...] = ("id", "name", "alias", "sorted", "concat", "init", "ndel", "tok", "del")
"""Every key kind; ``KIND_BIT[kind]`` (``1 << position``) marks it in a :class:`Match`'s mask."""

KIND_BIT: dict[str, int] = {kind: 1 << i for i, kind in enumerate(KINDS)}

_NORMALISED = KIND_BIT["sorted"] | KIND_BIT["concat"]


@dataclass(slots=True)
class Match:
    """What one entity matched: ``mask``, the kinds of its keys found (OR of
    :data:`KIND_BIT`), and per source (a name of the entity: 0 the display name, 1..
    an alias, -1 an identifier) ``(exact, near, ntok)``: the surface tokens that name
    matched exactly (``tok``), those it matched only within one deletion (``del``),
    and its token count."""

    mask: int = 0
    sources: dict[int, tuple[int, int, int]] = field(default_factory=dict)


def collect(p: Probe, hits: Iterable[tuple[str, str, int, int]]) -> dict[str, Match]:
    """Group key hits ``(entity_id, digest input, source, ntok)`` per entity."""
    keys = p.keys
    return tally((entity_id, *keys[text], source, ntok) for entity_id, text, source, ntok in hits)


def tally(hits: Iterable[tuple[str, str, int, int, int]]) -> dict[str, Match]:
    """Group key hits ``(entity_id, kind, token index, source, ntok)`` per entity (the
    token index: the surface token a ``tok`` / ``del`` key stands for, else -1)."""
    masks: dict[str, int] = {}
    names: dict[str, dict[int, tuple[set[int], set[int], int]]] = {}
    for entity_id, kind, tok, source, ntok in hits:
        masks[entity_id] = masks.get(entity_id, 0) | KIND_BIT[kind]
        per = names.setdefault(entity_id, {})
        got = per.get(source)
        if got is None:
            got = per[source] = (set(), set(), ntok)
        if kind == "tok":
            got[0].add(tok)
        elif kind == "del":
            got[1].add(tok)
    return {entity_id: Match(mask, {source: (len(exact), len(near - exact), ntok)
                                    for source, (exact, near, ntok) in names[entity_id].items()})
            for entity_id, mask in masks.items()}


def score(p: Probe, m: Match) -> tuple[str, float] | None:
    """``(tier, score in [0, 1])`` of an entity's :class:`Match`, or ``None`` below
    :data:`CANDIDATE_FLOOR`."""
    mask = m.mask
    if mask & KIND_BIT["id"]:
        return "identifier", TIER_SCORE["identifier"]
    if mask & KIND_BIT["name"]:
        return "exact_name", TIER_SCORE["exact_name"]
    if mask & KIND_BIT["alias"]:
        return "exact_alias", TIER_SCORE["exact_alias"]
    if mask & _NORMALISED:
        return "normalised", TIER_SCORE["normalised"]
    best = _overlap(p, m)
    if mask & KIND_BIT["ndel"]:
        best = max(best, 0.9)
    if mask & KIND_BIT["init"]:
        best = max(best, 0.8)
    value = round(TIER_SCORE["fuzzy"] * best, 4)
    return ("fuzzy", value) if value >= CANDIDATE_FLOOR else None


def _overlap(p: Probe, m: Match) -> float:
    """The best token overlap over the entity's names: exact tokens count 1, tokens within
    one deletion 0.8, divided by the larger token count."""
    best = 0.0
    for exact, near, ntok in m.sources.values():
        best = max(best, (exact + 0.8 * near) / max(p.ntok, ntok, 1))
    return best


def auto_pick(ranked: Sequence[tuple[str, str, float]]) -> str | None:
    """The entity an upsert may resolve to without asking, from ranked ``(entity_id,
    tier, score)``: the best candidate when its tier is in :data:`AUTO_TIERS` and no other
    candidate matched at an auto tier (two entities with that name or identifier:
    ambiguous, so none)."""
    strong = [c for c in ranked if c[1] in AUTO_TIERS]
    if len(strong) != 1:
        if strong and strong[0][1] == "identifier" and all(c[1] != "identifier" for c in strong[1:]):
            return strong[0][0]  # an identifier outranks a namesake
        return None
    return strong[0][0]
