"""Subject inference without a model: which *slot* (entity + attribute) a fact fills.

Supersession must not follow cosine similarity ("Ticket 4411 …" and "Ticket 4412 …"
score 0.98 and are different tickets).  Similarity may only *propose* a neighbour; a
changed fact supersedes it when both notes fill the same single-valued slot with
different values.  This module derives that slot deterministically from the text:

    extract("Alice lives in Berlin")      -> alice|residence = berlin       (rule holder_verb)
    extract("Alice moved to Munich")      -> alice|residence = munich       (rule holder_verb)
    supersedes(new, old)                  -> Supersession(rule="value_changed", ...)

Everything is pure (stdlib + snowballstemmer), English-only and conservative: when no
rule is sure, :meth:`RuleSubjectExtractor.extract` returns ``None`` and the write path
inserts.  A host can plug another :class:`SubjectExtractor` (an NLP parser, an LLM, a
schema of subjects); an explicit ``subject``/``supersedes`` from the caller always wins
(:func:`resolve_subject`).

Pre-processing (before any rule)
--------------------------------
* only ``kind == "fact"`` notes, at most 600 characters, sentences of at most 160; questions (``?``) are skipped;
* **language gate**: letters of a non-Latin script, or more foreign (de/fr/es/it/pt/nl)
  than English function words → ``None`` (insert rather than guess);
* **speaker prefix** ``"Caroline: I moved to Boston"`` (a capitalised name before a
  colon): first person (I, my, me) resolves to the speaker, so two speakers never share
  a key; ``you``/``he``/``she``/``they`` cannot be resolved → no key;
* contractions expanded (``I'm`` → ``I am``, ``doesn't`` → ``does not``), curly quotes
  straightened, leading discourse markers (``Update:``, ``Actually,``, ``Guess what,``,
  ``As of May,``) dropped; every sentence is tried, the first that yields a key wins.

Rules (``SubjectKey.rule``), tried in this order
-------------------------------------------------
``relative_role``   "The football team Lionel Messi currently plays for is Inter Miami"
                    → lionel messi|team.
``held_by``         "The CEO position at Walmart is currently held by Doug McMillon".
``inverted_role``   "Andy Jassy is now the CEO of Amazon" → amazon|ceo = andy jassy;
                    "Pizza is my favourite food" → self|favourite food.
``from_to``         "Alice switched from Tesla to Volvo": no attribute is named, so the key
                    is ``alice|*`` with ``previous="tesla"``; it supersedes only a note of
                    the same entity whose value *is* the previous value.  With a named
                    attribute ("changed her number from X to Y") it is a normal key.
``holder_verb``     a person/thing + a single-valued relation verb: lives in / moved to /
                    relocated to / is based in (residence), works at|for / got a job at /
                    is employed by / joined … as (employer), works as / was promoted to /
                    serves as (role), plays|races|drives for / signed with (team), drives a
                    (car), studies at / attends (school), is married to / is dating
                    (partner), prefers X (preference, keyed by X's head noun), uses X as
                    (tool for a purpose).  Negation ("no longer works at", "does not live
                    in … anymore", "quit her job at", "left her job at") gives
                    ``polarity=False``.
``sentiment``       love / like / enjoy / adore / am a fan of  vs  hate / dislike / can't
                    stand / do not like / no longer like: the key is
                    ``entity|feeling:<object stem>``, the value ``+``/``-``; "I love X" →
                    "I hate X" supersedes, "I love X" → "I love Y" does not (other key).
``copular``         an *attribute* noun phrase + is/are/changed to/is now set to/…:
                    "Alice's phone number is now 555-0199", "My favourite colour is green",
                    "The current CEO of Walmart is Doug McMillon", "The deadline moved to
                    Monday", "The budget was raised to 50k", "The office is in Hamburg"
                    (sub-attribute ``location``), "The build is broken" (sub-attribute
                    ``status``).
``status``          an entity with an identifier or a name + is/was marked + a status word
                    (open, closed, resolved, merged, shipped, paid, …):
                    "Ticket 4411 is open" → ticket 4411|status.
``age``             "Alice is 34" / "Alice just turned 35" → alice|age.
``label_value``     "Home city: Munich", "Alice's phone: 555-0100", "Ticket 4411: resolved".

Normalisation: entities and attributes are lower-cased, accent-folded, articles and
"current/new/present" dropped, attribute words stemmed (Snowball) and mapped to a small
table of synonyms (CEO = chief executive officer, headquarters = head office = main office
location, team = club = football team, secretary general = general secretary, …).
Identifiers stay part of the entity ("ticket 4411" ≠ "ticket 4412").

Single- vs multi-valued: relations such as likes, has, visited, speaks, is a <noun>,
and family/friend/pet/hobby nouns ("my sister is …") are multi-valued: their value is part
of the key (``entity|has:dog``), so a different value never supersedes and only a
negation of the same value does ("I no longer have a dog").

Deliberately left alone (no key → insert)
-----------------------------------------
* pronoun subjects (he, she, they, it, this, you) and anything needing coreference;
* "X is a <noun>" (teacher / mother / vegetarian are not one slot), "X is in <place>"
  for people, "X is at Y", bare "joined X" (club or company?), "left X" (city or job?);
* future and plans ("is moving to", "will join", "plans to"), past-only states ("used
  to live in", "lived in", "was the CEO"), conditionals and questions;
* "switched to X" / "now uses X" without a named attribute or a previous value;
* non-English text, and notes longer than 600 characters;
* multi-clause sentences where the verb is buried after a subordinate clause.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Protocol, runtime_checkable

import snowballstemmer

__all__ = [
    "MAX_KEY_CHARS",
    "WILDCARD",
    "RuleSubjectExtractor",
    "SubjectExtractor",
    "SubjectKey",
    "Supersession",
    "resolve_subject",
    "same_subject",
    "supersedes",
]

MAX_KEY_CHARS = 200
WILDCARD = "*"
"""Attribute of a ``from_to`` key that names no attribute (matched through its value)."""


@dataclass(frozen=True, slots=True)
class SubjectKey:
    """The slot a statement fills: ``entity|attribute`` and the value it puts there.

    ``key`` is the normalised ``"entity|attribute"`` string (≤ 200 chars), the thing two
    notes must share to be about the same subject.  ``single_valued`` is False for
    relations that hold several values at once (their value is then part of ``key``).
    ``polarity`` is False for a negation ("is no longer", "does not like").
    ``previous`` is the value a "from A to B" statement says was replaced.
    """

    entity: str
    attribute: str
    value: str
    rule: str
    polarity: bool = True
    single_valued: bool = True
    previous: str | None = None
    key: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.entity}|{self.attribute}"[:MAX_KEY_CHARS])


@runtime_checkable
class SubjectExtractor(Protocol):
    """Port: derive the subject slot of a note's text, or ``None`` when unsure."""

    def extract(self, text: str, *, kind: str = "fact") -> SubjectKey | None: ...


