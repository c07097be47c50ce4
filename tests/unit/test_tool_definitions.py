"""Tool definitions and their provider renderings (pure: no database)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from memfabric.adapters.tools import (
    PROVIDER_NAME_RE,
    TOOL_NAMES,
    MemoryTools,
    NotAttachedError,
    UnknownToolError,
    tool_error,
)
from memfabric.domain.attach import attach
from memfabric.domain.errors import FabricError
from pydantic import ValidationError


@dataclass(frozen=True)
class FakeScope:
    key: str = "acme/u/t"


class FakeNotes:
    scope = FakeScope()

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def read_outside(self, kind: str, read: Any, operation: str) -> Any:
        """As ``Notes.read_outside`` without a principal: the file read runs."""
        return read()

    def __getattr__(self, name: str) -> Any:
        def record(*a: Any, **kw: Any) -> Any:
            self.calls.append((name, (a, kw)))
            raise AssertionError(f"{name} must not be reached")
        return record


class FakeService:
    pass


@dataclass
class Session:
    id: str = "s1"


@pytest.fixture
def tools(tmp_path: Path) -> MemoryTools:
    return MemoryTools(FakeNotes(), FakeService(), tmp_path)  # type: ignore[arg-type]


def test_five_definitions(tools: MemoryTools) -> None:
    assert tuple(d.name for d in tools.definitions) == TOOL_NAMES
    for d in tools.definitions:
        assert len(d.description) > 40
        assert d.input_schema["type"] == "object"
        jsonschema.Draft202012Validator.check_schema(d.input_schema)


def test_openai_rendering(tools: MemoryTools) -> None:
    rendered = tools.openai()
    assert [t["function"]["name"] for t in rendered] == [
        "memory_view", "memory_read", "memory_insert", "memory_recall", "memory_forget"]
    for t in rendered:
        assert set(t) == {"type", "function"} and t["type"] == "function"
        fn = t["function"]
        assert set(fn) == {"name", "description", "parameters"}
        assert PROVIDER_NAME_RE.match(fn["name"])
        assert fn["parameters"]["type"] == "object"
        jsonschema.Draft202012Validator.check_schema(fn["parameters"])
    json.dumps(rendered)


def test_anthropic_rendering(tools: MemoryTools) -> None:
    rendered = tools.anthropic()
    for t in rendered:
        assert set(t) == {"name", "description", "input_schema"}
        assert PROVIDER_NAME_RE.match(t["name"]) and len(t["name"]) <= 64
        assert t["input_schema"]["type"] == "object"
        jsonschema.Draft202012Validator.check_schema(t["input_schema"])
    # the SDK's own param type accepts the shape
    from anthropic.types.beta import BetaToolParam

    for t in rendered:
        param: BetaToolParam = {"name": t["name"], "description": t["description"],
                                "input_schema": t["input_schema"]}
        assert param["input_schema"]["type"] == "object"
    json.dumps(rendered)


def test_renderings_are_copies(tools: MemoryTools) -> None:
    tools.openai()[0]["function"]["parameters"]["properties"].clear()
    assert tools.definitions[0].input_schema["properties"]


GOOD: list[tuple[str, dict[str, Any]]] = [
    ("memory.view", {}), ("memory.view", {"path": "notes"}),
    ("memory.read", {"path": "a.md"}),
    ("memory.insert", {"text": "hi", "block": "persona"}),
    ("memory.insert", {"text": "hi", "path": "a.md"}),
    ("memory.recall", {"query": "units"}),
    ("memory.recall", {"query": "units", "kinds": ["fact", "procedure"], "top_k": 3,
                       "as_of": "2026-01-01T00:00:00+00:00", "budget": 100}),
    ("memory.forget", {"id": "0123456789ab"}), ("memory.forget", {"block": "todo", "hold": True}),
]
BAD: list[tuple[str, dict[str, Any]]] = [
    ("memory.view", {"path": 3}), ("memory.view", {"other": 1}),
    ("memory.read", {}), ("memory.read", {"path": ""}),
    ("memory.insert", {"text": "", "block": "persona"}),
    ("memory.insert", {"text": "hi", "block": "Not A Label"}),
    ("memory.recall", {}), ("memory.recall", {"query": "q", "top_k": 0}),
    ("memory.recall", {"query": "q", "kinds": ["working"]}),
    ("memory.recall", {"query": "q", "top_k": "3"}),
    ("memory.recall", {"query": "q", "as_of": 5}),
    ("memory.forget", {"id": "XYZ"}), ("memory.forget", {"block": "b", "hold": "yes"}),
]


EXACTLY_ONE: list[tuple[str, dict[str, Any]]] = [
    ("memory.insert", {"text": "hi"}), ("memory.insert", {"text": "hi", "block": "b", "path": "p"}),
    ("memory.forget", {}), ("memory.forget", {"id": "0123456789ab", "block": "b"}),
    ("memory.entities", {}), ("memory.entities", {"name": "Maria", "id": "0123456789ab"}),
]
"""Issue 26 defect 4: "exactly one of" is no top-level ``oneOf`` (providers refuse it)
but a validation rule of the tool: a clear tool error naming both fields."""


@pytest.mark.parametrize(("name", "args"), GOOD)
def test_schema_and_model_accept(tools: MemoryTools, name: str, args: dict[str, Any]) -> None:
    d = tools.definition(name)
    jsonschema.Draft202012Validator(d.input_schema).validate(args)
    d.args.model_validate(args)


@pytest.mark.parametrize(("name", "args"), BAD)
def test_schema_and_model_reject(tools: MemoryTools, name: str, args: dict[str, Any]) -> None:
    d = tools.definition(name)
    assert not jsonschema.Draft202012Validator(d.input_schema).is_valid(args)
    with pytest.raises(ValidationError):
        d.args.model_validate(args)


def test_names_both_forms_and_unknown(tools: MemoryTools) -> None:
    assert tools.definition("memory_view") is tools.definition("memory.view")
    with pytest.raises(UnknownToolError):
        tools.definition("memory.delete")
    assert issubclass(UnknownToolError, FabricError)


def test_every_tool_refused_before_attach(tools: MemoryTools) -> None:
    for name, args in GOOD:
        with pytest.raises(NotAttachedError):
            tools.call(name, args, session=Session())
    assert tools.notes.calls == []  # type: ignore[attr-defined]


def test_bad_call_after_attach_raises_validation_error(tools: MemoryTools) -> None:
    with attach(tools._service, "acme/u/t", Session(), provider=lambda c: []):
        for name, args in BAD:
            with pytest.raises(ValidationError):
                tools.call(name, args, session=Session())
    assert tools.notes.calls == []  # type: ignore[attr-defined]


def test_tool_error_never_echoes_input(tools: MemoryTools) -> None:
    with attach(tools._service, "acme/u/t", Session(), provider=lambda c: []):
        result, is_error = tools.call_or_error(
            "memory.recall", {"query": "secret-query-text", "top_k": "many"}, session=Session())
    assert is_error and result["error"]["type"] == "ValidationError"
    assert "secret-query-text" not in json.dumps(result) and "many" not in json.dumps(result)
    assert "top_k" in result["error"]["message"]
    err = tool_error(NotAttachedError("session is not attached"))
    assert err == {"error": {"type": "NotAttachedError", "message": "session is not attached"}}


def test_without_root_file_tools_fail_closed() -> None:
    from memfabric.adapters.jail import JailError

    tools = MemoryTools(FakeNotes(), FakeService(), None)  # type: ignore[arg-type]
    with attach(tools._service, "acme/u/t", Session(), provider=lambda c: []):
        for name, args in [("memory.view", {}), ("memory.read", {"path": "a.md"}),
                           ("memory.insert", {"text": "x", "path": "a.md"})]:
            with pytest.raises(JailError):
                tools.call(name, args, session=Session())


def test_max_file_bytes_hard_cap(tmp_path: Path) -> None:
    with pytest.raises(ValidationError):
        MemoryTools(FakeNotes(), FakeService(), tmp_path, max_file_bytes=2 * 1024 * 1024)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        MemoryTools(FakeNotes(), FakeService(), None, max_file_bytes=2 * 1024 * 1024)  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "args"), EXACTLY_ONE)
def test_exactly_one_of_is_a_validation_rule(tools: MemoryTools, name: str, args: dict[str, Any]) -> None:
    with attach(tools._service, "acme/u/t", Session(), provider=lambda c: []):
        result, is_error = tools.call_or_error(name, args, session=Session())
    assert is_error and result["error"]["type"] == "ValidationError"
    assert "exactly one of" in result["error"]["message"]
    assert tools.notes.calls == []  # type: ignore[attr-defined]


def _rendered(tools: MemoryTools) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(where, schema, rules) for every schema every rendering hands a provider."""
    from tests.unit import provider_rules as r

    out = [(f"anthropic {t['name']}", t["input_schema"], r.ANTHROPIC_INPUT_SCHEMA) for t in tools.anthropic()]
    out += [(f"openai {t['function']['name']}", t["function"]["parameters"], r.OPENAI_PARAMETERS)
            for t in tools.openai()]
    out += [(f"openai strict {t['function']['name']}", t["function"]["parameters"], r.OPENAI_STRICT)
            for t in tools.openai(strict=True)]
    out += [(f"mcp {d.provider_name}", d.input_schema, r.MCP_INPUT_SCHEMA)
            for d in (*tools.definitions, *tools.read_only_definitions)]
    # an MCP host hands inputSchema on to the model APIs: Anthropic's rules apply too
    out += [(f"mcp->anthropic {d.provider_name}", d.input_schema, r.ANTHROPIC_INPUT_SCHEMA)
            for d in (*tools.definitions, *tools.read_only_definitions)]
    return out


