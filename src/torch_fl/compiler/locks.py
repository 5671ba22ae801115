"""File locks for the compile cache (``fcntl.flock``): the kernel drops a lock when its holder dies,
so a rank killed mid-write never leaves the cache locked.

flock works across processes on one host and, on Linux, across NFS clients (emulated with POSIX
locks). Windows has no fcntl: there the locks are no-ops and concurrent writers are not protected.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

from ..errors import CacheLockTimeout
from . import trust

_log = logging.getLogger("torch_fl.compile")
TIMEOUT_S = 600.0  # a writer holds the lock for milliseconds; minutes mean a hung holder
_ANNOUNCE_S = 5.0
_POLL_S = 0.05
# Lock files are created 0600 and never through a symbolic link (one planted in a directory another user
# could write would otherwise make this process create or truncate a file of its choosing).
_FLAGS = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)


@contextlib.contextmanager
def exclusive(path: Path, timeout: float = TIMEOUT_S) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created if missing) for the block; waits up to `timeout` s.

    Raises CacheUnusableError (naming the directory and the fix) when the lock file cannot be created:
    a read-only or full disk, a file where the directory should be."""
    try:
        trust.make_private_dirs(path.parent)
        fd = trust.open_private(path, _FLAGS)
    except OSError as exc:
        raise trust.unusable(path.parent, exc, doing=f"creating its lock file {path.name}") from None
    try:
        _wait_exclusive(fd, path, timeout)
        _note_holder(fd)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _note_holder(fd: int) -> None:
    """Who holds the lock, for the message of a waiter that times out (informational only: a full disk
    must not stop the writer that would free space)."""
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except OSError as exc:
        _log.debug("compile cache lock: could not record the holder: %s", exc)


def _wait_exclusive(fd: int, path: Path, timeout: float) -> None:
    if fcntl is None:
        return
    start = time.monotonic()
    announced = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        waited = time.monotonic() - start
        if waited > _ANNOUNCE_S and not announced:
            _log.info("waiting for the compile cache lock %s (held by pid %s)", path, _holder(path))
            announced = True
        if waited > timeout:
            raise CacheLockTimeout(
                f"the compile cache lock {path} is still held by pid {_holder(path)} after {timeout:.0f} s. "
                f"If that process is hung, stop it: the lock is released when its holder exits.")
        time.sleep(_POLL_S)


def _holder(path: Path) -> str:
    try:
        return path.read_text().strip() or "unknown"
    except OSError:
        return "unknown"


def hold_shared(path: Path) -> int | None:
    """A shared lock on `path` (created if missing) taken without waiting, as an open fd: the lock lasts
    until the fd is closed. None when the file cannot be created or someone holds it exclusively."""
    try:
        fd = trust.open_private(path, _FLAGS)
    except OSError:  # its directory is gone (the entry was just removed)
        return None
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
    return fd


@contextlib.contextmanager
def exclusive_if_free(path: Path) -> Iterator[bool]:
    """Yield True while holding an exclusive lock on `path` (or when `path` does not exist: nobody can
    hold it), False without waiting when another process holds any lock on it."""
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        yield True
        return
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
        yield True
    finally:
        os.close(fd)