@dataclass(frozen=True, slots=True)
class Supersession:
    """Why a new note supersedes an old one; ``as_event_fields`` goes into the
    Superseded event so an auditor sees the key, both values and the rules."""

    key: str
    old_value: str
    new_value: str
    rule: str  # decision rule: value_changed | negation | reaffirmed | from_to
    new_rule: str  # extraction rule of the new note
    old_rule: str  # extraction rule of the old note

    def as_event_fields(self) -> dict[str, str]:
        return {
            "subject_key": self.key,
            "old_value": self.old_value,
            "new_value": self.new_value,
            "decision_rule": self.rule,
            "extraction_rules": f"{self.new_rule}/{self.old_rule}",
        }


def same_subject(a: SubjectKey | None, b: SubjectKey | None) -> bool:
    """True when both notes are about the same slot (wildcard keys never match here)."""
    if a is None or b is None:
        return False
    if a.attribute == WILDCARD or b.attribute == WILDCARD:
        return False
    return a.key == b.key


def supersedes(new: SubjectKey | None, old: SubjectKey | None) -> Supersession | None:
    """Decide whether ``new`` supersedes ``old`` (a candidate neighbour) and say why.

    * same key, both affirmative, single-valued, different value → ``value_changed``;
    * same key, new negative, same value as an affirmative old → ``negation`` (the
      negation note replaces the statement; the scope keeps the negation, never empty);
    * same key, new affirmative, old negative → ``reaffirmed`` (any value);
    * new ``from_to`` without attribute: same entity, old affirmative single-valued and
      old value == new ``previous`` → ``from_to``;
    * anything else (other key, same value, multi-valued change, both negative) → None.
    """
    if new is None or old is None:
        return None
    if new.attribute == WILDCARD:
        if (
            new.previous is not None
            and old.entity == new.entity
            and old.polarity
            and old.single_valued
            and _value_matches(old.value, new.previous)
        ):
            return _sup("from_to", new, old, key=old.key)
        return None
    if old.attribute == WILDCARD or new.key != old.key:
        return None
    same_value = _value_matches(new.value, old.value)
    if new.polarity and old.polarity:
        if new.single_valued and old.single_valued and not same_value:
            if new.previous is not None and not _value_matches(old.value, new.previous):
                return None
            return _sup("value_changed", new, old)
        return None
    if not new.polarity and old.polarity:
        return _sup("negation", new, old) if same_value else None
    if new.polarity and not old.polarity:
        if same_value or new.single_valued:
            return _sup("reaffirmed", new, old)
        return None
    return None


def resolve_subject(
    explicit: str | None,
    text: str,
    extractor: SubjectExtractor | None,
    *,
    kind: str = "fact",
) -> SubjectKey | None:
    """The write path's entry point: an explicit ``subject`` from the caller wins (rule
    ``explicit``, value = the note text); otherwise the extractor (``None`` = off)."""
    if explicit is not None:
        return SubjectKey(entity=explicit, attribute="", value=_norm_value(text), rule="explicit")
    if extractor is None:
        return None
    return extractor.extract(text, kind=kind)


def _sup(rule: str, new: SubjectKey, old: SubjectKey, *, key: str | None = None) -> Supersession:
    return Supersession(
        key=key or new.key,
        old_value=old.value if old.polarity else f"not {old.value}",
        new_value=new.value if new.polarity else f"not {new.value}",
        rule=rule,
        new_rule=new.rule,
        old_rule=old.rule,
    )


def _value_matches(a: str, b: str) -> bool:
    """Equal normalised values, or one is a leading word-prefix of the other
    ("tesla" ~ "tesla model 3")."""
    if a == b:
        return True
    wa, wb = a.split(), b.split()
    n = min(len(wa), len(wb))
    shorter = wa if len(wa) <= len(wb) else wb
    return n > 0 and wa[:n] == wb[:n] and not any(ch.isdigit() for ch in " ".join(shorter))


# --------------------------------------------------------------------------- lexicon

_STEM = snowballstemmer.stemmer("english")

_ARTICLES = {"the", "a", "an"}
_MODIFIERS = {"current", "currently", "new", "present", "latest", "actual", "now"}
_PRONOUNS = {
    "he", "she", "they", "it", "this", "that", "these", "those", "you", "we", "him", "her",
    "them", "his", "hers", "their", "its", "there", "here", "who", "what", "which", "one",
    "someone", "everyone", "everything", "something", "anything", "nothing", "me", "us",
    "your", "yours", "all", "both", "each", "some", "any", "i",
}
_FIRST_PERSON = {"i", "me", "myself"}

# synonym table over *stemmed* attribute phrases → canonical attribute
_ATTR_SYNONYMS: dict[str, str] = {
    "chief execut offic": "ceo",
    "chief execut": "ceo",
    "ceo": "ceo",
    "headquart": "headquarters",
    "headquart locat": "headquarters",
    "head offic": "headquarters",
    "head offic locat": "headquarters",
    "main offic": "headquarters",
    "main offic locat": "headquarters",
    "central locat": "headquarters",
    "hq": "headquarters",
    "general secretari": "secretary general",
    "secretari general": "secretary general",
    "secretary-gener": "secretary general",
    "secretari-gener": "secretary general",
    "chairperson": "chair",
    "chairman": "chair",
    "chairwoman": "chair",
    "chair": "chair",
    "director / manag": "director",
    "director/manag": "director",
    "director manag": "director",
    "director": "director",
    "director general": "director",
    "director-gener": "director",
    "head coach": "head coach",
    "coach": "head coach",
    "manag": "manager",
    "phone": "phone",
    "phone number": "phone",
    "telephon": "phone",
    "telephon number": "phone",
    "mobil": "phone",
    "mobil number": "phone",
    "cell": "phone",
    "cell number": "phone",
    "cell phone number": "phone",
    "email": "email",
    "e-mail": "email",
    "email address": "email",
    "e-mail address": "email",
    "car": "car",
    "vehicl": "car",
    "employ": "employer",
    "compani": "employer",
    "workplac": "employer",
    "job": "role",
    "job titl": "role",
    "titl": "role",
    "role": "role",
    "occup": "role",
    "profess": "role",
    "posit": "role",
    "home": "residence",
    "home citi": "residence",
    "citi": "residence",
    "resid": "residence",
    "partner": "partner",
    "husband": "partner",
    "wife": "partner",
    "spous": "partner",
    "boyfriend": "partner",
    "girlfriend": "partner",
    "fianc": "partner",
    "fiance": "partner",
    "fiancé": "partner",
    "team": "team",
    "club": "team",
    "footbal club": "team",
    "footbal team": "team",
    "basketbal team": "team",
    "nba team": "team",
    "school": "school",
    "univers": "school",
    "colleg": "school",
}

# attribute heads that hold several values at once
_MULTI_NOUNS = {
    "sister", "brother", "sibl", "friend", "kid", "child", "children", "son", "daughter",
    "cousin", "colleagu", "neighbor", "neighbour", "pet", "dog", "cat", "hobbi", "hobbies",
    "interest", "skill", "languag", "allergi", "parent", "grandchild", "aunt", "uncl",
    "nephew", "niec", "client", "custom", "tag", "member", "favorit thing",
}