def test_every_rendered_schema_meets_the_providers_rules(tools: MemoryTools) -> None:
    """Issue 26 defect 4: ``memory_insert`` / ``memory_forget`` had a top-level
    ``oneOf`` (Anthropic refuses it; OpenAI wants a plain object)."""
    from tests.unit import provider_rules as r

    rendered = _rendered(tools)
    assert len(rendered) == 5 * 3 + 8 * 2
    broken = {where: r.violations(schema, rules) for where, schema, rules in rendered
              if r.violations(schema, rules)}
    assert broken == {}
    for t in tools.openai(strict=True):
        assert t["function"]["strict"] is True and r.TOOL_NAME.match(t["function"]["name"])


def test_the_rules_catch_what_providers_refuse() -> None:
    """The checker is not vacuous: the old shapes fail it."""
    from tests.unit import provider_rules as r

    one_of = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
              "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}
    assert r.violations(one_of, r.ANTHROPIC_INPUT_SCHEMA) == ["top level: oneOf is not allowed"]
    assert r.violations({"type": "array"}, r.OPENAI_PARAMETERS)
    loose = {"type": "object", "properties": {"a": {"type": "string", "minLength": 1}}}
    assert len(r.violations(loose, r.OPENAI_STRICT)) == 3  # open, not all required, minLength


def test_strict_rendering_is_what_the_agents_sdk_expects(tools: MemoryTools) -> None:
    """openai-agents' own strict-schema pass leaves the strict rendering unchanged, and
    a strict call with nulls for the absent fields validates."""
    import copy

    strict_schema = pytest.importorskip("agents.strict_schema")
    for t in tools.openai(strict=True):
        params = t["function"]["parameters"]
        assert strict_schema.ensure_strict_json_schema(copy.deepcopy(params)) == params
        jsonschema.Draft202012Validator.check_schema(params)
    view = next(t for t in tools.openai(strict=True) if t["function"]["name"] == "memory_view")
    jsonschema.Draft202012Validator(view["function"]["parameters"]).validate({"path": None})
    with attach(tools._service, "acme/u/t", Session(), provider=lambda c: []):
        listing = tools.call("memory_view", {"path": None}, session=Session())  # null = absent
    assert listing["path"] == "" and listing["entries"] == []
