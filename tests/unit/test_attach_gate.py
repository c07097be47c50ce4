"""The attach gate (pure: no database)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest
from memfabric.domain.attach import (
    AttachConfig,
    Attachment,
    AttachSettings,
    NotAttachedError,
    SessionError,
    attach,
    check_session,
    gate_for,
)
from memfabric.domain.errors import FabricError


@dataclass
class Session:
    id: str

    def entries(self) -> list[str]:
        return []


class Owner:
    """Stands in for a fabric's service object."""

    attach_config: AttachConfig | None = None


def _attach(owner: object, session: object, **kw: object) -> Attachment:
    return attach(owner, "acme/u/t", session, provider=lambda current: ["ctx", current], **kw)


def test_errors_are_fabric_errors() -> None:
    assert issubclass(NotAttachedError, FabricError)
    assert issubclass(SessionError, FabricError)


@pytest.mark.parametrize("bad", [None, "s1", 42, object(), Session(id=""),
                                 type("S", (), {"id": 7})(),
                                 type("S", (), {"id": "s", "entries": ["x"]})()])
def test_not_a_session_fails_closed(bad: object) -> None:
    owner = Owner()
    with pytest.raises(SessionError):
        _attach(owner, bad)
    assert not gate_for(owner).is_attached("s", "acme/u/t")


def test_session_with_callable_entries_or_none_is_accepted() -> None:
    assert check_session(Session("s1")) == "s1"
    assert check_session(type("S", (), {"id": "s2"})()) == "s2"


def test_configured_session_only() -> None:
    owner = Owner()
    owner.attach_config = AttachConfig(session_id="s1")
    with pytest.raises(SessionError):
        _attach(owner, Session("s2"))
    assert not gate_for(owner).is_attached("s2", "acme/u/t")
    with _attach(owner, Session("s1")):
        assert gate_for(owner).is_attached("s1", "acme/u/t")


def test_settings_default_all_off_and_frozen() -> None:
    att = _attach(Owner(), Session("s1"))
    assert att.settings == AttachSettings(linker=False, evolution=False, passive=False)
    with pytest.raises(AttributeError):
        att.settings.linker = True  # type: ignore[misc]
    owner = Owner()
    owner.attach_config = AttachConfig(settings=AttachSettings(passive=True))
    assert _attach(owner, Session("s1")).settings.passive is True


def test_gate_opens_and_closes() -> None:
    owner = Owner()
    gate = gate_for(owner)
    session = Session("s1")
    assert not gate.is_attached(session, "acme/u/t")
    with pytest.raises(NotAttachedError):
        gate.require(session, "acme/u/t")
    att = _attach(owner, session)
    assert gate.is_attached(session, "acme/u/t") and gate.is_attached("s1", "acme/u/t")
    assert not gate.is_attached(session, "acme/u/other")  # bound to its scope
    assert not gate.is_attached(Session("s2"), "acme/u/t")
    assert att.context_provider("q") == ["ctx", "q"]
    att.detach()
    att.detach()  # idempotent
    assert not gate.is_attached(session, "acme/u/t")
    with pytest.raises(NotAttachedError):
        att.context_provider("q")


def test_context_manager_detaches() -> None:
    owner = Owner()
    with _attach(owner, Session("s1")) as att:
        assert att.active
    assert not att.active
    assert not gate_for(owner).is_attached("s1", "acme/u/t")


def test_two_attachments_of_one_session_are_independent() -> None:
    owner = Owner()
    a, b = _attach(owner, Session("s1")), _attach(owner, Session("s1"))
    a.detach()
    assert gate_for(owner).is_attached("s1", "acme/u/t")
    b.detach()
    assert not gate_for(owner).is_attached("s1", "acme/u/t")


def test_signal_closes_the_gate() -> None:
    owner = Owner()
    signal = threading.Event()
    att = _attach(owner, Session("s1"), signal=signal)
    assert gate_for(owner).is_attached("s1", "acme/u/t")
    signal.set()
    assert not gate_for(owner).is_attached("s1", "acme/u/t")
    assert not att.active
    signal.clear()  # closed for good, as by detach()
    assert not gate_for(owner).is_attached("s1", "acme/u/t")


def test_signal_already_set_and_bad_signal() -> None:
    owner = Owner()
    ev = threading.Event()
    ev.set()
    assert not _attach(owner, Session("s1"), signal=ev).active
    with pytest.raises(SessionError):
        _attach(owner, Session("s1"), signal="stop")
    assert not gate_for(owner).is_attached("s1", "acme/u/t")


def test_gates_are_per_fabric() -> None:
    a, b = Owner(), Owner()
    with _attach(a, Session("s1")):
        assert not gate_for(b).is_attached("s1", "acme/u/t")


def test_attach_starts_no_thread() -> None:
    before = set(threading.enumerate())
    with _attach(Owner(), Session("s1"), signal=threading.Event()):
        assert set(threading.enumerate()) == before
