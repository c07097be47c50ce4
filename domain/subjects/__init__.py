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
* contractions expanded (``I'm`` → ``I am``, ``doesn't`` → ``does not``, ``Alice's no
  longer`` → ``Alice is no longer``), curly quotes
  straightened, leading discourse markers and time phrases (``Update:``, ``Actually,``,
  ``Guess what,``, ``As of May,``, ``As of this week``, ``These days``, ``Nowadays``)
  dropped; a note without its subject that starts with an update verb before "my"/"our"
  ("Switched my editor to Emacs") is the writer's ("I switched …"); every sentence, and
  every clause that starts again with "I"/"we" after "and"/"but"/"so", is tried, the
  first that yields a key wins.

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
                    (partner), prefers X (preference, keyed by X's head noun), uses X
                    (multi-valued; "uses X as my <thing>" is ``update_verb``).  Negation ("no longer works at", "does not live
                    in … anymore", "quit her job at", "left her job at") gives
                    ``polarity=False``.
``update_verb``     a new value of a named slot stated with an update verb and without
                    the old value (issue 29, :mod:`~memfabric.domain.subjects.updates`):
                    a change of the possessed thing ("I switched my editor to Emacs",
                    "Alice changed her number to …", "We raised the budget to 50k", "I
                    replaced my laptop with a ThinkPad", "I swapped my bank for Ally",
                    any auxiliary, adverb, particle and trailing time phrase); a value
                    adopted for the slot ("I switched to Emacs as my editor", "started
                    using Obsidian for my notes", "went with Azure as our new cloud
                    provider", "made Emacs my default editor"); and the slot stated
                    without a change ("I use Vim as my editor" / "… for my notes"). The
                    thing is read like an attribute noun phrase ("my X" → the speaker,
                    "our X" → the speaker's group, "her X" → the subject, "the X" → the
                    implicit entity), so it meets the copular "My editor is Vim". A
                    possessed *name* is the old value: "I swapped my Prius for a Model
                    Y", "I ditched Vim for Emacs", "dropped Vim in favour of Emacs" are
                    ``from_to`` keys with ``previous`` ("prius", "vim"). A bare plural
                    names the slot ("I switched banks to Ally" → ``self|bank``). An ended
                    use ("I no longer use Vim as my editor", "I stopped using Vim …") is
                    the same key with ``polarity=False``. A verb of motion with a place
                    ("moved my car to the garage", "moved our office to Berlin": a
                    determined place, or a name when the thing stands somewhere) keys
                    ``…/location``. A role of an organisation changing hands: "Andy
                    Jassy took over as CEO of Amazon", "… succeeded Jeff Bezos as CEO
                    of Amazon" (``previous``), "Amazon named Andy Jassy as its new CEO"
                    (the noun a role: CEO, chair, coach, …). Negated, planned and hedged
                    updates ("never switched", "almost switched", "might change my …",
                    "used to use", "will succeed") give no key.
``sentiment``       love / like / enjoy / adore / am a fan of  vs  hate / dislike / can't
                    stand / do not like / no longer like / am no longer into / am not a
                    fan of … anymore / stopped being a fan of: the key is
                    ``entity|feeling:<object stem>``, the value ``+``/``-``; "I love X" →
                    "I hate X" supersedes, "I love X" → "I love Y" does not (other key).
``copular``         an *attribute* noun phrase + is/are/changed to/is now set to/…, or
                    the thing as the subject of an update verb ("My editor has been
                    switched to Emacs", "The budget was raised to 50k"):
                    "Alice's phone number is now 555-0199", "My favourite colour is green",
                    "The current CEO of Walmart is Doug McMillon", "The deadline moved to
                    Monday", "The office is in Hamburg"
                    (sub-attribute ``location``), "The build is broken" (sub-attribute
                    ``status``). A role subject ("The user is vegetarian") is a holder,
                    read by ``state``.
``status``          an entity with an identifier or a name + is/was marked + a status word
                    (open, closed, resolved, merged, shipped, paid, …):
                    "Ticket 4411 is open" → ticket 4411|status.
``age``             "Alice is 34" / "Alice just turned 35" → alice|age.
``label_value``     "Home city: Munich", "Alice's phone: 555-0100", "Ticket 4411: resolved".
``state``           a holder's copular state (:mod:`~memfabric.domain.subjects.states`):
                    "I am vegetarian" (also "am now …", "became …", "have been … for
                    years") and its negation (issue 29): "I am no longer vegetarian", "not
                    … anymore / any more / any longer", "am now no longer …", "stopped /
                    quit being …", "have not been … since May", "off the diet" after "on
                    the diet". The state is part of the
                    key (``self|state:vegetarian``): only its negation (or a
                    reaffirmation) supersedes, two states never do. One word, two words
                    ending in an adjective ("lactose intolerant"), a noun / prepositional
                    phrase ("a member of the chess club", "on a diet") or a word with its
                    complement ("allergic to peanuts", "afraid of flying"); a feeling
                    toward someone ("proud of Alice"), progressives and opinions give no
                    key.

Added values (issue 29): a value ends at the first clause boundary, except an "and" that
adds a short noun phrase ("User prefers metric units and Celsius": value "metric units and
celsius", the key from the first conjunct) or a comma that starts a list of them ("metric
units, Celsius and dark mode"). Such a value is *another* value of the slot, so it
supersedes "metric units"; a refinement ("tesla" → "tesla model 3") is the same value, and
a plain repeat folds (the same tokens, before any key is looked at).

Normalisation: entities and attributes are lower-cased, accent-folded, articles and
"current/new/present/default/usual/go-to/preferred/regular" dropped ("my default shell" is
"my shell"), attribute words stemmed (Snowball) and mapped to a small
table of synonyms (CEO = chief executive officer, headquarters = head office = main office
location, team = club = football team, secretary general = general secretary, …).
Identifiers stay part of the entity ("ticket 4411" ≠ "ticket 4412").

Single- vs multi-valued: relations such as likes, has, visited, speaks, is a <noun>,
and family/friend/pet/hobby nouns ("my sister is …") are multi-valued: their value is part
of the key (``entity|has:dog``), so a different value never supersedes and only a
negation of the same value does ("I no longer have a dog"). A modifier that singles one
out makes the slot single-valued ("my primary language", "my first language"), and so
does a noun before ``client`` (the software: "my email client"; "my biggest client" stays
a customer).

Deliberately left alone (no key → insert)
-----------------------------------------
* pronoun subjects (he, she, they, it, this, you) and anything needing coreference;
* "X is a <noun>" (teacher / mother / vegetarian are not one slot), "X is in <place>"
  for people, "X is at Y", bare "joined X" (club or company?), "left X" (city or job?);
* future and plans ("is moving to", "will join", "plans to"), past-only states ("used
  to live in", "lived in", "was the CEO"), conditionals and questions;
* "switched to X" / "now uses X" without a named slot ("as my editor", "my editor") or a previous value;
* the same slot named in another word order ("our vendor for payroll" / "our payroll
  vendor"); "moved my X to <a bare name>" when the name is a place ("moved my car to
  Berlin" keys the car's value, not its location: only a determined place, "the
  garage", is a location); an update joined to another clause ("Our building was sold
  and our landlord is now …");
* non-English text, and notes longer than 600 characters;
* multi-clause sentences where the verb is buried after a subordinate clause.

Module layout
-------------
This module is the public face (the types, :func:`supersedes`, :class:`RuleSubjectExtractor`);
the work is done in ``key`` (:class:`SubjectKey`), ``prep`` (pre-processing), ``text`` (word
lists, normalisation, noun-phrase readers), ``vocab`` (the attribute synonyms), ``rules``
(the rules in order), ``verbs`` (the ``holder_verb`` rule and its verb tables),
``updates`` (``update_verb``) and ``states`` (``sentiment`` and ``state``). The generated
phrasings that test the issue 29 families are ``tests/supersession_phrasings.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from memfabric.domain.subjects.key import MAX_KEY_CHARS, WILDCARD, SubjectKey
from memfabric.domain.subjects.rules import RULES, rule_label_value
from memfabric.domain.subjects.prep import LABEL_WORDS, is_foreign, normalise, prepare_sentence, sentences, split_speaker
from memfabric.domain.subjects.text import Context, norm_value

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
        return _from_to_supersedes(new, old)
    if old.attribute == WILDCARD or new.key != old.key:
        return None
    return _same_slot_decision(new, old)


def _same_slot_decision(new: SubjectKey, old: SubjectKey) -> Supersession | None:
    """Both notes fill the same slot: decide by polarity and value (see :func:`supersedes`)."""
    same_value = _value_matches(new.value, old.value)
    if new.polarity and old.polarity:
        return _value_changed(new, old) if not same_value else None
    if not new.polarity and old.polarity:
        return _sup("negation", new, old) if same_value else None
    if new.polarity and not old.polarity and (same_value or new.single_valued):
        return _sup("reaffirmed", new, old)
    return None


def _from_to_supersedes(new: SubjectKey, old: SubjectKey) -> Supersession | None:
    """A wildcard ``from_to`` key: replaces an affirmative single-valued note of the same
    entity whose value is the stated previous value."""
    if (
        new.previous is not None
        and old.entity == new.entity
        and old.polarity
        and old.single_valued
        and _value_matches(old.value, new.previous)
    ):
        return _sup("from_to", new, old, key=old.key)
    return None


def _value_changed(new: SubjectKey, old: SubjectKey) -> Supersession | None:
    """Both affirmative, different values: only a single-valued slot changes, and a
    stated previous value must match the old one."""
    if not (new.single_valued and old.single_valued):
        return None
    if new.previous is not None and not _value_matches(old.value, new.previous):
        return None
    return _sup("value_changed", new, old)


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
        return SubjectKey(entity=explicit, attribute="", value=norm_value(text), rule="explicit")
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


_ADDING = {"and", "plus"}


def _value_matches(a: str, b: str) -> bool:
    """Equal normalised values, or one is a leading word-prefix of the other that refines
    it ("tesla" ~ "tesla model 3"). A value that keeps the other and adds to it with
    "and"/"plus" ("metric units and celsius" after "metric units") is another value: the
    slot changed (issue 29)."""
    if a == b:
        return True
    wa, wb = a.split(), b.split()
    n = min(len(wa), len(wb))
    shorter, longer = (wa, wb) if len(wa) <= len(wb) else (wb, wa)
    if 0 < n < len(longer) and longer[n] in _ADDING:
        return False
    return n > 0 and wa[:n] == wb[:n] and not any(ch.isdigit() for ch in " ".join(shorter))


class RuleSubjectExtractor:
    """The default :class:`SubjectExtractor`: the documented regex rules, no model.

    Deterministic and pure.  Measured on LoCoMo chat turns (scripts/eval_subjects.py):
    p50 ≈ 65 µs, p95 ≈ 170 µs per call — short fact notes are much cheaper; a long chat
    turn is tried sentence by sentence against every rule."""

    def __init__(self, *, max_chars: int = 600) -> None:
        self._max_chars = max_chars

    def extract(self, text: str, *, kind: str = "fact") -> SubjectKey | None:
        if kind != "fact" or not text or len(text) > self._max_chars:
            return None
        text = normalise(text)
        if is_foreign(text):
            return None
        speaker, body = split_speaker(text)
        ctx = Context(speaker)
        if speaker is None and text.split(":", 1)[0].strip().lower() not in LABEL_WORDS:
            hit = rule_label_value(text, ctx)
            if hit is not None:
                return hit
            if re.match(r"^[^:]{1,60}:\s", text) and text.split(":", 1)[0].lower() not in LABEL_WORDS:
                return None  # a label whose value is not a slot
        for raw in sentences(body):
            sent = prepare_sentence(raw, speaker)
            if sent is None:
                continue
            for rule in RULES:
                hit = rule(sent, ctx)
                if hit is not None:
                    return hit
        return None
