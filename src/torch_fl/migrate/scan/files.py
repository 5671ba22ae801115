"""File walking and reading: which files a scan covers (Python sources and the suffixes the rules
ask for, ``SKIP_DIRS`` and the config's ``extend-exclude`` skipped), their text in the right encoding,
and the scan table that governs each path."""

from __future__ import annotations

import errno
import fnmatch
import io
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ...config import ScanConfig as Config
from ...config import ScanConfigError, load_scan_config
from ..rules import HOOKS, expand, selected

PYTHON_SUFFIXES = (".py", ".pyi")
SKIP_DIRS = frozenset({
    ".git", ".hg", ".svn", ".venv", "venv", "__pycache__", "build", "dist", "node_modules",
    "site-packages", ".tox", ".nox", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".eggs",
    ".ipynb_checkpoints", "__pypackages__",
})
# Build outputs by name, unless the folder is a Python package of the project (mmengine's
# `mmengine/dist/` holds its distributed helpers): one with an __init__.py is walked.
OUTPUT_DIRS = frozenset({"build", "dist"})


def _skipped_dir(entry: os.DirEntry, path: Path) -> bool:
    if entry.name not in SKIP_DIRS:
        return False
    return entry.name not in OUTPUT_DIRS or not os.path.isfile(path / "__init__.py")


def other_suffixes() -> tuple[str, ...]:
    """Suffixes of non-Python files some rule looks at (``.cu``)."""
    return tuple(HOOKS.files)


def is_python(path: Path) -> bool:
    """Whether a scan reads `path` as Python: anything but a file whose suffix a rule's file hook takes
    (`.cu`, `.yaml`); a file named on the command line without a suffix is Python."""
    return path.name.endswith(PYTHON_SUFFIXES) or path.suffix not in other_suffixes()


class Unreadable(Exception):
    """A file whose bytes are not text in its declared (or the default UTF-8) encoding."""


def read_source(path: Path) -> str:
    data = path.read_bytes()
    head = data[:400]
    if b"coding" not in head and not head.startswith(b"\xef\xbb\xbf"):
        try:
            return data.decode("utf-8")  # PEP 3120 default; tokenize is imported only for a cookie or BOM
        except UnicodeDecodeError as exc:
            raise Unreadable(f"the bytes are not valid in the file's encoding (UTF-8 unless a PEP 263 "
                             f"coding comment says otherwise): {exc.reason}") from None
    import tokenize

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
        # detect_encoding reports undecodable first lines and unknown cookies as SyntaxError.
        detail = exc.reason if isinstance(exc, UnicodeDecodeError) else getattr(exc, "msg", str(exc))
        raise Unreadable(f"the bytes are not valid in the file's encoding (UTF-8 unless a PEP 263 "
                         f"coding comment says otherwise): {detail}") from None


def load_config(start: Path) -> Config:
    """The scan table of the nearest config above `start` (see ``torch_fl.config.load_scan_config``)."""
    return load_scan_config(start, expand)


def enabled_codes(select: Iterable[str] | None, ignore: Iterable[str] | None,
                  config: Config | None = None) -> frozenset[str]:
    """The rule codes in force: the coupling rules, then the config's scan table, then select/ignore as
    on the command line."""
    try:
        layers: list[tuple[Any, ...]] = [] if config is None else [
            (config.select, config.ignore, config.extend_select)]
        return selected(*layers, (None if select is None else list(select), list(ignore or ())))
    except ValueError as exc:
        raise ScanConfigError(str(exc)) from None


def _excluded(path: Path, config: Config) -> bool:
    if not config.extend_exclude:
        return False
    try:
        relative = path.resolve().relative_to(config.root).as_posix()  # type: ignore[arg-type]
    except ValueError:
        relative = path.as_posix()
    return any(fnmatch.fnmatchcase(relative, pattern) or fnmatch.fnmatchcase(path.name, pattern)
               for pattern in config.extend_exclude)


def not_a_file(path: Path | str, entry: os.DirEntry[str] | None = None) -> str | None:
    """Why `path` is not a regular file a scan may read, or None when it is one (after symlinks):
    a FIFO or a device would block or never end, a symlink loop or a broken link cannot be opened."""
    try:
        if entry is not None and entry.is_file(follow_symlinks=False):
            return None
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symlink loop"
        if exc.errno == errno.ENOENT and os.path.lexists(path):
            return "a broken symlink"
        return f"cannot be read ({exc.strerror or exc})"
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "a special file")
    return f"{kind}, not a regular file (reading it could block or never end)"


def iter_files(root: Path, config: Config | None = None,
               skipped: list[tuple[str, str]] | None = None) -> Iterator[Path]:
    """Python and CUDA source files under `root` in sorted order, skipping SKIP_DIRS (``build`` and
    ``dist`` only when they are not packages) and the config's extend-exclude globs. A file given as `root` is yielded whatever its name. Paths that
    are not regular files (FIFOs, devices, sockets, symlink loops, broken links) are never opened:
    they go to `skipped` as (path, reason)."""
    config = Config() if config is None else config
    skipped = [] if skipped is None else skipped
    reason = not_a_file(root)
    if reason is not None:
        skipped.append((str(root), reason))
        return
    if not root.is_dir():
        yield root
        return
    suffixes = PYTHON_SUFFIXES + other_suffixes()
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            continue
        subdirs = []
        for entry in entries:
            path = directory / entry.name
            if entry.is_dir(follow_symlinks=False):
                if not _skipped_dir(entry, path) and not _excluded(path, config):
                    subdirs.append(path)
            elif entry.name.endswith(suffixes) and not _excluded(path, config):
                reason = not_a_file(path, entry)
                if reason is None:
                    yield path
                else:
                    skipped.append((str(path), reason))
        stack.extend(reversed(subdirs))


def targets(paths: Iterable[str | os.PathLike[str]], select: Iterable[str] | None = None,
            ignore: Iterable[str] | None = None,
            skipped: list[tuple[str, str]] | None = None) -> Iterator[tuple[Path, frozenset[str]]]:
    """Every file under `paths` once, with the codes enabled for it (its nearest scan table plus
    select/ignore): what `torchfl scan` scans and `torchfl fix` fixes. Paths that are not regular
    files go to `skipped` as (path, reason)."""
    seen: set[Path] = set()
    select = None if select is None else list(select)
    ignore = list(ignore or ())
    for argument in paths:
        root = Path(argument)
        if not os.path.lexists(root):
            raise FileNotFoundError(f"{argument}: no such file or directory")
        reason = not_a_file(root)
        if reason is not None:  # a FIFO, a device, a symlink loop named on the command line
            if skipped is not None:
                skipped.append((str(root), reason))
            continue
        config = load_config(root)
        codes = enabled_codes(select, ignore, config)
        for path in iter_files(root, config, skipped):
            resolved = Path(os.path.realpath(path))
            if resolved not in seen:
                seen.add(resolved)
                yield path, codes
