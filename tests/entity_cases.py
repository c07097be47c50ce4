"""Issue 32: the alias / identifier resolution test set (people, companies, projects).

``WORLD``: the entities a scope holds (key, type, display name, identifiers, aliases).
``CASES``: ``(surface, identifiers, expected)``; ``expected`` is the WORLD key the
surface names (a *must-merge*: an upsert may resolve it, and ``resolve`` must list it)
or ``None`` (a *must-not-merge*: another entity, unknown, or ambiguous — an upsert must
not resolve it to anything). Hand-written hard cases first, then systematic variants
of every WORLD entity (:func:`variants`).
"""

from __future__ import annotations

from typing import Any

Case = tuple[str, list[tuple[str, str]], str | None]

WORLD: list[dict[str, Any]] = [
    # people
    {"key": "maria", "type": "person", "name": "Maria Lopez", "ids": [("email", "maria.lopez@acme.example"), ("handle", "@mlopez")], "aliases": ["Maria"]},
    {"key": "maria2", "type": "person", "name": "Maria Lopez", "ids": [("email", "maria@globex.example")], "aliases": []},
    {"key": "jose", "type": "person", "name": "José García", "ids": [("phone", "+34 600 123 456")], "aliases": ["Pepe"]},
    {"key": "john1", "type": "person", "name": "John Smith", "ids": [("email", "john.smith@initech.example")], "aliases": []},
    {"key": "john2", "type": "person", "name": "John Smith", "ids": [("email", "jsmith@umbrella.example")], "aliases": []},
    {"key": "aiko", "type": "person", "name": "Aiko Tanaka", "ids": [("email", "aiko@kaizen.example"), ("handle", "@aiko_t")], "aliases": ["Dr. Tanaka"]},
    {"key": "li", "type": "person", "name": "Li Wei", "ids": [("phone", "+86 138 0013 8000")], "aliases": []},
    {"key": "oconnor", "type": "person", "name": "Siobhan O'Connor", "ids": [("email", "siobhan@celtic.example")], "aliases": ["Shiv"]},
    {"key": "bob", "type": "person", "name": "Robert Johnson", "ids": [("email", "bob.johnson@acme.example")], "aliases": ["Bob Johnson", "Bobby"]},
    {"key": "anna", "type": "person", "name": "Anna Müller", "ids": [("email", "anna.mueller@bayer.example")], "aliases": []},
    {"key": "priya", "type": "person", "name": "Priya Natarajan", "ids": [("handle", "@priyan"), ("phone", "+1 415 555 0142")], "aliases": ["Priya N."]},
    {"key": "kwame", "type": "person", "name": "Kwame Mensah", "ids": [("email", "kwame@accra.example")], "aliases": []},
    {"key": "sven", "type": "person", "name": "Sven Eriksson", "ids": [("email", "sven.e@nordic.example")], "aliases": []},
    {"key": "chloe", "type": "person", "name": "Chloé Dubois", "ids": [("handle", "@chloedubois")], "aliases": ["Chloe"]},
    {"key": "omar", "type": "person", "name": "Omar Haddad", "ids": [("phone", "+961 3 123 456")], "aliases": []},
    # organisations
    {"key": "acme", "type": "organisation", "name": "Acme Corp", "ids": [("url", "https://acme.example")], "aliases": ["ACME"]},
    {"key": "acmelabs", "type": "organisation", "name": "Acme Labs", "ids": [("url", "https://labs.acme-research.example")], "aliases": []},
    {"key": "globex", "type": "organisation", "name": "Globex Corporation", "ids": [("url", "globex.example")], "aliases": ["Globex"]},
    {"key": "initech", "type": "organisation", "name": "Initech GmbH", "ids": [("url", "https://www.initech.example/")], "aliases": []},
    {"key": "umbrella", "type": "organisation", "name": "Umbrella Health", "ids": [("url", "umbrella.example")], "aliases": []},
    {"key": "kaizen", "type": "organisation", "name": "Kaizen Robotics", "ids": [("url", "kaizen.example")], "aliases": ["Kaizen"]},
    {"key": "nordic", "type": "organisation", "name": "Nordic Timber AB", "ids": [("url", "nordic.example")], "aliases": []},
    {"key": "bluebird", "type": "organisation", "name": "Bluebird Logistics", "ids": [("url", "bluebird.example")], "aliases": ["Bluebird"]},
    # projects
    {"key": "apollo", "type": "project", "name": "Project Apollo", "ids": [("jira", "APL")], "aliases": ["Apollo"]},
    {"key": "apollo2", "type": "project", "name": "Apollo Two", "ids": [("jira", "AP2")], "aliases": []},
    {"key": "phoenix", "type": "project", "name": "Phoenix Migration", "ids": [("jira", "PHX"), ("url", "https://wiki.example/phoenix")], "aliases": ["Phoenix"]},
    {"key": "atlas", "type": "project", "name": "Atlas Data Platform", "ids": [("jira", "ATL")], "aliases": ["Atlas"]},
    {"key": "hermes", "type": "project", "name": "Hermes Notifications", "ids": [("jira", "HRM")], "aliases": []},
    {"key": "orion", "type": "project", "name": "Orion Billing Rewrite", "ids": [("jira", "ORB")], "aliases": ["Orion"]},
    {"key": "zephyr", "type": "project", "name": "Zephyr", "ids": [("jira", "ZPH")], "aliases": []},
]

