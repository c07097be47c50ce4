"""Shared helpers for scripts/bench_peers.py: synthetic facts, the shared embedder, stats.

Everything here is deterministic (fixed seed, blake2b hashing), so the parent process
and every per-system child process regenerate byte-identical data on their own instead
of shipping it over pipes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import hashlib
import random
import re
from dataclasses import dataclass

import numpy as np

N_TENANTS = 10
QUERY_TENANT = 0


def tenant_name(t: int) -> str:
    return f"tenant-{t:02d}"


# --------------------------------------------------------------------------- embedder
class _StandInHashEmbedder:
    """Stand-in with the interface of memfabric.adapters.embedders.HashEmbedder.

    Signed feature hashing of word unigrams + bigrams, L2-normalised float32.
    Only used while the real adapter is missing from the installed memfabric.
    """

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim
        self.id = f"bench-standin-hash-{dim}"

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            toks = re.findall(r"[a-z0-9]+", text.lower())
            for feat in toks + [a + " " + b for a, b in zip(toks, toks[1:])]:
                h = int.from_bytes(hashlib.blake2b(feat.encode(), digest_size=8).digest(), "little")
                out[i, h % self.dim] += 1.0 if h >> 63 else -1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)


def shared_embedder(dim: int = 384):
    """The one embedder every system gets: memfabric's HashEmbedder, else the stand-in."""
    try:
        from memfabric.adapters.embedders import HashEmbedder
    except ImportError as exc:  # only a missing memfabric adapter falls back, not a missing dep
        if not (exc.name or "").startswith("memfabric"):
            raise
        return _StandInHashEmbedder(dim)
    return HashEmbedder(dim=dim)


def bench_embedder(name: str = "hash"):
    """The embedder of ``--embedder``: ``hash`` (:func:`shared_embedder`, 384-d) or a
    memfabric embedder name (``wordllama``, ``minilm``: a real model, its own dimension)."""
    if name == "hash":
        return shared_embedder(384)
    from memfabric.adapters.embedders import embedder_from_name

    return embedder_from_name(name)


