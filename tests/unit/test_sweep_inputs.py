"""``sweep``'s arguments are checked before anything runs: ``now`` a timezone-aware
datetime, ``limit`` and ``batch_size`` whole numbers in range; anything else is a
``SettingsError`` naming the argument (a string ``now`` or ``limit`` raised
``AttributeError`` / ``TypeError`` before)."""

from __future__ import annotations

from datetime import date, datetime

import pytest

from memfabric.adapters import open_memory_fabric
from memfabric.domain.errors import SettingsError


@pytest.mark.parametrize(("args", "named"), [
    ({"now": "2030-01-01T00:00:00Z"}, "now"), ({"now": 5}, "now"), ({"now": date(2030, 1, 1)}, "now"),
    ({"now": datetime(2030, 1, 1)}, "now"), ({"limit": "5"}, "limit"), ({"limit": 0}, "limit"),
    ({"limit": True}, "limit"), ({"batch_size": "10"}, "batch_size"), ({"batch_size": 2.5}, "batch_size"),
])
def test_bad_sweep_arguments_are_settings_errors(args: dict[str, object], named: str) -> None:
    with open_memory_fabric() as fab:
        fab.scope("acme", "u1").remember(kind="fact", content="User prefers metric units", retention="ephemeral")
        with pytest.raises(SettingsError, match=named):
            fab.sweep(**args)  # type: ignore[arg-type]
        assert fab.scope("acme", "u1").count() == 1


@pytest.mark.parametrize("window", ["99999999y", "1001y", 1e30, float("inf"), float("nan")])
def test_a_retention_window_out_of_range_is_a_validation_error(window: object) -> None:
    """A fresh user's finding (2026-12-04): ``retention={"operational": "99999999y"}``
    raised a bare ``OverflowError``; every window is at most 1,000 years."""
    from pydantic import ValidationError

    from memfabric.domain.retention import RetentionConfig

    with pytest.raises(ValidationError, match="operational"):
        RetentionConfig.of({"operational": window})
    assert RetentionConfig.of({"operational": "1000y"}).operational is not None
