"""The extraction rules of subject inference, one function per rule, tried in the order of
:data:`RULES` (documented in :mod:`memfabric.domain.subjects`).

Each rule takes one pre-processed sentence and the :class:`~memfabric.domain.subjects.text.Context`
(who "I" is) and returns a :class:`~memfabric.domain.subjects.key.SubjectKey` or ``None``.
The ``holder_verb`` rule, with its verb tables, lives in :mod:`memfabric.domain.subjects.verbs`.
Every rule starts with a cheap substring / trigger test so that most sentences are
rejected before the main regex runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from memfabric.domain.subjects.key import WILDCARD, SubjectKey
from memfabric.domain.subjects.text import (
    ADVERBS, PRONOUNS, ROLE_SUBJECTS, STATUS_WORDS, Context, adjective_like, attribute_np, clean_value,
    has_digit, holder_of, looks_like_place, looks_like_value, make_key, norm_attr, proper_name,
    union_by_first_letter,
)
from memfabric.domain.subjects.updates import CHANGE_VERBS, PLACE_ATTRS, ROLE_WORDS, rule_update_verb
from memfabric.domain.subjects.states import NOT_A_SLOT_VALUE, rule_sentiment, rule_state
from memfabric.domain.subjects.verbs import rule_holder_verb


Rule = Callable[[str, Context], SubjectKey | None]


_RELATIVE = re.compile(
    r"^the (?P<attr>(?:\S+ ){0,4}?(?:team|club|company|employer|city|school|party|band|label))"
    r" (?P<ent>.+?) (?:is |are )?(?:currently |now )?(?:\w+ing|\w+s|\w+) (?:for|at|in|with|to)\b.*? is (?:now |currently )?(?P<val>.+)$",
    re.IGNORECASE,
)


def _rule_relative_role(s: str, ctx: Context) -> SubjectKey | None:
    if not s[:4].lower() == "the ":
        return None
    m = _RELATIVE.match(s)
    if not m:
        return None
    ent = proper_name(m.group("ent")) or holder_of(m.group("ent"), ctx)
    if ent is None:
        return None
    return make_key(ent, norm_attr(m.group("attr")), clean_value(m.group("val")), "relative_role")


_HELD_BY = re.compile(r"^(?P<np>.+?) (?:is|are) (?:now |currently |still )?(?:held|occupied|filled) by (?P<val>.+)$", re.IGNORECASE)


def _rule_held_by(s: str, ctx: Context) -> SubjectKey | None:
    if " by " not in s:
        return None
    m = _HELD_BY.match(s)
    if not m:
        return None
    ea = attribute_np(m.group("np"), ctx)
    if ea is None:
        return None
    return make_key(ea[0], ea[1], clean_value(m.group("val")), "held_by")


_INVERTED = re.compile(
    r"^(?P<val>.+?) (?:is|has become|became|was (?:appointed|named|elected)(?: as)?|"
    r"has been (?:appointed|named|elected)(?: as)?|is now|is currently) (?:now |currently |officially )?"
    r"(?P<np>(?:the |my |our |[A-Z][\w.-]*(?: [A-Z][\w.-]*)*['’]s )?.+)$"
)
_INVERTED_VERB_HINTS = (" is ", " became ", " become ", " was ", " been ")
_INVERTED_OWNER_HINTS = (" of ", " at ", " for ", " my ", " our ", "'s ")
_OWNED_BY_NAME_NOUN = re.compile(r"^[A-Z][\w.-]*(?: [A-Z][\w.-]*)*['’]s [a-z]")
_OWNED_BY_NAME = re.compile(r"^[A-Z][\w.-]*(?: [A-Z][\w.-]*)*['’]s ")
_ROLE_OF = re.compile(r"^(?:the )?(.+?) (?:of|at|for) ")
_UPPER_OR_DIGIT = re.compile(r"^[A-Z0-9]")


def _rule_inverted_role(s: str, ctx: Context) -> SubjectKey | None:
    if not any(h in s for h in _INVERTED_VERB_HINTS) or not any(h in s for h in _INVERTED_OWNER_HINTS):
        return None
    m = _INVERTED.match(s)
    if not m:
        return None
    val = m.group("val")
    if not _is_named_value(val):
        return None
    np = clean_value(m.group("np"))
    if not _is_owned_role(np):
        return None
    ea = attribute_np(np, ctx)
    if ea is None or ea[0] == "_":
        return None
    return make_key(ea[0], ea[1], val, "inverted_role")


def _is_named_value(val: str) -> bool:
    """The value of an inverted role is a name or an id: not "the …", not a pronoun."""
    if val.lower().startswith(("the ", "my ", "our ")) or _OWNED_BY_NAME_NOUN.match(val):
        return False  # "My editor is …", "Bob's pizza place is …": an attribute, read by the copular rule
    if proper_name(val) is None and not _UPPER_OR_DIGIT.match(val):
        return False
    return val.split()[0].lower() not in PRONOUNS


def _is_owned_role(np: str) -> bool:
    """"my X", "Alice's X", or a role noun of a named entity ("the CEO of Amazon");
    "Bob is proud of Alice" and "X is the best" are not slots."""
    if np.lower().startswith(("my ", "our ")) or _OWNED_BY_NAME.match(np):
        return True
    m = _ROLE_OF.match(np)
    return m is not None and bool(ROLE_WORDS.search(m.group(1)))


_FROM_TO = re.compile(
    r"^(?P<subj>.+?) (?:has |have |had )?" + ADVERBS + r"*(?:switched|changed|moved|went|upgraded|downgraded|"
    r"transferred|swapped|traded|relocated|shifted|converted|migrated)(?: over| back)?"
    r"(?: (?P<poss>her|his|my|their|our|its) (?P<attr>[a-z][a-z -]{0,30}?))? from (?P<prev>.+?) (?:to|for) (?P<val>.+)$",
    re.IGNORECASE,
)

_NAMED_AFTER = re.compile(r"^(?P<val>.+?) (?:as|for) (?P<poss>my|our|her|his|their) (?P<attr>[a-z][\w' -]{0,40})$",
                          re.IGNORECASE)


def _rule_from_to(s: str, ctx: Context) -> SubjectKey | None:
    if " from " not in s:
        return None
    m = _FROM_TO.match(s)
    if not m:
        return None
    subj = m.group("subj")
    ent = holder_of(subj, ctx)
    raw_val, poss, attr = m.group("val"), m.group("poss"), m.group("attr")
    named = None if attr else _NAMED_AFTER.match(raw_val)
    if named:  # "switched from Vim to Emacs for my editor"
        raw_val, poss, attr = named.group("val"), named.group("poss"), named.group("attr")
    prev, val = clean_value(m.group("prev")), clean_value(raw_val)
    if not prev or not val:
        return None
    if ent is None:
        ea = attribute_np(subj, ctx)
        if ea is None:
            return None
        return make_key(ea[0], ea[1], val, "from_to", previous=prev)
    if attr:
        owner = ent if poss.lower() != "my" else ctx.me
        return make_key(owner, norm_attr(clean_value(attr)), val, "from_to", previous=prev)
    verb = re.search(r"(moved|relocated)", s[len(subj):], re.IGNORECASE)
    if verb and looks_like_place(prev) and looks_like_place(val):
        return make_key(ent, "residence", val, "from_to", previous=prev)
    return make_key(ent, WILDCARD, val, "from_to", single=True, previous=prev)


_COPULAR_TRIGGER = re.compile(
    r" (?:" + union_by_first_letter(["is", "are", "changed", "moved", "was", "were", "has", "had", "got", "gets", "rose", "increased",
                                      "went", "dropped", "fell", "decreased", "became", "switched", "now",
                                      "reads"]) + r")\b|'s ",
    re.IGNORECASE,
)
_PASSIVE_UPDATE = (
    r"(?:has been|have been|had been|has now been|was|were|got|gets|is|are)(?: now| just| recently| finally| "
    r"officially)? (?:" + union_by_first_letter([v for v in CHANGE_VERBS if v not in {"replaced", "swapped", "traded",
                                                                             "exchanged"}])
    + r")(?: back| over| up| down| forward)? to"
)
"""The thing as the subject of an update verb ("My editor has been switched to Emacs",
"The budget was raised to 50k"): a copula like "is" (issue 29)."""
_COPULAR = re.compile(
    r"^(?P<np>.+?) (?P<cop>" + _PASSIVE_UPDATE + r"|is|are|'s|has changed to|changed to|has been changed to|was changed to|"
    r"got changed to|was updated to|has been updated to|is now set to|is set to|was set to|has been set to|"
    r"moved to|has moved to|was moved to|has been moved to|got moved to|was pushed (?:back )?to|"
    r"has been pushed (?:back )?to|was postponed to|was rescheduled (?:for|to)|has been rescheduled (?:for|to)|"
    r"rose to|has risen to|increased to|has increased to|went up to|dropped to|has dropped to|fell to|"
    r"decreased to|went down to|was raised to|has been raised to|was lowered to|was reduced to|"
    r"was cut to|was bumped to|became|has become|switched to|has switched to|is located in|is located at|"
    r"are located in|is based in|now reads|reads) (?P<rest>.+)$",
    re.IGNORECASE,
)


_BE = {"is", "are", "'s"}
_COPULAR_NEG = re.compile(r"^(?:no longer|not|never) (.+)$", re.IGNORECASE)
_COPULAR_ADVERB = re.compile(r"^(?:now|currently|still|officially|finally|actually|at) (?=\S)", re.IGNORECASE)
_COPULAR_ADVERB_AGAIN = re.compile(r"^(?:now|currently|still) ", re.IGNORECASE)
_COPULAR_PLACE_VERB = re.compile(r"^(?:located|situated|based|stored|kept) (?=in |at )", re.IGNORECASE)
_COPULAR_PLACE_PREP = re.compile(r"^(?:in|at|on) ", re.IGNORECASE)
def _rule_copular(s: str, ctx: Context) -> SubjectKey | None:
    if not _COPULAR_TRIGGER.search(s):
        return None
    m = _COPULAR.match(s)
    if not m:
        return None
    ea = attribute_np(m.group("np"), ctx)
    if ea is None or m.group("np").strip().lower() in ROLE_SUBJECTS:
        return None  # "The user is vegetarian": a holder's state (rule state), not an attribute
    ent, attr = ea
    if not attr or attr.split()[0] in PRONOUNS:
        return None
    cop = m.group("cop").lower()
    polarity, rest = _copular_rest(m.group("rest").strip())
    single = False if cop == "are" and attr.endswith("s") and not attr.endswith("ss") else None
    refined = _copular_sub_attribute(attr, cop, rest)
    if refined is None:
        return None
    attr, rest = refined
    val = clean_value(rest)
    if ent == "_" and _is_description(val, cop):
        return None
    if not looks_like_value(val):
        return None
    return make_key(ent, attr, val, "copular", polarity=polarity, single=single)


def _is_description(val: str, cop: str) -> bool:
    """For the implicit entity ``_``: a value without digits or capitals that is long or
    an adjective ("the server is fast") describes, it does not fill a slot."""
    if re.search(r"\d|[A-Z]", val):
        return False
    return len(val.split()) > 3 or (cop in _BE and adjective_like(val))


def _copular_rest(rest: str) -> tuple[bool, str]:
    """(polarity, rest) after the copula: a leading negation, time adverbs and a
    "located/based/…" before "in/at" are dropped."""
    polarity = True
    neg = _COPULAR_NEG.match(rest)
    if neg:
        polarity, rest = False, neg.group(1)
    rest = _COPULAR_ADVERB.sub("", rest)
    rest = _COPULAR_ADVERB_AGAIN.sub("", rest)
    return polarity, _COPULAR_PLACE_VERB.sub("", rest)


def _copular_sub_attribute(attr: str, cop: str, rest: str) -> tuple[str, str] | None:
    """(attribute, rest) with a ``/location`` or ``/status`` sub-attribute when the value
    is a place ("The office is in Hamburg") or a status word ("The build is broken");
    ``None`` when the copula introduces an opinion ("is very …", "is great")."""
    placed = False
    if _COPULAR_PLACE_PREP.match(rest) and cop in _BE:
        rest = rest.split(" ", 1)[1]
        placed = True
    elif "moved" in cop or "located" in cop or "based" in cop:
        placed = True
    if placed:
        if looks_like_place(rest) and not attr.endswith(PLACE_ATTRS):
            attr = f"{attr}/location"
    elif cop in _BE:
        if clean_value(rest).lower() in STATUS_WORDS:
            attr = f"{attr}/status"
        elif NOT_A_SLOT_VALUE.match(rest):
            return None
    return attr, rest


_STATUS = re.compile(
    r"^(?P<subj>.+?) (?:is|are|was|has been|got|was marked|is marked|is now marked|has been marked|"
    r"is marked as|was marked as|has been marked as) (?:now |currently |finally |still |officially )?"
    r"(?P<neg>no longer |not )?(?P<val>[a-z]+(?: (?:progress|hold))?)$",
    re.IGNORECASE,
)


def _rule_status(s: str, ctx: Context) -> SubjectKey | None:
    last = s.rsplit(None, 1)[-1].lower()
    if last not in STATUS_WORDS and last not in {"progress", "hold"}:
        return None
    m = _STATUS.match(s)
    if not m:
        return None
    val = m.group("val").lower()
    if val not in STATUS_WORDS:
        return None
    ent = holder_of(m.group("subj"), ctx)
    if ent is None:
        ea = attribute_np(m.group("subj"), ctx)
        if ea is None:
            return None
        ent = ea[0] if ea[0] != "_" else ea[1]
        if ea[0] != "_":
            ent = f"{ea[0]}/{ea[1]}"
    return make_key(ent, "status", val, "status", polarity=not m.group("neg"))


_PLACED = re.compile(
    r"^(?P<subj>.+?) (?:is|are) (?:now |currently |still )?(?:located |stored |kept |installed |parked )?"
    r"(?:in|at|on) (?P<val>.+)$",
    re.IGNORECASE,
)


def _rule_placed(s: str, ctx: Context) -> SubjectKey | None:
    """An identified thing's location: "Server db-7 is in rack 3" (ids only: people "in"
    places are left alone)."""
    if not has_digit(s):
        return None
    m = _PLACED.match(s)
    if not m or not has_digit(m.group("subj")):
        return None
    ent = proper_name(m.group("subj"))
    if ent is None:
        return None
    return make_key(ent, "location", clean_value(m.group("val")), "placed")


_AGE = re.compile(
    r"^(?P<subj>.+?) (?:is|am|are|just turned|turned|has turned|will be|is now|am now) (?:now )?(?P<n>\d{1,3})(?: years? old| yo)?$",
    re.IGNORECASE,
)


def _rule_age(s: str, ctx: Context) -> SubjectKey | None:
    last = s.rsplit(None, 1)[-1].lower()
    if not (last.isdigit() or last in {"old", "yo"}):
        return None
    m = _AGE.match(s)
    if not m or "will be" in s.lower():
        return None
    ent = holder_of(m.group("subj"), ctx)
    if ent is None:
        return None
    return make_key(ent, "age", m.group("n"), "age")


_LABEL = re.compile(r"^(?P<label>[^:]{1,60}?)\s*:\s+(?P<val>.{1,120})$")


def rule_label_value(text: str, ctx: Context) -> SubjectKey | None:
    m = _LABEL.match(text.strip().rstrip("."))
    if not m:
        return None
    label, val = m.group("label").strip(), m.group("val").strip()
    if len(val.split()) > 8 or val.endswith("?"):
        return None
    if has_digit(label) and proper_name(label) is not None:
        # "Ticket 4411: resolved" — an entity label; only a status word is a slot
        ent = proper_name(label)
        v = val.lower().rstrip(".!")
        if ent is None or v not in STATUS_WORDS:
            return None
        return make_key(ent, "status", v, "label_value")
    if proper_name(label) is not None:
        return None  # "Jon: Thanks!" — a name, not an attribute label
    ea = attribute_np(label, ctx)
    if ea is None:
        low = label.lower()
        if re.fullmatch(r"[a-z][a-z /-]{0,40}", low) and low.split()[0] not in PRONOUNS:
            ea = ("_", norm_attr(low))
        else:
            return None
    return make_key(ea[0], ea[1], val, "label_value")


RULES: tuple[Rule, ...] = (
    _rule_relative_role,
    _rule_held_by,
    _rule_inverted_role,
    _rule_from_to,
    rule_sentiment,
    rule_update_verb,
    rule_holder_verb,
    _rule_status,
    _rule_placed,
    _rule_age,
    _rule_copular,
    rule_state,
)
