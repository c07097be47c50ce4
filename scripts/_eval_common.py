"""Shared helpers for the evaluation scripts (``eval_locomo.py``, ``eval_temporal.py``).

Nothing here is part of the memfabric package: these helpers only locate the
evaluation data (which lives *outside* the repository, in ``../shared/data``),
open a throw-away fabric, and print / write results.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import sys
import tempfile
import random
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


def default_data_path(*parts: str) -> Path:
    """Path of a data file under ``<repo>/../shared/data``."""
    return SHARED_DATA.joinpath(*parts)


def load_json(path: Path) -> Any:
    if not path.is_file():
        sys.exit(f"data file not found: {path} (pass --data PATH)")
    with path.open(encoding="utf-8") as fh:
        return json.load(fh)


# --------------------------------------------------------------------------- fabric


def import_fabric():
    """Return ``open_fabric`` or exit with a readable message."""
    try:
        from memfabric.adapters import open_fabric  # type: ignore[attr-defined]
    except ImportError as exc:  # pragma: no cover - depends on the install
        sys.exit(f"memfabric public API not importable ({exc}); install memfabric first")
    return open_fabric


EMBEDDERS = ("hash", "wordllama", "minilm")


def make_embedder(name: str):
    """``hash`` (default, deterministic), ``wordllama`` or ``minilm`` (each needs its extra)."""
    from memfabric.adapters.embedders import embedder_from_name

    try:
        return embedder_from_name(name)
    except ImportError as exc:  # the optional extra is not installed
        sys.exit(f"embedder {name!r} needs its extra ({exc}); pip install 'memfabric[{name}]'")


@contextlib.contextmanager
def fabric_session(
    *,
    dsn: str | None,
    embedder_name: str,
    consolidate: bool,
    data_dir: str | None,
    threshold: float | None = None,
) -> Iterator[Any]:
    """Open a fabric.  Without a DSN an embedded PostgreSQL runs in ``data_dir``.

    ``threshold`` overrides the supersession cosine threshold (library default 0.85)."""
    open_fabric = import_fabric()
    kwargs: dict[str, Any] = {
        "dsn": dsn,
        "embedder": make_embedder(embedder_name),
        "consolidate": {"threshold": threshold} if (consolidate and threshold is not None) else consolidate,
    }
    if dsn is None and data_dir is not None:
        params = inspect.signature(open_fabric).parameters
        if "data_dir" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
            kwargs["data_dir"] = data_dir
        else:  # fall back on the documented environment variable
            os.environ["MEMFABRIC_HOME"] = data_dir
    with open_fabric(**kwargs) as fabric:
        yield fabric


@contextlib.contextmanager
def scratch_dir(keep: str | None = None) -> Iterator[str]:
    """A fresh directory for the embedded database (removed afterwards)."""
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix="memfabric-eval-") as tmp:
        yield tmp


_IDS = random.Random()


def new_tenant(prefix: str) -> str:
    """``prefix`` and 10 hex digits: random, or of the seeded sequence after :func:`fixed_ids`."""
    return f"{prefix}-{_IDS.getrandbits(40):010x}"


def fixed_ids(seed: int = 0) -> None:
    """Make an evaluation repeatable (issue 29): tenant names and the ids of notes written
    without one come from a generator seeded with ``seed`` instead of ``uuid4``. A note's
    aggregate id is derived from its scope and id, and recall breaks ties of equal score
    (and the lists' cuts, and expansion's cut at equal edge weight) by it, so with
    random ids the same evaluation ranked tied notes differently from run to run."""
    from memfabric.domain import inputs, remember

    _IDS.seed(seed)

    def seeded_id() -> str:
        while True:
            candidate = f"{_IDS.getrandbits(48):012x}"
            if not inputs.is_block_id(candidate):
                return candidate

    remember.new_note_id = seeded_id


def remember_all(notes: Any, items: Sequence[dict[str, Any]]) -> list[Any]:
    """``remember_many`` when the scope has it, else one ``remember`` per item."""
    many = getattr(notes, "remember_many", None)
    if many is not None:
        out = list(many(list(items)))
        if len(out) != len(items):
            raise RuntimeError(
                f"remember_many returned {len(out)} notes for {len(items)} items"
            )
        return out
    return [notes.remember(**item) for item in items]


def attr(obj: Any, name: str, default: Any = None) -> Any:
    """Read a field from a dataclass / pydantic object or a mapping."""
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def note_id(note: Any) -> str:
    return str(attr(note, "id"))


def source_ids(note: Any) -> list[str]:
    return [str(s) for s in (attr(note, "source_entry_ids") or [])]


class Timer:
    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def __call__(self) -> float:
        return time.perf_counter() - self.t0


# --------------------------------------------------------------------------- output


def write_json(path: str | None, payload: dict[str, Any]) -> None:
    if not path:
        return
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    print(f"wrote {out}")


def fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A rich table when rich is installed, plain text otherwise."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # pragma: no cover
        print(title)
        print("  ".join(columns))
        for row in rows:
            print("  ".join(fmt(c) for c in row))
        return
    table = Table(title=title)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*(fmt(c) for c in row))
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    console.print(table)
