"""Issue 29: a generated suite of supersession phrasings, one *kind of sentence* per family.

The hand-written suites (``tests/data/supersession``) hold one sentence per row. This
module composes sentences from parts instead, so each family is tested over every
holder, thing, verb form, adverb and trailing time phrase it is built from, not over the
few sentences a rule was written against:

* holders: ``I``, ``we``, a named person (Alice, Bob), a role (``The user``) and a chat
  speaker (``Caroline: I …``), each with its possessive and verb agreement;
* positive families (the new note must supersede the old one):

  - ``added_value``: the old value kept and another added ("X and Z", "X plus Z",
    "X, Z and W", "X as well as Z", "both X and Z") in a preference or a copular slot;
  - ``possessive_switch``: the old value stated as "I use X as my T" (or "My T is X",
    "X is my T", "I have been using X for my T"), the new one with an update verb on the
    possessed thing ("I switched my T to Y", "swapped my T for Y", "replaced my T with
    Y"), any auxiliary, adverb, particle and trailing time phrase;
  - ``adopted_as``: the new value adopted for a named slot ("I switched to Y as my T",
    "started using Y for my T", "went with Y as my new T", "made Y my default T");
  - ``passive_update``: the thing as subject ("My T has been switched to Y", "… is now Y");
  - ``quantity_update``: an implicit thing's new amount or date ("We raised the budget
    to 50k", "Anna pushed the deadline to Friday");
  - ``state_negation``: "I am no longer S" (and "not S anymore / any longer", "stopped
    being S", "have not been S since …", "off the diet" after "on the diet", a clause "…
    and I am no longer S") after "I am S", and the state reaffirmed after its negation;
  - ``exchanged_name``: the old value as the possessed thing ("I drive a Prius", then "I
    swapped my Prius for a Model Y"); ``exchanged_value``: the old value exchanged with
    no slot named ("I ditched Vim for Emacs", "dropped Vim in favour of Emacs");
  - ``subjectless_note``: a note without its subject ("Switched my editor to Emacs");
  - ``bare_plural``: the slot named by a bare plural ("I switched banks to Ally");
  - ``ended_use``: "I no longer use X as my T" / "stopped using X for my T" after "I use
    X as my T";
  - ``role_change``: a role of an organisation changes hands ("X took over as CEO of Y",
    "X succeeded Z as …", "Y named X as its new CEO");
  - leading markers and time phrases ("Update:", "As of this week", "These days") on the
    possessive switches;

* negative families (the new note must not supersede, either way round):
  ``other_thing``, ``other_holder``, ``hedged`` (plans, wishes, questions, conditionals,
  past habits, a negated update), ``pronoun`` (who is "she"?), ``repeat`` (the same
  value again, a refinement), ``purpose`` ("I picked tulips for my mother": "for my"
  without a slot), ``other_state``.

:func:`positive` and :func:`negative` return ``{"category", "old", "new"}`` rows (and
``"form"``, the template of the new sentence, where a family has several) in a
fixed order (no randomness): every part appears, and parts are combined round-robin so
the suite stays a few thousand rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import cycle, islice

Row = dict[str, str]


@dataclass(frozen=True)
class Holder:
    """Who a sentence is about: its subject, possessive, "my"-form at the start of a
    sentence, and verb agreement (``third``: "uses" / "has" / "is")."""

    subject: str
    poss: str
    own: str
    third: bool
    speaker: str = ""

    def verb(self, plain: str) -> str:
        """``plain`` ("use", "have", "am", "prefer") agreed with the subject."""
        if plain in ("am", "are", "is"):
            return "is" if self.third else ("am" if self.subject == "I" else "are")
        if plain == "have":
            return "has" if self.third else "have"
        return plain + ("es" if plain.endswith(("sh", "ch", "s")) else "s") if self.third else plain

    @property
    def contracted(self) -> str:
        """The subject with its copula contracted: "I'm", "We're", "Alice's"."""
        return {"I": "I'm", "We": "We're"}.get(self.subject, f"{self.subject}'s")

    def say(self, text: str) -> str:
        return f"{self.speaker}: {text}" if self.speaker else text


HOLDERS = (
    Holder("I", "my", "My", False),
    Holder("Alice", "her", "Alice's", True),
    Holder("We", "our", "Our", False),
    Holder("The user", "their", "The user's", True),
    Holder("Bob", "his", "Bob's", True),
    Holder("I", "my", "My", False, speaker="Caroline"),
)

THINGS = (  # (thing, old value, new value)
    ("editor", "Vim", "Emacs"),
    ("browser", "Firefox", "Chrome"),
    ("bank", "Chase", "Ally"),
    ("password manager", "Bitwarden", "1Password"),
    ("email client", "Outlook", "Thunderbird"),
    ("phone carrier", "Verizon", "T-Mobile"),
    ("music app", "Spotify", "Tidal"),
    ("note-taking app", "Notion", "Obsidian"),
    ("default shell", "bash", "zsh"),
    ("search engine", "Google", "DuckDuckGo"),
    ("operating system", "Windows", "Linux"),
    ("internet provider", "Comcast", "Sonic"),
    ("dentist", "Dr. Patel", "Dr. Kim"),
    ("gym", "Planet Fitness", "Equinox"),
    ("keyboard layout", "QWERTY", "Dvorak"),
    ("VPN", "NordVPN", "Mullvad"),
    ("IDE", "PyCharm", "VS Code"),
    ("insurance company", "Geico", "Allstate"),
    ("primary language", "Java", "Kotlin"),
    ("calendar app", "Google Calendar", "Fantastical"),
    ("streaming service", "Netflix", "Hulu"),
    ("mail client", "Apple Mail", "Spark"),
    ("team's chat tool", "Slack", "Microsoft Teams"),
    ("home airport", "JFK", "Newark"),
    ("theme", "light mode", "dark mode"),
    ("mobile plan", "the Basic plan", "the Unlimited plan"),
    ("coffee order", "a latte", "a flat white"),
    ("diet", "keto", "paleo"),
    ("go-to pizza place", "Luigi's", "Domino's"),
    ("units", "metric units", "imperial units"),
    ("seat preference", "window seats", "aisle seats"),
    ("cloud provider", "AWS", "Azure"),
)

OTHER_THINGS = ("laptop", "car", "bike", "phone number", "username", "landlord")

STATES = (
    "vegetarian", "vegan", "a vegetarian", "a smoker", "single", "married", "unemployed", "a student",
    "pregnant", "a member of the chess club", "on a diet", "in the hospital", "a Premium subscriber",
    "on the night shift", "sober", "retired", "a manager", "engaged", "allergic to peanuts", "a night owl",
    "an early riser", "in a relationship", "on medication", "a homeowner", "self-employed", "a freelancer",
    "in therapy", "part of the band", "diabetic", "afraid of flying", "interested in politics",
    "active on Twitter", "a fan of jazz", "into running", "gluten-free", "a US citizen", "on call",
    "a coffee drinker", "in charge of the budget", "on the board",
)

QUANTITIES = (  # (the thing, old value, new value, update verbs that fit)
    ("budget", "40k", "50k", ("raised", "increased", "upped", "bumped", "cut", "lowered", "reduced", "set")),
    ("rent", "1200 EUR", "1350 EUR", ("raised", "increased", "hiked", "lowered", "adjusted")),
    ("deadline", "Friday", "next Monday", ("moved", "pushed", "postponed", "extended", "changed")),
    ("standup", "9am", "10am", ("moved", "pushed", "rescheduled", "shifted", "changed")),
    ("rate limit", "100 requests per minute", "500 requests per minute", ("raised", "bumped", "lowered", "set")),
    ("price", "10 dollars", "12 dollars", ("raised", "increased", "dropped", "cut", "slashed")),
    ("launch date", "June 3", "June 10", ("moved", "pushed", "postponed", "rescheduled", "changed")),
    ("thermostat", "21 degrees", "19 degrees", ("lowered", "turned down", "set", "reset", "changed")),
    ("meeting", "Tuesday", "Thursday", ("moved", "rescheduled", "pushed", "changed")),
    ("max batch size", "64", "128", ("increased", "doubled", "raised", "changed")),
)
QUANTITY_HOLDERS = ("We", "I", "Anna", "The team", "Management", "The landlord")

AUX = ("", "just ", "recently ", "finally ", "{have} ", "{have} just ", "{have} now ", "already ", "officially ")
LEADS = ("", "", "", "Update: ", "As of this week ", "Since last month, ", "These days ", "Nowadays ", "Actually, ",
         "FYI: ", "Quick update: ", "As of Monday, ")
TRAIL = ("", " last week", " yesterday", " a few days ago", " this morning", " in March", " for good", " now",
         " on Monday", " earlier this year")


def _take(parts: tuple[str, ...], n: int, start: int = 0) -> list[str]:
    """``n`` parts round-robin from index ``start`` (every part appears when ``n`` is large)."""
    return list(islice(cycle(parts[start % len(parts):] + parts[:start % len(parts)]), n))


def _fill(h: Holder, template: str, **parts: str) -> str:
    """``template`` with the holder's words ({S} subject, {p} possessive, {Own}, {use},
    {have}, {be}, {prefer}) and ``parts`` filled in, said by the holder's speaker."""
    words = {"S": h.subject, "p": h.poss, "Own": h.own, "use": h.verb("use"), "have": h.verb("have"),
             "be": h.verb("am"), "prefer": h.verb("prefer"), "Sc": h.contracted}
    return h.say(template.format(**words, **parts))


