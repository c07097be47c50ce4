"""The ``sentiment`` and ``state`` rules of subject inference: a holder's feeling about a
thing and a holder's copular state, each keyed with its object so that only its own
negation (or reaffirmation) supersedes it (documented in :mod:`memfabric.domain.subjects`).

A state is said with a copula and, for its negation (issue 29), with any of the forms of
"no longer": "I am no longer vegetarian", "I am not vegetarian anymore / any more / any
longer", "I am now no longer …", "I stopped (quit, ceased) being vegetarian", "I have not
been vegetarian since May"; and affirmed as "I am vegetarian", "I am now / still …", "I
became vegetarian", "I have been vegetarian for years". "The user's no longer on call"
reaches this rule as "The user is no longer on call" (:mod:`memfabric.domain.subjects.prep`).
"""

from __future__ import annotations

import re

from memfabric.domain.subjects.key import SubjectKey
from memfabric.domain.subjects.text import (
    PRONOUNS, STEM, WORD_RE, Context, adjective_like, clean_value, fold_accents, has_digit, holder_of, looks_like_value, make_key,
    union_by_first_letter,
)

NOT_A_SLOT_VALUE = re.compile(  # "is very ...", "is going to", "is great": an opinion, not a value
    r"^(?:very|so|really|too|quite|pretty|super|a bit|kind of|always|usually|often|"
    r"going|about|getting|being|doing|looking|coming|gonna|like|such|one of|the best|"
    r"great|good|bad|awesome|amazing|important|hard|tough|nice|fine|ok|okay)\b",
    re.IGNORECASE,
)
"""A copula's complement that is an opinion or a clause, not a value."""

_STANCE_ADVERBS = r"(?:now|currently|still|officially|actually|definitely|technically|finally|already|also|really)"
_STATE = re.compile(
    r"^(?P<subj>.+?) (?:"
    r"(?:am|is|are)(?: " + _STANCE_ADVERBS + r")* (?P<neg>(?:no longer|not(?: really)?|never) )?"
    r"|(?:has|have)(?: (?P<perf_neg>not|never))? been "
    r"|(?P<stopped>(?:(?:has|have) )?(?:stopped|quit|ceased) being) "
    r"|(?:became|has become|have become) "
    r")(?:" + _STANCE_ADVERBS + r" )*(?P<val>.+)$",
    re.IGNORECASE,
)
_STATE_TRIGGER = re.compile(r" (?:am|is|are|been|being|became|become) ", re.IGNORECASE)
_STATE_PHRASE = re.compile(r"^(?:a|an|the|in|on|at|off|out of) \S", re.IGNORECASE)
"""A state of several words is a noun phrase ("a member of the chess club") or a
prepositional one ("on a diet", "in the hospital"); one word ("vegetarian") always is."""
_COMPLEMENTED = re.compile(
    r"^[a-z][a-z-]+ (?:of|in|on|for|with|from|about|at) \S"
    r"|^[a-z][a-z-]+ to (?:(?:the|a|an|my|our|his|her|their) \S|[A-Z]|\S+s\b)",
)
"""Or a word with its complement: "allergic to peanuts", "part of the band", "afraid of
flying", "interested in politics"; "to" only before a noun phrase ("pumped to start" is
a clause)."""
_FEELINGS = {
    "proud", "happy", "sad", "angry", "mad", "upset", "jealous", "grateful", "thankful", "excited", "worried",
    "nervous", "annoyed", "disappointed", "impressed", "amazed", "thrilled", "pumped", "psyched", "curious",
    "surprised", "shocked", "touched", "moved", "glad", "sorry", "sure", "tired", "sick", "bored", "fond",
    "crazy", "nuts", "obsessed", "keen", "eager", "anxious", "confident", "hopeful", "ashamed", "embarrassed",
}
"""A feeling toward someone or something ("proud of Alice", "excited about the trip") is a
moment, not a state; the word alone ("I am happy") still is one."""
_NOT_A_STATE = re.compile(r"^(?:\w+ing|a bit|sure|glad|sorry|here|there|back|able|about|going|to|"
                          r"by|with|like|that|because|ready|supposed|due)\b", re.IGNORECASE)


def rule_state(s: str, ctx: Context) -> SubjectKey | None:
    """A copular state of a holder (see the module docstring). The state is part of the
    key (``self|state:vegetarian``), so only its negation supersedes it, and two states
    never do; a progressive, a feeling of the moment, an opinion or a clause ("I am
    working", "I am not sure", "is great", "am pumped to start") gives no key."""
    if not _STATE_TRIGGER.search(s):
        return None
    m = _STATE.match(s)
    if not m or m.group("subj").count(" ") > 3:  # a holder is a short noun phrase
        return None
    ent = holder_of(m.group("subj"), ctx)
    val = clean_value(m.group("val"))
    if ent is None or not _is_state(val):
        return None
    stem = object_stem(val, max_words=6)
    if stem is None or has_digit(stem):
        return None
    negated = bool(m.group("neg") or m.group("perf_neg") or m.group("stopped"))
    if stem.startswith("off "):  # "off the keto diet", "off medication": the negation of "on …"
        negated, stem, val = not negated, "on " + stem[4:], "on " + val[4:]
    return make_key(ent, f"state:{stem}", val, "state", polarity=not negated, single=True)


