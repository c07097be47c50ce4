"""The ``update_verb`` rule of subject inference (issue 29): a new value of a named slot
stated with an update verb and without the old value, and the same slot stated without a
change (documented in :mod:`memfabric.domain.subjects`).

The kinds of sentence, each read by one pattern, tried in this order:

* **a change of the possessed thing** (:data:`_CHANGES`): ``<holder> [aux] [adverbs]
  <update verb> [particle] <possessive or "the"> <thing> [particle] to|with|for <value>``
  ("I switched my editor to Emacs", "We raised the budget to 50k", "I replaced my laptop
  with a ThinkPad", "I swapped my bank for Ally", "Facilities turned the thermostat down
  to 19"). ``with`` goes only with *replace*, ``for`` only with a verb of exchange
  (swap, trade, exchange). A possessed *name* is the old value, not a slot ("I swapped
  my Prius for a Model Y": the ``from_to`` wildcard key, ``previous`` = "prius");
* **a value adopted for a named slot** (:data:`_ADOPT`): ``<holder> <verb of adoption>
  <value> as|for <possessive> <thing>`` ("I switched to Emacs as my editor", "I started
  using Obsidian for my notes", "We went with Azure as our new cloud provider") and its
  plain statement ("I use Vim as my editor", "I have been using Vim for my editor"); an
  ended use ("I no longer use Vim as my editor", "I stopped using …") is the same key,
  negated. A verb of choice (chose, picked, selected, opted for, adopted) takes only
  ``as``: "I picked tulips for my mother" names no slot;
* **a value made the slot** (:data:`_MADE`): ``<holder> made <value> <possessive>
  new|default|… <thing>`` ("I made Emacs my default editor"); without the marker of a
  single slot ("I made a cake my kids loved") no key;
* **a role changing hands** (:data:`_TOOK_ROLE`, :data:`_GAVE_ROLE`): "Andy Jassy took
  over as CEO of Amazon", "… succeeded Jeff Bezos as …", "Amazon named Andy Jassy as its
  new CEO" (the noun a role, :data:`ROLE_WORDS`);
* **a slot named by a bare plural** (:data:`_SWITCH_BARE`): "I switched banks to Ally";
* **an old value exchanged, no slot named** (:data:`_EXCHANGE_BARE`): "I ditched Vim for
  Emacs", "I dropped Vim in favour of Emacs" (the ``from_to`` wildcard key).

The thing is read like an attribute noun phrase ("my X": the speaker, "our X": the
speaker's group, "her X": the holder, "its X" of a common-noun holder: that holder,
"the X": the implicit entity), so it meets the copular "My editor is Vim". A negated or
hedged head ("I never switched …", "I almost switched …", "I might change …", "If I
switched …") gives no key. A verb of motion whose value is a place keys
``<thing>/location`` as the copular rule does, when the place is determined ("I moved my
car to the garage") or the thing stands somewhere (:data:`_SITES`: "We moved our office
to Berlin"); another thing moved to a name gets a new value ("I moved my backups to
Backblaze").
"""

from __future__ import annotations

import re

from memfabric.domain.subjects.key import WILDCARD, SubjectKey
from memfabric.domain.subjects.text import (
    ADVERBS, COMMON_OWNER, Context, attribute_np, clean_value, holder_of, looks_like_place, looks_like_value, make_key, norm_attr,
    norm_entity, union_by_first_letter,
)
from memfabric.domain.subjects.verbs import MODAL

ROLE_WORDS = re.compile(
    r"\b(?:ceo|cfo|cto|coo|chief|president|chair|chairman|chairwoman|chairperson|director|head|manager|"
    r"captain|coach|mayor|governor|minister|secretary|treasurer|leader|lead|owner|editor|principal|dean|"
    r"chancellor|speaker|commissioner|ambassador|capital|champion|king|queen|pope|host|conductor)\b",
    re.IGNORECASE,
)
"""Nouns of a role one person holds at a time (the CEO of Amazon, the coach of a team)."""

PLACE_ATTRS = ("location", "headquarters", "address", "residence")
"""Attributes that already name a place (no ``/location`` sub-attribute)."""

CHANGE_VERBS = (
    "switched", "changed", "updated", "set", "reset", "swapped", "upgraded", "downgraded", "renamed", "rebooked",
    "rescheduled", "moved", "pushed", "postponed", "bumped", "raised", "lowered", "cut", "reduced", "increased",
    "decreased", "converted", "migrated", "transferred", "shifted", "replaced", "upped", "hiked", "slashed",
    "dropped", "extended", "adjusted", "doubled", "halved", "tripled", "boosted", "trimmed", "turned", "traded",
    "exchanged", "revised", "shortened", "lengthened", "capped", "lifted", "brought", "rebranded", "relocated",
)
"""Past forms of the verbs that give a thing a new value ("switched my editor to …")."""

