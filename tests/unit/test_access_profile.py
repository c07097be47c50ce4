"""Issue 33: memory profiles, scope patterns and the write rules (pure, no database)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memfabric.domain.access import check_read, check_write
from memfabric.domain.errors import AccessDenied
from memfabric.domain.principal import MemoryProfile, Principal, ScopePattern
from memfabric.domain.scope import Scope


def profile(**kw: object) -> MemoryProfile:
    return MemoryProfile.model_validate({"recall_scope": ["acme/u1/*"], **kw})


@pytest.mark.parametrize("bad", [
    {"recall_scope": []}, {"recall_scope": ["acme/u1/t1/x"]}, {"recall_scope": ["acme//t1"]},
    {"recall_scope": ["ac me"]}, {"recall_scope": ["acme"], "read_kinds": ["secret"]},
    {"recall_scope": ["acme"], "writes": "maybe"}, {"recall_scope": ["acme"], "extra": 1},
    {"recall_scope": ["acme"], "retention_ceiling": "forever"}, {"recall_scope": ["acme"], "visibility": ["world"]},
])
def test_a_bad_profile_is_a_validation_error(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        MemoryProfile.model_validate(bad)


@pytest.mark.parametrize(("pattern", "scope", "match"), [
    ("acme/u1/*", ("acme", "u1", "t1"), True), ("acme/u1/*", ("acme", "u1", ""), True),
    ("acme/u1/*", ("acme", "u2", "t1"), False), ("acme/u1/*", ("beta", "u1", "t1"), False),
    ("acme/*", ("acme", "", ""), True), ("acme/*", ("acme", "u9", "t9"), True),
    ("acme/u1", ("acme", "u1", ""), True), ("acme/u1", ("acme", "u1", "t1"), False),
    ("acme", ("acme", "u1", ""), False), ("acme", ("acme", "", ""), True),
    ("acme/*/t1", ("acme", "u5", "t1"), True), ("acme/*/t1", ("acme", "u5", "t2"), False),
])
def test_scope_patterns(pattern: str, scope: tuple[str, str, str], match: bool) -> None:
    assert ScopePattern.parse(pattern).matches(*scope) is match


def test_reads_need_a_covered_scope_and_readable_kinds() -> None:
    p = profile(read_kinds=["fact"])
    check_read("bot", p, Scope(tenant_id="acme", resource_id="u1", thread_id="t1"), ["fact"])
    with pytest.raises(AccessDenied) as e:
        check_read("bot", p, Scope(tenant_id="acme", resource_id="u2"), ["fact"])
    assert e.value.rule == "recall_scope"
    with pytest.raises(AccessDenied) as e:
        check_read("bot", p, Scope(tenant_id="acme", resource_id="u1"), ["fact", "file"])
    assert e.value.rule == "read_kinds" and "file" in str(e.value)


@pytest.mark.parametrize(("kw", "write", "rule"), [
    ({}, {"kind": "fact"}, "writes"),
    ({"writes": "propose", "write_kinds": ["fact", "working"]}, {"kind": "fact"}, "writes"),
    ({"writes": "commit", "write_kinds": ["file"]}, {"kind": "fact"}, "write_kinds"),
    ({"writes": "commit", "write_kinds": ["fact"], "visibility": ["thread"]}, {"kind": "fact"}, "visibility"),
    ({"writes": "commit", "write_kinds": ["fact"], "recall_scope": ["acme/u1/t1"]}, {"kind": "fact"},
     "recall_scope"),
    ({"writes": "commit", "write_kinds": ["fact"]}, {"kind": "fact", "vis": "tenant"}, "recall_scope"),
    ({"writes": "commit", "write_kinds": ["fact"], "retention_ceiling": "operational"},
     {"kind": "fact"}, "retention_ceiling"),
])
def test_write_rules(kw: dict[str, object], write: dict[str, str], rule: str) -> None:
    p = profile(**kw)
    scope = Scope(tenant_id="acme", resource_id="u1", thread_id="t1")
    with pytest.raises(AccessDenied) as e:
        check_write("bot", p, scope, write["kind"], vis=write.get("vis"))  # type: ignore[arg-type]
    assert e.value.rule == rule


def test_allowed_writes() -> None:
    scope = Scope(tenant_id="acme", resource_id="u1", thread_id="t1")
    check_write("bot", profile(writes="propose", write_kinds=["working"]), scope, "working")
    check_write("bot", profile(writes="commit", write_kinds=["fact"], retention_ceiling="durable"), scope, "fact")
    check_write("bot", profile(recall_scope=["acme/u1/t1"], writes="commit", write_kinds=["file"]), scope, "file")


def test_the_principal_aggregate_records_who_changed_what() -> None:
    p = Principal.define("bot", profile(read_kinds=["fact"]), "host")
    assert not p.change(profile(read_kinds=["fact"]), "admin")  # the same profile: no event
    assert p.change(profile(read_kinds=["fact", "file"]), "admin")
    events = p.collect_events()
    assert [type(e).__name__ for e in events] == ["Defined", "ProfileChanged"]
    assert p.updated_by == "admin" and p.memory_profile().read_kinds == ("fact", "file")


def _like(pattern: str, text: str) -> bool:
    """SQL ``LIKE`` (backslash escape) in Python."""
    import re
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out, i = out + re.escape(pattern[i + 1]), i + 2
            continue
        out += ".*" if c == "%" else "." if c == "_" else re.escape(c)
        i += 1
    return re.fullmatch(out, text, re.S) is not None


def test_the_sql_like_form_of_a_pattern_matches_exactly_what_the_pattern_does() -> None:
    ids = ["acme", "a_b", "axb", "u1", "u_1", "t1", ""]
    keys = [(t, r, th) for t in ids[:3] for r in ids for th in ids if not (r == "" and th != "")]
    patterns = ["acme/*", "a_b/*", "a_b/u_1/*", "acme/u1", "acme", "acme/*/t1", "*/u_1", "a_b/*/t1", "*"]
    for text in patterns:
        p = ScopePattern.parse(text)
        for key in keys:
            assert _like(p.like(), "/".join(key)) is p.matches(*key), (text, key)