OLD_USE = (
    "{S} {use} {X} as {p} {T}",
    "{Own} {T} is {X}",
    "{S} {use} {X} for {p} {T}",
    "{S} {have} been using {X} as {p} {T}",
    "{S} {be} using {X} as {p} {T}",
    "{Own} current {T} is {X}",
)
UPDATE_VERBS = (  # (verb, particle before the new value)
    ("switched", "to"), ("changed", "to"), ("updated", "to"), ("set", "to"), ("migrated", "to"),
    ("upgraded", "to"), ("downgraded", "to"), ("converted", "to"), ("switched", "over to"),
    ("changed", "over to"), ("switched", "back to"), ("swapped", "for"), ("traded", "for"),
    ("replaced", "with"), ("exchanged", "for"), ("swapped", "out for"),
)
ADOPTED = (
    "{S} switched to {Y} as {p} {T}",
    "{S} switched over to {Y} for {p} {T}",
    "{S} moved over to {Y} for {p} {T}",
    "{S} {have} started using {Y} as {p} {T}",
    "{S} started using {Y} for {p} {T}",
    "{S} now {use} {Y} as {p} {T}",
    "{S} {be} now using {Y} as {p} {T}",
    "{S} chose {Y} as {p} new {T}",
    "{S} picked {Y} as {p} {T}",
    "{S} went with {Y} as {p} new {T}",
    "{S} settled on {Y} as {p} {T}",
    "{S} made {Y} {p} new {T}",
    "{S} made {Y} {p} default {T}",
    "{S} {have} adopted {Y} as {p} {T}",
    "{S} opted for {Y} as {p} {T}",
    "{S} {have} gone with {Y} for {p} {T}",
)
PASSIVE = (
    "{Own} {T} is now {Y}",
    "{Own} {T} has been switched to {Y}",
    "{Own} {T} was changed to {Y}",
    "{Own} {T} got updated to {Y}",
    "{Own} new {T} is {Y}",
    "{Own} {T} has been changed over to {Y}",
    "{Own} {T} was migrated to {Y}",
    "{Own} {T} is {Y} now",
)


