"""The ``memfabric`` command line on real PostgreSQL: one-line errors, ``--block``,
``log`` filters and tampered events, tables at 80 columns, help texts and the demo."""

from __future__ import annotations

import json
from collections.abc import Iterator

import psycopg
import pytest
from cryptography.exceptions import InvalidTag
from rich.console import Console
from typer.testing import CliRunner

from memfabric.adapters import Fabric
from memfabric.adapters.cli import admin as cli_admin, app as cli

runner = CliRunner()


def invoke(dsn: str, *args: str) -> object:
    return runner.invoke(cli.app, [*args, "--dsn", dsn])


def errors(res: object) -> list[str]:
    return res.stderr.strip().splitlines()  # type: ignore[attr-defined]


@pytest.fixture
def width(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """``width(n)`` makes the CLI's tables render at ``n`` columns."""
    def set_width(n: int) -> None:
        monkeypatch.setattr(cli, "console", Console(width=n, highlight=False))
    yield set_width


def test_validation_errors_print_one_clean_line_each(dsn: str) -> None:
    cases = [
        (("remember", "x", "-t", "acme", "--importance", "nan"),
         ["error: importance: must be a number between 0 and 1"]),
        (("remember", "x", "-t", "acme", "--importance", "1.5"),
         ["error: importance: must be a number between 0 and 1"]),
        (("remember", "x", "-t", "acme", "--kind", "working"),  # cross-field: empty loc
         ["error: block: required for kind 'working'"]),
        (("remember", "x", "-t", "acme", "--kind", "file"), ["error: path: required for kind 'file'"]),
        (("remember", "x", "-t", "ac me"),
         ["error: tenant_id: must be 1-128 letters, digits or ._:@- starting with a letter or digit"]),
        (("recall", "x", "-t", "acme", "--top-k", "0", "--mode", "fuzzy"),
         ["error: top_k: Input should be greater than or equal to 1",
          "error: mode: Input should be 'hybrid', 'vector' or 'lexical'"]),
        (("lineage", "abc", "-t", "acme"), ["error: id: must be 12 lowercase hex digits"]),
        (("lineage", "abcdefabcdef", "-t", "acme"), None),  # NoteNotFoundError: one line
    ]
    for args, expected in cases:
        res = invoke(dsn, *args)
        assert res.exit_code == 2, (args, res.output)  # type: ignore[attr-defined]
        lines = errors(res)
        if expected is None:
            assert len(lines) == 1 and lines[0].startswith("error: ") and "abcdefabcdef" in lines[0]
        else:
            assert lines == expected, args
        assert "pydantic.dev" not in res.output and "input_value" not in res.output  # type: ignore[attr-defined]
        assert "Traceback" not in res.output  # type: ignore[attr-defined]


def test_remember_writes_a_working_block_with_block(dsn: str, fabric: Fabric) -> None:
    res = invoke(dsn, "remember", "Concise assistant", "-t", "acme", "--kind", "working", "--block", "persona")
    assert res.exit_code == 0, res.output  # type: ignore[attr-defined]
    assert res.output.split()[1] == "inserted"  # type: ignore[attr-defined]
    res = invoke(dsn, "remember", "Terse assistant", "-t", "acme", "--kind", "working", "--block", "persona",
                 "--json")
    assert res.exit_code == 0 and json.loads(res.output)["block"] == "persona"  # type: ignore[attr-defined]
    blocks = fabric.scope("acme").working_value()["_fabric"]["blocks"]
    assert blocks["persona"]["content"] == "Terse assistant" and blocks["persona"]["version"] == 2
    res = invoke(dsn, "remember", "x", "-t", "acme", "--kind", "working", "--block", "Not A Label")
    assert res.exit_code == 2 and errors(res) == [  # type: ignore[attr-defined]
        "error: block: must be 1-64 lowercase letters, digits or ._- starting with a letter or digit"]


def test_log_validates_note_and_tenant(dsn: str) -> None:
    note_id = invoke(dsn, "remember", "User prefers metric units", "-t", "acme").output.split()[0]  # type: ignore[attr-defined]
    for args, word in ((("--note", "'; drop"), "note"), (("--note", "ABCDEF123456"), "note"),
                       (("--tenant", "'; drop"), "tenant")):
        res = invoke(dsn, "log", *args)
        assert res.exit_code == 2, args  # type: ignore[attr-defined]
        lines = errors(res)
        assert len(lines) == 1 and lines[0].startswith(f"error: {word}: "), lines
    res = invoke(dsn, "log", "--note", note_id, "--tenant", "acme")
    assert res.exit_code == 0 and note_id in res.output and "Remembered" in res.output  # type: ignore[attr-defined]
    res = invoke(dsn, "export", "--out", "/dev/null", "--tenant", "a b")
    assert res.exit_code == 2 and errors(res)[0].startswith("error: tenant: ")  # type: ignore[attr-defined]


def _tamper(dsn: str, notification_id: int) -> None:
    """Flip a byte near the end of an event row (inside the sealed, encrypted part)."""
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "UPDATE memfabric_events SET state = overlay(state placing '\\x00'::bytea from length(state) - 5 for 1)"
            " WHERE notification_id = %s", (notification_id,))