def _is_state(val: str) -> bool:
    """One word, a noun or prepositional phrase, or a word with its complement; not an
    opinion, a progressive or a clause."""
    if not val or _NOT_A_STATE.match(val) or NOT_A_SLOT_VALUE.match(val) or not looks_like_value(val):
        return False
    if " " not in val or _STATE_PHRASE.match(val) or _qualified(val):
        return True
    return bool(_COMPLEMENTED.match(val)) and val.split(" ", 1)[0].lower() not in _FEELINGS


def _qualified(val: str) -> bool:
    """Two words, the second an adjective: "lactose intolerant", "legally blind"."""
    words = val.split()
    return len(words) == 2 and words[0][:1].islower() and adjective_like(words[1].lower())


_FAN = r"(?:into|a (?:big |huge )?fan of)"
_BE = r"(?:am|is|are)"
_POS = (r"(?:love|loves|loved|like|likes|enjoy|enjoys|adore|adores|really like|really love|"
        r"(?:" + _BE + r"|(?:have|has) been|became|(?:have|has) become)(?: (?:now|still|currently|really|officially))* "
        + _FAN + ")")
_NEGS = (r"(?:hate|hates|dislike|dislikes|can not stand|cannot stand|could not stand|detest|detests|"
         r"(?:do|does|did) not (?:really )?(?:like|love|enjoy)|no longer (?:like|likes|love|loves|enjoy|enjoys)|"
         r"(?:am|is) (?:tired|sick) of|(?:got|am|is|have got|has gotten) bored (?:of|with)|stopped (?:liking|enjoying|loving)|"
         r"(?:am|is) over|"
         + _BE + r"(?: (?:now|officially|actually))* (?:no longer|not(?: really)?) " + _FAN + r"|"
         r"(?:(?:have|has) )?(?:stopped|quit) being " + _FAN + r"|(?:have|has) not been " + _FAN + r")")
_SENTIMENT = re.compile(
    r"^(?P<subj>I|we|We|(?-i:[A-Z][\w.'-]*(?: [A-Z][\w.'-]*){0,3})|my \w+|My \w+|the user|The user|user|User) (?:(?:now|still|really|absolutely|totally|actually|honestly|kind of|kinda|just|also) )*"
    r"(?:(?P<neg>" + _NEGS + r")|(?P<pos>" + _POS + r")) (?P<obj>.+)$",
    re.IGNORECASE,
)
_SENTIMENT_TRIGGER = re.compile(
    r"\b(?:" + union_by_first_letter(["lov", "lik", "enjoy", "ador", "into", "fan", "hat", "dislik", "stand",
                                       "detest", "tired", "sick", "bored", "over"]) + ")",
    re.IGNORECASE,
)
_OBJ_STOP = {"to", "it", "that", "this", "how", "when", "what", "the", "a", "an", "you", "your", "them",
             "her", "him", "those", "these", "being", "seeing", "hearing", "having", "doing", "getting",
             "my", "our", "his", "their", "its", "all", "so", "some", "every", "each", "with", "there", "here"}


def rule_sentiment(s: str, ctx: Context) -> SubjectKey | None:
    """``entity|feeling:<object stem>`` = ``+`` (love, like, am into, am a fan of) or ``-``
    (hate, dislike, no longer like, am not a fan of, stopped being into, …)."""
    if not _SENTIMENT_TRIGGER.search(s):
        return None
    m = _SENTIMENT.match(s)
    if not m:
        return None
    ent = holder_of(m.group("subj"), ctx)
    if ent is None:
        return None
    stem = object_stem(clean_value(m.group("obj")))
    if stem is None:
        return None
    return SubjectKey(entity=ent, attribute=f"feeling:{stem}"[:120], value="+" if m.group("pos") else "-",
                      rule="sentiment", polarity=True, single_valued=True)


def object_stem(obj: str, max_words: int = 4) -> str | None:
    """The stemmed object of a feeling or a state ("the beach" → "beach"), at most
    ``max_words`` words; ``None`` when it starts with a pronoun or a stop word ("that …",
    "how …", "being …"). A capitalised word is a name, never a pronoun ("a US citizen")."""
    words = WORD_RE.findall(fold_accents(obj))
    if words and words[0].lower() == "to" and len(words) > 1:
        words = words[1:]
    while words and words[0].lower() in {"the", "a", "an"}:
        words = words[1:]
    if not words or len(words) > max_words:
        return None
    first = words[0] if words[0].isupper() and len(words[0]) > 1 else words[0].lower()
    if first in _OBJ_STOP or first in PRONOUNS:
        return None
    return " ".join(STEM.stemWord(w.lower()) for w in words)
