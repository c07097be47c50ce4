"""DyKnow temporal evaluation: does memfabric recall the value that is valid *now*,
and the value that was valid *then*?

Run (from the repository root)::

    python scripts/eval_temporal.py                     # explicit windows + incremental mode
    python scripts/eval_temporal.py --out /tmp/dyknow.json --mode hybrid
    python scripts/eval_temporal.py --limit 5           # quick smoke run

Data: ``../shared/data/dyknow-dev/dyknow-dev.json`` relative to the repository
(override with ``--data``).  A *fact* is ``category/entity`` or
``category/entity/relation``; each of its answers ``"<value> |S: <start> |E: <end>"``
becomes one note ``"<generic question> <value>"`` (e.g. "The current team of
Cristiano Ronaldo is Al-Nassr") and the query is the fact's ``generic`` question.

Parsing and window decisions (all windows are half-open ``[valid_from, valid_to)``, UTC)
-------------------------------------------------------------------------------------
* Wikidata times ``+YYYY-MM-DDT..Z``: ``-00-00`` = year precision, ``-MM-00`` =
  month precision; the missing parts become 1 (``+2023-01-00`` -> 2023-01-01).
* ``|E:`` closes the window at E.
* ``|P:`` (point in time) with a start: the statement was *observed* at P, so the
  window is ``[S, P)`` -- closed at P.  This matches the data set's own convention that
  a fact has one open-ended value (the P answer is not the open one).  ``|P:``
  without a start: ``S = E = P`` and the zero-length rule below applies.
* An answer with an end but no start cannot be placed: skipped and counted.
* Zero-length / inverted windows (E <= S): when S or E has year (month) precision,
  the window becomes ``[S, S + 1 year)`` (``+ 1 month``) -- the coarsest precision of
  the two; when both have day precision the answer is skipped and counted.
* Open-ended answers (no E, no P) are the *current* values.  The README says each
  fact has exactly one, but a few facts (club + national team) have two: any open
  value ranking first counts as current.

Metrics
-------
* ``current@1``: recall with no ``as_of``; the top hit's value is an open-ended value.
* ``asof@1``: for every closed window, ``as_of`` = the window's midpoint; the top hit's
  value must be one whose (parsed) window contains that instant.  Windows overlap in
  the data (club and national team, loan spells), so *any* containing value counts.
  ``asof@1_own`` (extra) requires the window's own value.
* ``stale_rate``: fraction of facts where, with no ``as_of``, the top hit is a
  closed (no longer valid) value that is not also an open value.

Two ways of loading the facts, each fact in its own scope (``resource_id`` = fact key):

* **explicit**: every answer with its full window (``valid_from``/``valid_to``),
  consolidation ``--consolidate`` (default off: the windows are given, there is
  nothing for consolidation to infer).
* **incremental**: answers remembered one by one in start order with ``valid_from``
  only and ``subject`` = fact key, consolidation on; the fabric's supersession has to
  close the windows itself.  Scored against the same (data) windows.
"""

from __future__ import annotations

import argparse
import re
import sys
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _eval_common as common  # noqa: E402

RECALL_K = 5

WD_TIME_RE = re.compile(r"^([+-])(\d{1,})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})Z$")
PRECISION_ORDER = {"day": 0, "month": 1, "year": 2}


@dataclass(frozen=True)
class WdTime:
    when: datetime
    precision: str  # year | month | day


def parse_wd_time(s: str) -> WdTime:
    m = WD_TIME_RE.match(s.strip())
    if not m:
        raise ValueError(f"bad Wikidata time {s!r}")
    sign, y, mo, d, hh, mi, ss = m.groups()
    if sign == "-":
        raise ValueError(f"BCE time not supported: {s!r}")
    year, month, day = int(y), int(mo), int(d)
    precision = "year" if month == 0 else "month" if day == 0 else "day"
    when = datetime(year, month or 1, day or 1, int(hh), int(mi), int(ss), tzinfo=timezone.utc)
    return WdTime(when, precision)