_EXCHANGE_VERBS = {"swapped", "traded", "exchanged"}
_MOTION_VERBS = {"moved", "pushed", "shifted", "brought", "relocated"}
_SITES = {"offic", "headquart", "home", "hous", "apart", "flat", "base", "shop", "store", "studio", "lab",
          "warehous", "factori", "branch", "clinic", "restaur", "cafe", "compani", "busi", "team", "car",
          "couch", "sofa", "desk", "bed", "lamp", "tabl", "plant", "bike", "boat", "server", "rack"}
"""Stemmed heads of things that *stand somewhere* (sites and movable objects): moved to a
capitalised name ("We moved our office to Berlin") they change place; other things moved
to a name change value ("I moved my backups to Backblaze")."""
_PARTICLE = r"(?:back|over|up|down|forward|out|around|in)"
_HEAD = r"^(?P<subj>.+?) (?:(?:has|have|had) )?" + ADVERBS + r"*"
_POSSESSED = r"(?P<np>(?:my|our|her|his|their|its|the) [a-z][\w' -]{0,40}?)"
_CHANGES = re.compile(
    _HEAD + r"(?P<verb>" + union_by_first_letter(list(CHANGE_VERBS)) + r")(?: " + _PARTICLE + r")? "
    + _POSSESSED + r"(?: " + _PARTICLE + r")? (?P<prep>to|with|for) (?P<val>.+)$",
    re.IGNORECASE,
)

_SWITCH_BARE = re.compile(
    _HEAD + r"(?:switched|changed|swapped|upgraded|downgraded) (?P<things>[a-z]+s)(?: over)? to (?P<val>.+)$",
    re.IGNORECASE,
)
"""A slot named by a bare plural: "I switched banks to Ally", "We changed providers to Sonic"."""
_EXCHANGE_BARE = re.compile(
    _HEAD + r"(?:swapped|traded|exchanged|ditched|dropped|replaced|switched|gave up)(?: out)? "
    r"(?P<prev>(?:(?:a|an|the) )?(?-i:[A-Z0-9])\S*(?: (?-i:[A-Z0-9])\S*){0,3})(?: out)? "
    r"(?:for|with|in favou?r of) (?P<val>.+)$",
    re.IGNORECASE,
)
"""An old value exchanged for a new one, no slot named: "I ditched Vim for Emacs", "I
dropped Vim in favour of Emacs" (the ``from_to`` wildcard key with ``previous``)."""
_ADOPT_AS = [  # verbs of choice: "as <poss> <thing>" only
    "chose", "picked", "selected", "opted for", "adopted", "appointed", "named", "designated",
]
_ADOPT_AS_OR_FOR = [  # verbs of switching and of use: "as" or "for"
    "(?:switched|moved|changed|migrated|upgraded|downgraded|went|turned|converted|shifted|transitioned|"
    "came)(?: over| back)? to",
    "(?:started|began|begun|start) using", "use", "uses", "using", "(?:went|gone|go|going) with",
    "settled on", "rely on", "relies on", "relied on",
]
_ADOPT = re.compile(
    r"^(?P<subj>.+?) (?:(?:has|have|had|am|is|are) )?(?:(?:been|now|currently|still|also|mostly|mainly|just|"
    r"recently|finally|officially|already|actually|since|then) )*(?P<verb>"
    + union_by_first_letter(_ADOPT_AS + _ADOPT_AS_OR_FOR)
    + r") (?P<val>.+?) (?P<prep>as|for) (?P<np>(?:my|our|her|his|their) .{1,60})$",
    re.IGNORECASE,
)
_CHOICE = re.compile(r"^(?:" + "|".join(_ADOPT_AS) + r")$", re.IGNORECASE)
_SLOT_MARKERS = r"(?:new|default|main|primary|go-to|preferred|usual|official|permanent|regular)"
_MADE = re.compile(
    _HEAD + r"made (?P<val>.+?) (?P<np>(?:my|our|her|his|their) " + _SLOT_MARKERS + r" .{1,60})$",
    re.IGNORECASE,
)
_TRIGGER = re.compile(
    r"\b(?:" + union_by_first_letter(list(CHANGE_VERBS) + _ADOPT_AS + [
        "ditched", "gave", "took", "stepped", "came", "succeeded", "followed", "hired", "elected", "tapped",
        "installed", "promoted", "returned", "reinstated", "sworn", "went", "gone", "go", "transitioned", "use",
        "uses", "using", "started", "began", "begun", "start", "settled", "rely", "relies", "relied", "made"])
    + r")\b",
    re.IGNORECASE,
)
_NEGATED_HEAD = re.compile(r"\b(?:not|never|no longer|nobody|no one|almost|nearly|refused|failed)\b", re.IGNORECASE)
_ENDED_USE = re.compile(r"(?:\b(?:no longer|not|never)(?: \w+)?|\b(?:stopped|quit|ceased))$", re.IGNORECASE)
"""The head of an ended use: "I no longer use X as my T", "I do not use …", "I stopped using …"."""
_USE_VERBS = {"use", "uses", "using"}
_TRAILING_AUX = re.compile(r"(?:\s+(?:has|have|had|do|does|did|am|is|are|was|were))+$", re.IGNORECASE)
_DETERMINED = re.compile(r"^(?:the|a|an|my|our|her|his|their) \S", re.IGNORECASE)