_STATUS_WORDS = {
    "open", "opened", "reopened", "closed", "resolved", "fixed", "pending", "done",
    "blocked", "merged", "deployed", "shipped", "delivered", "paid", "unpaid", "overdue",
    "cancelled", "canceled", "approved", "rejected", "active", "inactive", "enabled",
    "disabled", "online", "offline", "down", "up", "broken", "running", "stopped",
    "in progress", "on hold", "completed", "complete", "failed", "failing", "passing",
    "live", "archived", "deprecated", "expired", "valid", "invalid",
    "accepted", "declined", "scheduled", "postponed", "finished", "started", "draft",
    "published", "unassigned", "assigned", "escalated", "healthy", "degraded",
}

_ENGLISH_FUNCTION = {
    "the", "is", "are", "was", "of", "and", "to", "in", "my", "i", "at", "for", "has",
    "have", "now", "with", "on", "a", "an", "works", "lives", "not", "no", "by", "from",
    "be", "am", "it", "this", "that", "his", "her", "their", "our", "we", "you",
}
_FOREIGN_FUNCTION = {
    # de
    "der", "die", "das", "und", "ist", "nicht", "jetzt", "wohnt", "arbeitet", "bei", "ein",
    "eine", "ich", "bin", "mein", "meine", "nach", "zu", "auf", "mit", "seit", "sind",
    # fr
    "le", "les", "est", "et", "une", "je", "suis", "mon", "ma", "chez", "dans", "habite",
    "travaille", "maintenant", "pour", "avec", "sur", "du", "au", "aux",
    # es / it / pt
    "el", "los", "las", "es", "y", "vive", "trabaja", "ahora", "en", "con", "mi", "soy",
    "il", "lo", "gli", "che", "sono", "ora", "lavora", "abita", "um", "uma", "mora", "agora",
    "não", "em", "é", "ele", "ela", "está",
    # nl
    "het", "een", "ik", "woont", "werkt", "bij", "nu", "niet", "naar",
}
_NAME_PARTICLES = {"de", "van", "von", "der", "den", "da", "di", "du", "la", "le", "al", "bin", "el", "dos", "del"}

_ADVERBS = (
    r"(?:(?:now|currently|still|recently|just|finally|officially|already|actually|also|"
    r"really|happily|since|then|again|eventually|soon)\s+)"
)
_NEG = r"(?P<neg>no longer|does not|do not|did not|is not|am not|are not|not|never)"
_TRAIL_CUT = re.compile(
    r"(?:,|;|:|\(|\s[-–—]\s|\s+(?:since|as of|starting|from now|last|this|next|now|anymore|any more|"
    r"these days|for (?:the )?(?:past|last)|because|but|so that|after|when|where|which|"
    r"who|while|until|in order|recently|yesterday|today|tonight|this week|"
    r"a (?:few|couple)|effective|instead|again|too|as well|"
    r"(?:in|on|by|around|from) (?:(?:19|20)\d\d|january|february|march|april|may|june|july|"
    r"august|september|october|november|december|spring|summer|autumn|fall|winter|monday|"
    r"tuesday|wednesday|thursday|friday|saturday|sunday)|"
    r"(?:one|two|three|four|five|six|a|\d+) (?:days?|weeks?|months?|years?) ago|"
    r"(?:a lot|so much|very much|more than)|and (?=[a-z]))\b)",
    re.IGNORECASE,
)

_NON_LATIN = re.compile(r"[^\W\d_a-zA-Z\u00c0-\u024f\u1e00-\u1eff]", re.UNICODE)
_WORDS = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*", re.UNICODE)


def _fold(s: str) -> str:
    s = unicodedata.normalize("NFKD", s)
    return "".join(ch for ch in s if not unicodedata.combining(ch))


def _norm_value(s: str) -> str:
    """Lower-case, accent-folded, articles and punctuation dropped ("a Volvo XC40." → "volvo xc40")."""
    toks = re.findall(r"[a-z0-9+#@]+(?:[.'_:/-][a-z0-9+#@]+)*", _fold(s).lower())
    while toks and toks[0] in _ARTICLES:
        toks = toks[1:]
    return " ".join(toks)[:MAX_KEY_CHARS]


def _norm_entity(s: str) -> str:
    toks = re.findall(r"[a-z0-9]+(?:[.'-][a-z0-9]+)*|/", _fold(s).lower())
    toks = [t for t in toks if t not in _ARTICLES]
    return " ".join(toks).replace(" / ", "/")


@lru_cache(maxsize=4096)
def _norm_attr(s: str) -> str:
    """Stemmed, modifier-free attribute, mapped through the synonym table."""
    raw = _fold(s).lower().replace("favourite", "favorite")
    toks = re.findall(r"[a-z0-9]+(?:-[a-z0-9]+)*|/", raw)
    toks = [t for t in toks if t not in _ARTICLES and t not in _MODIFIERS]
    stems = [t if t == "/" else _STEM.stemWord(t) for t in toks]
    # "position of X" / "X position" → X (DyKnow "The CEO position at …")
    while len(stems) > 2 and stems[1] == "of" and stems[0] in {"posit", "name", "role", "offic", "titl"}:
        stems = stems[2:]
    if len(stems) > 1 and stems[-1] in {"posit", "role", "job", "seat"}:
        stems = stems[:-1]
    phrase = " ".join(stems)
    if phrase in _ATTR_SYNONYMS:
        return _ATTR_SYNONYMS[phrase]
    if stems and stems[-1] in {"team", "club"}:
        return "team"
    if stems and stems[-1] in {"headquart"}:
        return "headquarters"
    return phrase


def _is_multi(attr: str) -> bool:
    words = attr.split()
    return bool(words) and (words[-1] in _MULTI_NOUNS or attr in _MULTI_NOUNS)


_COMMON_ADJ = {
    "fast", "slow", "cheap", "expensive", "big", "small", "good", "bad", "great", "nice", "new", "old", "hot",
    "cold", "warm", "easy", "hard", "long", "short", "high", "low", "full", "empty", "busy", "quiet", "loud",
    "late", "early", "ready", "right", "wrong", "true", "false", "clean", "dirty", "safe", "fun", "cool",
    "free", "fine", "ok", "okay", "huge", "tiny", "best", "worse", "worst", "better", "same", "different",
    "weird", "strange", "sure", "real", "fake", "cute", "ugly", "pretty", "simple", "complex", "light",
    "heavy", "dark", "bright", "strong", "weak", "rich", "poor", "smart", "fair", "nuts", "lit", "sad",
}
_ADJ_SUFFIX = re.compile(r"(?:ful|ous|ive|able|ible|al|ic|y|less|ed|ing|est|ish|ant|ent)$")


def _adjective_like(v: str) -> bool:
    return " " not in v and (v in _COMMON_ADJ or bool(_ADJ_SUFFIX.search(v)))


def _clean_value(obj: str) -> str:
    """The value phrase: cut at the first clause boundary / time adverbial."""
    obj = obj.strip()
    m = _TRAIL_CUT.search(obj)
    if m and m.start() > 0:
        obj = obj[: m.start()]
    return obj.strip(" .!,;:'\"")


def _looks_like_value(v: str) -> bool:
    words = v.split()
    if not words or len(words) > 8:
        return False
    return words[0].lower() not in _PRONOUNS or len(words) > 1 and words[0].lower() in {"her", "his", "their", "my"}