def _slots() -> Iterator[tuple[int, Holder, str, str, str]]:
    """(index, holder, thing, old, new) over every thing, holders round-robin."""
    for i, (thing, old, new) in enumerate(THINGS):
        for j in range(len(HOLDERS)):
            yield i * len(HOLDERS) + j, HOLDERS[(i + j) % len(HOLDERS)], thing, old, new


def _old_use(n: int, h: Holder, thing: str, old: str) -> str:
    template = OLD_USE[n % len(OLD_USE)]
    return _fill(h, template, T=thing, X=old)


def possessive_switch() -> list[Row]:
    """Old: a use-as / copular statement; new: an update verb on the possessed thing."""
    rows = []
    for n, h, thing, old, new in _slots():
        for k, (verb, particle) in enumerate(UPDATE_VERBS):
            if (n + k) % 3:
                continue  # a third of the verbs per slot, every verb over all slots
            aux = AUX[(n + k) % len(AUX)]
            trail = TRAIL[(n * 7 + k) % len(TRAIL)]
            lead = LEADS[(n * 3 + k) % len(LEADS)]
            text = _fill(h, lead + "{S} " + aux + verb + " {p} {T} " + particle + " {Y}" + trail, T=thing, Y=new)
            rows.append({"category": "possessive_switch", "form": f"{verb} … {particle}",
                         "old": _old_use(n + k, h, thing, old), "new": text})
    return rows


