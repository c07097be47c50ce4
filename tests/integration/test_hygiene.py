"""Issue 19: process hygiene — no library configures logging, ``<erased>`` only for
fields an event had, and the test session's data directory is removed."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from memfabric.adapters import Fabric
from memfabric.adapters.audit import read_log


@pytest.mark.skipif(importlib.util.find_spec("wordllama") is None, reason="extra wordllama not installed")
def test_loading_wordllama_leaves_root_logging_alone() -> None:
    code = (
        "import logging\n"
        "from memfabric.adapters.embedders import WordLlamaEmbedder\n"
        "e = WordLlamaEmbedder()\n"
        "assert e.embed(['hello world']).shape == (1, e.dim)\n"
        "root = logging.getLogger()\n"
        "assert root.handlers == [], root.handlers\n"
        "assert root.level == logging.WARNING, root.level\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def test_root_handlers_of_the_host_are_kept() -> None:
    import logging

    from memfabric.adapters.embedders import quiet_logging_config

    root = logging.getLogger()
    mine = logging.NullHandler()
    root.addHandler(mine)
    before = root.level
    try:
        with quiet_logging_config():
            root.removeHandler(mine)
            logging.basicConfig(level=logging.DEBUG)
        assert mine in root.handlers and root.level == before
        assert all(h is mine or h in root.handlers for h in root.handlers)
    finally:
        root.removeHandler(mine)


def test_erased_lists_only_fields_the_event_had(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u1")
    fact = notes.remember(kind="fact", content="User prefers metric units")
    file = notes.remember(kind="file", path="src/app.py", content="entry point")
    notes.forget(id=fact.id)
    notes.forget(id=file.id)
    remembered = notes.history(fact.id)[0]
    assert remembered.type == "Remembered"
    assert "content" in remembered.erased and "path" not in remembered.erased
    assert remembered.fields["path"] is None and remembered.fields["content"] == "<erased>"
    file_event = notes.history(file.id)[0]
    assert "path" in file_event.erased and file_event.fields["path"] == "<erased>"
    logged = [e for e in read_log(fabric, note=fact.id) if e.type == "Remembered"]
    assert "path" not in logged[0].erased and logged[0].fields["path"] is None


def test_protected_fields_still_round_trip_before_forget(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u1")
    n = notes.remember(kind="fact", content="User likes green tea", context="chat")
    entry = notes.history(n.id)[0]
    assert entry.fields["content"] == "User likes green tea" and entry.fields["path"] is None
    assert entry.fields["context"] == "chat" and entry.erased == ()
