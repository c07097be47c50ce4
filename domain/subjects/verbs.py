"""The ``holder_verb`` rule of subject inference: a person or thing + a relation verb
("Alice lives in Berlin", "I work at Acme", "Tom plays for Ajax", "I no longer work at X",
"She quit her job at Y").

The verbs are two tables: :data:`_HOLDER_VERBS` (verb pattern → attribute, single-valued,
polarity) and :data:`_NEG_VERBS` (verbs that end a relation, polarity ``False``).  One
combined regex (:data:`_ANY_HOLDER`) rejects a sentence with none of the verbs before
any per-verb pattern runs.
"""

from __future__ import annotations

import re

from memfabric.domain.subjects.key import SubjectKey
from memfabric.domain.subjects.text import (
    ADVERBS, PRONOUNS, STEM, Context, clean_value, first_conjunct, holder_of, looks_like_value, make_key,
    norm_value, union_by_first_letter,
)

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
MODAL = re.compile(r"\b(?:will|would|could|should|might|may|going to|want to|wants to|plans? to|hopes? to|"
                    r"used to|if|wish|thinking of|considering|about to|trying to|tries to)\b", re.IGNORECASE)
"""Words of a plan, a wish or a past habit before a relation verb: no key."""


def _peel(head: str) -> tuple[str, bool]:
    """Split "Alice does not even" into ("Alice", negated=True)."""
    words = head.split()
    negated = False
    while len(words) > 1 and words[-1].lower() in _PEEL:
        negated = negated or words[-1].lower() in _NEG_WORDS
        words.pop()
    return " ".join(words), negated


_HOLDER_RES = _compile_holder()
# Pre-filter: does any relation verb (affirmative or ending) follow a whitespace?
# Every match of a rule pattern below implies a match here.
_ANY_HOLDER = re.compile(
    r"\s(?:" + union_by_first_letter([re.sub(r"\(\?P<\w+>", "(?:", v) for v, _, _, _ in _HOLDER_VERBS]
                                + [v for v, _, _ in _NEG_VERBS]) + r")",
    re.IGNORECASE,
)
_NEG_RES = [
    (re.compile(r"\b(?:" + verb + r")", re.IGNORECASE), re.compile(r"^(?P<subj>.+?) (?:has |have |had )?" + ADVERBS + r"*(?:" + verb + r")(?P<obj>.+)$", re.IGNORECASE), attr, single)
    for verb, attr, single in _NEG_VERBS
]


def rule_holder_verb(s: str, ctx: Context) -> SubjectKey | None:
    if not _ANY_HOLDER.search(s):
        return None
    for pre, rx, attr, single in _NEG_RES:
        if pre.search(s):
            m = rx.match(s)
            found = _negated_holder_value(m, attr, ctx) if m else None
            if found is not None:
                return make_key(found[0], attr, found[1], "holder_verb", polarity=False, single=single)
    for pre2, attr, single, pol in _HOLDER_RES:
        m = pre2.search(s)
        if m and m.start() > 0:
            return _affirmed_holder_verb(s, m, attr, single, pol, ctx)
    return None


def _negated_holder_value(m: re.Match[str], attr: str, ctx: Context) -> tuple[str, str] | None:
    """(entity, value) of "Alice quit her job at Acme", "moved out of Paris", "sold my
    Volvo"; ``None`` lets the next verb pattern try."""
    ent = holder_of(m.group("subj"), ctx)
    val = clean_value(m.group("obj"))
    if not ent or not looks_like_value(val) or val.lower().startswith(("to ", "for ", "being ")):
        return None
    if attr == "car":
        val = re.sub(r"^(?:car|vehicle)\b\s*(?:,\s*)?(?:a |an |the )?", "", val)
    return ent, val


def _affirmed_holder_verb(s: str, m: re.Match[str], attr: str, single: bool, pol: bool,
                          ctx: Context) -> SubjectKey | None:
    """The first relation verb found (``m``) after a subject: peel adverbs/negation off the
    subject, trim the object to the value, and key it under ``attr``."""
    subj, negated = _peel(s[: m.start()])
    if MODAL.search(s[: m.start()]):
        return None
    ent = holder_of(subj, ctx)
    if ent is None:
        return None
    groups = m.groupdict()
    val = clean_value(groups.get("obj2") or groups.get("obj3") or s[m.end():])
    if attr == "employer" and groups.get("obj3"):
        val = groups["obj3"]
    val = _trim_holder_value(attr, val, m)
    if attr == "preference":
        head = norm_value(first_conjunct(val)).split()
        if not head or head[0] in PRONOUNS or head[0] in {"to", "not"}:
            return None
        attr = f"preference:{STEM.stemWord(head[-1])}"
    if not looks_like_value(val):
        return None
    return make_key(ent, attr, val, "holder_verb", polarity=pol and not negated, single=single)


def _trim_holder_value(attr: str, val: str, m: re.Match[str]) -> str:
    """Attribute-specific trimming of a relation verb's object ("a nurse at X" → "nurse",
    "Acme as CTO" → "Acme", "tea over coffee" → "tea", "has a dog" → "a dog" → "dog")."""
    if attr == "role":
        val = re.sub(r"^(?:a|an|the)\s+", "", val, flags=re.IGNORECASE)
        val = re.split(r"\s+(?:at|for|with|in)\s+", val, maxsplit=1)[0]
    if attr in {"employer", "team", "residence", "school"}:
        val = re.split(r"\s+as\s+", val, maxsplit=1)[0]
    if attr == "preference":
        val = re.split(r"\s+(?:over|to|rather than|instead of)\s+", val, maxsplit=1)[0]
    if attr == "has":
        val = m.group(0).split()[-1] + " " + val
        val = re.sub(r"^(?:a|an)\s+", "", val)
    return val