def adopted_as() -> list[Row]:
    rows = []
    for n, h, thing, old, new in _slots():
        for k, template in enumerate(ADOPTED):
            if (n + k) % 3:
                continue
            rows.append({"category": "adopted_as", "form": template, "old": _old_use(n + k, h, thing, old),
                         "new": _fill(h, template + TRAIL[(n + k) % len(TRAIL)], T=thing, Y=new)})
    return rows


def passive_update() -> list[Row]:
    rows = []
    for n, h, thing, old, new in _slots():
        for k, template in enumerate(PASSIVE):
            if (n + k) % 2:
                continue
            rows.append({"category": "passive_update", "form": template, "old": _old_use(n + k, h, thing, old),
                         "new": _fill(h, template, T=thing, Y=new)})
    return rows


def added_value() -> list[Row]:
    """The old value kept and another added: "X and Z", "X plus Z", "X, Z and W"."""
    rows = []
    for n, h, thing, old, new in _slots():
        z, w = new, THINGS[(THINGS.index((thing, old, new)) + 1) % len(THINGS)][2]
        for k, added in enumerate((f"{old} and {z}", f"{old} plus {z}", f"{old}, {z} and {w}",
                                   f"{old} as well as {z}", f"both {old} and {z}")):
            for m, (before, after) in enumerate((
                ("{S} {prefer} {X}", "{S} {prefer} {V}"),
                ("{Own} {T} is {X}", "{Own} {T} is {V}"),
                ("{Own} {T} is {X}", "{Own} {T} is now {V}"),
            )):
                if (n + k + m) % 3:
                    continue
                rows.append({"category": "added_value", "old": _fill(h, before, T=thing, X=old),
                             "new": _fill(h, after, T=thing, V=added)})
    return rows


def quantity_update() -> list[Row]:
    rows = []
    for i, (thing, old, new, verbs) in enumerate(QUANTITIES):
        for k, verb in enumerate(verbs):
            who = QUANTITY_HOLDERS[(i + k) % len(QUANTITY_HOLDERS)]
            aux = ("", "just ", "finally ", "officially ")[(i + k) % 4]
            trail = ("", " last week", " yesterday", " this morning")[(i * 3 + k) % 4]
            before = ("The {T} is {X}", "Our {T} is {X}", "The {T} is currently {X}")[(i + k) % 3]
            if before.startswith("Our") and who not in ("We", "I"):
                before = "The {T} is {X}"
            det = "our" if before.startswith("Our") else "the"
            rows.append({"category": "quantity_update", "old": before.format(T=thing, X=old),
                         "new": f"{who} {aux}{verb} {det} {thing} to {new}{trail}"})
    return rows


STATE_OLD = ("{S} {be} {X}", "{S} {be} now {X}", "{S} {be} currently {X}", "{S} became {X}",
             "{S} {have} been {X} for years", "{Sc} {X}")
STATE_NEW = (
    "{S} {be} no longer {X}", "{S} {be} not {X} anymore", "{S} {be} not {X} any more",
    "{S} {be} not {X} any longer", "{S} {be} now no longer {X}", "{S} {be} no longer {X} now",
    "{S} stopped being {X}", "{S} quit being {X}", "{S} {have} not been {X} since May",
    "{S} {be} officially no longer {X}", "{S} {be} not {X} these days", "{S} {be} actually no longer {X}",
    "{S} {have} stopped being {X}", "{S} {be} no longer {X} as of this week", "{Sc} no longer {X}",
    "{Sc} not {X} anymore",
)