def add_unit(dt: datetime, precision: str) -> datetime:
    if precision == "year":
        return dt.replace(year=dt.year + 1)
    if precision == "month":
        return dt.replace(year=dt.year + dt.month // 12, month=dt.month % 12 + 1)
    return dt + timedelta(days=1)


@dataclass
class Answer:
    value: str
    raw: str
    start: datetime
    end: datetime | None  # None = open-ended (current)
    note: str = ""  # how the window was derived, when not plain S/E

    @property
    def closed(self) -> bool:
        return self.end is not None

    def contains(self, t: datetime) -> bool:
        return self.start <= t and (self.end is None or t < self.end)


@dataclass
class Fact:
    key: str
    prompt: str
    answers: list[Answer]
    index: int = 0

    @property
    def resource_id(self) -> str:
        """A scope id (``[A-Za-z0-9._:@-]``, <= 128 chars) unique to this fact."""
        ascii_key = unicodedata.normalize("NFKD", self.key).encode("ascii", "ignore").decode()
        slug = re.sub(r"[^A-Za-z0-9._:@-]+", "_", ascii_key).strip("_")
        return f"f{self.index:03d}-{slug}"[:128]

    def content(self, value: str) -> str:
        return f"{self.prompt} {value}"

    @property
    def open_values(self) -> set[str]:
        return {a.value for a in self.answers if not a.closed}

    @property
    def closed_values(self) -> set[str]:
        return {a.value for a in self.answers if a.closed}


@dataclass
class ParseStats:
    answers: int = 0
    used: int = 0
    point_in_time: int = 0
    zero_length_extended: int = 0
    skipped: Counter = field(default_factory=Counter)
    facts_multi_open: list[str] = field(default_factory=list)
    facts_no_open: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "answers": self.answers,
            "used": self.used,
            "point_in_time": self.point_in_time,
            "zero_length_extended": self.zero_length_extended,
            "skipped": dict(self.skipped),
            "facts_multi_open": self.facts_multi_open,
            "facts_no_open": self.facts_no_open,
        }


ANSWER_TAG_RE = re.compile(r"\|\s*([A-Z])\s*:\s*([^|]+)")


def parse_answer(raw: str, stats: ParseStats) -> Answer | None:
    stats.answers += 1
    value = raw.split("|", 1)[0].strip()
    tags = {k: v.strip() for k, v in ANSWER_TAG_RE.findall(raw)}
    try:
        times = {k: parse_wd_time(v) for k, v in tags.items() if k in "SEP"}
    except ValueError:
        stats.skipped["bad_time"] += 1
        return None
    s, e, p = times.get("S"), times.get("E"), times.get("P")
    note = ""
    if s is None and p is not None:
        s, e, note = p, p, "point"
        stats.point_in_time += 1
    elif p is not None and e is None:
        e, note = p, "closed at P"
        stats.point_in_time += 1
    if s is None:
        stats.skipped["no_start"] += 1
        return None
    end: datetime | None = e.when if e is not None else None
    if e is not None and e.when <= s.when:
        coarse = max((s.precision, e.precision), key=PRECISION_ORDER.__getitem__)
        if coarse == "day":
            stats.skipped["zero_length_day_precision"] += 1
            return None
        end = add_unit(s.when, coarse)
        note = (note + "; " if note else "") + f"zero-length -> +1 {coarse}"
        stats.zero_length_extended += 1
    stats.used += 1
    return Answer(value=value, raw=raw, start=s.when, end=end, note=note)


def iter_raw_facts(data: dict[str, Any]):
    for category, entities in data.items():
        for entity, body in entities.items():
            if "questions" in body:
                yield f"{category}/{entity}", body
            else:
                for relation, rbody in body.items():
                    yield f"{category}/{entity}/{relation}", rbody


def load_facts(path: Path, limit: int | None, stats: ParseStats) -> list[Fact]:
    data = common.load_json(path)
    facts: list[Fact] = []
    for key, body in iter_raw_facts(data):
        answers = [a for raw in body["answers"] if (a := parse_answer(raw, stats)) is not None]
        fact = Fact(key=key, prompt=body["questions"]["generic"].strip(), answers=answers, index=len(facts))
        if len(fact.open_values) > 1:
            stats.facts_multi_open.append(key)
        if not fact.open_values:
            stats.facts_no_open.append(key)
        facts.append(fact)
        if limit is not None and len(facts) >= limit:
            break
    return facts


def midpoint(a: Answer) -> datetime:
    assert a.end is not None
    return a.start + (a.end - a.start) / 2


# --------------------------------------------------------------------------- fabric


