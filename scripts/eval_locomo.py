"""LoCoMo retrieval evaluation: memfabric recall vs a BM25 baseline.

Run (from the repository root)::

    python scripts/eval_locomo.py                       # both consolidation modes, hybrid recall
    python scripts/eval_locomo.py --mode all --out /tmp/locomo.json
    python scripts/eval_locomo.py --limit 1 --consolidate off   # quick smoke run
    python scripts/eval_locomo.py --bonus-weights 0.1   # also the ranking bonus before issue 29, same notes

Data: ``../shared/data/locomo-dev/locomo-dev.json`` relative to the repository
(override with ``--data``).  The data set is CC BY-NC 4.0: it is read in place and
never copied into the project.

What is measured
----------------
Every dialog turn becomes one ``fact`` note ``"<speaker>: <text>"`` (plus
``" [image: <blip_caption>]"`` when the turn shares an image), with
``t_ref = valid_from =`` the session's date (UTC) and ``source_entry_ids=[dia_id]``.
Each conversation is ingested into its own scope (one tenant per run, one
``resource_id`` per conversation) with ``remember_many`` in turn order.  Every
question is then recalled (``top_k=25``, no ``as_of``) and scored against its
evidence dia_ids: a hit covers evidence ``e`` when ``e`` is among the hit's
``source_entry_ids`` (a folded note can carry several).

* ``frac@k`` = |evidence covered by the top-k hits| / |evidence|
* ``any@k``  = 1 when at least one evidence id is covered by the top-k hits

for k in 1, 5, 10, 25, per LoCoMo category ("1" multi-hop, "2" temporal,
"3" open-domain, "4" single-hop, "5" adversarial) and pooled over 1-4 ("1-4").

Evidence ids are normalised: a string is split on ``;``/``,``/whitespace,
each piece is read as ``D<session>:<turn>`` (tolerating spaces, a stray colon
and leading zeros), and ids that are not turns of that conversation are
dropped.  Questions left with no valid evidence are skipped and counted.

The BM25 baseline (``rank_bm25.BM25Okapi``) indexes the very same turn texts,
one document per turn, tokenised by lowercasing, ``[a-z0-9]+`` and removing
the same English stop-word list from documents and queries; ties keep turn
order.

With ``--consolidate on`` (or ``both``) the script also reports the
*hidden-evidence* effect: evidence turns whose note was folded into another
turn's note or superseded by a later note, and the scores of the questions
that depend on them, consolidation on vs off.  ``--threshold`` lowers the
supersession cosine threshold to show the effect (with the default HashEmbedder
no two LoCoMo turns reach the library's 0.85, so nothing is folded or superseded).

memfabric breaks score ties by ingestion time, then note id, and BM25 by turn order, so
two runs on the same data give the same figures (note ids are random, so a tie that
survives ingestion time can still flip; none did in our runs).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _eval_common as common  # noqa: E402

KS = (1, 5, 10, 25)
TOP_K = 25
CATEGORIES = ("1", "2", "3", "4", "5")
POOLED = "1-4"
CATEGORY_NAMES = {
    "1": "multi-hop",
    "2": "temporal",
    "3": "open-domain",
    "4": "single-hop",
    "5": "adversarial",
    POOLED: "pooled 1-4",
}
JSON_KEYS = ("frac@1", "frac@5", "frac@10", "frac@25", "any@10")

# NLTK's English stop-word list (179 words), applied to documents and queries alike.
STOPWORDS = frozenset(
    """i me my myself we our ours ourselves you you're you've you'll you'd your yours
    yourself yourselves he him his himself she she's her hers herself it it's its itself
    they them their theirs themselves what which who whom this that that'll these those am
    is are was were be been being have has had having do does did doing a an the and but if
    or because as until while of at by for with about against between into through during
    before after above below to from up down in out on off over under again further then
    once here there when where why how all any both each few more most other some such no
    nor not only own same so than too very s t can will just don don't should should've
    now d ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't hadn
    hadn't hasn hasn't haven haven't isn isn't ma mightn mightn't mustn mustn't needn
    needn't shan shan't shouldn shouldn't wasn wasn't weren weren't won won't wouldn
    wouldn't""".split()
)
# the tokenizer splits on apostrophes, so keep only the apostrophe-free forms
STOPWORDS = frozenset(w for w in STOPWORDS if "'" not in w)
TOKEN_RE = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    return [t for t in TOKEN_RE.findall(text.lower()) if t not in STOPWORDS]


