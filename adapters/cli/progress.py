"""Rich progress bars for the command line (presentation stays in the entry points)."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text


_RATE_UNITS = {"events": "ev/s", "notes": "rows/s"}


class _Rate(ProgressColumn):
    """Events (or notes: rows) per second of a task."""

    def render(self, task: Task) -> Text:
        unit = _RATE_UNITS.get(str(task.fields.get("unit", "events")))
        if unit is None:
            return Text("")
        speed = task.finished_speed or task.speed
        return Text(f"-- {unit}" if speed is None else f"{speed:,.0f} {unit}", style="progress.data.speed")


class RichReporter:
    """A rich progress bar per task (events/s and ETA); use as a context manager."""

    def __init__(self, console: Console | None = None) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), _Rate(),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            console=console, transient=False,
        )

    def __enter__(self) -> RichReporter:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def task(self, description: str, total: int | None, unit: str = "events") -> Callable[[int], None]:
        task_id = self.progress.add_task(description, total=total, unit=unit)
        return lambda n: self.progress.advance(task_id, n)


class LineReporter:
    """Progress as plain lines (for a log, not a terminal): at most one line per
    ``every`` seconds per task, ``label: done/total unit, rate/s, ETA s``, and one when
    the task completes."""

    def __init__(self, console: Console, every: float = 5.0) -> None:
        self.console = console
        self.every = every

    def task(self, description: str, total: int | None, unit: str = "events") -> Callable[[int], None]:
        started = last = time.monotonic()
        done = 0

        def advance(n: int) -> None:
            nonlocal done, last
            done += n
            now = time.monotonic()
            finished = total is not None and done >= total
            if now - last < self.every and not finished:
                return
            last = now
            rate = done / max(now - started, 1e-9)
            eta = f", ETA {(total - done) / rate:.0f}s" if total and rate > 0 and not finished else ""
            of = f"/{total:,}" if total is not None else ""
            self.console.print(f"{description}: {done:,}{of} {unit}, {rate:,.0f}/s{eta}")

        return advance