def state_negation() -> list[Row]:
    rows = []
    for i, state in enumerate(STATES):
        for j, h in enumerate(HOLDERS):
            for k, template in enumerate(STATE_NEW):
                if (i + j + k) % 4:
                    continue
                before = STATE_OLD[(i + k) % len(STATE_OLD)]
                if before == "{Sc} {X}" and h.third:
                    before = "{S} {be} {X}"  # "Alice's vegetarian" could be a possessive: only "I'm", "We're"
                rows.append({"category": "state_negation", "form": template, "old": _fill(h, before, X=state),
                             "new": _fill(h, template, X=state)})
            if state.startswith("on "):  # "off the night shift" negates "on the night shift"
                rows.append({"category": "state_negation", "form": "{S} {be} off …",
                             "old": _fill(h, "{S} {be} {X}", X=state), "new": _fill(h, "{S} {be} off " + state[3:])})
            if not h.third:  # a clause of its own after "and I" / "and we"
                rows.append({"category": "state_negation", "form": "… and {S} {be} no longer {X}",
                             "old": _fill(h, "{S} {be} {X}", X=state),
                             "new": _fill(h, "Things changed and {S} {be} no longer {X}", X=state)})
            rows.append({"category": "state_reaffirmed", "old": _fill(h, "{S} {be} no longer {X}", X=state),
                         "new": _fill(h, "{S} {be} {X} again", X=state)})
    return rows


VEHICLES = (("Prius", "Model Y"), ("Civic", "Model 3"), ("Golf", "Polestar 2"), ("Corolla", "Ioniq 5"),
            ("Jetta", "Leaf"), ("Camry", "Kona"))
EXCHANGES = ("{S} swapped {p} {X} for a {Y}", "{S} traded {p} {X} in for a {Y}", "{S} replaced {p} {X} with a {Y}",
             "{S} {have} traded in {p} {X} for a {Y}", "{S} finally exchanged {p} {X} for a {Y} last month",
             "{S} just swapped out {p} {X} for a {Y}")


def exchanged_name() -> list[Row]:
    """The old value named as the possessed thing ("I swapped my Prius for a Model Y"):
    no slot is named, the stated old value decides (the ``from_to`` wildcard key)."""
    rows = []
    for i, (old, new) in enumerate(VEHICLES):
        for j, h in enumerate(HOLDERS):
            before = ("{S} {drive} a {X}", "{Own} car is a {X}")[(i + j) % 2]
            for k, template in enumerate(EXCHANGES):
                if (i + j + k) % 2:
                    continue
                rows.append({"category": "exchanged_name", "form": template,
                             "old": _fill(h, before, X=old, drive=h.verb("drive")),
                             "new": _fill(h, template, X=old, Y=new)})
    return rows


NOTE_VERBS = ("Switched", "Changed", "Updated", "Moved", "Upgraded", "Set")


def subjectless_note() -> list[Row]:
    """A note without its subject ("Switched my editor to Emacs"): the writer's own."""
    rows = []
    for i, (thing, old, new) in enumerate(THINGS):
        verb = NOTE_VERBS[i % len(NOTE_VERBS)]
        for j, trail in enumerate(("", " today", " last week")):
            rows.append({"category": "subjectless_note", "form": f"{verb} my … to",
                         "old": _old_use(i + j, HOLDERS[0], thing, old), "new": f"{verb} my {thing} to {new}{trail}"})
    return rows


PLURAL_SLOTS = (("editor", "Vim", "Emacs"), ("browser", "Firefox", "Chrome"), ("bank", "Chase", "Ally"),
                ("dentist", "Dr. Patel", "Dr. Kim"), ("gym", "Planet Fitness", "Equinox"), ("VPN", "NordVPN", "Mullvad"),
                ("theme", "light mode", "dark mode"), ("diet", "keto", "paleo"), ("barber", "Tony", "Luis"),
                ("carrier", "Verizon", "T-Mobile"))


def bare_plural() -> list[Row]:
    """The slot named by a bare plural: "I switched banks to Ally"."""
    rows = []
    for i, (thing, old, new) in enumerate(PLURAL_SLOTS):
        for j, h in enumerate(HOLDERS):
            verb = ("switched", "changed", "swapped", "switched")[(i + j) % 4]
            before = ("{Own} {T} is {X}", "{S} {use} {X} as {p} {T}")[(i + j) % 2]
            rows.append({"category": "bare_plural", "form": f"{verb} <things> to",
                         "old": _fill(h, before, T=thing, X=old),
                         "new": _fill(h, "{S} " + AUX[(i + j) % len(AUX)] + verb + " {T}s to {Y}", T=thing, Y=new)})
    return rows