def _status_mb(field: str) -> float | None:
    """``field`` (``VmRSS``, ``VmHWM``) of /proc/self/status in MB; ``None`` without /proc."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def rss_mb() -> float:
    """Current RSS of this process (VmRSS), MB; 0.0 where /proc is missing."""
    return _status_mb("VmRSS") or 0.0


# --------------------------------------------------------------------------- data
FIRST = ("Alice Bruno Chen Dara Elif Farid Greta Hugo Ines Jonas Kira Luca Maya Nadia Omar Priya "
         "Quinn Rosa Sven Tariq Uma Viktor Wen Ximena Yusuf Zoe Amara Bjorn Carmen Diego Esme Felix "
         "Gita Hana Ivan Jada Kofi Lena Mateo Noor Olga Pavel Rania Soren Talia Ulrich Vera Wanjiru "
         "Yara Zane Aiko Boris Celine Dmitri Eun Fatima Goran Hiro Isla Jorge").split()
LAST = ("Smith Garcia Okafor Novak Tanaka Haddad Rossi Silva Kowalski Nguyen Muller Dubois Ahmed "
        "Larsen Petrov Moreau Yilmaz Costa Fischer Kim Singh Lopez Wagner Ivanova Sato Mensah Berg "
        "Romano Cohen Patel Jensen Alvarez Meyer Park Nakamura Hughes Duarte Volkov Eriksen Bauer").split()
CITY = ("Lisbon Nairobi Osaka Denver Krakow Montreal Lyon Bogota Hanoi Tallinn Porto Accra Seoul "
        "Austin Valencia Dublin Leipzig Mumbai Quito Bergen Adelaide Tbilisi Cork Kyoto Malmo Turin "
        "Ghent Perth Durban Halifax Busan Bilbao Graz Tucson Split Sapporo Lagos Lima Oslo Cusco").split()
JOB = ("nurse|data engineer|pastry chef|civil engineer|librarian|pilot|dentist|carpenter|translator|"
       "radiologist|teacher|product manager|electrician|architect|journalist|pharmacist|farmer|"
       "game designer|firefighter|biologist|accountant|barista|lawyer|geologist|paramedic|"
       "sound engineer|tailor|veterinarian|urban planner|welder").split("|")
FOOD = ("ramen|paella|dumplings|lasagna|falafel|tacos|pho|risotto|biryani|pierogi|sushi|goulash|"
        "moussaka|ceviche|jollof rice|bibimbap|shakshuka|empanadas|croissants|laksa").split("|")
DRINK = "green tea|espresso|oat milk latte|sparkling water|rooibos|hot chocolate|kombucha|matcha".split("|")
ALLERGEN = "peanuts|shellfish|penicillin|pollen|cats|gluten|lactose|latex|bee stings|sesame".split("|")
PET = "dog|cat|parrot|rabbit|tortoise|hamster|goldfish|ferret".split("|")
PETNAME = "Biscuit Pepper Mochi Luna Ziggy Olive Nacho Pixel Juniper Waffles Rocket Clover".split()
HOBBY = ("bouldering|chess|pottery|birdwatching|salsa dancing|sailing|knitting|trail running|"
         "astrophotography|woodworking|calligraphy|beekeeping|fencing|origami").split("|")
LANG = "Portuguese Japanese Swahili Polish Korean Turkish Dutch Hindi Greek Finnish Arabic Czech".split()
PROJECT = "Atlas Borealis Cobalt Delta Ember Falcon Granite Helix Ion Juno Kestrel Lumen".split()
MONTH = "January February March April May June July August September October November December".split()
DAY = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()

# kind -> (stored-fact template, [paraphrased query templates]); {p} is a full person name.
KINDS = {
    "job": ("{p} works as a {job} in {city}.",
            ["What does {p} do for a living in {city}?", "{p}'s job as {job}", "occupation of {p} in {city}"]),
    "food": ("{p}'s favourite dish is {food}, ideally from a place in {city}.",
             ["Which dish does {p} like most?", "favourite food of {p} is {food}", "{p} loves eating {food}"]),
    "drink": ("In the {part} {p} usually drinks {drink} instead of {drink2}.",
              ["What does {p} drink in the {part}?", "{p} prefers {drink} over {drink2}"]),
    "allergy": ("{p} is allergic to {allergen} and carries medication.",
                ["Is {p} allergic to anything?", "{p} allergy {allergen}", "what is {p} allergic to"]),
    "pet": ("{p} has a {pet} called {petname}.",
            ["What is the name of {p}'s {pet}?", "{p} owns a {pet}", "pet of {p} named {petname}"]),
    "moved": ("{p} moved to {city} in {year} for a new job.",
              ["When did {p} relocate to {city}?", "{p} lives in {city} since {year}"]),
    "hobby": ("On weekends {p} goes {hobby} with friends from {city}.",
              ["What hobby does {p} have?", "{p} enjoys {hobby} on weekends"]),
    "lang": ("{p} is learning {lang} and practises every {day}.",
             ["Which language is {p} studying?", "{p} learns {lang} on {day}s"]),
    "deadline": ("The {project} project owned by {p} is due on {day}, {month} {dom}.",
                 ["When is the {project} project deadline?", "due date of {p}'s {project} project"]),
    "meeting": ("{p} has a standing meeting about {project} every {day} at {hour}:00.",
                ["When does {p} meet about {project}?", "{p} {project} meeting on {day}"]),
}


@dataclass(frozen=True)
class Dataset:
    texts: list[str]          # N unique facts
    tenants: list[int]        # owner tenant of each fact (row i belongs to tenants[i])
    queries: list[str]        # paraphrases of facts of QUERY_TENANT
    query_src: list[int]      # row index each query paraphrases


def _slots(rng: random.Random) -> dict:
    d1, d2 = rng.sample(DRINK, 2)
    return dict(p=f"{rng.choice(FIRST)} {rng.choice(LAST)}", job=rng.choice(JOB), city=rng.choice(CITY),
                food=rng.choice(FOOD), drink=d1, drink2=d2, part=rng.choice(["morning", "afternoon", "evening"]),
                allergen=rng.choice(ALLERGEN), pet=rng.choice(PET), petname=rng.choice(PETNAME),
                year=rng.randint(1995, 2024), hobby=rng.choice(HOBBY), lang=rng.choice(LANG),
                day=rng.choice(DAY), project=rng.choice(PROJECT), month=rng.choice(MONTH),
                dom=rng.randint(1, 28), hour=rng.randint(7, 18))


def tenant_of(i: int, n_tenants: int = N_TENANTS) -> int:
    """Owner of row ``i``: tenant 0 owns every 10th row (10% of the rows, the largest
    tenant, the one queried); with 10 tenants each owns a tenth (row ``i`` -> ``i % 10``),
    with more the other 90% are dealt round-robin to tenants 1..n_tenants-1."""
    if n_tenants <= N_TENANTS:
        return i % n_tenants
    if i % 10 == 0:
        return 0
    return 1 + (i - i // 10 - 1) % (n_tenants - 1)


def make_dataset(n: int, n_queries: int = 200, seed: int = 20240611,
                 n_tenants: int = N_TENANTS) -> Dataset:
    """N unique short facts owned by ``n_tenants`` (:func:`tenant_of`: tenant 0 owns 10%
    of the rows); queries paraphrase tenant 0's facts."""
    rng = random.Random(seed)
    kinds = list(KINDS)
    texts, slots, seen = [], [], set()
    while len(texts) < n:
        kind, s = rng.choice(kinds), _slots(rng)
        text = KINDS[kind][0].format(**s)
        if text in seen:
            continue
        seen.add(text)
        texts.append(text)
        slots.append((kind, s))
    tenants = [tenant_of(i, n_tenants) for i in range(n)]
    own = [i for i in range(n) if tenants[i] == QUERY_TENANT]
    src = [own[i % len(own)] for i in rng.sample(range(max(len(own), n_queries)), n_queries)]
    queries = []
    for i in src:
        kind, s = slots[i]
        queries.append(rng.choice(KINDS[kind][1]).format(**s))
    return Dataset(texts, tenants, queries, src)