# --------------------------------------------------------------------------- noun phrases

_CAP_TOKEN = re.compile(r"^(?:[A-Z0-9#][\w.&'’+-]*|[a-z]+-?\d[\w-]*)$")


def _proper_name(np: str) -> str | None:
    """A capitalised name or an identifier ("Alice", "Kevin De Bruyne", "Ticket 4411",
    "db-7", "Order #1001"), normalised; None for pronouns / common nouns."""
    toks = np.replace(",", " ").split()
    if not toks or len(toks) > 7:
        return None
    if toks[0].lower() in _PRONOUNS or toks[0].lower() in {"the", "my", "our", "a", "an"}:
        if not (toks[0].lower() == "the" and len(toks) > 1 and all(_CAP_TOKEN.match(t) or t.lower() in _NAME_PARTICLES for t in toks[1:])):
            return None
        toks = toks[1:]
    for i, t in enumerate(toks):
        if _CAP_TOKEN.match(t):
            continue
        if i > 0 and (t.lower() in _NAME_PARTICLES or t.lower() in {"of", "and", "&"}):
            continue
        if i > 0 and any(ch.isdigit() or ch in "_#" for ch in t):
            continue
        if i == len(toks) - 2 and len(toks) <= 4 and any(ch.isdigit() or ch in "_#" for ch in toks[-1]):
            continue  # "Feature flag dark_mode", "Order no 55"
        return None
    if toks[-1].lower() in _NAME_PARTICLES | {"of", "and", "&"}:
        return None
    name = _norm_entity(" ".join(toks))
    return name or None


@dataclass(frozen=True, slots=True)
class _Ctx:
    speaker: str | None  # normalised speaker of a chat turn

    @property
    def me(self) -> str:
        return self.speaker or "self"


_ROLE_SUBJECTS = {"the user": "user", "user": "user", "the customer": "customer", "customer": "customer",
                  "the client": "client", "client": "client", "the patient": "patient", "patient": "patient"}


def _holder(np: str, ctx: _Ctx) -> str | None:
    """Who a relation verb is about: I/we, my X, X's Y, the user, a name or an id."""
    s = np.strip().strip(",")
    low = s.lower()
    if low in _FIRST_PERSON:
        return ctx.me
    if low == "we":
        return f"{ctx.me}/we"
    if low in _ROLE_SUBJECTS:
        return _ROLE_SUBJECTS[low]
    m = re.match(r"^(?:my|our) ([a-z][a-z -]{0,30})$", s, re.IGNORECASE)
    if m:
        return f"{ctx.me}/{_norm_attr(m.group(1))}"
    m = re.match(r"^(.+?)['’]s ([a-z][a-z -]{0,30})$", s)
    if m:
        owner = _holder(m.group(1), ctx)
        return f"{owner}/{_norm_attr(m.group(2))}" if owner else None
    name = _proper_name(s)
    if name is not None:
        if ctx.speaker is not None and name == "i":
            return ctx.me
        return name
    return None


def _attr_np(np: str, ctx: _Ctx) -> tuple[str, str] | None:
    """(entity, attribute) of an attribute noun phrase: "my X", "Alice's X", "the X of
    Y", "the X at Y", "the X held by Y", "the X" (implicit entity ``_``)."""
    s = np.strip().strip(",")
    # "the position of CEO at X" / "the name of the current X at Y" → "CEO at X"
    s = re.sub(r"^(?:the )?(?:position|post|office|role|name|title|job) of (?:the )?", "", s, flags=re.IGNORECASE)
    if not s:
        return None
    m = re.match(r"^(?:my|our) (.{1,60})$", s, re.IGNORECASE)
    if m:
        return ctx.me, _norm_attr(m.group(1))
    m = re.match(r"^(?:the )?(.+?)['’]s? (.{1,60})$", s, re.IGNORECASE) if "'" in s or "’" in s else None
    if m:
        owner = _holder(m.group(1), ctx)
        if owner is None and re.fullmatch(r"(?i:the )?[a-z][a-z -]{0,30}", m.group(1)):
            owner = _norm_entity(m.group(1))
        if owner is None or owner.split()[0] in _PRONOUNS:
            return None
        return owner, _norm_attr(m.group(2))
    m = re.match(r"^(?:the )?(.{1,60}?) (?:held|led|run|owned|coached|managed) by (.+)$", s, re.IGNORECASE)
    if m:
        ent = _proper_name(m.group(2))
        return (ent, _norm_attr(m.group(1))) if ent else None
    # "the X of Y" / "the X at Y": entity starts at the first of/at followed by a capital
    m = re.match(r"^(?:the )?(.{1,80}?) (?:of|at|for) (?=[A-Z0-9])(.+)$", s)
    if m:
        ent = _proper_name(m.group(2)) or _holder(m.group(2), ctx)
        return (ent, _norm_attr(m.group(1))) if ent else None
    m = re.match(r"^(?:the )?(.{1,80}?) (?:of|at|for) (?:the )?([a-z][a-z0-9 -]{0,40})$", s)
    if m and m.group(2).split()[0] not in _PRONOUNS:
        return _norm_entity(m.group(2)), _norm_attr(m.group(1))
    m = re.match(r"^the ([a-z][a-z0-9 /_-]{0,50})$", s, re.IGNORECASE)
    if m and any(w[:1].islower() for w in m.group(1).split()):
        words = m.group(1).split()
        if words and words[0] not in _PRONOUNS:
            return "_", _norm_attr(m.group(1))
    return None


# --------------------------------------------------------------------------- rules

Rule = Callable[[str, _Ctx], "SubjectKey | None"]


def _key(entity: str, attribute: str, value: str, rule: str, *, polarity: bool = True,
         single: bool | None = None, previous: str | None = None) -> SubjectKey | None:
    v = _norm_value(value)
    if not entity or not attribute or not v:
        return None
    if single is None:
        single = not _is_multi(attribute)
    if not single and attribute != WILDCARD:
        attribute = f"{attribute}:{v}"
    return SubjectKey(entity=entity[:120], attribute=attribute[:120], value=v, rule=rule,
                      polarity=polarity, single_valued=single,
                      previous=_norm_value(previous) if previous else None)


_RELATIVE = re.compile(
    r"^the (?P<attr>(?:\S+ ){0,4}?(?:team|club|company|employer|city|school|party|band|label))"
    r" (?P<ent>.+?) (?:is |are )?(?:currently |now )?(?:\w+ing|\w+s|\w+) (?:for|at|in|with|to)\b.*? is (?:now |currently )?(?P<val>.+)$",
    re.IGNORECASE,
)


def _rule_relative_role(s: str, ctx: _Ctx) -> SubjectKey | None:
    if not s[:4].lower() == "the ":
        return None
    m = _RELATIVE.match(s)
    if not m:
        return None
    ent = _proper_name(m.group("ent")) or _holder(m.group("ent"), ctx)
    if ent is None:
        return None
    return _key(ent, _norm_attr(m.group("attr")), _clean_value(m.group("val")), "relative_role")


_HELD_BY = re.compile(r"^(?P<np>.+?) (?:is|are) (?:now |currently |still )?(?:held|occupied|filled) by (?P<val>.+)$", re.IGNORECASE)