EXCHANGE_BARE = ("{S} ditched {X} for {Y}", "{S} dropped {X} in favour of {Y}", "{S} swapped {X} for {Y}",
                 "{S} replaced {X} with {Y}", "{S} traded {X} for {Y}", "{S} gave up {X} for {Y}",
                 "{S} {have} switched {X} out for {Y}", "{S} finally dropped {X} in favor of {Y}")


def exchanged_value() -> list[Row]:
    """The old value exchanged for the new one, no slot named: "I ditched Vim for Emacs"."""
    rows = []
    named = [(t, o, n) for t, o, n in THINGS if o[:1].isupper()]
    for i, (thing, old, new) in enumerate(named):
        for j, template in enumerate(EXCHANGE_BARE):
            if (i + j) % 2:
                continue
            h = HOLDERS[(i + j) % len(HOLDERS)]
            rows.append({"category": "exchanged_value", "form": template,
                         "old": _fill(h, ("{Own} {T} is {X}", "{S} {use} {X} as {p} {T}")[j % 2], T=thing, X=old),
                         "new": _fill(h, template, X=old, Y=new)})
    return rows


ENDED_USE = ("{S} no longer {use} {X} as {p} {T}", "{S} stopped using {X} for {p} {T}",
             "{S} {do} not use {X} as {p} {T} anymore", "{S} quit using {X} as {p} {T}",
             "{S} {have} stopped using {X} as {p} {T}", "{S} {be} no longer using {X} for {p} {T}")


def ended_use() -> list[Row]:
    """The use of a value for a slot ended: "I no longer use Vim as my editor" after "I
    use Vim as my editor" (the same key, negated)."""
    rows = []
    for n, h, thing, old, _new in _slots():
        template = ENDED_USE[n % len(ENDED_USE)]
        rows.append({"category": "ended_use", "form": template, "old": _old_use(n, h, thing, old),
                     "new": _fill(h, template, T=thing, X=old, do="does" if h.third else "do")})
    return rows


ORGS = ("Amazon", "the Lakers", "Acme Corp", "the Red Cross", "Globex", "the city council", "Initech", "Spotify")
ROLES = ("CEO", "head coach", "chair", "CFO", "president", "treasurer")
PEOPLE = (("Jeff Bezos", "Andy Jassy"), ("Frank Vogel", "JJ Redick"), ("Maria Lopez", "Kwame Mensah"),
          ("Li Wei", "Sven Eriksson"))
ROLE_OLD = ("The {R} of {O} is {P}", "{P} is the {R} of {O}", "{P} is currently the {R} of {O}")
ROLE_NEW = ("{Q} took over as {R} of {O}", "{Q} stepped in as the new {R} of {O}", "{Q} replaced {P} as {R} of {O}",
            "{Q} succeeded {P} as {R} of {O}", "{Q} was named {R} of {O}", "{Q} was appointed {R} of {O}",
            "{Q} became the new {R} of {O}", "{Q} has been elected {R} of {O}", "{Q} returned as {R} of {O}",
            "{Oc} named {Q} as its new {R}", "{Oc} appointed {Q} as {R}", "{Oc} has hired {Q} as its next {R}")


def role_change() -> list[Row]:
    """A role of an organisation changes hands: "Andy Jassy took over as CEO of Amazon",
    "Amazon named Andy Jassy as its new CEO" (the old holder unnamed, or named as replaced)."""
    rows = []
    for i, org in enumerate(ORGS):
        for j, role in enumerate(ROLES):
            old, new = PEOPLE[(i + j) % len(PEOPLE)]
            for k, template in enumerate(ROLE_NEW):
                if (i + j + k) % 4:
                    continue
                if template.startswith("{Oc}") and org[0].islower():
                    continue  # "the city council named …": a common noun is no holder
                oc = org[0].upper() + org[1:]
                rows.append({"category": "role_change", "form": template,
                             "old": ROLE_OLD[(i + k) % len(ROLE_OLD)].format(R=role, O=org, P=old),
                             "new": template.format(R=role, O=org, Oc=oc, P=old, Q=new)})
    return rows