def rule_update_verb(s: str, ctx: Context) -> SubjectKey | None:
    """The ``update_verb`` key of sentence ``s`` (see the module docstring), or ``None``."""
    if not (" to " in s or " as " in s or " for " in s or " with " in s or " made " in s or " favo" in s
            or " its " in s):
        return None
    if not _TRIGGER.search(s):
        return None
    m = _CHANGES.match(s)
    if m and _prep_fits(m.group("verb").lower(), m.group("prep").lower()):
        if m.group("prep").lower() in ("for", "with") and _NAMED_THING.match(m.group("np")):
            poss, _, thing = m.group("np").partition(" ")
            return _exchanged_key(m.group("subj"), poss, thing, m.group("val"), ctx)
        return _slot_key(m.group("subj"), m.group("np"), m.group("val"), ctx, m.group("verb"))
    m = _ADOPT.match(s)
    if m and (m.group("prep").lower() == "as" or not _CHOICE.match(m.group("verb"))):
        return _adopted_key(m, ctx)
    m = _MADE.match(s)
    if m:
        return _slot_key(m.group("subj"), m.group("np"), m.group("val"), ctx)
    return _role_change_key(s, ctx) or _unnamed_slot_key(s, ctx)


_NAME = r"(?-i:[A-Z][\w.'-]*(?: (?:[A-Z][\w.'-]*|de|van|von|da|di|al|bin|el))*)"
_TOOK_ROLE = re.compile(
    r"^(?P<val>" + _NAME + r") (?:has |had )?(?:(?:now|just|officially|recently|finally) )*"
    r"(?:(?:took over|stepped in|stepped up|came in|took office|was sworn in|has been sworn in|started|returned|"
    r"came back|was brought in|was reinstated)"
    r"|(?:replaced|succeeded|took over from|followed) (?P<prev>" + _NAME + r")) as (?P<np>.+)$",
    re.IGNORECASE,
)
"""A person taking a role, the old holder unnamed or named: "Andy Jassy took over as CEO of
Amazon", "Andy Jassy succeeded Jeff Bezos as CEO of Amazon"."""
_GAVE_ROLE = re.compile(
    r"^(?P<org>" + _NAME + r") (?:has |have )?(?:(?:now|just|officially|recently|finally) )*"
    r"(?:named|appointed|hired|elected|tapped|picked|chose|promoted|made|installed) (?P<val>" + _NAME + r")"
    r"(?: as)? (?:(?:its|their) )?(?:new |next |interim )?(?P<role>[a-z][\w -]{1,40})$",
    re.IGNORECASE,
)
"""An organisation giving a role: "Amazon named Andy Jassy as its new CEO"."""


def _role_change_key(s: str, ctx: Context) -> SubjectKey | None:
    """``<org>|<role>`` = the person a role-change sentence puts there (``previous``: the
    holder it names as replaced), when the noun is a role (:data:`ROLE_WORDS`)."""
    m = _TOOK_ROLE.match(s)
    if m:
        np = clean_value(m.group("np"))
        slot = attribute_np(np, ctx)
        if slot is None or slot[0] == "_" or not ROLE_WORDS.search(np):
            return None
        return make_key(slot[0], slot[1], m.group("val"), "update_verb", previous=m.group("prev"))
    m = _GAVE_ROLE.match(s)
    if m and ROLE_WORDS.search(m.group("role")) and holder_of(m.group("org"), ctx):
        role = clean_value(m.group("role"))
        return make_key(norm_entity(m.group("org")), norm_attr(role), m.group("val"), "update_verb")
    return None


def _adopted_key(m: re.Match[str], ctx: Context) -> SubjectKey | None:
    """A value adopted for a slot; an ended use ("I no longer use Vim as my editor",
    "I stopped using Vim …") is the same key with ``polarity=False``."""
    subj = m.group("subj")
    if m.group("verb").lower() in _USE_VERBS and _ENDED_USE.search(subj) and not MODAL.search(subj):
        subj = _TRAILING_AUX.sub("", _ENDED_USE.sub("", subj).strip())
        return _slot_key(subj, m.group("np"), m.group("val"), ctx, polarity=False)
    return _slot_key(subj, m.group("np"), m.group("val"), ctx)