def test_log_reports_a_tampered_event_in_one_line(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for text in ("User prefers metric units", "User lives in Lisbon", "User owns a bicycle"):
        assert invoke(dsn, "remember", text, "-t", "acme").exit_code == 0  # type: ignore[attr-defined]
    real = cli_admin.read_log

    def raw_invalid_tag(fabric: object, **kw: object) -> Iterator[object]:  # the core's older behaviour
        for entry in real(fabric, **kw):  # type: ignore[arg-type]
            if entry.position == 2:
                raise InvalidTag
            yield entry

    monkeypatch.setattr(cli_admin, "read_log", raw_invalid_tag)
    res = invoke(dsn, "log")  # nothing tampered yet: the stand-in fails on event 2
    assert res.exit_code == 1  # type: ignore[attr-defined]
    assert errors(res) == ["error: the log cannot be read after notification 1: InvalidTag;"
                           " run 'memfabric audit verify'"]
    monkeypatch.undo()

    _tamper(dsn, 2)  # a changed row is marked and the listing goes on (issue 19)
    for args in (("log",), ("log", "--tenant", "acme", "--json")):
        res = invoke(dsn, *args)
        assert res.exit_code == 1, res.output  # type: ignore[attr-defined]
        lines = errors(res)
        head = "1 event failed the integrity check (notification 2): "
        assert len(lines) == 1, lines  # with --json the one error is a JSON object
        assert lines[0].startswith("error: " + head if "--json" not in args else '{"error": "' + head), lines
        assert "failed authentication: its stored bytes were changed" in lines[0], lines
        assert "Traceback" not in res.output and "Lisbon" not in res.output  # type: ignore[attr-defined]
        assert len(res.stdout.splitlines()) == 3  # type: ignore[attr-defined]  # events 1 and 3 as well


def test_recall_table_is_readable_at_80_and_160_columns(dsn: str, width: object) -> None:
    for text in ("User prefers metric units and Celsius for every temperature shown in the dashboard",
                 "Billing runs on the first business day of each month"):
        assert invoke(dsn, "remember", text, "-t", "acme").exit_code == 0  # type: ignore[attr-defined]
    assert invoke(dsn, "remember", "Payments entry point", "-t", "acme", "--kind", "file",
                  "--path", "services/payments/app.py").exit_code == 0  # type: ignore[attr-defined]
    query = "which units does the user prefer in the payments app"
    data = json.loads(invoke(dsn, "recall", query, "-t", "acme", "--json").output)  # type: ignore[attr-defined]
    # the relevance floor keeps the notes with evidence and drops the unrelated one (no padding)
    assert sorted(h["content"][:12] for h in data["hits"]) == ["Payments ent", "User prefers"]
    for columns in (80, 160):
        width(columns)  # type: ignore[operator]
        res = invoke(dsn, "recall", query, "-t", "acme")
        assert res.exit_code == 0, res.output  # type: ignore[attr-defined]
        lines = res.output.splitlines()  # type: ignore[attr-defined]
        assert all(len(line) <= columns for line in lines)
        assert lines[0].split() == ["#", "id", "score", "sim", "lex", "content"]
        for rank, (hit, ex) in enumerate(zip(data["hits"], data["explain"], strict=True), 1):
            row = next(line for line in lines if hit["id"] in line).split()
            # numbers are never wrapped: each sits whole on the hit's first line
            assert row[:5] == [str(rank), hit["id"], f"{ex['score']:.3f}", f"{ex['similarity']:.3f}",
                               f"{ex['lexical']:.3f}"]
        assert "services/payments/app.py" in res.output  # type: ignore[attr-defined]  # a file note's path, dim
        if columns == 160:  # wide enough for every content on one line
            assert any("for every temperature shown in the dashboard" in line for line in lines)
    res = invoke(dsn, "recall", "zebras on the moon", "-t", "acme")
    assert res.exit_code == 0 and "no matching notes" in res.output  # type: ignore[attr-defined]
    res = invoke(dsn, "recall", query, "-t", "globex")   # issue 19: an unknown tenant says so
    assert res.exit_code == 2 and "no tenant 'globex'" in res.output  # type: ignore[attr-defined]


def test_lineage_table_at_80_columns(dsn: str, width: object) -> None:
    first = invoke(dsn, "remember", "User prefers metric units", "-t", "acme", "--subject", "units")
    second = invoke(dsn, "remember", "User prefers imperial units", "-t", "acme", "--subject", "units")
    new_id = second.output.split()[0]  # type: ignore[attr-defined]
    assert f"supersedes {first.output.split()[0]}" in second.output  # type: ignore[attr-defined]
    width(80)  # type: ignore[operator]
    res = invoke(dsn, "lineage", new_id, "-t", "acme")
    assert res.exit_code == 0, res.output  # type: ignore[attr-defined]
    assert all(len(line) <= 80 for line in res.output.splitlines())  # type: ignore[attr-defined]
    assert f"lineage of {new_id}: 1 predecessor(s)" in res.output  # type: ignore[attr-defined]
    assert "Superseded" in res.output and f"▶ {new_id}" in res.output  # type: ignore[attr-defined]


def test_help_texts_show_flags_without_types(dsn: str) -> None:
    for args in ((), ("remember",), ("recall",), ("lineage",), ("demo",), ("log",), ("export",),
                 ("projections",), ("projections", "rebuild"), ("audit",), ("audit", "verify"), ("console",)):
        res = runner.invoke(cli.app, [*args, "--help"])
        assert res.exit_code == 0, args  # type: ignore[attr-defined]
        assert "<bool>" not in res.output, args  # type: ignore[attr-defined]
    res = runner.invoke(cli.app, ["remember", "--help"])
    assert "--block" in res.output and "CONTENT" in res.output  # type: ignore[attr-defined]
    res = runner.invoke(cli.app, ["audit", "verify", "--help"])
    assert "--no-checkpoint" in res.output and "checkpoint" in res.output.split("Options")[0]  # type: ignore[attr-defined]


def test_audit_verify_says_what_it_checkpointed(dsn: str) -> None:
    for text in ("User prefers metric units", "User lives in Lisbon"):
        assert invoke(dsn, "remember", text, "-t", "acme").exit_code == 0  # type: ignore[attr-defined]
    res = invoke(dsn, "audit", "verify", "--no-checkpoint")
    assert res.exit_code == 0 and "2 new events not checkpointed (--no-checkpoint)" in res.output  # type: ignore[attr-defined]
    res = invoke(dsn, "audit", "verify")
    assert res.exit_code == 0 and "checkpointed 2 new events (1 checkpoint written)" in res.output  # type: ignore[attr-defined]
    assert "━" not in res.output  # type: ignore[attr-defined]  # no progress bar when not on a terminal
    res = invoke(dsn, "audit", "verify")
    assert "no new events to checkpoint" in res.output  # type: ignore[attr-defined]


def test_demo_runs_with_dsn_at_80_columns(dsn: str, width: object) -> None:
    width(80)  # type: ignore[operator]
    res = invoke(dsn, "demo")
    assert res.exit_code == 0, res.output  # type: ignore[attr-defined]
    out = res.output  # type: ignore[attr-defined]
    assert "demo finished" in out
    assert all(len(line) <= 80 for line in out.splitlines())
    for title in ("3. recall 'which units does the user prefer?' top_k=10 budget=400",
                  "5. recall 'billing invoices database payments' top_k=10 budget=25",
                  "6a. recall 'how do I rotate the API key?' top_k=5",
                  "10. working memory: labelled blocks, read every turn"):
        assert title in out.splitlines(), title  # each heading on one line of its own
    sweep_header = next(line for line in out.splitlines() if line.split()[:2] == ["class", "expired"])
    assert sweep_header.split()[-1] == "decayed", sweep_header  # a column per outcome (finding 2026-12-03)


def test_remember_takes_a_retention_class(dsn: str, fabric: Fabric) -> None:
    """A fresh user's finding (2026-12-03): the CLI's ``remember`` had no ``--retention``."""
    res = invoke(dsn, "remember", "Draft of the dispute letter", "-t", "acme", "--retention", "ephemeral", "--json")
    assert res.exit_code == 0, res.output  # type: ignore[attr-defined]
    note = json.loads(res.output)  # type: ignore[attr-defined]
    assert note["retention"] == "ephemeral" and fabric.scope("acme").get(note["id"]).retention == "ephemeral"
    res = invoke(dsn, "remember", "x", "-t", "acme", "--retention", "forever")
    assert res.exit_code == 2 and errors(res) == [  # type: ignore[attr-defined]
        "error: retention: Input should be 'ephemeral', 'operational', 'durable' or 'regulated'"]