@dataclass
class Scored:
    current: int = 0
    stale: int = 0
    no_hit: int = 0
    n_facts: int = 0
    asof_any: int = 0
    asof_own: int = 0
    n_windows: int = 0
    failures: list[str] = field(default_factory=list)
    diagnostics: dict[str, Any] = field(default_factory=dict)

    def metrics(self) -> dict[str, Any]:
        return {
            "current@1": self.current / self.n_facts if self.n_facts else 0.0,
            "asof@1": self.asof_any / self.n_windows if self.n_windows else 0.0,
            "stale_rate": self.stale / self.n_facts if self.n_facts else 0.0,
            "n_facts": self.n_facts,
        }

    def extra(self) -> dict[str, Any]:
        return {
            "asof@1_own": self.asof_own / self.n_windows if self.n_windows else 0.0,
            "n_windows": self.n_windows,
            "no_hit": self.no_hit,
            **self.diagnostics,
        }


def top_value(res: Any, id_value: dict[str, str], content_value: dict[str, str]) -> str | None:
    hits = list(res.hits)
    if not hits:
        return None
    h = hits[0]
    nid = common.note_id(h)
    if nid in id_value:
        return id_value[nid]
    return content_value.get(str(common.attr(h, "content", "")).strip())


def score_fact(
    notes: Any, fact: Fact, id_value: dict[str, str], mode: str, out: Scored, label: str
) -> None:
    content_value = {fact.content(a.value): a.value for a in fact.answers}
    out.n_facts += 1
    res = notes.recall(fact.prompt, top_k=RECALL_K, mode=mode)
    top = top_value(res, id_value, content_value)
    if top is None:
        out.no_hit += 1
    elif top in fact.open_values:
        out.current += 1
    elif top in fact.closed_values:
        out.stale += 1
    if top not in fact.open_values:
        out.failures.append(f"[{label}] {fact.key}: now -> {top!r}, expected {sorted(fact.open_values)}")
    for a in fact.answers:
        if not a.closed:
            continue
        t = midpoint(a)
        out.n_windows += 1
        res = notes.recall(fact.prompt, top_k=RECALL_K, as_of=t, mode=mode)
        top = top_value(res, id_value, content_value)
        valid = {b.value for b in fact.answers if b.contains(t)}
        if top in valid:
            out.asof_any += 1
        else:
            out.failures.append(
                f"[{label}] {fact.key}: as_of {t.date()} -> {top!r}, expected one of {sorted(valid)}"
            )
        if top == a.value:
            out.asof_own += 1


def run_explicit(facts: Sequence[Fact], args: argparse.Namespace, data_dir: str | None) -> Scored:
    out = Scored()
    tenant = common.new_tenant("dyknow-explicit")
    folded = superseded = 0
    with common.fabric_session(
        dsn=args.dsn, embedder_name=args.embedder, consolidate=args.consolidate == "on", data_dir=data_dir
    ) as fabric:
        for fact in facts:
            notes = fabric.scope(tenant, resource_id=fact.resource_id)
            items = [
                dict(
                    kind="fact",
                    content=fact.content(a.value),
                    t_ref=a.start,
                    valid_from=a.start,
                    valid_to=a.end,
                    source_entry_ids=[f"{fact.key}#{i}"],
                )
                for i, a in enumerate(fact.answers)
            ]
            returned: list[Any] = common.remember_all(notes, items)
            id_value: dict[str, str] = {}
            for a, n in zip(fact.answers, returned):
                nid = common.note_id(n)
                if nid in id_value:
                    folded += 1
                id_value.setdefault(nid, a.value)
                if common.attr(n, "supersedes"):
                    superseded += 1
            score_fact(notes, fact, id_value, args.mode, out, "explicit")
    out.diagnostics = {
        "folded": folded,
        "supersessions": superseded,
    }
    return out