def _rule_held_by(s: str, ctx: _Ctx) -> SubjectKey | None:
    if " by " not in s:
        return None
    m = _HELD_BY.match(s)
    if not m:
        return None
    ea = _attr_np(m.group("np"), ctx)
    if ea is None:
        return None
    return _key(ea[0], ea[1], _clean_value(m.group("val")), "held_by")


_INVERTED = re.compile(
    r"^(?P<val>.+?) (?:is|has become|became|was (?:appointed|named|elected) (?:as )?|"
    r"has been (?:appointed|named|elected) (?:as )?|is now|is currently) (?:now |currently |officially )?"
    r"(?P<np>(?:the |my |our |[A-Z][\w.-]*(?: [A-Z][\w.-]*)*['’]s )?.+)$"
)
_ROLE_WORDS = re.compile(
    r"\b(?:ceo|cfo|cto|coo|chief|president|chair|chairman|chairwoman|chairperson|director|head|manager|"
    r"captain|coach|mayor|governor|minister|secretary|treasurer|leader|lead|owner|editor|principal|dean|"
    r"chancellor|speaker|commissioner|ambassador|capital|champion|king|queen|pope|host|conductor)\b",
    re.IGNORECASE,
)


def _rule_inverted_role(s: str, ctx: _Ctx) -> SubjectKey | None:
    if not (" is " in s or " became " in s or " become " in s or " was " in s) or not (
        " of " in s or " at " in s or " for " in s or " my " in s or " our " in s or "'s " in s
    ):
        return None
    m = _INVERTED.match(s)
    if not m:
        return None
    val = m.group("val")
    if _proper_name(val) is None and not val.lower().startswith(("the ",)):
        if not re.match(r"^[A-Z0-9]", val):
            return None
    if val.split()[0].lower() in _PRONOUNS:
        return None
    np = _clean_value(m.group("np"))
    low = np.lower()
    owned = low.startswith(("my ", "our ")) or bool(re.match(r"^[A-Z][\w.-]*(?: [A-Z][\w.-]*)*['’]s ", np))
    if not owned:
        # "the X of Y" / "CEO of Y": only a role noun owned by a named entity is a slot
        # ("Bob is proud of Alice", "X is the best" stay alone)
        m2 = re.match(r"^(?:the )?(.+?) (?:of|at|for) ", np)
        if m2 is None or not _ROLE_WORDS.search(m2.group(1)):
            return None
    ea = _attr_np(np, ctx)
    if ea is None or ea[0] == "_":
        return None
    if val.lower().startswith("the "):
        return None
    return _key(ea[0], ea[1], val, "inverted_role")


_FROM_TO = re.compile(
    r"^(?P<subj>.+?) (?:has |have |had )?" + _ADVERBS + r"*(?:switched|changed|moved|went|upgraded|downgraded|"
    r"transferred|swapped|traded|relocated|shifted|converted|migrated)"
    r"(?: (?P<poss>her|his|my|their|our|its) (?P<attr>[a-z][a-z -]{0,30}?))? from (?P<prev>.+?) (?:to|for) (?P<val>.+)$",
    re.IGNORECASE,
)

_RESIDENCE_VERBS = {"moved", "relocated"}


def _rule_from_to(s: str, ctx: _Ctx) -> SubjectKey | None:
    if " from " not in s:
        return None
    m = _FROM_TO.match(s)
    if not m:
        return None
    subj = m.group("subj")
    ent = _holder(subj, ctx)
    prev, val = _clean_value(m.group("prev")), _clean_value(m.group("val"))
    if not prev or not val:
        return None
    if ent is None:
        ea = _attr_np(subj, ctx)
        if ea is None:
            return None
        return _key(ea[0], ea[1], val, "from_to", previous=prev)
    if m.group("attr"):
        poss = m.group("poss").lower()
        owner = ent if poss != "my" else ctx.me
        return _key(owner, _norm_attr(m.group("attr")), val, "from_to", previous=prev)
    verb = re.search(r"(moved|relocated)", s[len(subj):], re.IGNORECASE)
    if verb and _looks_place(prev) and _looks_place(val):
        return _key(ent, "residence", val, "from_to", previous=prev)
    return _key(ent, WILDCARD, val, "from_to", single=True, previous=prev)


_PLACE_ATTRS = ("location", "headquarters", "address", "residence")
_TIME_WORD = re.compile(
    r"\b(?:\d|monday|tuesday|wednesday|thursday|friday|saturday|sunday|january|february|march|april|may|june|"
    r"july|august|september|october|november|december|noon|midnight|tomorrow|today|week|month|year)",
    re.IGNORECASE,
)


def _looks_place(v: str) -> bool:
    """A place-like value: capitalised or "the/a <noun>", and no date/time in it."""
    v = v.strip()
    if not v or _TIME_WORD.search(v):
        return False
    return v[0].isupper() or bool(re.match(r"^(?:the|a|an|my|our|her|his) [a-z]", v))


# (verb regex, attribute, single-valued, polarity)
_HOLDER_VERBS: list[tuple[str, str, bool, bool]] = [
    (r"(?:lives?|living|resides?|residing|is based|am based|are based|settled|has settled|"
     r"moved|has moved|relocated|moved back|moved over|is now living|now lives|based) (?:in|to)", "residence", True, True),
    (r"(?:moved|relocated|moved back)(?: out)? to", "residence", True, True),
    (r"(?:calls?) (?P<obj2>.+?) home", "residence", True, True),
    (r"(?:works?|working|is working|am working|started working|began working|is employed|am employed|"
     r"got a (?:new )?job|took a (?:new )?job|accepted a (?:new )?job|landed a (?:new )?job|started a new job|"
     r"has a (?:new )?job|started (?:a )?(?:new )?(?:position|role)) (?:at|for|with|by)", "employer", True, True),
    (r"(?:is employed|am employed|employed) by", "employer", True, True),
    (r"joined (?P<obj3>[A-Z][\w&.-]*(?: [A-Z][\w&.-]*)*) as", "employer", True, True),
    (r"(?:works?|working|is working|am working|started working|is employed|am employed|serves|is serving|"
     r"am serving) as", "role", True, True),
    (r"(?:was|got|has been|have been|just got|is being) promoted to", "role", True, True),
    (r"(?:plays?|playing|is playing|races?|racing|is racing|drives|driving|is driving|signed|has signed|"
     r"transferred|was transferred|is on loan) (?:for|with|to|at)", "team", True, True),
    (r"(?:drives?|driving|is driving) (?:a|an)", "car", True, True),
    (r"(?:studies|studying|is studying|am studying|is enrolled|am enrolled|goes to school|is a student) (?:at|in)",
     "school", True, True),
    (r"attends", "school", True, True),
    (r"(?:is|am|are|got) (?:married|engaged) to", "partner", True, True),
    (r"(?:is|am) (?:dating|seeing|in a relationship with)", "partner", True, True),
    (r"prefers?", "preference", True, True),
    # multi-valued relations (value becomes part of the key)
    (r"(?:has|have|owns?) (?:a|an|two|three|\d+)", "has", False, True),
    (r"(?:visited|has visited|have visited|been to|has been to|have been to)", "visited", False, True),
    (r"speaks?", "speaks", False, True),
    (r"(?:uses?|is using|am using)", "uses", False, True),
    (r"(?:is|am) (?:allergic) to", "allergic", False, True),
]
_NEG_VERBS: list[tuple[str, str, bool]] = [
    (r"(?:quit|left|has left|resigned from|stopped working (?:at|for)|was laid off (?:from|by)|got fired from|"
     r"retired from) (?:(?:her|his|my|their) (?:job|position|role) (?:at|with) )?", "employer", True),
    (r"(?:moved out of|moved away from)", "residence", True),
    (r"(?:sold|gave away|got rid of) (?:her|his|my|their)", "car", True),
]