def _singular(plural: str) -> str:
    """"banks" → "bank", "VPNs" → "VPN", "switches" → "switch"."""
    if re.search(r"(?:sh|ch|x|ss)es$", plural, re.IGNORECASE):
        return plural[:-2]
    return plural[:-1]


def _unnamed_slot_key(s: str, ctx: Context) -> SubjectKey | None:
    """"I switched banks to Ally" (the slot a bare plural names) and "I ditched Vim for
    Emacs" (no slot: the ``from_to`` wildcard key, ``previous`` = the old value)."""
    m = _SWITCH_BARE.match(s)
    if m:
        owner = holder_of(m.group("subj"), ctx)
        value = clean_value(m.group("val"))
        if owner is None or not looks_like_value(value):
            return None
        return make_key(owner, norm_attr(_singular(m.group("things"))), value, "update_verb")
    m = _EXCHANGE_BARE.match(s)
    if m:
        return _exchanged_key(m.group("subj"), None, m.group("prev"), m.group("val"), ctx)
    return None


_NAMED_THING = re.compile(r"^(?:my|our|her|his|their) (?-i:[A-Z][a-z]|[a-z]+[A-Z]|\S*\d)", re.IGNORECASE)
"""A possessed *name* ("my Prius", "her iPhone", "my Pixel 6"): the old value, not a slot;
an acronym in capitals is a noun ("my VPN", "our CI")."""


def _exchanged_key(subj: str, poss: str | None, previous: str, val: str, ctx: Context) -> SubjectKey | None:
    """"I swapped my Prius for a Model Y", "I ditched Vim for Emacs": the old value is
    named, the slot is not, so the key is ``from_to``'s wildcard (``holder|*``,
    ``previous`` = the old value): it supersedes only a note of the holder whose value
    *is* that ("I drive a Prius"). ``poss``: the possessive before the old value, if any."""
    if MODAL.search(subj) or _NEGATED_HEAD.search(subj):
        return None
    owner = {"my": ctx.me, "our": f"{ctx.me}/we"}.get((poss or "").lower()) or holder_of(subj, ctx)
    value = clean_value(val)
    if owner is None or not looks_like_value(value):
        return None
    return make_key(owner, WILDCARD, value, "from_to", single=True, previous=clean_value(previous))


def _prep_fits(verb: str, prep: str) -> bool:
    """"replaced … with", "swapped … for"; every other verb takes "to"."""
    if prep == "with":
        return verb == "replaced"
    if prep == "for":
        return verb in _EXCHANGE_VERBS
    return verb != "replaced"


def _possessed_slot(np: str, subj: str, ctx: Context) -> tuple[str, str] | None:
    """(entity, attribute) of the thing an update names: "my editor" (the speaker), "her
    editor" (the subject: "Alice switched her editor"), "the budget" (the implicit entity)."""
    np = clean_value(np)
    first, _, thing = np.partition(" ")
    if first.lower() in {"her", "his", "their", "its"}:
        owner = holder_of(subj, ctx)
        if owner is None and first.lower() in {"its", "their"} and COMMON_OWNER.fullmatch(subj):
            owner = norm_entity(subj)  # "The team moved its deploy day": the team's, as "The team's deploy day"
        return (owner, norm_attr(thing)) if owner and thing else None
    return attribute_np(np, ctx)


def _slot_key(subj: str, np: str, val: str, ctx: Context, verb: str = "", *,
              polarity: bool = True) -> SubjectKey | None:
    """The key of "<subj> <verb> <np> to <val>": a negated, modal or hedged head ("I never
    switched …", "I might change …", "I am thinking of …") or a value that is no value (a
    pronoun) gives none; a verb of motion with a determined place ("to the garage"), or
    with a place-like name when the thing stands somewhere (:data:`_SITES`: "our office
    to Berlin"), moves the thing (sub-attribute ``location``)."""
    if MODAL.search(subj) or _NEGATED_HEAD.search(subj):
        return None
    slot = _possessed_slot(np, subj, ctx)
    value = clean_value(val)
    if slot is None or not slot[1] or not looks_like_value(value):
        return None
    entity, attribute = slot
    if (verb.lower() in _MOTION_VERBS and looks_like_place(value) and not attribute.endswith(PLACE_ATTRS)
            and (_DETERMINED.match(value) or attribute.split()[-1] in _SITES)):
        attribute = f"{attribute}/location"
    return make_key(entity, attribute, value, "update_verb", polarity=polarity)
