"""The compile cache: one directory per fingerprint, a manifest, locks, and stale-entry removal.

Layout (see docs/compile.md)::

    <root>/                              FL_CACHE_DIR, else the description's compile.cache_dir
      .lock                              exclusive lock of writers (creating, updating, removing)
      cpu-3f9a1c0d2b7e4a55/              one entry: '<description>-<fingerprint digest>'
        manifest.json                    format, fingerprint, components, created, warm-up records
        .inuse                           shared-locked by every process using the entry
        inductor/                        TORCHINDUCTOR_CACHE_DIR while the entry is in use
        triton/                          TRITON_CACHE_DIR

Safety: an entry is built in a hidden ``.tmp-*`` directory and renamed into place, so a reader sees
either no entry or a complete one; manifest updates are written to a temporary file and renamed over
the manifest. A writer killed half-way leaves only hidden leftovers, which the next writer removes.
Entries whose ``.inuse`` lock is held by a live process are never removed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .. import _env
from ..description.model import Description
from ..errors import ConfigError
from . import locks
from .fingerprint import COMPONENTS, Fingerprint, describe_change, digest, entry_name, fingerprint

_log = logging.getLogger("torch_fl.compile")

FORMAT = 1
MANIFEST = "manifest.json"
LOCK = ".lock"
INUSE = ".inuse"
SUBDIRS = ("inductor", "triton")
DEFAULT_ROOT = Path("~/.cache/torch_fl")
_TMP = ".tmp-"
_TRASH = ".trash-"
_WARMUP_RECORDS = 50  # the manifest keeps the latest warm-up records only

# Entries this process uses: path -> fd of its shared .inuse lock (held until exit).
_held: dict[Path, int] = {}


@dataclass
class Entry:
    """An entry this process uses."""

    root: Path
    path: Path
    fingerprint: Fingerprint
    created: bool = False  # this process created it (the compile cache starts empty)
    replaced: dict[str, tuple[str, str]] = field(default_factory=dict)  # what changed vs the last entry
    removed: list[str] = field(default_factory=list)  # stale entries removed when this one was created

    @property
    def inductor_dir(self) -> Path:
        return self.path / "inductor"

    @property
    def triton_dir(self) -> Path:
        return self.path / "triton"

    def manifest(self) -> dict[str, Any]:
        return read_manifest(self.path)


# Root and keep ------------------------------------------------------------------------------------
def cache_root(desc: Description) -> Path:
    """FL_CACHE_DIR, else the description's compile.cache_dir, else ~/.cache/torch_fl."""
    if _env.FL_CACHE_DIR.is_set():
        return Path(_env.FL_CACHE_DIR.get()).expanduser()
    if desc.section("compile")["cache_dir"].strip():
        return desc.cache_dir()
    return DEFAULT_ROOT.expanduser()


def keep_count() -> int:
    text = _env.FL_CACHE_KEEP.get()
    try:
        keep = int(text)
    except ValueError:
        keep = 0
    if keep < 1:
        raise ConfigError(f"FL_CACHE_KEEP: '{text}' is not a whole number >= 1 (how many compile cache "
                          f"entries to keep per description, the current one included; default 3)")
    return keep


# Manifest -----------------------------------------------------------------------------------------
def read_manifest(entry: Path) -> dict[str, Any]:
    """The parsed manifest of `entry`; raises ValueError (or OSError) when it is missing or invalid."""
    data = json.loads((entry / MANIFEST).read_text(encoding="utf-8"))
    problem = manifest_problem(entry.name, data)
    if problem:
        raise ValueError(problem)
    return data


