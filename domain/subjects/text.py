"""Text helpers of subject inference (:mod:`memfabric.domain.subjects`): word lists and the
attribute synonym table, normalisation of values / entities / attributes, the noun-phrase
readers (a proper name, the holder of a relation, an attribute noun phrase) and
:func:`make_key`, which builds a :class:`~memfabric.domain.subjects.key.SubjectKey` from raw phrases.

Everything here is pure and deterministic (stdlib + snowballstemmer).
"""

from __future__ import annotations

import enum
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from memfabric.domain.stemming import ENGLISH

from memfabric.domain.subjects.key import MAX_KEY_CHARS, WILDCARD, SubjectKey
from memfabric.domain.subjects.vocab import ATTR_SYNONYMS


STEM = ENGLISH
"""The shared, thread-safe English stemmer (:mod:`memfabric.domain.stemming`)."""

_ARTICLES = {"the", "a", "an"}
_MODIFIERS = {"current", "currently", "new", "present", "latest", "actual", "now", "default", "usual", "go-to",
              "preferred", "regular"}
"""Words that mark *which* value of a slot, not another slot: "my new editor", "my default
shell", "my go-to pizza place" are "my editor", "my shell", "my pizza place"."""
PRONOUNS = {
    "he", "she", "they", "it", "this", "that", "these", "those", "you", "we", "him", "her",
    "them", "his", "hers", "their", "its", "there", "here", "who", "what", "which", "one",
    "someone", "everyone", "everything", "something", "anything", "nothing", "me", "us",
    "your", "yours", "all", "both", "each", "some", "any", "i",
}
_FIRST_PERSON = {"i", "me", "myself"}


# attribute heads that hold several values at once
_MULTI_NOUNS = {
    "sister", "brother", "sibl", "friend", "kid", "child", "children", "son", "daughter",
    "cousin", "colleagu", "neighbor", "neighbour", "pet", "dog", "cat", "hobbi", "hobbies",
    "interest", "skill", "languag", "allergi", "parent", "grandchild", "aunt", "uncl",
    "nephew", "niec", "client", "custom", "tag", "member", "favorit thing",
}

STATUS_WORDS = {
    "open", "opened", "reopened", "closed", "resolved", "fixed", "pending", "done",
    "blocked", "merged", "deployed", "shipped", "delivered", "paid", "unpaid", "overdue",
    "cancelled", "canceled", "approved", "rejected", "active", "inactive", "enabled",
    "disabled", "online", "offline", "down", "up", "broken", "running", "stopped",
    "in progress", "on hold", "completed", "complete", "failed", "failing", "passing",
    "live", "archived", "deprecated", "expired", "valid", "invalid",
    "accepted", "declined", "scheduled", "postponed", "finished", "started", "draft",
    "published", "unassigned", "assigned", "escalated", "healthy", "degraded",
}

_NAME_PARTICLES = {"de", "van", "von", "der", "den", "da", "di", "du", "la", "le", "al", "bin", "el", "dos", "del"}

ADVERBS = (
    r"(?:(?:now|currently|still|recently|just|finally|officially|already|actually|also|"
    r"really|happily|since|then|again|eventually|soon)\s+)"
)
_TRAIL_CUT = re.compile(
    r"(?:,|;|:|\(|\s[-–—]\s|\s+(?:since|as of|starting|from now|last|this|next|now|anymore|any more|"
    r"these days|any longer|for (?:the )?(?:past|last)|because|but|so that|after|when|where|which|"
    r"for (?:years|months|weeks|ages|decades|a while|a long time|good|(?:a|one|two|three|several|many|a few|\d+) "
    r"(?:days?|weeks?|months?|years?|decades?))|"
    r"who|while|until|in order|recently|yesterday|today|tonight|this week|earlier|later on|"
    r"a (?:few|couple)|effective|instead|again|too|as well|"
    r"(?:in|on|by|around|from) (?:(?:19|20)\d\d|january|february|march|april|may|june|july|"
    r"august|september|october|november|december|spring|summer|autumn|fall|winter|monday|"
    r"tuesday|wednesday|thursday|friday|saturday|sunday)|"
    r"(?:one|two|three|four|five|six|a|\d+) (?:days?|weeks?|months?|years?) ago|"
    r"(?:a lot|so much|very much|more than)|and (?=[a-z]))\b)",
    re.IGNORECASE,
)

