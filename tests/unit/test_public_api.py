"""The public API list of docs/api.md (moved there from the README, issue 34) and
``memfabric.adapters.__all__`` name the same things, and every name imports."""

from __future__ import annotations

import re
from pathlib import Path

import memfabric.adapters as api

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def documented_names() -> set[str]:
    text = API_DOC.read_text(encoding="utf-8")
    section = text.split("## Public API", 1)[1].split("\n## ", 1)[0]
    bullets = [line for line in section.splitlines() if line.startswith("- ")]
    return {name for line in bullets for name in re.findall(r"`([A-Za-z_]\w*)`", line)}


def test_api_doc_lists_exactly_the_exported_names() -> None:
    assert documented_names() == set(api.__all__)


def test_every_exported_name_imports() -> None:
    missing = [name for name in api.__all__ if not hasattr(api, name)]
    assert missing == []


def test_errors_are_fabric_errors() -> None:
    errors = [getattr(api, n) for n in api.__all__ if n.endswith("Error")]
    assert errors and all(issubclass(e, api.FabricError) for e in errors)