def run_incremental(facts: Sequence[Fact], args: argparse.Namespace, data_dir: str | None) -> Scored:
    """Values arrive in start order with no end; supersession must close the windows."""
    out = Scored()
    tenant = common.new_tenant("dyknow-incremental")
    folded = supersessions = expected_closures = 0
    closed_at_successor = closed_elsewhere = never_closed = emptied = 0
    examples: list[str] = []
    with common.fabric_session(
        dsn=args.dsn, embedder_name=args.embedder, consolidate=True, data_dir=data_dir
    ) as fabric:
        for fact in facts:
            notes = fabric.scope(tenant, resource_id=fact.resource_id)
            order = sorted(range(len(fact.answers)), key=lambda i: (fact.answers[i].start, i))
            id_value: dict[str, str] = {}
            id_start: dict[str, datetime] = {}
            successor_start: dict[str, datetime] = {}
            prev_id: str | None = None
            for i in order:
                a = fact.answers[i]
                n = notes.remember(
                    kind="fact",
                    content=fact.content(a.value),
                    t_ref=a.start,
                    valid_from=a.start,
                    valid_to=None,
                    source_entry_ids=[f"{fact.key}#{i}"],
                    subject=fact.key,
                )
                nid = common.note_id(n)
                if nid in id_value:
                    folded += 1
                    continue
                id_value[nid] = a.value
                id_start[nid] = a.start
                if prev_id is not None:
                    expected_closures += 1
                    successor_start[prev_id] = a.start
                sup = common.attr(n, "supersedes")
                if sup:
                    supersessions += 1
                prev_id = nid
            # what windows did the fabric end up with?  Read them back from hits.
            seen: dict[str, Any] = {}
            probe_times = [None] + [a.start + timedelta(seconds=1) for a in fact.answers]
            for t in probe_times:
                res = notes.recall(fact.prompt, top_k=50, as_of=t, mode=args.mode)
                for h in res.hits:
                    seen.setdefault(common.note_id(h), h)
            for nid, succ in successor_start.items():
                if succ <= id_start[nid]:
                    # the successor starts when (or before) this value does: supersession
                    # can only leave an empty window, so the value is invisible at every as_of
                    emptied += 1
                    continue
                h = seen.get(nid)
                vt = common.attr(h, "valid_to") if h is not None else None
                if vt is None:
                    never_closed += 1
                elif vt == succ:
                    closed_at_successor += 1
                else:
                    closed_elsewhere += 1
                    if len(examples) < 5:
                        examples.append(
                            f"{fact.key}: {id_value[nid]!r} closed at {vt}, successor starts {succ}"
                        )
            score_fact(notes, fact, id_value, args.mode, out, "incremental")
    out.diagnostics = {
        "folded": folded,
        "supersessions": supersessions,
        "expected_closures": expected_closures,
        "closed_at_successor_start": closed_at_successor,
        "closed_elsewhere": closed_elsewhere,
        "emptied_same_start": emptied,
        "not_closed_or_not_seen": never_closed,
        "closure_examples": examples,
    }
    return out


def run_shared(facts: Sequence[Fact], args: argparse.Namespace, data_dir: str | None) -> Scored:
    """Issue 12: every fact in ONE scope, every value remembered in global start order
    with the defaults (consolidation on, no ``subject``, no ``valid_to``): the inferred
    subject key must close the right windows and never another fact's."""
    out = Scored()
    tenant = common.new_tenant("dyknow-shared")
    stream = sorted(((a.start, fi, i) for fi, f in enumerate(facts) for i, a in enumerate(f.answers)),
                    key=lambda x: (x[0], x[1], x[2]))
    owner: dict[str, tuple[int, str]] = {}
    supersessions = false_sup = folded = 0
    examples: list[str] = []
    with common.fabric_session(
        dsn=args.dsn, embedder_name=args.embedder, consolidate=True, data_dir=data_dir
    ) as fabric:
        notes = fabric.scope(tenant)
        order: dict[int, list[str]] = {}
        for start, fi, i in stream:
            fact, a = facts[fi], facts[fi].answers[i]
            n = notes.remember(kind="fact", content=fact.content(a.value), t_ref=start, valid_from=start)
            nid = common.note_id(n)
            if nid in owner:
                folded += 1
                if owner[nid][0] != fi and len(examples) < 10:
                    examples.append(f"fold across facts: {fact.content(a.value)!r}")
                continue
            owner[nid] = (fi, a.value)
            order.setdefault(fi, []).append(nid)
            sup = common.attr(n, "supersedes")
            if sup:
                supersessions += 1
                if owner.get(sup, (fi,))[0] != fi:
                    false_sup += 1
                    if len(examples) < 10:
                        examples.append(f"false: {fact.content(a.value)!r} retired {facts[owner[sup][0]].key!r}")
        missed = expected = 0
        for fi, fact in enumerate(facts):
            ids = order.get(fi, [])
            for prev in ids[:-1]:
                expected += 1
                if notes.get(prev).superseded_by is None:
                    missed += 1
            id_value = {nid: v for nid, (f2, v) in owner.items() if f2 == fi}
            score_fact(notes, fact, id_value, args.mode, out, "shared")
    out.diagnostics = {
        "values": len(stream), "folded": folded, "supersessions": supersessions,
        "false_supersessions": false_sup,
        "false_supersession_rate": false_sup / supersessions if supersessions else 0.0,
        "expected_closures": expected, "missed_closures": missed, "examples": examples,
    }
    return out


