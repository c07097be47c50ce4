"""The file jail (pure: a temporary directory, no database)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from memfabric.adapters import jail as jail_mod
from memfabric.adapters.jail import FileJail, FilePathError, JailError
from memfabric.domain.errors import CapacityError
from pydantic import ValidationError


def snapshot(root: Path) -> dict[str, str]:
    """Every path below ``root`` (symlinks not followed) with a digest of its content."""
    out: dict[str, str] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_file():
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[rel] = "dir"
    return out


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret")
    (root / "notes").mkdir()
    (root / "notes" / "a.md").write_text("hello")
    return root, outside


ESCAPES = ["../outside/secret.txt", "notes/../../outside/secret.txt", "/etc/passwd",
           "..", "notes/..", "a/../b.md"]


@pytest.mark.parametrize("path", ESCAPES)
def test_lexical_escapes_refused(tree: tuple[Path, Path], path: str) -> None:
    root, _outside = tree
    j = FileJail(root)
    before = snapshot(root.parent)
    with pytest.raises(JailError):
        j.read(path)
    with pytest.raises(JailError):
        j.append(path, "x")
    with pytest.raises(JailError):
        j.listdir(path)
    assert snapshot(root.parent) == before


def test_absolute_path_inside_root_is_still_refused(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    with pytest.raises(JailError):
        FileJail(root).read(str(root / "notes" / "a.md"))


def test_symlink_file_refused(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    (root / "leak.txt").symlink_to(outside / "secret.txt")
    (root / "alias.md").symlink_to(root / "notes" / "a.md")  # even pointing inside
    j = FileJail(root)
    before = snapshot(root.parent)
    for p in ("leak.txt", "alias.md"):
        with pytest.raises(JailError):
            j.read(p)
        with pytest.raises(JailError):
            j.append(p, "x")
    assert snapshot(root.parent) == before
    assert (outside / "secret.txt").read_text() == "top secret"


def test_symlink_directory_refused(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    (root / "out").symlink_to(outside, target_is_directory=True)
    j = FileJail(root)
    before = snapshot(root.parent)
    with pytest.raises(JailError):
        j.listdir("out")
    with pytest.raises(JailError):
        j.read("out/secret.txt")
    with pytest.raises(JailError):
        j.append("out/new.txt", "x")
    with pytest.raises(JailError):
        j.append("out/deeper/new.txt", "x")
    assert snapshot(root.parent) == before
    assert not (outside / "new.txt").exists()


def test_symlink_planted_between_check_and_use(tree: tuple[Path, Path],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The real-path check passes, then ``notes`` is swapped for a symlink to the
    outside before the walk: the ``O_NOFOLLOW`` walk refuses it."""
    root, outside = tree
    (outside / "a.md").write_text("outside a")
    j = FileJail(root)
    original = FileJail.check_real

    def check_then_swap(self: FileJail, parts: tuple[str, ...]) -> None:
        original(self, parts)
        (root / "notes" / "a.md").unlink()
        (root / "notes").rmdir()
        (root / "notes").symlink_to(outside, target_is_directory=True)

    monkeypatch.setattr(FileJail, "check_real", check_then_swap)
    with pytest.raises(JailError):
        j.append("notes/a.md", "planted")
    assert (outside / "a.md").read_text() == "outside a"
    monkeypatch.setattr(FileJail, "check_real", original)
    os.unlink(root / "notes")
    (root / "notes").mkdir()
    (root / "notes" / "a.md").write_text("hello")

    def check_then_swap_file(self: FileJail, parts: tuple[str, ...]) -> None:
        original(self, parts)
        (root / "notes" / "a.md").unlink()
        (root / "notes" / "a.md").symlink_to(outside / "secret.txt")

    monkeypatch.setattr(FileJail, "check_real", check_then_swap_file)
    with pytest.raises(JailError):
        j.read("notes/a.md")
    with pytest.raises(JailError):
        j.append("notes/a.md", "planted")
    assert (outside / "secret.txt").read_text() == "top secret"


def test_root_replaced_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    j = FileJail(root)
    root.rename(tmp_path / "moved")
    root.mkdir()
    with pytest.raises(JailError):
        j.listdir()


