"""Issue 27 item 6: what ``memfabric projections run`` prints (``cli_admin.RunLog``),
on a fake clock: never a line per event; a line per full batch of a long catch-up, per
large catch-up, and one summary per interval."""

from __future__ import annotations

from typing import Any

from memfabric.adapters.cli.admin import RunLog


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run_log(interval: float = 10.0) -> tuple[RunLog, Clock, list[tuple[str, dict[str, Any]]]]:
    lines: list[tuple[str, dict[str, Any]]] = []
    clock = Clock()
    return RunLog(lambda kind, fields: lines.append((kind, fields)), interval=interval, clock=clock), clock, lines


def test_a_trickle_of_single_events_prints_one_summary_per_interval() -> None:
    show, clock, lines = run_log(interval=10.0)
    show({"recall_index": 0})
    for i in range(1, 3001):  # one event per catch-up, 0.1 s apart: 300 s
        clock.now = i * 0.1
        show({"recall_index": i})
    kinds = [k for k, _ in lines]
    assert kinds[0] == "caught_up" and set(kinds[1:]) == {"summary"}, kinds[:5]
    assert 29 <= len(kinds) - 1 <= 30, len(kinds)  # 300 s / 10 s, never 3000 lines
    assert sum(f["events"] for k, f in lines if k == "summary") == sum(f["catch_ups"] for k, f in lines[1:]) >= 2990
    assert all(9.9 <= f["seconds"] <= 10.1 for _, f in lines[1:]), lines[1:3]


def test_a_large_catch_up_prints_its_batches_and_one_line() -> None:
    show, clock, lines = run_log(interval=60.0)
    show({"recall_index": 10, "link_graph": 10})
    for pos in (2010, 4010):  # the runner reports each full batch of a long catch-up
        show.progress("recall_index", 2000, pos)
    clock.now = 5.0
    show({"recall_index": 5010, "link_graph": 5010})
    assert [k for k, _ in lines] == ["caught_up", "progress", "progress", "batch"]
    assert lines[1][1] == {"projection": "recall_index", "events": 2000, "position": 2010}
    assert lines[3][1]["events"] == 5000 and lines[3][1]["seconds"] == 5.0
    clock.now = 6.0
    show({"recall_index": 5010, "link_graph": 5010})  # nothing new, before the interval: silent
    assert len(lines) == 4
    show.summary({"recall_index": 5010, "link_graph": 5010})  # on stop
    assert lines[-1][0] == "summary" and lines[-1][1]["events"] == 5000 and lines[-1][1]["catch_ups"] == 1