# --------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--data",
        type=Path,
        default=common.default_data_path("dyknow-dev", "dyknow-dev.json"),
        help="DyKnow JSON (default: <repo>/../shared/data/dyknow-dev/dyknow-dev.json)",
    )
    p.add_argument("--dsn", default=None, help="PostgreSQL DSN (default: embedded PostgreSQL in a temp dir)")
    p.add_argument("--data-dir", default=None, help="keep the embedded database here instead of a temp dir")
    p.add_argument("--embedder", choices=common.EMBEDDERS, default="hash",
                   help="hash (default), wordllama (extra 'wordllama') or minilm (extra 'minilm')")
    p.add_argument("--mode", choices=("hybrid", "vector", "lexical"), default="hybrid")
    p.add_argument(
        "--consolidate", choices=("on", "off"), default="off", help="consolidation for the explicit-window run"
    )
    p.add_argument("--skip-incremental", action="store_true")
    p.add_argument("--skip-shared", action="store_true", help="skip the shared-scope stream (issue 12)")
    p.add_argument("--limit", type=int, default=None, help="only the first N facts")
    p.add_argument("--show-failures", type=int, default=10, help="print up to N failed queries per run")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    stats = ParseStats()
    facts = load_facts(args.data, args.limit, stats)
    n_closed = sum(1 for f in facts for a in f.answers if a.closed)
    print(
        f"DyKnow: {len(facts)} facts, {stats.answers} answers, {stats.used} used "
        f"({n_closed} closed windows), skipped {dict(stats.skipped)}, "
        f"{stats.zero_length_extended} zero-length window(s) extended, "
        f"{stats.point_in_time} point-in-time answer(s), "
        f"{len(stats.facts_multi_open)} fact(s) with several open values"
    )

    with common.scratch_dir(args.data_dir) as data_dir:
        dd = None if args.dsn else data_dir
        timer = common.Timer()
        explicit = run_explicit(facts, args, dd)
        print(f"explicit run: {timer():.1f}s")
        incremental = None
        if not args.skip_incremental:
            timer = common.Timer()
            incremental = run_incremental(facts, args, dd)
            print(f"incremental run: {timer():.1f}s")
        shared = None
        if not args.skip_shared:
            timer = common.Timer()
            shared = run_shared(facts, args, dd)
            print(f"shared-scope run: {timer():.1f}s")

    rows = []
    for label, s in (("explicit", explicit), ("incremental", incremental), ("shared", shared)):
        if s is None:
            continue
        m, x = s.metrics(), s.extra()
        rows.append([label, m["current@1"], m["asof@1"], x["asof@1_own"], m["stale_rate"], m["n_facts"], x["n_windows"]])
    common.print_table(
        f"DyKnow (embedder={args.embedder}, mode={args.mode}, explicit consolidate={args.consolidate})",
        ["run", "current@1", "asof@1", "asof@1_own", "stale_rate", "n_facts", "n_windows"],
        rows,
    )
    for label, s in (("explicit", explicit), ("incremental", incremental), ("shared", shared)):
        if s is None:
            continue
        print(f"{label} diagnostics: {s.diagnostics}")
        for line in s.failures[: args.show_failures]:
            print("  " + line)
        if len(s.failures) > args.show_failures:
            print(f"  ... {len(s.failures) - args.show_failures} more")

    payload: dict[str, Any] = dict(explicit.metrics())
    if incremental is not None:
        payload["incremental"] = incremental.metrics()
    if shared is not None:
        payload["shared"] = {**shared.metrics(), **shared.extra()}
    payload["meta"] = {
        "data": str(args.data),
        "embedder": args.embedder,
        "mode": args.mode,
        "explicit_consolidate": args.consolidate,
        "parse": stats.as_dict(),
        "explicit": explicit.extra(),
        "incremental": incremental.extra() if incremental is not None else None,
    }
    common.write_json(args.out, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