# --------------------------------------------------------------------------- stats
def pct(values: list[float], p: float) -> float | None:
    return float(np.percentile(np.asarray(values), p)) if values else None


def peak_rss_mb() -> float:
    """Peak RSS of *this* process image (VmHWM is reset by exec, unlike ru_maxrss)."""
    peak = _status_mb("VmHWM")
    if peak is not None:
        return peak
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def recall_at_k(hits: list[int], query_vec: np.ndarray, vecs: np.ndarray, rows: np.ndarray, k: int = 10) -> float:
    """Share of the exact top-k (tie-tolerant: any row scoring >= the k-th best counts)."""
    sims = vecs @ query_vec
    kth = np.sort(sims)[-min(k, len(sims))]
    score = {int(r): float(s) for r, s in zip(rows, sims)}
    good = {h for h in hits if h in score and score[h] >= kth - 1e-5}
    return len(good) / min(k, len(rows))


def run_header() -> dict:
    """What every figure is reported with: the UTC date, the machine's load average
    (1, 5, 15 min; ``os.getloadavg``) and the command line that made it."""
    import os
    import shlex
    import sys
    from datetime import datetime, timezone

    return {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "load_avg": [round(x, 2) for x in os.getloadavg()],
            "command": "python " + " ".join(shlex.quote(a) for a in sys.argv)}


@contextmanager
def kept_database(dsn: str, name: str) -> Iterator[str]:
    """The database ``name`` on the server at ``dsn``, created when absent and never
    dropped (``--keep-db``: a second run of a benchmark reuses what the first loaded
    instead of loading 100,000 notes again); yields its DSN."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    with psycopg.connect(dsn, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield make_conninfo(dsn, dbname=name)


@contextmanager
def scratch_database(dsn: str | None, prefix: str) -> Iterator[str]:
    """A fresh database (dropped afterwards) on the server at ``dsn``, or on a
    throwaway embedded PostgreSQL when ``dsn`` is None; yields its DSN."""
    import tempfile
    import uuid
    from pathlib import Path

    import psycopg
    from psycopg.conninfo import make_conninfo

    from memfabric.adapters.postgres.embedded import EmbeddedPostgres

    tmp = None if dsn else tempfile.TemporaryDirectory(prefix=prefix + "-")
    server = EmbeddedPostgres(Path(tmp.name) / "pg") if tmp else None
    base = server.dsn if server else str(dsn)
    name = prefix.replace("-", "_") + "_" + uuid.uuid4().hex[:8]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield make_conninfo(base, dbname=name)
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        if server is not None:
            server.close()
        if tmp is not None:
            tmp.cleanup()
