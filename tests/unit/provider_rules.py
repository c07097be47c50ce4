"""The providers' documented tool-schema rules, written down as data, and a checker.

Sources (as documented by each provider):

- Anthropic Messages API, tool use: a tool has ``name`` (``^[a-zA-Z0-9_-]{1,64}$``),
  ``description`` and ``input_schema``, a JSON Schema whose top level is
  ``type: object``; ``oneOf``, ``allOf`` and ``anyOf`` are refused at the top level.
- OpenAI function calling: ``function.name`` (same pattern), ``function.parameters``
  a JSON Schema object (``type: object``) with no combinator at the top level.
- OpenAI strict mode (Structured Outputs, ``"strict": true``): every object has
  ``additionalProperties: false`` and lists *all* its properties in ``required``; an
  optional field is expressed as a type array with ``"null"``; only the supported
  keywords per type may appear (strings: ``pattern``, ``format``; numbers:
  ``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``, ``multipleOf``;
  arrays: ``items``, ``minItems``, ``maxItems``; plus ``type``, ``description``,
  ``enum``, ``const``, ``properties``, ``required``, ``additionalProperties``).
- MCP tools spec: ``inputSchema`` is a JSON Schema object (``type: object``).
"""

from __future__ import annotations

import re
from typing import Any

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

ANTHROPIC_INPUT_SCHEMA: dict[str, Any] = {
    "root_type": "object",
    "root_forbidden": ("oneOf", "allOf", "anyOf"),
}
OPENAI_PARAMETERS: dict[str, Any] = {
    "root_type": "object",
    "root_forbidden": ("oneOf", "allOf", "anyOf", "not", "enum"),
}
OPENAI_STRICT: dict[str, Any] = {
    **OPENAI_PARAMETERS,
    "objects_closed": True,        # additionalProperties: false on every object
    "all_required": True,          # every property listed in required
    "keywords": {
        "string": {"type", "description", "enum", "const", "pattern", "format"},
        "integer": {"type", "description", "enum", "const", "minimum", "maximum",
                    "exclusiveMinimum", "exclusiveMaximum", "multipleOf"},
        "number": {"type", "description", "enum", "const", "minimum", "maximum",
                   "exclusiveMinimum", "exclusiveMaximum", "multipleOf"},
        "boolean": {"type", "description", "const"},
        "array": {"type", "description", "items", "minItems", "maxItems"},
        "object": {"type", "description", "properties", "required", "additionalProperties"},
    },
    "formats": {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"},
}
MCP_INPUT_SCHEMA: dict[str, Any] = {"root_type": "object", "root_forbidden": ()}


def _types(node: dict[str, Any]) -> list[str]:
    t = node.get("type")
    return [t] if isinstance(t, str) else list(t or [])


def violations(schema: Any, rules: dict[str, Any]) -> list[str]:
    """Every way ``schema`` breaks ``rules`` (empty: it complies)."""
    out: list[str] = []
    if not isinstance(schema, dict) or schema.get("type") != rules["root_type"]:
        return [f"top level: type must be {rules['root_type']!r}"]
    out += [f"top level: {k} is not allowed" for k in rules.get("root_forbidden", ()) if k in schema]
    if "keywords" in rules:
        out += _strict(schema, rules, "$", root=True)
    return out


def _strict(node: dict[str, Any], rules: dict[str, Any], where: str, *, root: bool = False) -> list[str]:
    out: list[str] = []
    types = _types(node)
    if not types:
        return [f"{where}: no type"]
    real = [t for t in types if t != "null"]
    if len(real) != 1 or (root and "null" in types):
        return [f"{where}: one JSON type (optionally with null) expected, got {types}"]
    kind = real[0]
    allowed = rules["keywords"].get(kind, set())
    out += [f"{where}: keyword {k!r} is not supported for {kind}" for k in node if k not in allowed]
    if kind == "string" and "format" in node and node["format"] not in rules["formats"]:
        out.append(f"{where}: format {node['format']!r} is not supported")
    if kind == "object":
        props = node.get("properties", {})
        if rules["objects_closed"] and node.get("additionalProperties") is not False:
            out.append(f"{where}: additionalProperties must be false")
        if rules["all_required"] and set(node.get("required", [])) != set(props):
            out.append(f"{where}: every property must be required (optional ones nullable)")
        for name, sub in props.items():
            out += _strict(sub, rules, f"{where}.{name}")
    if kind == "array" and isinstance(node.get("items"), dict):
        out += _strict(node["items"], rules, f"{where}[]")
    return out
