"""Rich progress bars for the command line (presentation stays in the entry points)."""

from __future__ import annotations

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


class _Rate(ProgressColumn):
    """Events per second of a task."""

    def render(self, task: Task) -> Text:
        if task.fields.get("unit", "events") != "events":
            return Text("")
        speed = task.finished_speed or task.speed
        return Text("-- ev/s" if speed is None else f"{speed:,.0f} ev/s", style="progress.data.speed")


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