def test_root_must_be_a_directory_and_cap_bounded(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(JailError):
        FileJail(tmp_path / "f")
    with pytest.raises(JailError):
        FileJail(tmp_path / "missing")
    with pytest.raises(ValidationError):
        FileJail(tmp_path, max_file_bytes=1024 * 1024 + 1)
    with pytest.raises(ValidationError):
        FileJail(tmp_path, max_file_bytes=0)
    assert FileJail(tmp_path, max_file_bytes=1024 * 1024).max_file_bytes == 1024 * 1024


def test_append_newline_rule_and_parent_creation(tmp_path: Path) -> None:
    j = FileJail(tmp_path)
    r = j.append("deep/er/log.md", "first")
    assert r.created and not r.newline_added and r.size == 5
    assert (tmp_path / "deep" / "er").is_dir()
    r = j.append("deep/er/log.md", "second")
    assert r.newline_added and r.written == 7
    r = j.append("deep/er/log.md", "\nthird")
    assert not r.newline_added
    assert (tmp_path / "deep/er/log.md").read_text() == "first\nsecond\nthird"
    (tmp_path / "empty.md").write_text("")
    j.append("empty.md", "only")
    assert (tmp_path / "empty.md").read_text() == "only"




def test_append_caps(tmp_path: Path) -> None:
    j = FileJail(tmp_path, max_file_bytes=10)
    j.append("f.md", "12345")
    r = j.append("f.md", "678")  # 5 + 1 + 3 = 9
    assert r.size == 9
    before = snapshot(tmp_path)
    with pytest.raises(CapacityError):
        j.append("f.md", "ab")  # 9 + 1 + 2 = 12 > 10
    with pytest.raises(CapacityError):
        j.append("new/dir/g.md", "x" * 11)  # refused before the folders are made
    assert snapshot(tmp_path) == before
    r = j.append("f.md", "\n")  # exactly 10
    assert r.size == 10


def test_read_is_bounded_and_flags_truncation(tmp_path: Path) -> None:
    j = FileJail(tmp_path, max_file_bytes=1024)
    big = tmp_path / "huge.bin"
    with open(big, "wb") as f:  # a sparse 1 GiB file
        f.truncate(1024 ** 3)
    reads: list[int] = []
    real_read = os.read

    def counting_read(fd: int, n: int) -> bytes:
        reads.append(n)
        return real_read(fd, n)

    jail_mod.os.read = counting_read  # type: ignore[assignment]
    try:
        res = j.read("huge.bin")
    finally:
        jail_mod.os.read = real_read  # type: ignore[assignment]
    assert res.truncated and len(res.data) == 1024 and res.size == 1024 ** 3
    assert sum(reads) <= 1025 + 65536
    (tmp_path / "small.md").write_text("tiny")
    res = j.read("small.md")
    assert res.data == b"tiny" and not res.truncated
    (tmp_path / "exact.md").write_bytes(b"x" * 1024)
    assert not j.read("exact.md").truncated


def test_read_refuses_non_regular_files(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    j = FileJail(tmp_path)
    with pytest.raises(FilePathError):
        j.read("fifo")  # never blocks
    with pytest.raises(FilePathError):
        j.read("dir")
    with pytest.raises(FilePathError):
        j.read("missing.md")
    with pytest.raises(FilePathError):
        j.append("fifo", "x")


def test_listdir(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("12345")
    (tmp_path / "a").mkdir()
    (tmp_path / "link").symlink_to("/etc")
    j = FileJail(tmp_path)
    listing = j.listdir()
    names = [(e.name, e.type) for e in listing.entries]
    assert names == [("a", "dir"), ("b.md", "file"), ("link", "symlink")]
    assert listing.entries[1].size == 5 and listing.entries[2].size is None
    before = snapshot(tmp_path)
    with pytest.raises(FilePathError):
        j.listdir("nope/deeper")
    assert snapshot(tmp_path) == before  # view creates nothing


def test_listdir_at_most_200(tmp_path: Path) -> None:
    for i in range(250):
        (tmp_path / f"f{i:03d}").write_text("")
    listing = FileJail(tmp_path).listdir()
    assert len(listing.entries) == 200 and listing.total == 250 and listing.truncated
    assert listing.entries[0].name == "f000" and listing.entries[-1].name == "f199"


def test_write_rename_remove(tmp_path: Path) -> None:
    j = FileJail(tmp_path)
    assert j.write("d/x.md", b"one", exclusive=True)
    with pytest.raises(FilePathError):
        j.write("d/x.md", b"two", exclusive=True)
    assert not j.write("d/x.md", b"two")
    assert (tmp_path / "d/x.md").read_bytes() == b"two"
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["x.md"]  # no temp file left
    j.write("d/sub/y.md", b"y")
    assert j.files_under("d") == ["d/sub/y.md", "d/x.md"]
    j.rename("d", "e/f")
    assert j.files_under("e/f") == ["e/f/sub/y.md", "e/f/x.md"]
    with pytest.raises(FilePathError):
        j.rename("e/f/x.md", "e/f/sub/y.md")  # target exists
    with pytest.raises(FilePathError):
        j.rename("e/f", "e/f/inside")
    j.remove("e")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "out").symlink_to("/etc")
    with pytest.raises(JailError):
        j.remove("out/passwd")
    with pytest.raises(JailError):
        j.rename("out", "x")
    assert (tmp_path / "out").is_symlink()