HARD: list[Case] = [
    # identifiers in another spelling: must merge
    ("MARIA.LOPEZ@ACME.EXAMPLE", [], "maria"),
    ("@MLopez", [], "maria"),
    ("+34600123456", [], "jose"),
    ("0034 600 123 456", [], None),  # another spelling of the number, not normalised: unsure
    ("http://acme.example/", [], "acme"),
    ("www.initech.example", [], "initech"),
    ("https://globex.example", [], "globex"),
    ("+1 (415) 555-0142", [], "priya"),
    ("Maria", [("email", "maria@globex.example")], "maria2"),  # the identifier decides
    ("M. Lopez", [("handle", "mlopez")], "maria"),
    ("Bob", [("email", "BOB.JOHNSON@acme.example")], "bob"),
    # accents, case, honorifics, legal suffixes: the same name
    ("jose garcia", [], "jose"),
    ("JOSÉ GARCÍA", [], "jose"),
    ("Siobhan OConnor", [], "oconnor"),
    ("Anna Muller", [], "anna"),
    ("Dr. Aiko Tanaka", [], "aiko"),
    ("Acme Inc.", [], "acme"),
    ("Globex Corp", [], "globex"),
    ("Initech", [], "initech"),
    ("Nordic Timber", [], "nordic"),
    # namesakes and near names: must not merge
    ("Maria Lopez", [], None),  # two of them
    ("John Smith", [], None),  # two of them
    ("John Smith", [("email", "john@other.example")], None),  # a third one
    ("Maria Lopez", [("email", "maria.l@elsewhere.example")], None),
    ("Acme Research", [], None),
    ("Acme Labs Berlin", [], None),
    ("Apollo Three", [], None),
    ("Project Apollo", [("jira", "AP2")], "apollo2"),  # the identifier names Apollo Two
    ("Phoenix Rising", [], None),
    ("Atlas Mobile", [], None),
    ("Hermes Payments", [], None),
    ("Orion Health", [], None),
    ("Zephyr Labs", [], None),
    ("Kaizen Foods", [], None),
    ("Bluebird Airlines", [], None),
    ("Umbrella Insurance", [], None),
    ("Sven Olsen", [], None),
    ("Anna Schmidt", [], None),
    ("Li Na", [], None),
    ("Omar Khan", [], None),
    ("Kwame Nkrumah", [], None),
    ("Priya Patel", [], None),
    ("Robert Jordan", [], None),
    ("Aiko Suzuki", [], None),
    ("Chloé Martin", [], None),
    ("José Martínez", [], None),
    ("Maria Garcia", [], None),
    ("Olga Petrova", [], None),
    ("olga@petrova.example", [], None),
    ("kwame.mensah@gmail.example", [], None),  # his name in an unknown email: a candidate, never sure
    ("aiko.tanaka@other.example", [], None),
    ("zephyr.example", [], None),  # a domain whose label is a project's name
    ("acme.example", [], "acme"),  # the company's own domain (its url identifier)
    ("@someone_else", [], None),
    ("+44 20 7946 0000", [], None),
    ("https://unknown.example", [], None),
    ("Bobby Tables", [], None),
    ("Shiva", [], None),
    ("Pepe Le Pew", [], None),
]


def _typo(name: str) -> str:
    """``name`` with one letter dropped from its longest token (a typo)."""
    tokens = name.split()
    longest = max(range(len(tokens)), key=lambda i: len(tokens[i]))
    t = tokens[longest]
    tokens[longest] = t[:len(t) // 2] + t[len(t) // 2 + 1:]
    return " ".join(tokens)


def variants(entity: dict[str, Any], namesakes: set[str]) -> list[Case]:
    """Must-merge cases of one WORLD entity: each identifier upper-cased, the name in
    lower case (only a must-merge when no other entity has the name), each alias, the
    tokens reversed and a one-letter typo (candidates only)."""
    key, name = entity["key"], entity["name"]
    out: list[Case] = [(value.upper() if kind != "phone" else value, [], key) for kind, value in entity["ids"]
                       if kind in ("email", "handle", "url", "phone")]
    out += [("someone", [(kind, value)], key) for kind, value in entity["ids"] if kind not in ("email", "handle", "url", "phone")]
    if name not in namesakes:
        out.append((name.lower(), [], key))
        out.append((_typo(name), [], key))
        if len(name.split()) > 1:
            out.append((", ".join(reversed(name.split())), [], key))
    out += [(alias, [], key) for alias in entity["aliases"]]
    return out


def cases() -> list[Case]:
    """Every case: :data:`HARD` and the :func:`variants` of every WORLD entity."""
    names = [e["name"] for e in WORLD]
    namesakes = {n for n in names if names.count(n) > 1}
    out = list(HARD)
    for e in WORLD:
        out += variants(e, namesakes)
    return out