def positive() -> list[Row]:
    """Every positive row: the new note supersedes the old one."""
    return (possessive_switch() + adopted_as() + passive_update() + added_value() + quantity_update()
            + state_negation() + exchanged_name() + subjectless_note() + bare_plural() + exchanged_value()
            + ended_use() + role_change())


# ----------------------------------------------------------------------------- negatives

HEDGES = (
    "{S} might switch {p} {T} to {Y}",
    "{S} {want} to switch {p} {T} to {Y}",
    "{S} {be} thinking of switching {p} {T} to {Y}",
    "{S} {be} going to change {p} {T} to {Y}",
    "{S} will switch {p} {T} to {Y}",
    "{S} should switch {p} {T} to {Y}",
    "Should {s} switch {p} {T} to {Y}?",
    "If {s} switched {p} {T} to {Y}, {s} would save money",
    "{S} used to use {Y} as {p} {T}",
    "{S} did not switch {p} {T} to {Y}",
    "{S} never changed {p} {T} to {Y}",
    "{S} {be} considering {Y} as {p} new {T}",
    "{S} tried {Y} as {p} {T} for a week",
    "{S} {plan} to switch to {Y} as {p} {T}",
    "{S} {be} not going to switch {p} {T} to {Y}",
    "Maybe {s} will make {Y} {p} new {T}",
    "{S} almost switched {p} {T} to {Y}",
    "{S} nearly changed {p} {T} to {Y}",
    "{S} refused to switch {p} {T} to {Y}",
    "{S} {be} about to switch {p} {T} to {Y}",
    "{S} might switch {T}s to {Y}",
    "{S} almost ditched {X} for {Y}",
    "{S} would never trade {X} for {Y}",
    "Thinking of switching {p} {T} to {Y}",
    "{S} {be} planning to replace {X} with {Y}",
    "{S} no longer {want} to switch {p} {T} to {Y}",
)


def _hedge(h: Holder, template: str, thing: str, old: str, new: str) -> str:
    s = h.subject if h.subject == "I" else h.subject.lower() if h.subject in ("We", "The user") else h.subject
    return _fill(h, template, T=thing, X=old, Y=new, s=s, want=h.verb("want"), plan=h.verb("plan"))


def negative_updates() -> list[Row]:
    rows = []
    for n, h, thing, old, new in _slots():
        other = OTHER_THINGS[n % len(OTHER_THINGS)]
        verb, particle = UPDATE_VERBS[n % len(UPDATE_VERBS)]
        rows.append({"category": "other_thing", "old": _old_use(n, h, thing, old),
                     "new": _fill(h, "{S} " + verb + " {p} {O} " + particle + " {Y}", O=other, Y=new)})
        rows.append({"category": "other_thing", "old": _old_use(n, h, thing, old),
                     "new": _fill(h, ADOPTED[n % len(ADOPTED)], T="new " + other if n % 2 else other, Y=new)})
        rows.append({"category": "other_thing", "old": _old_use(n, h, thing, old),
                     "new": _fill(h, ENDED_USE[n % len(ENDED_USE)], T=other, X=old, do="does" if h.third else "do")})
        other_holder = HOLDERS[(n + 1 + (n % 2)) % len(HOLDERS)]
        if other_holder.subject != h.subject or other_holder.speaker != h.speaker:
            rows.append({"category": "other_holder", "old": _old_use(n, h, thing, old),
                         "new": _fill(other_holder, "{S} " + verb + " {p} {T} " + particle + " {Y}",
                                      T=thing, Y=new)})
        rows.append({"category": "hedged", "form": HEDGES[n % len(HEDGES)], "old": _old_use(n, h, thing, old),
                     "new": _hedge(h, HEDGES[n % len(HEDGES)], thing, old, new)})
        rows.append({"category": "pronoun", "old": _old_use(n, h, thing, old),
                     "new": ("She", "They", "He", "It")[n % 4] + f" switched {('her', 'their', 'his', 'its')[n % 4]}"
                            f" {thing} to {new}"})
        rows.append({"category": "repeat", "old": _old_use(n, h, thing, old),
                     "new": _fill(h, "{S} switched {p} {T} to {X}", T=thing, X=old)})
    return rows