def manifest_problem(name: str, data: Any) -> str:
    """Why `data` is not a valid manifest of an entry directory called `name` ('' when it is)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return f"not a format-{FORMAT} manifest"
    components = data.get("components")
    if not isinstance(components, dict) or not all(isinstance(v, str) for v in components.values()):
        return "components missing or not strings"
    if sorted(components) != sorted(COMPONENTS):
        return f"components {sorted(components)} are not the fingerprint components {sorted(COMPONENTS)}"
    actual = digest(components)
    if data.get("fingerprint") != actual:
        return f"recorded fingerprint {data.get('fingerprint')} != {actual}, the hash of its components"
    if entry_name(str(data.get("description", "")), actual) != name:
        return f"directory name does not match the fingerprint {entry_name(str(data.get('description')), actual)}"
    return ""


def timestamp() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that readers see the old file or the new one, never a part (temp file + rename)."""
    tmp = path.with_name(f"{path.name}{_TMP}{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# Opening an entry ---------------------------------------------------------------------------------
def open_entry(desc: Description) -> Entry:
    """The cache entry of this process's fingerprint for `desc`, created (and stale entries of the same
    description removed, keeping FL_CACHE_KEEP) when it does not exist yet."""
    fp = fingerprint(desc)
    root = cache_root(desc)
    path = root / fp.entry_name
    if path in _held or _claim(path):
        _touch(path)
        return Entry(root, path, fp)
    keep = keep_count()  # a bad FL_CACHE_KEEP fails before anything is written
    trash: list[Path] = []
    with locks.exclusive(root / LOCK):
        _sweep_leftovers(root)
        if _claim(path):  # another process created it while this one waited for the lock
            _touch(path)
            return Entry(root, path, fp)
        if path.exists():
            _log.warning("compile cache entry %s is corrupt (%s); replacing it", path,
                         _problem_of(path) or "unreadable")
            trash.append(_to_trash(path))
        _create(path, fp)
        if not _claim(path):
            raise OSError(f"the compile cache entry {path} vanished right after it was created")
        entry = Entry(root, path, fp, created=True)
        trash += _remove_stale(entry, keep)
    for directory in trash:
        shutil.rmtree(directory, ignore_errors=True)
    _log_new_entry(entry)
    return entry


def _claim(path: Path) -> bool:
    """Use an existing, valid entry: hold its shared in-use lock, then check the manifest (an entry
    renamed away between the two steps fails the check)."""
    fd = locks.hold_shared(path / INUSE)
    if fd is None:
        return False
    try:
        read_manifest(path)
    except (OSError, ValueError):
        os.close(fd)
        return False
    previous = _held.pop(path, None)
    if previous is not None:
        os.close(previous)
    _held[path] = fd
    return True


def release() -> None:
    """Drop this process's in-use locks (entries it used become removable by other processes)."""
    while _held:
        os.close(_held.popitem()[1])


def _touch(path: Path) -> None:
    """The manifest's mtime is the entry's last use (which entries are stale is decided by it)."""
    with contextlib.suppress(OSError):
        os.utime(path / MANIFEST)


def _create(path: Path, fp: Fingerprint) -> None:
    tmp = path.parent / f"{_TMP}{path.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    for sub in SUBDIRS:
        (tmp / sub).mkdir(parents=True)
    manifest = {"format": FORMAT, "fingerprint": fp.digest, "description": fp.description,
                "components": fp.components, "created": timestamp(), "warmup": []}
    write_json_atomic(tmp / MANIFEST, manifest)
    os.rename(tmp, path)  # the entry appears complete or not at all


def _to_trash(path: Path) -> Path:
    target = path.parent / f"{_TRASH}{path.name}-{os.getpid()}-{time.monotonic_ns()}"
    os.rename(path, target)
    return target


def _sweep_leftovers(root: Path) -> None:
    """Remove what killed writers left. Called under the writer lock: no writer is mid-write."""
    for child in root.iterdir():
        if child.name.startswith((_TMP, _TRASH)):
            shutil.rmtree(child, ignore_errors=True)
        elif child.is_dir():
            for leftover in child.glob(f"{MANIFEST}{_TMP}*"):
                leftover.unlink(missing_ok=True)


def _problem_of(path: Path) -> str:
    try:
        read_manifest(path)
    except FileNotFoundError:
        return "no manifest.json"
    except (OSError, ValueError) as exc:
        return str(exc)
    return ""


# Stale entries ------------------------------------------------------------------------------------
def _remove_stale(entry: Entry, keep: int) -> list[Path]:
    """Move entries of the same description beyond the `keep` most recently used (the new one counts)
    to the trash; returns the trash directories. Records what changed since the last-used entry."""
    others = [(p, m) for p, m in _valid_entries(entry.root)
              if p != entry.path and m["description"] == entry.fingerprint.description]
    others.sort(key=lambda item: _last_used(item[0]), reverse=True)
    if others:
        entry.replaced = entry.fingerprint.diff(others[0][1]["components"])
    trash = []
    for path, _ in others[keep - 1:]:
        with locks.exclusive_if_free(path / INUSE) as free:
            if not free:
                _log.info("compile cache: keeping stale entry %s, a running process uses it", path.name)
                continue
            trash.append(_to_trash(path))
            entry.removed.append(path.name)
    return trash


def _log_new_entry(entry: Entry) -> None:
    if entry.replaced:
        # A fingerprint change explains a slow start: say it, once, where a user looks.
        removed = f"; removed stale {', '.join(entry.removed)}" if entry.removed else ""
        _log.warning("compile cache for '%s': the stack changed (%s); compiling into a new entry %s%s",
                     entry.fingerprint.description, describe_change(entry.replaced), entry.path, removed)
    else:
        _log.info("compile cache: new entry %s", entry.path)


def _valid_entries(root: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    if not root.is_dir():
        return
    for child in sorted(root.iterdir()):
        if child.is_dir() and not child.name.startswith("."):
            with contextlib.suppress(OSError, ValueError):
                yield child, read_manifest(child)


def _last_used(path: Path) -> float:
    try:
        return (path / MANIFEST).stat().st_mtime
    except OSError:
        return 0.0


# Manifest updates ---------------------------------------------------------------------------------
def record_warmup(entry: Entry, records: list[dict[str, Any]]) -> None:
    """Append warm-up records to the entry's manifest (read-modify-write under the writer lock)."""
    with locks.exclusive(entry.root / LOCK):
        for leftover in entry.path.glob(f"{MANIFEST}{_TMP}*"):
            leftover.unlink(missing_ok=True)
        try:
            manifest = read_manifest(entry.path)
        except (OSError, ValueError) as exc:
            # The compiled code is in place either way; the records are only informational.
            _log.warning("compile cache: not recording the warm-up in %s: %s", entry.path, exc)
            return
        manifest["warmup"] = (manifest.get("warmup", []) + records)[-_WARMUP_RECORDS:]
        write_json_atomic(entry.path / MANIFEST, manifest)


# Inspection (torchfl cache info / verify / clear) -------------------------------------------------
@dataclass
class EntryStatus:
    name: str
    path: Path
    status: str  # ok | corrupt | leftover
    problem: str = ""
    manifest: dict[str, Any] | None = None
    size: int = 0
    last_used: float = 0.0
    in_use: bool = False

    @property
    def description(self) -> str:
        return str((self.manifest or {}).get("description", ""))


def scan(root: Path) -> list[EntryStatus]:
    """Every directory under `root` with its status: ok (valid manifest whose fingerprint re-hashes to
    the directory name), corrupt, or leftover (hidden debris of an interrupted write; harmless)."""
    statuses: list[EntryStatus] = []
    if not root.is_dir():
        return statuses
    for child in sorted(root.iterdir()):
        if not child.is_dir():
            continue
        if child.name.startswith("."):
            if child.name.startswith((_TMP, _TRASH)):
                statuses.append(EntryStatus(child.name, child, "leftover",
                                            "debris of an interrupted write or removal",
                                            size=_size(child)))
            continue
        status = EntryStatus(child.name, child, "ok", size=_size(child), last_used=_last_used(child))
        try:
            status.manifest = read_manifest(child)
        except FileNotFoundError:
            status.status, status.problem = "corrupt", "no manifest.json"
        except (OSError, ValueError) as exc:
            status.status, status.problem = "corrupt", f"manifest.json: {exc}"
        partial = sorted(p.name for p in child.glob(f"{MANIFEST}{_TMP}*"))
        if partial and status.status == "ok":
            status.problem = f"leftover partial write {', '.join(partial)} (harmless; the manifest is intact)"
        with locks.exclusive_if_free(child / INUSE) as free:
            status.in_use = not free and child not in _held
        statuses.append(status)
    return statuses


def _size(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def remove(root: Path, names: list[str], *, force: bool = False) -> tuple[list[str], list[str]]:
    """Remove entries (and leftovers) by directory name under the writer lock. Entries a running process
    uses are skipped unless `force`. Returns (removed, skipped)."""
    removed, skipped, trash = [], [], []
    with locks.exclusive(root / LOCK):
        for name in names:
            path = root / name
            if not path.exists():
                continue
            if name.startswith("."):
                trash.append(path)
                removed.append(name)
                continue
            with locks.exclusive_if_free(path / INUSE) as free:
                if not free and not force and path not in _held:
                    skipped.append(name)
                    continue
                trash.append(_to_trash(path))
                removed.append(name)
            fd = _held.pop(path, None)
            if fd is not None:
                os.close(fd)
    for directory in trash:
        shutil.rmtree(directory, ignore_errors=True)
    return removed, skipped
