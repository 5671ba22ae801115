"""The files of `torchfl fix`: which files to fix (those `torchfl scan` reads), reading them as they are
(encoding, BOM, newlines), writing them atomically, and the checks that keep a write from harming (a
symlink out of the tree, a read-only or hard-linked file, a file changed since it was read).

Writes are atomic: a temp file in the same directory, fsync, ``os.replace``; a failure at any point
leaves the original untouched and no temp file behind.
"""

from __future__ import annotations

import difflib
import errno
import hashlib
import io
import os
import stat
import tempfile
import tokenize
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import FileChanged
from .scan import is_python, targets

__all__ = ["Snapshot", "outside_tree", "python_files", "read_only", "read_source", "unified_diff", "write_atomic"]



@dataclass(frozen=True)
class Snapshot:
    """What a file was when it was read: size, modification time (ns) and a hash of its bytes."""

    size: int
    mtime_ns: int
    digest: bytes

    @classmethod
    def of(cls, data: bytes, st: os.stat_result) -> Snapshot:
        return cls(st.st_size, st.st_mtime_ns, hashlib.blake2b(data, digest_size=16).digest())

    def still(self, path: Path) -> bool:
        """Whether `path` still holds these bytes: the size first (cheap), then the hash, also when the
        mtime is the same (a save within the same mtime tick, or on a filesystem with coarse times). A
        new mtime over the same bytes (`touch`) is no change: overwriting it loses nothing."""
        try:
            st = path.stat()
            if st.st_size != self.size:
                return False
            data = path.read_bytes()
        except OSError:
            return False
        return hashlib.blake2b(data, digest_size=16).digest() == self.digest


def read_source(path: Path) -> tuple[str, str, Snapshot]:
    """A file's text (newlines untouched), its encoding (PEP 263) and what it was when read."""
    with open(path, "rb") as handle:
        st = os.fstat(handle.fileno())
        data = handle.read()
    snapshot = Snapshot.of(data, st)
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    if encoding == "utf-8-sig":
        # Keep the BOM out of the text (libcst and ast both reject it mid-stream) and put it back on write.
        return data.decode("utf-8-sig"), encoding, snapshot
    return data.decode(encoding), encoding, snapshot


def write_atomic(path: Path, text: str, encoding: str = "utf-8", *, expect: Snapshot | None = None) -> None:
    """Replace `path`'s content with `text` so that readers see the old file or the new one, never a
    mix: temp file in the same directory (same filesystem, so os.replace is atomic), fsync, replace.
    The file's permission bits, owner and group are kept (or the file is not replaced); on any failure
    the temp file is removed.

    With `expect` (what the file was when read), the file is replaced only if it still is that, checked
    right before the replace (size, then the hash of its bytes): otherwise FileChanged, and the newer
    file (an editor's save while fix ran) is kept."""
    path = Path(os.path.realpath(path))  # a symlink keeps pointing at the file we rewrote
    data = text.encode(encoding)
    before = path.stat()
    mode = stat.S_IMODE(before.st_mode)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".torchfl-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        made = os.stat(tmp)
        if (made.st_uid, made.st_gid) != (before.st_uid, before.st_gid):
            # Written as another user (root fixing a user's tree): the file keeps its owner and group,
            # or is not replaced at all.
            try:
                os.chown(tmp, before.st_uid, before.st_gid)
            except OSError as exc:
                raise OSError(exc.errno, f"cannot keep the file's owner and group (uid {before.st_uid}, gid "
                                         f"{before.st_gid}): {exc.strerror}; file not changed") from None
        os.chmod(tmp, mode)  # after chown, which may clear setuid/setgid bits
        if expect is not None and not expect.still(path):
            raise FileChanged(errno.ESTALE, "the file changed on disk since torchfl fix read it (saved by an editor "
                                            "or another tool?): not overwritten, the newer file is kept; run "
                                            "torchfl fix again")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    # The rename itself is durable only once the directory entry is on disk; not possible everywhere.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def unified_diff(path: Path, old: str, new: str) -> str:
    name = path.as_posix()
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 fromfile=f"a/{name}", tofile=f"b/{name}")
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def python_files(paths: Iterable[str | os.PathLike[str]], select: Sequence[str] | None,
           ignore: Sequence[str] | None,
           skipped: list[tuple[str, str]]) -> Iterable[tuple[Path, frozenset[str], Path]]:
    """The Python files `torchfl scan` would scan, with their enabled codes (the other files it reads,
    CUDA sources and config files, have no fix) and the tree they were found in (a directory argument,
    or a file argument's folder), so that scan and fix see the same findings."""
    seen: set[Path] = set()
    for argument in paths:
        root = Path(argument)
        tree = Path(os.path.realpath(root if root.is_dir() else root.parent))
        for path, codes in targets([argument], select, ignore, skipped):
            resolved = Path(os.path.realpath(path))
            if resolved in seen or not is_python(path):
                continue
            seen.add(resolved)
            yield path, codes, tree


def outside_tree(path: Path, tree: Path) -> bool:
    """Whether `path` (a link, or inside a linked folder) resolves to a file outside `tree`."""
    try:
        Path(os.path.realpath(path)).relative_to(tree)
    except ValueError:
        return True
    return False


def read_only(path: Path) -> bool:
    # By the permission bits, not os.access: root may write anything, and os.replace would replace
    # even a read-only file; a file the user marked read-only is theirs to unlock.
    return not stat.S_IMODE(path.stat().st_mode) & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)