WORD_RE = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*", re.UNICODE)


_ASCII_DIGIT = re.compile(r"[0-9]")


def has_digit(s: str) -> bool:
    """``any(ch.isdigit() for ch in s)``, with a regex fast path for ASCII text (where
    ``str.isdigit`` is exactly ``[0-9]``)."""
    if s.isascii():
        return _ASCII_DIGIT.search(s) is not None
    return any(ch.isdigit() for ch in s)


def _split_alternatives(verb: str) -> list[str]:
    """``"(?:a|b c) d"`` → ``["a d", "b c d"]`` (the top-level alternatives of a leading
    group, each with the shared tail); any other pattern is returned as is."""
    if not verb.startswith("(?:"):
        return [verb]
    depth, parts, start, i = 0, [], 3, 3
    while i < len(verb):
        ch = verb[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "(":
            depth += 1
        elif ch == ")" and depth == 0:
            break
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            parts.append(verb[start:i])
            start = i + 1
        i += 1
    parts.append(verb[start:i])
    tail = verb[i + 1:]
    if tail[:1] and tail[0] in "?*+{":
        raise ValueError(f"a quantified leading group cannot be split: {verb}")
    return [part + tail for part in parts]


def union_by_first_letter(verbs: list[str]) -> str:
    """One pattern for the union of ``verbs``, grouped by first letter
    (``l(?:ives?|iving)|r(?:esides?)|…``): the same language as ``a|b|c…``, but the regex
    engine tests one letter per position instead of every alternative."""
    groups: dict[str, list[str]] = {}
    for verb in verbs:
        for alt in _split_alternatives(verb):
            if not alt[:1].isalpha() or alt[1:2] in ("?", "*", "+", "{"):
                raise ValueError(f"a verb pattern must start with a plain letter: {alt}")
            groups.setdefault(alt[0].lower(), []).append(alt[1:])
    return "|".join(f"{letter}(?:{'|'.join(rests)})" for letter, rests in groups.items())


def fold_accents(s: str) -> str:
    s = unicodedata.normalize("NFKD", s)
    return "".join(ch for ch in s if not unicodedata.combining(ch))


def norm_value(s: str) -> str:
    """Lower-case, accent-folded, articles and punctuation dropped ("a Volvo XC40." → "volvo xc40")."""
    toks = re.findall(r"[a-z0-9+#@]+(?:[.'_:/-][a-z0-9+#@]+)*", fold_accents(s).lower())
    while toks and toks[0] in _ARTICLES:
        toks = toks[1:]
    return " ".join(toks)[:MAX_KEY_CHARS]


def norm_entity(s: str) -> str:
    toks = re.findall(r"[a-z0-9]+(?:[.'-][a-z0-9]+)*|/", fold_accents(s).lower())
    toks = [t for t in toks if t not in _ARTICLES]
    return " ".join(toks).replace(" / ", "/")


@lru_cache(maxsize=4096)
def norm_attr(s: str) -> str:
    """Stemmed, modifier-free attribute, mapped through the synonym table."""
    raw = fold_accents(s).lower().replace("favourite", "favorite")
    toks = re.findall(r"[a-z0-9]+(?:-[a-z0-9]+)*|/", raw)
    toks = [t for t in toks if t not in _ARTICLES and t not in _MODIFIERS]
    stems = _drop_position_words([t if t == "/" else STEM.stemWord(t) for t in toks])
    phrase = " ".join(stems)
    if phrase in ATTR_SYNONYMS:
        return ATTR_SYNONYMS[phrase]
    if stems and stems[-1] in {"team", "club"}:
        return "team"
    if stems and stems[-1] in {"headquart"}:
        return "headquarters"
    return phrase


def _drop_position_words(stems: list[str]) -> list[str]:
    """"position of X" / "X position" → X (DyKnow "The CEO position at …")."""
    while len(stems) > 2 and stems[1] == "of" and stems[0] in {"posit", "name", "role", "offic", "titl"}:
        stems = stems[2:]
    if len(stems) > 1 and stems[-1] in {"posit", "role", "job", "seat"}:
        stems = stems[:-1]
    return stems


_ONE_OF_A_KIND = {"primari", "main", "favorit", "nativ", "first", "onli"}
"""Stemmed modifiers that single out one value of a multi-valued noun ("my primary
language", "my first language", "my main client")."""


def is_multi_valued(attr: str) -> bool:
    """A stemmed attribute holds several values at once when its head noun does (``sister``,
    ``languag``, ``client``, ...), unless a modifier singles one out ("primary language")
    or, for ``client``, a noun names the software ("email client", "VPN client"; an
    adjective keeps the customer: "biggest client")."""
    words = attr.split()
    if not words or attr in _MULTI_NOUNS:
        return bool(words)
    if words[-1] not in _MULTI_NOUNS or any(w in _ONE_OF_A_KIND for w in words[:-1]):
        return False
    return not (words[-1] == "client" and len(words) > 1 and not adjective_like(words[-2]))


_COMMON_ADJ = {
    "fast", "slow", "cheap", "expensive", "big", "small", "good", "bad", "great", "nice", "new", "old", "hot",
    "cold", "warm", "easy", "hard", "long", "short", "high", "low", "full", "empty", "busy", "quiet", "loud",
    "late", "early", "ready", "right", "wrong", "true", "false", "clean", "dirty", "safe", "fun", "cool",
    "free", "fine", "ok", "okay", "huge", "tiny", "best", "worse", "worst", "better", "same", "different",
    "weird", "strange", "sure", "real", "fake", "cute", "ugly", "pretty", "simple", "complex", "light",
    "heavy", "dark", "bright", "strong", "weak", "rich", "poor", "smart", "fair", "nuts", "lit", "sad",
}
_ADJ_SUFFIX = re.compile(r"(?:ful|ous|ive|able|ible|al|ic|y|less|ed|ing|est|ish|ant|ent)$")


def adjective_like(v: str) -> bool:
    return " " not in v and (v in _COMMON_ADJ or bool(_ADJ_SUFFIX.search(v)))


def clean_value(obj: str) -> str:
    """The value phrase: cut at the first clause boundary / time adverbial, except an
    "and" that adds a short noun phrase to the value ("metric units and Celsius", see
    :func:`added_noun_phrase`) or a comma that starts a list of them ("metric units,
    Celsius and dark mode", see :func:`added_list`, written "metric units and Celsius and
    dark mode"): those are part of the value. "as well as", "along with" add like "and";
    a leading "both" is dropped."""
    obj = _ALSO.sub(" and ", _BOTH.sub("", obj.strip()))
    m = _TRAIL_CUT.search(obj)
    if m and m.start() > 0:
        cut, tail = m.group(0).strip().lower(), obj[m.end():]
        if cut == "," and added_list(tail):
            obj = _LIST_COMMA.sub(" and ", obj)
        elif not (cut == "and" and added_noun_phrase(tail)):
            obj = _DANGLING.sub("", obj[: m.start()])
    return obj.strip(" .!,;:'\"")


_DANGLING = re.compile(r"\s+(?:and|or|plus|but)$", re.IGNORECASE)


_ALSO = re.compile(r"\s+(?:as well as|along with|together with|in addition to)\s+(?=\S)", re.IGNORECASE)
_BOTH = re.compile(r"^both\s+(?=\S.*\sand\s)", re.IGNORECASE)
"""Other ways to add a value: "X as well as Y" is "X and Y"; "both X and Y" is "X and Y"."""
_LIST_COMMA = re.compile(r"\s*,\s*(?:(?:and|plus)\s+)?", re.IGNORECASE)
_LIST_TAIL = re.compile(r"^(?P<items>[^,;:]+(?:,[^,;:]+)*?),?\s+(?:and|plus)\s+(?P<last>[^,;:]+)$", re.IGNORECASE)


def added_list(tail: str) -> bool:
    """True when ``tail`` (what follows a value's comma) ends a list of added noun phrases:
    "Celsius and dark mode", "Celsius, dark mode and 24-hour time" (each item as
    :func:`added_noun_phrase`, the last after "and" / "plus")."""
    m = _LIST_TAIL.match(tail.strip())
    if m is None:
        return False
    return all(added_noun_phrase(item) for item in [*m.group("items").split(","), m.group("last")])


_CLAUSE_WORDS = {
    "at", "in", "on", "for", "to", "with", "from", "of", "by", "about", "into", "as", "then", "also", "now",
    "so", "still", "just", "really", "very", "not", "never", "no", "is", "are", "was", "were", "am", "be",
    "been", "has", "have", "had", "do", "does", "did", "will", "would", "can", "could", "should", "love",
    "loves", "like", "likes", "hate", "hates", "want", "wants", "need", "needs", "got", "get", "gets",
}


def added_noun_phrase(tail: str) -> bool:
    """True when ``tail`` (what follows a value's "and", to the end of the sentence) is a
    short noun phrase added to the value ("Celsius", "gluten-free meals"): 1-4 words, none a
    pronoun, a preposition, an adverb or a verb that would start a clause ("and I love it",
    "and works at Siemens", "and then left"), and no clause boundary of its own."""
    words = WORD_RE.findall(tail)
    if not words or len(words) > 4 or _TRAIL_CUT.search(" " + tail.strip()):
        return False
    return not any(_starts_a_clause(w) for w in words)


def _starts_a_clause(word: str) -> bool:
    """A pronoun, a clause word or a lower-case adverb in -ly ("Ally" is a name)."""
    low = word.lower()
    return low in PRONOUNS or low in _CLAUSE_WORDS or (word[:1].islower() and low.endswith("ly"))


def first_conjunct(value: str) -> str:
    """The value before an added noun phrase ("metric units and Celsius" → "metric units")."""
    return re.split(r"\s+(?:and|plus)\s+", value, maxsplit=1, flags=re.IGNORECASE)[0]


_NOT_COUNTED = {"and", "plus", "the", "a", "an"}


def looks_like_value(v: str) -> bool:
    """A value is 1-8 words (articles and the "and"/"plus" of an added list not counted),
    not led by a pronoun unless it is a possessive ("her sister")."""
    words = v.split()
    if not words or sum(w.lower() not in _NOT_COUNTED for w in words) > 8:
        return False
    return words[0].lower() not in PRONOUNS or len(words) > 1 and words[0].lower() in {"her", "his", "their", "my"}


# --------------------------------------------------------------------------- noun phrases

_CAP_TOKEN = re.compile(r"^(?:[A-Z0-9#][\w.&'’+-]*|[a-z]+-?\d[\w-]*)$")


_DETERMINERS = {"the", "my", "our", "a", "an"}
_NAME_JOINERS = {"of", "and", "&"}
_NAME_CANNOT_END = _NAME_PARTICLES | _NAME_JOINERS


def proper_name(np: str) -> str | None:
    """A capitalised name or an identifier ("Alice", "Kevin De Bruyne", "Ticket 4411",
    "db-7", "Order #1001"), normalised; None for pronouns / common nouns."""
    toks = np.replace(",", " ").split()
    if not toks or len(toks) > 7:
        return None
    first = toks[0].lower()
    if first in PRONOUNS or first in _DETERMINERS:
        if not _is_the_name(toks):
            return None
        toks = toks[1:]
    if not all(_is_name_token(i, t, toks) for i, t in enumerate(toks)):
        return None
    if toks[-1].lower() in _NAME_CANNOT_END:
        return None
    name = norm_entity(" ".join(toks))
    return name or None


def _is_the_name(toks: list[str]) -> bool:
    """"the" + a capitalised name ("The Beatles", "the Hague")."""
    return toks[0].lower() == "the" and len(toks) > 1 and all(
        _CAP_TOKEN.match(t) or t.lower() in _NAME_PARTICLES for t in toks[1:]
    )


def _has_id_char(t: str) -> bool:
    return any(ch.isdigit() or ch in "_#" for ch in t)


def _is_name_token(i: int, t: str, toks: list[str]) -> bool:
    """Token ``i`` of a name: capitalised / an id, or (not first) a particle, joiner or
    id part; a lower-case word just before a final id ("Feature flag dark_mode", "Order no 55")."""
    if _CAP_TOKEN.match(t):
        return True
    if i > 0 and (t.lower() in _NAME_PARTICLES or t.lower() in _NAME_JOINERS or _has_id_char(t)):
        return True
    return i == len(toks) - 2 and len(toks) <= 4 and _has_id_char(toks[-1])


@dataclass(frozen=True, slots=True)
class Context:
    speaker: str | None  # normalised speaker of a chat turn

    @property
    def me(self) -> str:
        return self.speaker or "self"


ROLE_SUBJECTS = {"the user": "user", "user": "user", "the customer": "customer", "customer": "customer",
                 "the client": "client", "client": "client", "the patient": "patient", "patient": "patient"}
"""The people an assistant's notes are about, named by their role: holders, not attributes."""


def holder_of(np: str, ctx: Context) -> str | None:
    """Who a relation verb is about: I/we, my X, X's Y, the user, a name or an id."""
    s = np.strip().strip(",")
    low = s.lower()
    if low in _FIRST_PERSON:
        return ctx.me
    if low == "we":
        return f"{ctx.me}/we"
    if low in ROLE_SUBJECTS:
        return ROLE_SUBJECTS[low]
    m = re.match(r"^(?:my|our) ([a-z][a-z -]{0,30})$", s, re.IGNORECASE)
    if m:
        return f"{ctx.me}/{norm_attr(m.group(1))}"
    m = re.match(r"^(.+?)['’]s ([a-z][a-z -]{0,30})$", s)
    if m:
        owner = holder_of(m.group(1), ctx)
        return f"{owner}/{norm_attr(m.group(2))}" if owner else None
    name = proper_name(s)
    if name is not None:
        if ctx.speaker is not None and name == "i":
            return ctx.me
        return name
    return None


class _Miss(enum.Enum):
    """A reader of :func:`attribute_np` that does not apply (the next one is tried)."""

    MISS = enum.auto()


_AttrReading = tuple[str, str] | None | Literal[_Miss.MISS]

_ROLE_OF_PREFIX = re.compile(r"^(?:the )?(?:position|post|office|role|name|title|job) of (?:the )?", re.IGNORECASE)
_MY_ATTR = re.compile(r"^(?:my|our) (.{1,60})$", re.IGNORECASE)
_POSSESSIVE_ATTR = re.compile(r"^(?:the )?(.+?)['’]s? (.{1,60})$", re.IGNORECASE)
COMMON_OWNER = re.compile(r"(?i:the )?[a-z][a-z -]{0,30}")
"""An owner named by a common noun ("the team's deploy day", "The team moved its …")."""
_HELD_BY_ATTR = re.compile(r"^(?:the )?(.{1,60}?) (?:held|led|run|owned|coached|managed) by (.+)$", re.IGNORECASE)
_OF_NAME_ATTR = re.compile(r"^(?:the )?(.{1,80}?) (?:of|at|for) (?:the )?(?=[A-Z0-9])(.+)$")
_OF_COMMON_ATTR = re.compile(r"^(?:the )?(.{1,80}?) (?:of|at|for) (?:the )?([a-z][a-z0-9 -]{0,40})$")
_THE_ATTR = re.compile(r"^the ([a-z][a-z0-9 /_-]{0,50})$", re.IGNORECASE)


def attribute_np(np: str, ctx: Context) -> tuple[str, str] | None:
    """(entity, attribute) of an attribute noun phrase: "my X", "Alice's X", "the X of
    Y", "the X at Y", "the X held by Y", "the X" (implicit entity ``_``).

    The readers in :data:`_ATTR_READERS` are tried in order; the first that applies decides
    (it may still say ``None``)."""
    s = np.strip().strip(",")
    # "the position of CEO at X" / "the name of the current X at Y" → "CEO at X"
    s = _ROLE_OF_PREFIX.sub("", s)
    if not s:
        return None
    for reader in _ATTR_READERS:
        found = reader(s, ctx)
        if found is not _Miss.MISS:
            return found
    return None


def _read_my_attr(s: str, ctx: Context) -> _AttrReading:
    """"my X" is the speaker's, "our X" the speaker's group's (the holder "we" names)."""
    m = _MY_ATTR.match(s)
    if not m:
        return _Miss.MISS
    owner = ctx.me if s[:2].lower() == "my" else f"{ctx.me}/we"
    return owner, norm_attr(m.group(1))


def _read_possessive_attr(s: str, ctx: Context) -> _AttrReading:
    """"Alice's phone", "the company's CEO", "the user's email"."""
    m = _POSSESSIVE_ATTR.match(s) if "'" in s or "’" in s else None
    if not m:
        return _Miss.MISS
    owner = holder_of(m.group(1), ctx)
    if owner is None and COMMON_OWNER.fullmatch(m.group(1)):
        owner = norm_entity(m.group(1))
    if owner is None or owner.split()[0] in PRONOUNS:
        return None
    return owner, norm_attr(m.group(2))


def _read_held_by_attr(s: str, ctx: Context) -> _AttrReading:
    m = _HELD_BY_ATTR.match(s)
    if not m:
        return _Miss.MISS
    ent = proper_name(m.group(2))
    return (ent, norm_attr(m.group(1))) if ent else None


def _read_of_name_attr(s: str, ctx: Context) -> _AttrReading:
    """"the X of Y" / "the X at Y": entity starts at the first of/at followed by a capital."""
    m = _OF_NAME_ATTR.match(s)
    if not m:
        return _Miss.MISS
    ent = proper_name(m.group(2)) or holder_of(m.group(2), ctx)
    return (ent, norm_attr(m.group(1))) if ent else None


def _read_of_common_attr(s: str, ctx: Context) -> _AttrReading:
    """"the capital of the country": a lower-case entity (not a pronoun)."""
    m = _OF_COMMON_ATTR.match(s)
    if not m or m.group(2).split()[0] in PRONOUNS:
        return _Miss.MISS
    return norm_entity(m.group(2)), norm_attr(m.group(1))


def _read_the_attr(s: str, ctx: Context) -> _AttrReading:
    """"the deadline": an attribute of the implicit entity ``_``."""
    m = _THE_ATTR.match(s)
    if not m or not any(w[:1].islower() for w in m.group(1).split()):
        return _Miss.MISS
    words = m.group(1).split()
    if words and words[0] not in PRONOUNS:
        return "_", norm_attr(m.group(1))
    return _Miss.MISS


_ATTR_READERS: tuple[Callable[[str, Context], _AttrReading], ...] = (
    _read_my_attr,
    _read_possessive_attr,
    _read_held_by_attr,
    _read_of_name_attr,
    _read_of_common_attr,
    _read_the_attr,
)


_TIME_WORD = re.compile(
    r"\b(?:\d|monday|tuesday|wednesday|thursday|friday|saturday|sunday|january|february|march|april|may|june|"
    r"july|august|september|october|november|december|noon|midnight|tomorrow|today|week|month|year)",
    re.IGNORECASE,
)


def looks_like_place(v: str) -> bool:
    """A place-like value: capitalised or "the/a <noun>", and no date/time in it."""
    v = v.strip()
    if not v or _TIME_WORD.search(v):
        return False
    return v[0].isupper() or bool(re.match(r"^(?:the|a|an|my|our|her|his) [a-z]", v))


def make_key(entity: str, attribute: str, value: str, rule: str, *, polarity: bool = True,
         single: bool | None = None, previous: str | None = None) -> SubjectKey | None:
    v = norm_value(value)
    if not entity or not attribute or not v:
        return None
    if single is None:
        single = not is_multi_valued(attribute)
    if not single and attribute != WILDCARD:
        attribute = f"{attribute}:{v}"
    return SubjectKey(entity=entity[:120], attribute=attribute[:120], value=v, rule=rule,
                      polarity=polarity, single_valued=single,
                      previous=norm_value(previous) if previous else None)