def _compile_holder() -> list[tuple[re.Pattern[str], str, bool, bool]]:
    out = []
    for verb, attr, single, pol in _HOLDER_VERBS:
        # (cheap unanchored pre-filter, anchored rule)
        out.append((re.compile(r"(?<=\s)(?:" + verb + r")(?:\s+|$)", re.IGNORECASE), attr, single, pol))
    return out


_PEEL = {"has", "have", "had", "is", "am", "are", "was", "now", "currently", "still", "recently", "just",
         "finally", "officially", "already", "actually", "also", "really", "happily", "then", "again",
         "eventually", "soon", "even", "longer", "no", "not", "never", "does", "do", "did"}
_NEG_WORDS = {"not", "never", "no"}
_MODAL = re.compile(r"\b(?:will|would|could|should|might|may|going to|want to|wants to|plans? to|hopes? to|"
                    r"used to|if|wish|thinking of|considering|about to|trying to|tries to)\b", re.IGNORECASE)


def _peel(head: str) -> tuple[str, bool]:
    """Split "Alice does not even" into ("Alice", negated=True)."""
    words = head.split()
    negated = False
    while len(words) > 1 and words[-1].lower() in _PEEL:
        negated = negated or words[-1].lower() in _NEG_WORDS
        words.pop()
    return " ".join(words), negated


_HOLDER_RES = _compile_holder()
_ANY_HOLDER = re.compile(
    r"(?<=\s)(?:" + "|".join(re.sub(r"\(\?P<\w+>", "(?:", v) for v, _, _, _ in _HOLDER_VERBS)
    + "|" + "|".join(v for v, _, _ in _NEG_VERBS) + r")",
    re.IGNORECASE,
)
_NEG_RES = [
    (re.compile(r"\b(?:" + verb + r")", re.IGNORECASE), re.compile(r"^(?P<subj>.+?) (?:has |have |had )?" + _ADVERBS + r"*(?:" + verb + r")(?P<obj>.+)$", re.IGNORECASE), attr, single)
    for verb, attr, single in _NEG_VERBS
]
_BASE_VERB = {  # "does not live in" → "lives in"
    "live in": "lives in", "work at": "works at", "work for": "works for", "play for": "plays for",
    "drive a": "drives a", "own a": "owns a", "have a": "has a", "use": "uses", "speak": "speaks",
}


def _rule_holder_verb(s: str, ctx: _Ctx) -> SubjectKey | None:
    if not _ANY_HOLDER.search(s):
        return None
    for pre, rx, attr, single in _NEG_RES:
        if not pre.search(s):
            continue
        m = rx.match(s)
        if m:
            ent = _holder(m.group("subj"), ctx)
            val = _clean_value(m.group("obj"))
            if ent and _looks_like_value(val) and not val.lower().startswith(("to ", "for ")):
                if attr == "car":
                    val = re.sub(r"^(?:car|vehicle)\b\s*(?:,\s*)?(?:a |an |the )?", "", val)
                return _key(ent, attr, val, "holder_verb", polarity=False, single=single)
    for pre2, attr, single, pol in _HOLDER_RES:
        m = pre2.search(s)
        if not m or m.start() == 0:
            continue
        subj, negated = _peel(s[: m.start()])
        if _MODAL.search(s[: m.start()]):
            return None
        ent = _holder(subj, ctx)
        if ent is None:
            return None
        groups = m.groupdict()
        obj = groups.get("obj2") or groups.get("obj3") or s[m.end():]
        val = _clean_value(obj)
        if attr == "employer" and groups.get("obj3"):
            val = groups["obj3"]
        if attr == "role":
            val = re.sub(r"^(?:a|an|the)\s+", "", val, flags=re.IGNORECASE)
            val = re.split(r"\s+(?:at|for|with|in)\s+", val, maxsplit=1)[0]
        if attr in {"employer", "team", "residence", "school"}:
            val = re.split(r"\s+as\s+", val, maxsplit=1)[0]
        if attr == "preference":
            val = re.split(r"\s+(?:over|to|rather than|instead of)\s+", val, maxsplit=1)[0]
            head = _norm_value(val).split()
            if not head or head[0] in _PRONOUNS or head[0] in {"to", "not"}:
                return None
            attr = f"preference:{_STEM.stemWord(head[-1])}"
        if attr == "has":
            val = m.group(0).split()[-1] + " " + val
            val = re.sub(r"^(?:a|an)\s+", "", val)
        if not _looks_like_value(val):
            return None
        polarity = pol and not negated
        return _key(ent, attr, val, "holder_verb", polarity=polarity, single=single)
    return None


_POS = r"(?:love|loves|loved|like|likes|enjoy|enjoys|adore|adores|am into|is into|are into|am a (?:big |huge )?fan of|is a (?:big |huge )?fan of|really like|really love)"
_NEGS = (r"(?:hate|hates|dislike|dislikes|can not stand|cannot stand|could not stand|detest|detests|"
         r"am not a fan of|is not a fan of|(?:do|does|did) not (?:really )?(?:like|love|enjoy)|no longer (?:like|likes|love|loves|enjoy|enjoys)|"
         r"(?:am|is) (?:tired|sick) of|(?:got|am|is|have got|has gotten) bored (?:of|with)|stopped (?:liking|enjoying|loving)|"
         r"(?:am|is) over)")
_SENTIMENT = re.compile(
    r"^(?P<subj>I|we|We|(?-i:[A-Z][\w.'-]*(?: [A-Z][\w.'-]*){0,3})|my \w+|My \w+|the user|The user|user|User) (?:(?:now|still|really|absolutely|totally|actually|honestly|kind of|kinda|just|also) )*"
    r"(?:(?P<neg>" + _NEGS + r")|(?P<pos>" + _POS + r")) (?P<obj>.+)$",
    re.IGNORECASE,
)
_SENTIMENT_TRIGGER = re.compile(
    r"\b(?:lov|lik|enjoy|ador|into|fan|hat|dislik|stand|detest|tired|sick|bored|over)", re.IGNORECASE
)
_OBJ_STOP = {"to", "it", "that", "this", "how", "when", "what", "the", "a", "an", "you", "your", "them",
             "her", "him", "those", "these", "being", "seeing", "hearing", "having", "doing", "getting",
             "my", "our", "his", "their", "its", "all", "so", "some", "every", "each", "with", "there", "here"}


