"""A file jail: every file operation of the memory tools stays inside one root directory.

Paths are relative, ``/``-separated and lexically checked first: absolute paths,
``..`` segments, NUL characters and paths over 1024 characters are refused
(:class:`JailError`). Then the real path of the longest existing ancestor of the
target is re-checked against the root (a symlink anywhere on the way, the target
included, is refused), and the operation itself walks from the root one component at
a time with ``openat``-style calls (``dir_fd``) and ``O_NOFOLLOW``: a symlink planted
between the check and the use makes the open fail (``ELOOP``/``ENOTDIR``) and is
refused the same way. The root's device and inode are pinned at construction.

Reads are bounded before anything is held (at most ``cap + 1`` bytes are read from a
file of any size); appends are refused before a byte is written when the file would
grow past ``max_file_bytes``. Only regular files with a single link are read or
written, checked on the opened descriptor (FIFOs and devices are refused without
blocking; a file with a hard link elsewhere, which may lie outside the root, is refused,
issue 28). A path changed while an operation runs (a symlink swapped in, a file removed)
is a typed error too: ``JailError`` or ``FilePathError``, never a bare ``OSError``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import heapq
import os
import stat
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar, cast

from memfabric.domain.errors import CapacityError, FabricError
from pydantic import Field, TypeAdapter

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "HARD_MAX_FILE_BYTES",
    "MAX_VIEW_ENTRIES",
    "AppendResult",
    "DirEntry",
    "FileJail",
    "FilePathError",
    "JailError",
    "Listing",
    "ReadResult",
]

DEFAULT_MAX_FILE_BYTES = 50 * 1024
HARD_MAX_FILE_BYTES = 1024 * 1024
MAX_VIEW_ENTRIES = 200
MAX_PATH_CHARS = 1024

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_DIR_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
_MAX_BYTES: TypeAdapter[int] = TypeAdapter(
    Annotated[int, Field(strict=True, ge=1, le=HARD_MAX_FILE_BYTES)]
)


def check_max_file_bytes(value: int) -> int:
    """``value`` when it is an int in 1 B - 1 MiB, else ``pydantic.ValidationError``."""
    return _MAX_BYTES.validate_python(value)


class JailError(FabricError):
    """A path would leave the jail (absolute, ``..``, a symlink on the way), or there
    is no jail (the tools were made without ``root``). Nothing was touched."""


class FilePathError(FabricError):
    """A path inside the jail does not name what the operation needs (missing, not a
    directory, not a regular file, already exists)."""


@dataclass(frozen=True, slots=True)
class DirEntry:
    """One entry of a listing: ``type`` is ``file``, ``dir``, ``symlink`` or ``other``;
    ``size`` in bytes (``None`` for a symlink, which is never followed)."""

    name: str
    type: str
    size: int | None


@dataclass(frozen=True, slots=True)
class Listing:
    """A directory listing: ``entries`` sorted by name, at most ``limit``;
    ``total`` entries in the directory; ``truncated`` when some were left out."""

    path: str
    entries: list[DirEntry]
    total: int
    truncated: bool


@dataclass(frozen=True, slots=True)
class ReadResult:
    """``data`` (at most ``cap`` bytes), ``size`` of the file, ``truncated`` when cut."""

    path: str
    data: bytes
    size: int
    truncated: bool


@dataclass(frozen=True, slots=True)
class AppendResult:
    """``written`` bytes (separator included), the file's new ``size``, whether it was
    ``created`` and whether a separating newline was added."""

    path: str
    written: int
    size: int
    created: bool
    newline_added: bool


_SWAPPED = frozenset({errno.ELOOP, errno.EINVAL, errno.ENOTDIR, errno.EXDEV, errno.EISDIR, errno.EMLINK})
"""``errno`` values of an operation whose path changed under it (a symlink or another
directory swapped in between the checks and the use)."""

_F = TypeVar("_F", bound=Callable[..., Any])


def _typed(method: _F) -> _F:
    """Issue 28, defect 9: an ``OSError`` escaping a jail operation (its path changed
    while it ran: a symlink swapped in, a file removed) becomes typed:
    ``FilePathError`` for a file gone (``ENOENT``) or another failure (its strerror),
    ``JailError`` for :data:`_SWAPPED` errnos. Typed errors pass through."""
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except FabricError:
            raise
        except FileNotFoundError:
            raise FilePathError("path: a file or directory on the way was removed while "
                                "the operation ran") from None
        except OSError as exc:
            if exc.errno in _SWAPPED:
                raise JailError("path: it changed while the operation ran (a symlink or "
                                f"directory swapped in?): {exc.strerror}; refused") from None
            raise FilePathError(f"path: {exc.strerror or exc}") from None
    return cast(_F, wrapper)


def _split(path: str | None, *, allow_root: bool) -> tuple[str, ...]:
    if path is None:
        path = ""
    if not isinstance(path, str):
        raise JailError("path: must be a string")
    if "\x00" in path:
        raise JailError("path: must not contain NUL characters")
    if len(path) > MAX_PATH_CHARS:
        raise JailError(f"path: longer than {MAX_PATH_CHARS} characters")
    if path.startswith(("/", "\\")):
        raise JailError("path: must be relative to the memory root, not absolute")
    parts = tuple(p for p in path.split("/") if p not in ("", "."))
    if ".." in parts:
        raise JailError("path: '..' segments are not allowed")
    if not parts and not allow_root:
        raise JailError("path: names the root directory, not a file")
    return parts


class FileJail:
    """File operations confined to ``root`` (an existing directory; its real path is
    taken once and its device/inode pinned). ``max_file_bytes`` (1 B - 1 MiB, default
    50 KiB) caps reads and the size appends and writes may grow a file to."""

    def __init__(self, root: str | os.PathLike[str], *,
                 max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> None:
        self.max_file_bytes = check_max_file_bytes(max_file_bytes)
        real = os.path.realpath(os.fspath(root))
        try:
            st = os.stat(real)
        except OSError as exc:
            raise JailError(f"root: {exc.strerror or 'cannot be used'}") from None
        if not stat.S_ISDIR(st.st_mode):
            raise JailError("root: not a directory")
        self.root = real
        self._pin = (st.st_dev, st.st_ino)

    # ------------------------------------------------------------- checking
    def parts(self, path: str | None, *, allow_root: bool = False) -> tuple[str, ...]:
        """The lexically checked components of ``path`` (``JailError`` on escape)."""
        return _split(path, allow_root=allow_root)

    @staticmethod
    def relpath(parts: tuple[str, ...]) -> str:
        """The canonical relative path (``a/b.md``) of checked components."""
        return "/".join(parts)

    def check_real(self, parts: tuple[str, ...]) -> None:
        """Re-check the real path of the longest existing ancestor of ``parts``
        (itself included): it must be exactly the root joined with the same
        components, so no symlink lies on the way. ``JailError`` otherwise."""
        for n in range(len(parts), -1, -1):
            candidate = os.path.join(self.root, *parts[:n])
            if os.path.lexists(candidate):
                if os.path.realpath(candidate) != candidate:
                    raise JailError("path: a symlink on the way leads out of the jail or "
                                    "aliases another path; symlinks are refused")
                return
        raise JailError("root: the memory root is gone")  # pragma: no cover

    @contextlib.contextmanager
    def _root_fd(self) -> Iterator[int]:
        fd = os.open(self.root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != self._pin:
                raise JailError("root: the memory root was replaced")
            yield fd
        finally:
            os.close(fd)

    @staticmethod
    def _refuse(name: str, dfd: int, exc: OSError) -> FabricError:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            return JailError(f"path: {name!r} is a symlink; symlinks are refused")
        try:
            if stat.S_ISLNK(os.lstat(name, dir_fd=dfd).st_mode):
                return JailError(f"path: {name!r} is a symlink; symlinks are refused")
        except OSError:
            pass
        if exc.errno == errno.ENOTDIR:
            return FilePathError(f"path: {name!r} is not a directory")
        if exc.errno == errno.ENOENT:
            return FilePathError(f"path: {name!r} does not exist")
        return FilePathError(f"path: {name!r}: {exc.strerror}")

    @contextlib.contextmanager
    def _dir(self, parts: tuple[str, ...], *, create: bool = False) -> Iterator[int]:
        """An fd of the directory ``parts``, opened component by component with
        ``O_NOFOLLOW`` (missing components are made when ``create``)."""
        with self._root_fd() as root_fd:
            fd = os.dup(root_fd)
        try:
            for name in parts:
                try:
                    nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise FilePathError(f"path: {name!r} does not exist") from None
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o700, dir_fd=fd)
                    try:
                        nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
                    except OSError as exc:
                        raise self._refuse(name, fd, exc) from None
                except OSError as exc:
                    raise self._refuse(name, fd, exc) from None
                os.close(fd)
                fd = nfd
            yield fd
        finally:
            os.close(fd)

    def _exists_dir(self, parts: tuple[str, ...]) -> bool:
        try:
            with self._dir(parts):
                return True
        except FilePathError:
            return False

    # ---------------------------------------------------------------- reads
    @_typed
    def listdir(self, path: str | None = None, *, limit: int = MAX_VIEW_ENTRIES) -> Listing:
        """List a directory (default the root): at most ``limit`` entries by name,
        with their types and byte sizes; symlinks are listed, never followed.
        Creates nothing."""
        parts = self.parts(path, allow_root=True)
        self.check_real(parts)
        with self._dir(parts) as dfd:
            total = 0
            names: list[tuple[str, str, int | None]] = []

            def rows() -> Iterator[tuple[str, str, int | None]]:
                nonlocal total
                with os.scandir(dfd) as it:
                    for entry in it:
                        total += 1
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            yield entry.name, "other", None
                            continue
                        if stat.S_ISLNK(st.st_mode):
                            yield entry.name, "symlink", None
                        elif stat.S_ISDIR(st.st_mode):
                            yield entry.name, "dir", st.st_size
                        elif stat.S_ISREG(st.st_mode):
                            yield entry.name, "file", st.st_size
                        else:
                            yield entry.name, "other", None

            names = heapq.nsmallest(limit, rows(), key=lambda r: r[0])
        entries = [DirEntry(name, kind, size) for name, kind, size in names]
        return Listing(self.relpath(parts), entries, total, total > len(entries))

    @_typed
    def read(self, path: str, *, cap: int | None = None) -> ReadResult:
        """Read a regular file, at most ``cap`` bytes (default ``max_file_bytes``):
        never more than ``cap + 1`` bytes are read, whatever the file's size."""
        limit = self.max_file_bytes if cap is None else cap
        parts = self.parts(path)
        self.check_real(parts)
        with self._dir(parts[:-1]) as dfd, self._open_file(parts[-1], dfd, os.O_RDONLY) as fd:
            size = os.fstat(fd).st_size
            chunks: list[bytes] = []
            got = 0
            while got <= limit:
                chunk = os.read(fd, min(65536, limit + 1 - got))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
            data = b"".join(chunks)
        truncated = len(data) > limit or size > limit
        return ReadResult(self.relpath(parts), data[:limit], max(size, len(data)), truncated)

    def _raw_open(self, name: str, dfd: int, flags: int, mode: int = 0o600) -> int:
        """Open a regular file ``name`` in ``dfd`` with ``O_NOFOLLOW`` (never blocking on
        a FIFO). ``FileNotFoundError`` passes through; other failures are typed."""
        try:
            fd = os.open(name, flags | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC, mode, dir_fd=dfd)
        except FileNotFoundError:
            raise
        except FileExistsError:
            raise FilePathError(f"path: {name!r} already exists") from None
        except OSError as exc:
            raise self._refuse(name, dfd, exc) from None
        try:
            _check_opened(name, os.fstat(fd))
            if _O_NONBLOCK:
                fl = fcntl.fcntl(fd, fcntl.F_GETFL)
                fcntl.fcntl(fd, fcntl.F_SETFL, fl & ~_O_NONBLOCK)
        except BaseException:
            os.close(fd)
            raise
        return fd

    @contextlib.contextmanager
    def _open_file(self, name: str, dfd: int, flags: int) -> Iterator[int]:
        try:
            fd = self._raw_open(name, dfd, flags)
        except FileNotFoundError:
            raise FilePathError(f"path: {name!r} does not exist") from None
        try:
            yield fd
        finally:
            os.close(fd)

    @_typed
    def is_dir(self, path: str | None) -> bool:
        """Whether ``path`` is a directory inside the jail (after the checks)."""
        parts = self.parts(path, allow_root=True)
        self.check_real(parts)
        return self._exists_dir(parts)

    @_typed
    def files_under(self, path: str) -> list[str]:
        """Relative paths of the regular files at or below ``path`` (symlinks are
        not followed), sorted."""
        parts = self.parts(path)
        self.check_real(parts)
        with self._dir(parts[:-1]) as dfd:
            try:
                st = os.lstat(parts[-1], dir_fd=dfd)
            except FileNotFoundError:
                raise FilePathError(f"path: {self.relpath(parts)!r} does not exist") from None
            if stat.S_ISREG(st.st_mode):
                return [self.relpath(parts)]
            if not stat.S_ISDIR(st.st_mode):
                return []
            out: list[str] = []
            base = self.relpath(parts)
            for top, _dirs, files, _fd in os.fwalk(parts[-1], dir_fd=dfd):
                rel = top.split("/", 1)[1] if "/" in top else ""
                for f in files:
                    fst = os.lstat(f, dir_fd=_fd)
                    if stat.S_ISREG(fst.st_mode):
                        out.append("/".join(p for p in (base, rel, f) if p))
            return sorted(out)

    # --------------------------------------------------------------- writes
    @_typed
    def append(self, path: str, text: str) -> AppendResult:
        """Append ``text`` to a file (made, with its parent directories, when absent),
        with a newline first when the file has content and ``text`` does not start
        with one. Refused before any byte is written (``CapacityError``) when the file
        would pass ``max_file_bytes``; a file made for a refused append is removed."""
        parts = self.parts(path)
        self.check_real(parts)
        data = text.encode("utf-8")
        cap = self.max_file_bytes
        if len(data) > cap:
            raise CapacityError(f"text: {len(data)} bytes; a file may hold at most {cap} bytes")
        with self._dir(parts[:-1], create=True) as dfd:
            name = parts[-1]
            created = False
            try:
                fd = self._raw_open(name, dfd, os.O_WRONLY | os.O_APPEND)
            except FileNotFoundError:
                fd = self._raw_open(name, dfd, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL)
                created = True
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                size = os.fstat(fd).st_size
                sep = b"\n" if size > 0 and not text.startswith("\n") else b""
                new_size = size + len(sep) + len(data)
                if new_size > cap:
                    if created:
                        with contextlib.suppress(OSError):
                            os.unlink(name, dir_fd=dfd)
                    raise CapacityError(
                        f"text: the file would grow to {new_size} bytes; the limit is {cap}"
                    )
                payload = memoryview(sep + data)
                while payload:
                    n = os.write(fd, payload)
                    payload = payload[n:]
            finally:
                os.close(fd)
        return AppendResult(self.relpath(parts), len(sep) + len(data), new_size, created, bool(sep))

    @_typed
    def write(self, path: str, data: bytes, *, exclusive: bool = False) -> bool:
        """Write a whole file (parents made as needed): with ``exclusive`` only when it
        does not exist yet (``FilePathError``), else atomically replacing it (temp file
        and rename inside its directory). Refused over ``max_file_bytes``. Returns
        whether the file was created."""
        parts = self.parts(path)
        self.check_real(parts)
        if len(data) > self.max_file_bytes:
            raise CapacityError(
                f"text: {len(data)} bytes; a file may hold at most {self.max_file_bytes} bytes"
            )
        with self._dir(parts[:-1], create=True) as dfd:
            name = parts[-1]
            if exclusive:
                with self._open_file(name, dfd, os.O_WRONLY | os.O_CREAT | os.O_EXCL) as fd:
                    _write_all(fd, data)
                return True
            try:
                st = os.lstat(name, dir_fd=dfd)
            except FileNotFoundError:
                st = None
            if st is not None and not stat.S_ISREG(st.st_mode):
                raise (JailError if stat.S_ISLNK(st.st_mode) else FilePathError)(
                    f"path: {name!r} is not a regular file")
            tmp = f".mf-tmp-{uuid.uuid4().hex}"
            with self._open_file(tmp, dfd, os.O_WRONLY | os.O_CREAT | os.O_EXCL) as fd:
                _write_all(fd, data)
            try:
                os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
                raise
            return st is None

    @_typed
    def remove(self, path: str) -> None:
        """Delete a file, or a directory with everything below it (symlinks inside
        are removed, never followed)."""
        import shutil

        parts = self.parts(path)
        self.check_real(parts)
        with self._dir(parts[:-1]) as dfd:
            name = parts[-1]
            try:
                st = os.lstat(name, dir_fd=dfd)
            except FileNotFoundError:
                raise FilePathError(f"path: {self.relpath(parts)!r} does not exist") from None
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(name, dir_fd=dfd)
            else:
                os.unlink(name, dir_fd=dfd)

    @_typed
    def rename(self, old: str, new: str) -> None:
        """Move a file or directory to a path that does not exist yet (parents made)."""
        src = self.parts(old)
        dst = self.parts(new)
        self.check_real(src)
        self.check_real(dst)
        if dst[: len(src)] == src:
            raise FilePathError("new_path: cannot move a directory inside itself")
        with self._dir(src[:-1]) as sfd, self._dir(dst[:-1], create=True) as dfd:
            try:
                os.lstat(src[-1], dir_fd=sfd)
            except FileNotFoundError:
                raise FilePathError(f"path: {self.relpath(src)!r} does not exist") from None
            try:
                os.lstat(dst[-1], dir_fd=dfd)
            except FileNotFoundError:
                pass
            else:
                raise FilePathError(f"path: {self.relpath(dst)!r} already exists")
            os.rename(src[-1], dst[-1], src_dir_fd=sfd, dst_dir_fd=dfd)


def _check_opened(name: str, st: os.stat_result) -> None:
    """Issue 28, defect 6: what an opened descriptor (``fstat``) must be: a regular file
    (``FilePathError`` otherwise) with one link (``JailError`` otherwise: a hard link
    planted in the root may name a file outside it, and nothing on the path shows it)."""
    if not stat.S_ISREG(st.st_mode):
        raise FilePathError(f"path: {name!r} is not a regular file")
    if st.st_nlink > 1:
        raise JailError(f"path: {name!r} has {st.st_nlink} hard links; a file with more than one "
                        "link may be a file outside the jail and is refused")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
