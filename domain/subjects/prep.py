"""Pre-processing of a note before subject rules run (:mod:`memfabric.domain.subjects`):
the language gate, quote / contraction normalisation, the chat speaker prefix, the
sentence split and the per-sentence clean-up (discourse markers, trailing adverbs).
"""

from __future__ import annotations

import re

from memfabric.domain.subjects.text import WORD_RE, has_digit, norm_entity
from memfabric.domain.subjects.updates import CHANGE_VERBS

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
_NON_LATIN = re.compile(r"[^\W\d_a-zA-Z\u00c0-\u024f\u1e00-\u1eff]", re.UNICODE)

_WHEN = (r"today|now|yesterday|tonight|(?:this|last|next) [a-z]+|\d{4}|(?:[a-z]+ )?\d{1,2}(?:st|nd|rd|th)?(?:,? \d{4})?|"
         r"(?:january|february|march|april|may|june|july|august|september|october|november|december|spring|"
         r"summer|autumn|fall|winter|monday|tuesday|wednesday|thursday|friday|saturday|sunday)(?: \d{4})?")
"""A short time phrase a leading "as of / since / starting / after" may take without a
comma ("As of this week I am …"); a longer one needs its comma ("Since the move, …")."""
_LEAD = re.compile(
    r"^(?:(?:update|fyi|note|news|good news|big news|quick update|heads up|btw|by the way|so|well|oh|ok|okay|"
    r"yeah|yes|yep|actually|guess what|just so you know|turns out|correction|also|and|but|anyway|hey|hi|"
    r"(?:as of|since|starting|effective|after) (?:" + _WHEN + r")|"
    r"(?:as of|since|starting|effective|after) [^,:]{1,40}(?=[,:])|from [^,]{1,30} on|last [a-z]+|this [a-z]+|"
    r"in (?:19|20)\d\d|recently|these days|nowadays|lately|currently|today|now|at the moment|for now)"
    r"\s*[,:!\-–]?\s+)+",
    re.IGNORECASE,
)
_SPEAKER = re.compile(r"^(?P<spk>[A-Z][\w.'-]*(?: [A-Z][\w.'-]*){0,2}):\s+(?P<body>.+)$", re.DOTALL)
LABEL_WORDS = {"update", "note", "fyi", "news", "correction", "edit", "reminder", "todo", "summary",
                "heads up", "good news", "big news", "quick update", "btw", "ps", "status", "info"}
_ABBREV = re.compile(r"(?:^|\s)(?:[A-Z]|Dr|Mr|Mrs|Ms|Prof|St|Jr|Sr|Inc|Ltd|Co|Corp|vs|No|Nr|[A-Z]\.[A-Z])\.$")
_TRAILING_ADV = re.compile(r"(?:[\s,]+(?:now|again|anymore|any more|any longer|these days|currently|already|lately|then|"
                           r"actually|as well|too|for now|for good))+$", re.IGNORECASE)
_TRAIL_LAST = {"now", "again", "anymore", "more", "longer", "days", "currently", "already", "lately", "then",
               "actually", "well", "too", "good"}
_SENT_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])|\s*[\n]+\s*")


def is_foreign(text: str) -> bool:
    """Non-Latin letters, or at least as many foreign (de/fr/es/it/pt/nl) as English
    function words among the lower-case words."""
    if _NON_LATIN.search(text):
        return True
    foreign = english = 0
    for word in WORD_RE.findall(text):
        if word[:1].islower():
            w = word.lower()
            if w in _ENGLISH_FUNCTION:
                english += 1
            elif w in _FOREIGN_FUNCTION:
                foreign += 1
    return foreign > 0 and foreign >= english


def normalise(s: str) -> str:
    s = s.replace("’", "'").replace("‘", "'").replace("“", '"').replace("”", '"')
    if "'" in s:
        s = _CONTRACTION.sub(_expand, s)
        s = _NAME_IS.sub(r"\1 is ", s)
    return " ".join(s.split())


_NAME_IS = re.compile(r"\b((?!(?:let|Let)\b)[A-Za-z][\w-]*)'s (?=(?:no longer|not|never|now|currently|still|"
                      r"officially|a|an)\b)")
"""A name's or a noun's "'s" before a negation, an adverb or an article is "is", never a
possessive: "Alice's no longer vegan", "The user's a vegetarian" (before a preposition it
may be a place: "Luigi's in Rome")."""


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


def sentences(body: str) -> list[str]:
    """Sentence split that keeps "Dr. Patel", "Khalid A. Al-Falih" together; a clause that
    starts again with "I" or "we" after "and" / "but" / "so" is a sentence of its own ("I
    got a job and I'm no longer unemployed")."""
    out: list[str] = []
    for piece in _SENT_SPLIT.split(body):
        piece = piece.strip()
        if not piece:
            continue
        if out and _ABBREV.search(out[-1]):
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return [clause for sent in out for clause in _FIRST_PERSON_CLAUSE.split(sent) if clause]


_FIRST_PERSON_CLAUSE = re.compile(r",?\s+(?:and|but|so)\s+(?=(?:I|we|We)\b)")


def split_speaker(text: str) -> tuple[str | None, str]:
    """``"Caroline: I moved"`` → ``("caroline", "I moved")``; ``(None, text)`` when the
    prefix is not a speaker name (a possessive, a number, a label word such as "Update")."""
    m = _SPEAKER.match(text)
    if m is None:
        return None, text
    spk = m.group("spk")
    if re.search(r"['’]s\b", spk) or has_digit(spk):
        return None, text
    if (all(w[:1].isupper() for w in spk.split()) and len(m.group("body").split()) >= 2
            and spk.lower() not in LABEL_WORDS):
        return norm_entity(spk), m.group("body")
    return None, text


def prepare_sentence(sent: str, speaker: str | None) -> str | None:
    """Strip discourse markers and trailing adverbs; ``None`` for a sentence no rule
    should see (a question, too short or long, an unresolvable pronoun in a chat turn)."""
    if not sent or sent.endswith("?"):
        return None
    sent = _LEAD.sub("", sent).strip().rstrip(".!").strip()
    if not sent:  # only markers or punctuation
        return None
    if sent.rsplit(None, 1)[-1].lower() in _TRAIL_LAST:
        sent = _TRAILING_ADV.sub("", sent)
    if len(sent) > 160 or len(sent) < 5:
        return None
    if speaker is not None and re.match(r"^(?:you|he|she|they)\b", sent, re.IGNORECASE):
        return None
    if _FIRST_PERSON_NOTE.match(sent):
        sent = "I " + sent[0].lower() + sent[1:]
    return sent


_FIRST_PERSON_NOTE = re.compile(
    r"^(?-i:(?=[A-Z]))(?:" + "|".join(CHANGE_VERBS) + r"|started using|stopped using|began using)"
    r"(?: (?:back|over|up|down|out|in))? (?:my|our) ", re.IGNORECASE)
"""A note without its subject ("Switched my editor to Emacs", "Moved our standup to
10am"): an update verb in the past before "my"/"our" is the writer's own (issue 29)."""