def _rule_sentiment(s: str, ctx: _Ctx) -> SubjectKey | None:
    if not _SENTIMENT_TRIGGER.search(s):
        return None
    m = _SENTIMENT.match(s)
    if not m:
        return None
    ent = _holder(m.group("subj"), ctx)
    if ent is None:
        return None
    obj = _clean_value(m.group("obj"))
    words = [w for w in _WORDS.findall(_fold(obj).lower())]
    if words and words[0] == "to" and len(words) > 1:
        words = words[1:]
    while words and words[0] in {"the", "a", "an"}:
        words = words[1:]
    if not words or words[0] in _OBJ_STOP or words[0] in _PRONOUNS or len(words) > 4:
        return None
    stem = " ".join(_STEM.stemWord(w) for w in words)
    return SubjectKey(entity=ent, attribute=f"feeling:{stem}"[:120], value="+" if m.group("pos") else "-",
                      rule="sentiment", polarity=True, single_valued=True)


_COPULAR_TRIGGER = re.compile(
    r" (?:is|are|changed|moved|was|has|got|rose|increased|went|dropped|fell|decreased|became|switched|now|"
    r"reads)\b|'s ", re.IGNORECASE
)
_COPULAR = re.compile(
    r"^(?P<np>.+?) (?P<cop>is|are|'s|has changed to|changed to|has been changed to|was changed to|"
    r"got changed to|was updated to|has been updated to|is now set to|is set to|was set to|has been set to|"
    r"moved to|has moved to|was moved to|has been moved to|got moved to|was pushed (?:back )?to|"
    r"has been pushed (?:back )?to|was postponed to|was rescheduled (?:for|to)|has been rescheduled (?:for|to)|"
    r"rose to|has risen to|increased to|has increased to|went up to|dropped to|has dropped to|fell to|"
    r"decreased to|went down to|was raised to|has been raised to|was lowered to|was reduced to|"
    r"was cut to|was bumped to|became|has become|switched to|has switched to|is located in|is located at|"
    r"are located in|is based in|now reads|reads) (?P<rest>.+)$",
    re.IGNORECASE,
)


def _rule_copular(s: str, ctx: _Ctx) -> SubjectKey | None:
    if not _COPULAR_TRIGGER.search(s):
        return None
    m = _COPULAR.match(s)
    if not m:
        return None
    ea = _attr_np(m.group("np"), ctx)
    if ea is None:
        return None
    ent, attr = ea
    if not attr or attr.split()[0] in _PRONOUNS:
        return None
    rest = m.group("rest").strip()
    polarity = True
    neg = re.match(r"^(?:no longer|not|never) (.+)$", rest, re.IGNORECASE)
    if neg:
        polarity, rest = False, neg.group(1)
    rest = re.sub(r"^(?:now|currently|still|officially|finally|actually|at) (?=\S)", "", rest, flags=re.IGNORECASE)
    rest = re.sub(r"^(?:now|currently|still) ", "", rest, flags=re.IGNORECASE)
    cop = m.group("cop").lower()
    single = None
    if cop == "are" and attr.endswith("s") and not attr.endswith("ss"):
        single = False
    rest = re.sub(r"^(?:located|situated|based|stored|kept) (?=in |at )", "", rest, flags=re.IGNORECASE)
    placed = False
    if re.match(r"^(?:in|at|on) ", rest, re.IGNORECASE) and cop in {"is", "are", "'s"}:
        rest = rest.split(" ", 1)[1]
        placed = True
    elif "moved" in cop or "located" in cop or "based" in cop:
        placed = True
    if placed and _looks_place(rest) and not attr.endswith(_PLACE_ATTRS):
        attr = f"{attr}/location"
    elif placed:
        pass
    elif cop in {"is", "are", "'s"}:
        first = _clean_value(rest).lower()
        if first in _STATUS_WORDS:
            attr = f"{attr}/status"
        elif re.match(r"^(?:very|so|really|too|quite|pretty|super|a bit|kind of|always|usually|often|"
                      r"going|about|getting|being|doing|looking|coming|gonna|like|such|one of|the best|"
                      r"great|good|bad|awesome|amazing|important|hard|tough|nice|fine|ok|okay)\b", rest, re.IGNORECASE):
            return None
    val = _clean_value(rest)
    if ent == "_" and not re.search(r"\d|[A-Z]", val):
        if len(val.split()) > 3 or (cop in {"is", "are", "'s"} and _adjective_like(val)):
            return None  # "the server is fast": an adjective, not a slot value
    if not _looks_like_value(val):
        return None
    return _key(ent, attr, val, "copular", polarity=polarity, single=single)


_STATUS = re.compile(
    r"^(?P<subj>.+?) (?:is|are|was|has been|got|was marked|is marked|is now marked|has been marked|"
    r"is marked as|was marked as|has been marked as) (?:now |currently |finally |still |officially )?"
    r"(?P<neg>no longer |not )?(?P<val>[a-z]+(?: (?:progress|hold))?)$",
    re.IGNORECASE,
)


def _rule_status(s: str, ctx: _Ctx) -> SubjectKey | None:
    last = s.rsplit(None, 1)[-1].lower()
    if last not in _STATUS_WORDS and last not in {"progress", "hold"}:
        return None
    m = _STATUS.match(s)
    if not m:
        return None
    val = m.group("val").lower()
    if val not in _STATUS_WORDS:
        return None
    ent = _holder(m.group("subj"), ctx)
    if ent is None:
        ea = _attr_np(m.group("subj"), ctx)
        if ea is None:
            return None
        ent = ea[0] if ea[0] != "_" else ea[1]
        if ea[0] != "_":
            ent = f"{ea[0]}/{ea[1]}"
    return _key(ent, "status", val, "status", polarity=not m.group("neg"))


_PLACED = re.compile(
    r"^(?P<subj>.+?) (?:is|are) (?:now |currently |still )?(?:located |stored |kept |installed |parked )?"
    r"(?:in|at|on) (?P<val>.+)$",
    re.IGNORECASE,
)


def _rule_placed(s: str, ctx: _Ctx) -> SubjectKey | None:
    """An identified thing's location: "Server db-7 is in rack 3" (ids only: people "in"
    places are left alone)."""
    if not any(ch.isdigit() for ch in s):
        return None
    m = _PLACED.match(s)
    if not m or not any(ch.isdigit() for ch in m.group("subj")):
        return None
    ent = _proper_name(m.group("subj"))
    if ent is None:
        return None
    return _key(ent, "location", _clean_value(m.group("val")), "placed")


_AGE = re.compile(
    r"^(?P<subj>.+?) (?:is|am|are|just turned|turned|has turned|will be|is now|am now) (?:now )?(?P<n>\d{1,3})(?: years? old| yo)?$",
    re.IGNORECASE,
)


def _rule_age(s: str, ctx: _Ctx) -> SubjectKey | None:
    last = s.rsplit(None, 1)[-1].lower()
    if not (last.isdigit() or last in {"old", "yo"}):
        return None
    m = _AGE.match(s)
    if not m or "will be" in s.lower():
        return None
    ent = _holder(m.group("subj"), ctx)
    if ent is None:
        return None
    return _key(ent, "age", m.group("n"), "age")


_LABEL = re.compile(r"^(?P<label>[^:]{1,60}?)\s*:\s+(?P<val>.{1,120})$")