PURPOSE = (  # "for my <noun>" without a slot: (template, old object, new object)
    ("{S} picked {O} for {p} mother", "tulips", "roses"),
    ("{S} made {O} for {p} kids", "pancakes", "waffles"),
    ("{S} bought {O} for {p} boss", "a mug", "a book"),
    ("{S} cooked {O} for {p} family", "pasta", "curry"),
    ("{S} made {O} {p} kids loved", "a cake", "cookies"),
    ("{S} chose {O} for {p} trip", "a red backpack", "a blue one"),
    ("{S} swapped stories with {p} friends", "", ""),
    ("{S} set {O} on {p} desk", "a plant", "a lamp"),
)


def negative_purpose() -> list[Row]:
    rows = []
    for i, (template, old, new) in enumerate(PURPOSE):
        for j, h in enumerate(HOLDERS[:4]):
            rows.append({"category": "purpose", "old": _fill(h, template, O=old),
                         "new": _fill(h, template, O=new)})
    return rows


STATE_HEDGES = ("{S} might not be {X} anymore", "{S} {be} thinking about no longer being {X}",
                "If {s} were no longer {X}, {s} would tell you", "{S} used to be {X}",
                "{S} will no longer be {X} next year", "{S} {want} to stop being {X}")


def negative_states() -> list[Row]:
    rows = []
    for i, state in enumerate(STATES):
        h = HOLDERS[i % len(HOLDERS)]
        other = STATES[(i + 7) % len(STATES)]
        rows.append({"category": "other_state", "old": _fill(h, "{S} {be} {X}", X=state),
                     "new": _fill(h, "{S} {be} no longer {X}", X=other)})
        rows.append({"category": "other_state", "old": _fill(h, "{S} {be} {X}", X=state),
                     "new": _fill(h, "{S} {be} {X}", X=other)})
        other_holder = HOLDERS[(i + 1) % len(HOLDERS)]
        if other_holder.subject != h.subject or other_holder.speaker != h.speaker:
            rows.append({"category": "other_holder", "old": _fill(h, "{S} {be} {X}", X=state),
                         "new": _fill(other_holder, "{S} {be} no longer {X}", X=state)})
        s = h.subject if h.subject == "I" else h.subject.lower() if h.subject in ("We", "The user") else h.subject
        rows.append({"category": "hedged", "old": _fill(h, "{S} {be} {X}", X=state),
                     "new": _fill(h, STATE_HEDGES[i % len(STATE_HEDGES)], X=state, s=s, want=h.verb("want"))})
        rows.append({"category": "repeat", "old": _fill(h, "{S} {be} {X}", X=state),
                     "new": _fill(h, "{S} {be} still {X}", X=state)})
    return rows


ROLE_HEDGES = ("{Q} is expected to take over as {R} of {O}", "{Q} will succeed {P} as {R} of {O}",
               "{Q} might replace {P} as {R} of {O}", "{Q} was almost named {R} of {O}",
               "{Q} did not take over as {R} of {O}", "{Q} used to be the {R} of {O}")


def negative_roles() -> list[Row]:
    """Another organisation, another role, a plan or a denial: no supersession."""
    rows = []
    for i, org in enumerate(ORGS):
        role, other_role = ROLES[i % len(ROLES)], ROLES[(i + 1) % len(ROLES)]
        old, new = PEOPLE[i % len(PEOPLE)]
        other_org = ORGS[(i + 1) % len(ORGS)]
        before = f"The {role} of {org} is {old}"
        rows.append({"category": "other_thing", "old": before, "new": f"{new} took over as {other_role} of {org}"})
        rows.append({"category": "other_holder", "old": before, "new": f"{new} took over as {role} of {other_org}"})
        for template in ROLE_HEDGES[i % 2::2]:
            rows.append({"category": "hedged", "form": template, "old": before,
                         "new": template.format(R=role, O=org, P=old, Q=new)})
    return rows


def negative() -> list[Row]:
    """Every negative row: the new note supersedes neither way round (a ``repeat``
    row's old note may supersede nothing either)."""
    return negative_updates() + negative_purpose() + negative_states() + negative_roles()