# --------------------------------------------------------------------------- data


@dataclass
class Turn:
    dia_id: str
    speaker: str
    text: str
    content: str
    when: datetime
    session: int


@dataclass
class Question:
    question: str
    category: str
    evidence: list[str]
    raw_evidence: Any


@dataclass
class Conversation:
    sample_id: str
    turns: list[Turn]
    questions: list[Question]
    skipped: list[Question] = field(default_factory=list)


@dataclass
class EvidenceStats:
    raw_ids: int = 0  # evidence strings seen
    split_strings: int = 0  # strings holding more than one id
    normalised: int = 0  # ids rewritten by normalisation (spaces, zeros, stray colon)
    unparsable: int = 0  # pieces that are not dia_ids at all
    unknown: int = 0  # well-formed ids that are not turns of the conversation
    skipped_questions: int = 0
    skipped_by_category: Counter = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {
            "raw_ids": self.raw_ids,
            "split_strings": self.split_strings,
            "normalised": self.normalised,
            "unparsable": self.unparsable,
            "unknown_dropped": self.unknown,
            "skipped_questions": self.skipped_questions,
            "skipped_by_category": dict(sorted(self.skipped_by_category.items())),
        }


SESSION_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%I:%M%p on %d %B, %Y")


def parse_session_date(s: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` -> aware UTC datetime."""
    s = " ".join(s.split())
    for fmt in SESSION_DATE_FORMATS:
        try:
            return datetime.strptime(s, fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
    raise ValueError(f"unrecognised session date {s!r}")


DIA_RE = re.compile(r"^D\s*:?\s*(\d+)\s*:\s*(\d+)$", re.IGNORECASE)


def normalise_dia_id(piece: str) -> str | None:
    m = DIA_RE.match(piece.strip())
    if not m:
        return None
    return f"D{int(m.group(1))}:{int(m.group(2))}"


def parse_evidence(raw: Any, known: set[str], stats: EvidenceStats) -> list[str]:
    """Split, normalise and filter a question's evidence; keeps first-seen order."""
    if raw is None:
        return []
    if isinstance(raw, str):
        raw = [raw]
    out: list[str] = []
    for item in raw:
        if item is None:
            continue
        stats.raw_ids += 1
        text = str(item)
        # split on ; and , first; whitespace splits only where it separates two ids
        pieces = [p for p in re.split(r"[;,]", text) if p.strip()]
        expanded: list[str] = []
        for p in pieces:
            found = re.findall(r"D\s*:?\s*\d+\s*:\s*\d+", p, re.IGNORECASE)
            if found:
                expanded.extend(found)
                leftover = re.sub(r"D\s*:?\s*\d+\s*:\s*\d+", " ", p, flags=re.IGNORECASE)
                stats.unparsable += len(leftover.split())
            else:
                stats.unparsable += len(p.split()) or 1
        if len(expanded) > 1:
            stats.split_strings += 1
        for piece in expanded:
            norm = normalise_dia_id(piece)
            if norm is None:
                stats.unparsable += 1
                continue
            if norm != piece.strip():
                stats.normalised += 1
            if norm not in known:
                stats.unknown += 1
                continue
            if norm not in out:
                out.append(norm)
    return out


def turn_content(turn: dict[str, Any]) -> str:
    content = f"{turn['speaker']}: {turn['text']}"
    caption = turn.get("blip_caption")
    if caption:
        content += f" [image: {caption}]"
    return content


def load_conversations(path: Path, limit: int | None, stats: EvidenceStats) -> list[Conversation]:
    data = common.load_json(path)
    if limit is not None:
        data = data[:limit]
    convs: list[Conversation] = []
    for sample in data:
        conv = sample["conversation"]
        sessions = sorted(
            (int(m.group(1)), k)
            for k in conv
            if (m := re.fullmatch(r"session_(\d+)", k)) and isinstance(conv[k], list)
        )
        turns: list[Turn] = []
        for num, key in sessions:
            when = parse_session_date(conv[f"{key}_date_time"])
            for t in conv[key]:
                turns.append(
                    Turn(
                        dia_id=normalise_dia_id(t["dia_id"]) or t["dia_id"],
                        speaker=t["speaker"],
                        text=t["text"],
                        content=turn_content(t),
                        when=when,
                        session=num,
                    )
                )
        known = {t.dia_id for t in turns}
        c = Conversation(sample_id=sample["sample_id"], turns=turns, questions=[])
        for qa in sample["qa"]:
            cat = str(qa["category"])
            ev = parse_evidence(qa.get("evidence"), known, stats)
            q = Question(question=qa["question"], category=cat, evidence=ev, raw_evidence=qa.get("evidence"))
            if ev:
                c.questions.append(q)
            else:
                c.skipped.append(q)
                stats.skipped_questions += 1
                stats.skipped_by_category[cat] += 1
        convs.append(c)
    return convs


# --------------------------------------------------------------------------- scoring

Ranking = list[frozenset[str]]  # per rank, the dia_ids a hit covers


def score_question(ranking: Ranking, evidence: Sequence[str]) -> dict[str, float]:
    ev = set(evidence)
    out: dict[str, float] = {}
    for k in KS:
        covered: set[str] = set()
        for ids in ranking[:k]:
            covered |= ids
        hit = ev & covered
        out[f"frac@{k}"] = len(hit) / len(ev)
        out[f"any@{k}"] = 1.0 if hit else 0.0
    return out


def aggregate(per_question: Iterable[tuple[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    buckets: dict[str, list[dict[str, float]]] = defaultdict(list)
    for cat, s in per_question:
        buckets[cat].append(s)
        if cat in ("1", "2", "3", "4"):
            buckets[POOLED].append(s)
    out: dict[str, dict[str, float]] = {}
    for cat in (*CATEGORIES, POOLED):
        rows = buckets.get(cat, [])
        agg: dict[str, float] = {}
        for key in (*(f"frac@{k}" for k in KS), *(f"any@{k}" for k in KS)):
            agg[key] = sum(r[key] for r in rows) / len(rows) if rows else 0.0
        agg["n"] = len(rows)
        out[cat] = agg
    return out


def json_view(agg: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """The per-category dicts restricted to the agreed JSON keys."""
    return {cat: {**{k: round(v[k], 6) for k in JSON_KEYS}, "n": int(v["n"])} for cat, v in agg.items()}


# --------------------------------------------------------------------------- BM25


def run_bm25(convs: Sequence[Conversation]) -> dict[tuple[str, int], Ranking]:
    from rank_bm25 import BM25Okapi

    rankings: dict[tuple[str, int], Ranking] = {}
    for conv in convs:
        docs = [tokenize(t.content) for t in conv.turns]
        bm25 = BM25Okapi(docs)
        for qi, q in enumerate(conv.questions):
            scores = bm25.get_scores(tokenize(q.question))
            order = sorted(range(len(docs)), key=lambda i: (-scores[i], i))[:TOP_K]
            rankings[(conv.sample_id, qi)] = [frozenset([conv.turns[i].dia_id]) for i in order]
    return rankings


# --------------------------------------------------------------------------- fabric


@dataclass
class IngestInfo:
    turn_note: dict[str, str]  # dia_id -> id of the note that holds it after remember_many
    folded: set[str]  # dia_ids whose note is another (earlier) turn's note
    superseded_notes: set[str]  # note ids that a later note superseded
    supersede_pairs: list[tuple[str, str]]  # (old note id, new note id)
    returned_closed: int  # returned notes that already carry a valid_to


def _supersedes(note: Any) -> list[str]:
    sup = common.attr(note, "supersedes")
    if not sup:
        return []
    if isinstance(sup, (list, tuple, set, frozenset)):
        return [str(s) for s in sup]
    return [str(sup)]


def ingest(notes: Any, conv: Conversation) -> IngestInfo:
    items = [
        dict(
            kind="fact",
            content=t.content,
            t_ref=t.when,
            valid_from=t.when,
            valid_to=None,
            source_entry_ids=[t.dia_id],
        )
        for t in conv.turns
    ]
    returned = common.remember_all(notes, items)
    turn_note: dict[str, str] = {}
    first_turn_of_note: dict[str, str] = {}
    folded: set[str] = set()
    superseded: set[str] = set()
    pairs: list[tuple[str, str]] = []
    closed = 0
    for t, n in zip(conv.turns, returned):
        nid = common.note_id(n)
        turn_note[t.dia_id] = nid
        if nid in first_turn_of_note:
            folded.add(t.dia_id)
        else:
            first_turn_of_note[nid] = t.dia_id
        for old in _supersedes(n):
            superseded.add(old)
            pairs.append((old, nid))
        if common.attr(n, "valid_to") is not None:
            closed += 1
    return IngestInfo(turn_note, folded, superseded, pairs, closed)


@dataclass
class FabricRun:
    rankings: dict[str, dict[tuple[str, int], Ranking]]  # mode -> question -> ranking
    ingest: dict[str, IngestInfo]  # sample_id -> info
    hit_note_ids: dict[str, dict[tuple[str, int], list[str]]]
    ingest_seconds: float
    recall_seconds: dict[str, float]
    multi_source_hits: Counter


def split_mode(label: str) -> tuple[str, dict[str, float] | None]:
    """``"hybrid"`` → ``("hybrid", None)`` (the library's scoring); ``"hybrid@0.1"`` →
    ``("hybrid", {"recency_weight": 0.1, "importance_weight": 0.1})`` (``--bonus-weights``)."""
    base, _, weight = label.partition("@")
    if not weight:
        return base, None
    return base, {"recency_weight": float(weight), "importance_weight": float(weight)}


def run_fabric(
    convs: Sequence[Conversation],
    *,
    modes: Sequence[str],
    consolidate: bool,
    args: argparse.Namespace,
    data_dir: str | None,
) -> FabricRun:
    tenant = common.new_tenant(f"locomo-{'c' if consolidate else 'nc'}")
    rankings: dict[str, dict[tuple[str, int], Ranking]] = {m: {} for m in modes}
    hit_ids: dict[str, dict[tuple[str, int], list[str]]] = {m: {} for m in modes}
    infos: dict[str, IngestInfo] = {}
    multi = Counter()
    recall_s = {m: 0.0 for m in modes}
    ingest_s = 0.0
    with common.fabric_session(
        dsn=args.dsn,
        embedder_name=args.embedder,
        consolidate=consolidate,
        data_dir=data_dir,
        threshold=args.threshold,
    ) as fabric:
        for conv in convs:
            notes = fabric.scope(tenant, resource_id=conv.sample_id)
            timer = common.Timer()
            infos[conv.sample_id] = ingest(notes, conv)
            ingest_s += timer()
            for mode in modes:
                timer = common.Timer()
                base, scoring = split_mode(mode)
                for qi, q in enumerate(conv.questions):
                    res = notes.recall(q.question, top_k=TOP_K, mode=base, scoring=scoring)
                    hits = list(res.hits)[:TOP_K]
                    ranking = [frozenset(common.source_ids(h)) for h in hits]
                    rankings[mode][(conv.sample_id, qi)] = ranking
                    hit_ids[mode][(conv.sample_id, qi)] = [common.note_id(h) for h in hits]
                    multi[mode] += sum(1 for r in ranking if len(r) > 1)
                recall_s[mode] += timer()
    return FabricRun(rankings, infos, hit_ids, ingest_s, recall_s, multi)


def score_run(convs: Sequence[Conversation], ranking: dict[tuple[str, int], Ranking]):
    per_q = []
    for conv in convs:
        for qi, q in enumerate(conv.questions):
            per_q.append((q.category, score_question(ranking[(conv.sample_id, qi)], q.evidence)))
    return aggregate(per_q)


def hidden_evidence_report(
    convs: Sequence[Conversation],
    on: FabricRun,
    off: FabricRun | None,
    mode: str,
    bm25: dict[tuple[str, int], Ranking],
) -> dict[str, Any]:
    """Evidence turns that consolidation folded away or superseded, and their cost."""
    ev_turns: set[tuple[str, str]] = set()
    folded_ev: set[tuple[str, str]] = set()
    superseded_ev: set[tuple[str, str]] = set()
    total_folded = total_superseded_turns = 0
    superseded_note_in_hits = 0
    for conv in convs:
        info = on.ingest[conv.sample_id]
        total_folded += len(info.folded)
        sup_turns = {d for d, nid in info.turn_note.items() if nid in info.superseded_notes}
        total_superseded_turns += len(sup_turns)
        for q in conv.questions:
            for e in q.evidence:
                key = (conv.sample_id, e)
                ev_turns.add(key)
                if e in info.folded:
                    folded_ev.add(key)
                if e in sup_turns:
                    superseded_ev.add(key)
        for qi, _ in enumerate(conv.questions):
            superseded_note_in_hits += sum(
                1 for nid in on.hit_note_ids[mode][(conv.sample_id, qi)] if nid in info.superseded_notes
            )
    hidden = folded_ev | superseded_ev

    # questions that depend on a hidden evidence turn, scored on vs off
    affected: list[tuple[str, Conversation, int]] = []
    for conv in convs:
        for qi, q in enumerate(conv.questions):
            if any((conv.sample_id, e) in hidden for e in q.evidence):
                affected.append((q.category, conv, qi))

    def subset_scores(ranking: dict[tuple[str, int], Ranking]) -> dict[str, float]:
        rows = [
            score_question(ranking[(c.sample_id, qi)], c.questions[qi].evidence)
            for _, c, qi in affected
        ]
        if not rows:
            return {}
        return {k: sum(r[k] for r in rows) / len(rows) for k in ("frac@10", "any@10", "frac@25")}

    # how many of the hidden evidence turns still surface (through their carrier note)
    surfaced = 0
    for conv in convs:
        for qi, q in enumerate(conv.questions):
            covered: set[str] = set()
            for ids in on.rankings[mode][(conv.sample_id, qi)]:
                covered |= ids
            surfaced += sum(1 for e in q.evidence if (conv.sample_id, e) in superseded_ev and e in covered)

    report: dict[str, Any] = {
        "mode": mode,
        "turns": sum(len(c.turns) for c in convs),
        "turns_folded": total_folded,
        "turns_superseded": total_superseded_turns,
        "returned_notes_already_closed": sum(i.returned_closed for i in on.ingest.values()),
        "evidence_turns": len(ev_turns),
        "evidence_folded": len(folded_ev),
        "evidence_superseded": len(superseded_ev),
        "evidence_hidden": len(hidden),
        "superseded_notes_in_hits": superseded_note_in_hits,
        "superseded_evidence_still_retrieved_top25": surfaced,
        "affected_questions": len(affected),
        "affected_by_category": dict(sorted(Counter(c for c, _, _ in affected).items())),
        "affected_scores_on": subset_scores(on.rankings[mode]),
        "affected_scores_bm25": subset_scores(bm25),
    }
    if off is not None:
        report["affected_scores_off"] = subset_scores(off.rankings[mode])
    examples = []
    for conv in convs:
        info = on.ingest[conv.sample_id]
        by_id = {t.dia_id: t for t in conv.turns}
        note_turn = {}
        for d, nid in info.turn_note.items():
            note_turn.setdefault(nid, d)
        for old, new in info.supersede_pairs[:3]:
            examples.append(
                {
                    "old": by_id[note_turn[old]].content if old in note_turn else old,
                    "new": by_id[note_turn[new]].content if new in note_turn else new,
                }
            )
    report["supersede_examples"] = examples[:6]
    return report


# --------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--data",
        type=Path,
        default=common.default_data_path("locomo-dev", "locomo-dev.json"),
        help="LoCoMo JSON (default: <repo>/../shared/data/locomo-dev/locomo-dev.json)",
    )
    p.add_argument("--dsn", default=None, help="PostgreSQL DSN (default: embedded PostgreSQL in a temp dir)")
    p.add_argument("--data-dir", default=None, help="keep the embedded database here instead of a temp dir")
    p.add_argument("--embedder", choices=common.EMBEDDERS, default="hash",
                   help="hash (default), wordllama (extra 'wordllama') or minilm (extra 'minilm')")
    p.add_argument(
        "--mode",
        choices=("hybrid", "vector", "lexical", "all"),
        default="hybrid",
        help="recall mode; 'all' ingests once and recalls in every mode ('fabric' = hybrid)",
    )
    p.add_argument("--consolidate", choices=("both", "on", "off"), default="both")
    p.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="supersession cosine threshold for consolidate=on (default: the library's, 0.85)",
    )
    p.add_argument("--bonus-weights", type=float, nargs="*", default=[],
                   help="also recall with these recency and importance weights (each W: both = W), side by side"
                        " with the library's defaults on the same notes (issue 29: 0.1 was the default before)")
    p.add_argument("--limit", type=int, default=None, help="only the first N conversations")
    p.add_argument("--max-questions", type=int, default=None, help="only the first N questions per conversation")
    p.add_argument("--no-fabric", action="store_true", help="BM25 baseline only (no database)")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    stats = EvidenceStats()
    convs = load_conversations(args.data, args.limit, stats)
    if args.max_questions is not None:
        for c in convs:
            c.questions = c.questions[: args.max_questions]
    n_q = sum(len(c.questions) for c in convs)
    print(
        f"LoCoMo: {len(convs)} conversations, {sum(len(c.turns) for c in convs)} turns, "
        f"{n_q} scored questions; skipped {stats.skipped_questions} question(s) with no valid "
        f"evidence {dict(stats.skipped_by_category)}; evidence: {stats.split_strings} multi-id "
        f"string(s) split, {stats.normalised} id(s) normalised, {stats.unknown} unknown id(s) "
        f"dropped, {stats.unparsable} unparsable piece(s)"
    )

    timer = common.Timer()
    bm25_rank = run_bm25(convs)
    bm25 = score_run(convs, bm25_rank)
    print(f"BM25 done in {timer():.1f}s")

    modes = ("hybrid", "vector", "lexical") if args.mode == "all" else (args.mode,)
    modes += tuple(f"{modes[0]}@{w:g}" for w in args.bonus_weights)
    settings = {"both": (True, False), "on": (True,), "off": (False,)}[args.consolidate]
    runs: dict[bool, FabricRun] = {}
    if not args.no_fabric:
        with common.scratch_dir(args.data_dir) as data_dir:
            for consolidate in settings:
                timer = common.Timer()
                runs[consolidate] = run_fabric(
                    convs,
                    modes=modes,
                    consolidate=consolidate,
                    args=args,
                    data_dir=None if args.dsn else data_dir,
                )
                r = runs[consolidate]
                print(
                    f"fabric consolidate={'on' if consolidate else 'off'}: ingest "
                    f"{r.ingest_seconds:.1f}s, recall "
                    + ", ".join(f"{m} {s:.1f}s" for m, s in r.recall_seconds.items())
                    + f" (total {timer():.1f}s)"
                )

    scores: dict[tuple[bool, str], dict[str, dict[str, float]]] = {}
    for consolidate, run in runs.items():
        for mode in modes:
            scores[(consolidate, mode)] = score_run(convs, run.rankings[mode])

    # ---- tables
    primary_c = settings[0]
    primary_m = modes[0]
    cols = ["category", "n"]
    systems: list[tuple[str, dict[str, dict[str, float]]]] = []
    for consolidate in settings:
        for mode in modes:
            if (consolidate, mode) in scores:
                label = f"{mode}/{'cons' if consolidate else 'nocons'}"
                systems.append((label, scores[(consolidate, mode)]))
    systems.append(("bm25", bm25))
    for k in ("frac@10", "any@10"):
        rows = []
        for cat in (*CATEGORIES, POOLED):
            row: list[Any] = [f"{cat} {CATEGORY_NAMES[cat]}", int(bm25[cat]["n"])]
            row += [s[cat][k] for _, s in systems]
            if len(systems) > 1:
                row.append(_ratio(systems[0][1][cat][k], bm25[cat][k]))
            rows.append(row)
        extra = [f"{systems[0][0]}/bm25"] if len(systems) > 1 else []
        common.print_table(f"LoCoMo {k} (top_k={TOP_K}, embedder={args.embedder})", cols + [s for s, _ in systems] + extra, rows)

    rows = []
    for label, s in systems:
        rows.append([label] + [s[POOLED][f"frac@{k}"] for k in KS] + [s[POOLED][f"any@{k}"] for k in KS])
    common.print_table(
        f"LoCoMo pooled 1-4 (n={int(bm25[POOLED]['n'])})",
        ["system"] + [f"frac@{k}" for k in KS] + [f"any@{k}" for k in KS],
        rows,
    )
    if scores:
        rows = []
        for (consolidate, mode), s in scores.items():
            f, b = s[POOLED]["frac@10"], bm25[POOLED]["frac@10"]
            rows.append([f"{mode}/{'cons' if consolidate else 'nocons'}", f, b, _ratio(f, b)])
        common.print_table("fabric vs bm25, frac@10 on 1-4", ["fabric", "fabric", "bm25", "ratio"], rows)

    hidden: dict[str, Any] | None = None
    if True in runs:
        hidden = hidden_evidence_report(convs, runs[True], runs.get(False), primary_m, bm25_rank)
        print("hidden evidence (consolidate=on, mode=%s):" % primary_m)
        for k, v in hidden.items():
            if k != "supersede_examples":
                print(f"  {k}: {v}")
        for ex in hidden["supersede_examples"]:
            print(f"  superseded: {ex['old']!r}\n      by:     {ex['new']!r}")

    # ---- JSON
    payload: dict[str, Any] = {}
    if scores:
        payload["fabric"] = json_view(scores[(primary_c, primary_m)])
    payload["bm25"] = json_view(bm25)
    if (False, primary_m) in scores and primary_c is True:
        payload["fabric_consolidate_off"] = json_view(scores[(False, primary_m)])
    for (consolidate, mode), s in scores.items():
        if (consolidate, mode) == (False, primary_m) and "fabric_consolidate_off" in payload:
            continue
        if (consolidate, mode) != (primary_c, primary_m):
            payload[f"fabric_{mode}_{'on' if consolidate else 'off'}"] = json_view(s)
    payload["skipped"] = stats.skipped_questions
    payload["meta"] = {
        "data": str(args.data),
        "conversations": [c.sample_id for c in convs],
        "questions_scored": n_q,
        "embedder": args.embedder,
        "mode": primary_m,
        "modes": list(modes),
        "consolidate": args.consolidate,
        "threshold": args.threshold,
        "fabric_consolidate": primary_c if scores else None,
        "top_k": TOP_K,
        "evidence": stats.as_dict(),
        "full_metrics": {
            **{f"fabric_{m}_{'on' if c else 'off'}": s for (c, m), s in scores.items()},
            "bm25": bm25,
        },
    }
    if hidden is not None:
        payload["hidden_evidence"] = hidden
    common.write_json(args.out, payload)
    return 0


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


if __name__ == "__main__":
    raise SystemExit(main())