def _rule_label_value(text: str, ctx: _Ctx) -> SubjectKey | None:
    m = _LABEL.match(text.strip().rstrip("."))
    if not m:
        return None
    label, val = m.group("label").strip(), m.group("val").strip()
    if len(val.split()) > 8 or val.endswith("?"):
        return None
    if any(ch.isdigit() for ch in label) and _proper_name(label) is not None:
        # "Ticket 4411: resolved" — an entity label; only a status word is a slot
        ent = _proper_name(label)
        v = val.lower().rstrip(".!")
        if ent is None or v not in _STATUS_WORDS:
            return None
        return _key(ent, "status", v, "label_value")
    if _proper_name(label) is not None:
        return None  # "Jon: Thanks!" — a name, not an attribute label
    ea = _attr_np(label, ctx)
    if ea is None:
        low = label.lower()
        if re.fullmatch(r"[a-z][a-z /-]{0,40}", low) and low.split()[0] not in _PRONOUNS:
            ea = ("_", _norm_attr(low))
        else:
            return None
    return _key(ea[0], ea[1], val, "label_value")


_RULES: tuple[Rule, ...] = (
    _rule_relative_role,
    _rule_held_by,
    _rule_inverted_role,
    _rule_from_to,
    _rule_sentiment,
    _rule_holder_verb,
    _rule_status,
    _rule_placed,
    _rule_age,
    _rule_copular,
)

# --------------------------------------------------------------------------- pre-processing

_LEAD = re.compile(
    r"^(?:(?:update|fyi|note|news|good news|big news|quick update|heads up|btw|by the way|so|well|oh|ok|okay|"
    r"yeah|yes|yep|actually|guess what|just so you know|turns out|correction|also|and|but|anyway|hey|hi|"
    r"as of [^,]{1,30}|since [^,]{1,30}|starting [^,]{1,30}|from [^,]{1,30} on|last [a-z]+|this [a-z]+|"
    r"in (?:19|20)\d\d|recently|effective [^,]{1,30}|after [^,]{1,40})\s*[,:!\-–]?\s+)+",
    re.IGNORECASE,
)
_SPEAKER = re.compile(r"^(?P<spk>[A-Z][\w.'-]*(?: [A-Z][\w.'-]*){0,2}):\s+(?P<body>.+)$", re.DOTALL)
_LABEL_WORDS = {"update", "note", "fyi", "news", "correction", "edit", "reminder", "todo", "summary",
                "heads up", "good news", "big news", "quick update", "btw", "ps", "status", "info"}
_ABBREV = re.compile(r"(?:^|\s)(?:[A-Z]|Dr|Mr|Mrs|Ms|Prof|St|Jr|Sr|Inc|Ltd|Co|Corp|vs|No|Nr|[A-Z]\.[A-Z])\.$")
_TRAILING_ADV = re.compile(r"(?:[\s,]+(?:now|again|anymore|any more|these days|currently|already|lately|then|"
                           r"actually|as well|too|for now|for good))+$", re.IGNORECASE)
_TRAIL_LAST = {"now", "again", "anymore", "more", "days", "currently", "already", "lately", "then",
               "actually", "well", "too", "good"}
_SENT_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])|\s*[\n]+\s*")


def _is_foreign(text: str) -> bool:
    if _NON_LATIN.search(text):
        return True
    words = [w.lower() for w in _WORDS.findall(text) if w[:1].islower()]
    foreign = sum(1 for w in words if w in _FOREIGN_FUNCTION and w not in _ENGLISH_FUNCTION)
    english = sum(1 for w in words if w in _ENGLISH_FUNCTION)
    return foreign > 0 and foreign >= english


def _normalise(s: str) -> str:
    s = s.replace("’", "'").replace("‘", "'").replace("“", '"').replace("”", '"')
    if "'" in s:
        s = _CONTRACTION.sub(_expand, s)
    return " ".join(s.split())


_CONTRACTION = re.compile(
    r"\b(?:(I)'(m)|(can|won)'t|(\w+)n't|(I|you|we|they)'(ve|ll|d|re)|(he|she|it|that|there|what)'s)\b",
    re.IGNORECASE,
)
_SUFFIX = {"m": "am", "ve": "have", "ll": "will", "d": "would", "re": "are"}


def _expand(m: re.Match[str]) -> str:
    g = m.groups()
    if g[0]:
        return f"{g[0]} am"
    if g[2]:
        return "can not" if g[2].lower() == "can" else "will not"
    if g[3]:
        return f"{g[3]} not"
    if g[4]:
        return f"{g[4]} {_SUFFIX[g[5].lower()]}"
    return f"{g[6]} is"


def _sentences(body: str) -> list[str]:
    """Sentence split that keeps "Dr. Patel", "Khalid A. Al-Falih" together."""
    out: list[str] = []
    for piece in _SENT_SPLIT.split(body):
        piece = piece.strip()
        if not piece:
            continue
        if out and _ABBREV.search(out[-1]):
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return out


class RuleSubjectExtractor:
    """The default :class:`SubjectExtractor`: the documented regex rules, no model.

    Deterministic and pure.  Measured on LoCoMo chat turns (scripts/eval_subjects.py):
    p50 ≈ 85 µs, p95 ≈ 200 µs per call — short fact notes are much cheaper; a long chat
    turn is tried sentence by sentence against every rule."""

    def __init__(self, *, max_chars: int = 600) -> None:
        self._max_chars = max_chars

    def extract(self, text: str, *, kind: str = "fact") -> SubjectKey | None:
        if kind != "fact" or not text or len(text) > self._max_chars:
            return None
        text = _normalise(text)
        if _is_foreign(text):
            return None
        speaker: str | None = None
        body = text
        m = _SPEAKER.match(text)
        if m and not re.search(r"['’]s\b", m.group("spk")) and not any(c.isdigit() for c in m.group("spk")):
            spk_words = m.group("spk").split()
            if (all(w[:1].isupper() for w in spk_words) and len(m.group("body").split()) >= 2
                    and m.group("spk").lower() not in _LABEL_WORDS):
                speaker = _norm_entity(m.group("spk"))
                body = m.group("body")
        ctx = _Ctx(speaker)
        if speaker is None and text.split(":", 1)[0].strip().lower() not in _LABEL_WORDS:
            hit = _rule_label_value(text, ctx)
            if hit is not None:
                return hit
            if re.match(r"^[^:]{1,60}:\s", text) and text.split(":", 1)[0].lower() not in _LABEL_WORDS:
                return None  # a label whose value is not a slot
        for sent in _sentences(body):
            if not sent or sent.endswith("?"):
                continue
            sent = _LEAD.sub("", sent).strip().rstrip(".!").strip()
            if sent.rsplit(None, 1)[-1].lower() in _TRAIL_LAST:
                sent = _TRAILING_ADV.sub("", sent)
            if len(sent) > 160:
                continue
            if len(sent) < 5:
                continue
            if speaker is not None and re.match(r"^(?:you|he|she|they)\b", sent, re.IGNORECASE):
                continue
            for rule in _RULES:
                hit = rule(sent, ctx)
                if hit is not None:
                    return hit
        return None
