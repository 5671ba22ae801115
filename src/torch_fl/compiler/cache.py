"""The compile cache: one directory per fingerprint, a manifest, locks, and stale-entry removal.

Layout (see docs/compile.md)::

    <root>/                              FL_CACHE_DIR, else the description's compile.cache_dir (0700)
      .lock                              exclusive lock of writers (creating, updating, removing)
      cpu-3f9a1c0d2b7e4a55/              one entry: '<description>-<fingerprint digest>' (0700)
        .torch_fl_entry                  the marker: torch-fl created this directory (`cache clear` removes
                                         only directories with it, a valid manifest, or a torch-fl name)
        manifest.json                    format, fingerprint, components, artifact hashes, warm-up records
        .inuse                           shared-locked by every process using the entry
        inductor/                        TORCHINDUCTOR_CACHE_DIR while the entry is in use
        triton/                          TRITON_CACHE_DIR
      .precompiled_headers/              Inductor's precompiled headers, shared by the entries (0700)
      .quarantine-cpu-...-<pid>-<ns>/    an entry refused as untrusted or altered (kept for inspection)

Trust (trust.py): the root must be this user's alone, else it is refused; an entry owned by someone else,
writable by others, or holding another user's files is never loaded: it is moved aside and rebuilt.
Integrity (integrity.py): the manifest records the sha256 of every artifact; each start, and ``torchfl
cache verify``, check those hashes before anything is loaded; an altered entry is moved aside and rebuilt.

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

from .. import _env, _toml
from ..description.model import Description
from ..errors import CacheUnusableError, TorchFLError
from . import integrity, locks, trust
from .fingerprint import COMPONENTS, Fingerprint, describe_change, digest, entry_name, fingerprint

_log = logging.getLogger("torch_fl.compile")

FORMAT = 2  # 2: artifact hashes (format-1 entries, written before them, are rebuilt)
MANIFEST = "manifest.json"
MARKER = ".torch_fl_entry"  # written into every entry torch-fl creates
LOCK = ".lock"
INUSE = ".inuse"
SUBDIRS = ("inductor", "triton")
DEFAULT_ROOT = Path("~/.cache/torch_fl")
_TMP = ".tmp-"
_TRASH = ".trash-"
QUARANTINE = ".quarantine-"
HEADERS = ".precompiled_headers"  # Inductor's precompiled headers, shared by the root's entries (jit.py)
_WARMUP_RECORDS = 50  # the manifest keeps the latest warm-up records only
_MANIFEST_BYTES = 64 * 1024 * 1024  # thousands of artifact records are a few MB

# Entries this process uses: path -> fd of its shared .inuse lock (held until exit).
_held: dict[Path, int] = {}
# Cache roots as given -> as resolved when they were checked (what this process uses).
_resolved: dict[Path, Path] = {}


class EntryRefused(Exception):
    """An entry that must not be loaded (untrusted or altered); the message says why."""


@dataclass
class Entry:
    """An entry this process uses."""

    root: Path
    path: Path
    fingerprint: Fingerprint
    created: bool = False  # this process created it (the compile cache starts empty)
    replaced: dict[str, tuple[str, str]] = field(default_factory=dict)  # what changed vs the last entry
    removed: list[str] = field(default_factory=list)  # stale entries removed when this one was created
    quarantined: list[str] = field(default_factory=list)  # why an earlier entry of this name was refused

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
    explicit = _env.FL_CACHE_DIR.value()
    if explicit is not None:
        return explicit
    if desc.section("compile")["cache_dir"].strip():
        return desc.cache_dir()
    return DEFAULT_ROOT.expanduser()


def root_source(desc: Description) -> str:
    """Where cache_root's answer comes from, for messages: FL_CACHE_DIR, a config file's cache_dir, the
    description or the default."""
    setting = _env.FL_CACHE_DIR.resolve()
    if setting.kind == "environment":
        return "FL_CACHE_DIR"
    if setting.value is not None:
        return f"cache_dir in {setting.source}"
    if desc.section("compile")["cache_dir"].strip():
        return f"compile.cache_dir of the '{desc.name}' description"
    return "the default"


def keep_count() -> int:
    """FL_CACHE_KEEP: entries kept per description, the current one included."""
    return _env.FL_CACHE_KEEP.value()


# Manifest -----------------------------------------------------------------------------------------
def read_manifest(entry: Path) -> dict[str, Any]:
    """The parsed manifest of `entry`; raises ValueError (or OSError) when it is missing or invalid."""
    try:  # a regular file only (a FIFO would block), and a crafted nesting is "invalid", not a crash
        data = json.loads(_toml.read_bytes(entry / MANIFEST, limit=_MANIFEST_BYTES).decode("utf-8"))
    except RecursionError:
        raise ValueError("manifest.json is nested too deeply to be a manifest") from None
    problem = manifest_problem(entry.name, data)
    if problem:
        raise ValueError(problem)
    return data


def manifest_problem(name: str, data: Any) -> str:
    """Why `data` is not a valid manifest of an entry directory called `name` ('' when it is)."""
    if isinstance(data, dict) and isinstance(data.get("format"), int) and data["format"] < FORMAT:
        return (f"written by an older torch-fl (manifest format {data['format']}, without artifact "
                f"hashes); it is rebuilt on next use")
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
    problem = integrity.records_problem(data.get("artifacts"))
    if problem:
        return problem
    if not isinstance(data.get("generation"), int) or not isinstance(data.get("verified"), int):
        return "generation / verified counters missing"
    return ""


def timestamp() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that readers see the old file or the new one, never a part (temp file + rename);
    the file is 0600 whatever the umask."""
    tmp = path.with_name(f"{path.name}{_TMP}{os.getpid()}")
    fd = trust.open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# Opening an entry ---------------------------------------------------------------------------------
def open_entry(desc: Description) -> Entry:
    """The cache entry of this process's fingerprint for `desc`, created (and stale entries of the same
    description removed, keeping FL_CACHE_KEEP) when it does not exist yet.

    Raises trust.CacheTrustError when the root is not this user's alone, CacheUnusableError when it cannot
    be used (read-only, full, not a directory; the message names the path and the fix). An existing entry
    that is not this user's alone (or whose artifacts were altered) is moved aside with a warning and
    rebuilt."""
    try:
        return _open_entry(desc)
    except CacheUnusableError as exc:  # from the locks, which do not know where the root came from
        if getattr(exc, "source", "") or not hasattr(exc, "oserror"):
            raise
        raise trust.unusable(cache_root(desc), exc.oserror, root_source(desc), exc.doing) from None
    except TorchFLError:
        raise
    except OSError as exc:
        raise trust.unusable(cache_root(desc), exc, root_source(desc), "opening an entry") from None


def open_entry_at(desc: Description, root: Path) -> Entry:
    """open_entry under the cache root `root` instead of the configured one (torch.fl.compile's private
    temporary root when the configured one is unusable)."""
    return _open_entry(desc, root, "a temporary directory")


def _open_entry(desc: Description, given: Path | None = None, source: str | None = None) -> Entry:
    fp = fingerprint(desc)
    given = cache_root(desc) if given is None else given
    root = _resolved.get(given)
    if root is not None and root / fp.entry_name in _held:
        _touch(root / fp.entry_name)
        return Entry(root, root / fp.entry_name, fp)
    # Checked once and used resolved from here on (Inductor gets this path): a symbolic link swapped after
    # the check cannot redirect this process to someone else's compiled code.
    root = _resolved[given] = trust.require_private_root(given, source or root_source(desc))
    path = root / fp.entry_name
    refused = ""
    with contextlib.suppress(EntryRefused):
        if _use(path, locked=False):
            return Entry(root, path, fp)
    keep = keep_count()  # a bad FL_CACHE_KEEP fails before anything is written
    trash: list[Path] = []
    with locks.exclusive(root / LOCK):
        _sweep_leftovers(root)
        try:
            if _use(path, locked=True):  # another process created it while this one waited for the lock
                return Entry(root, path, fp)
        except EntryRefused as exc:
            refused = str(exc)
        if refused:
            kept = _quarantine(path)
            _log.warning("compile cache entry %s is not used: %s. It was moved to %s for inspection "
                         "(`torchfl cache clear --corrupt` removes it) and is rebuilt.", path, refused, kept)
        elif path.exists() or path.is_symlink():
            _log.warning("compile cache entry %s is corrupt (%s); replacing it", path,
                         _problem_of(path) or "unreadable")
            trash.append(_to_trash(path))
        _create(path, fp)
        if not _claim(path):
            raise OSError(f"the compile cache entry {path} vanished right after it was created")
        entry = Entry(root, path, fp, created=True, quarantined=[refused] if refused else [])
        trash += _remove_stale(entry, keep)
    for directory in trash:
        shutil.rmtree(directory, ignore_errors=True)
    _log_new_entry(entry)
    return entry


def _use(path: Path, *, locked: bool) -> bool:
    """Use an existing, valid entry after checking who owns it and that its artifacts are intact; False
    when there is none, EntryRefused when there is one that must not be loaded."""
    if not os.path.lexists(path):
        return False
    problem = trust.entry_problem(path)
    if problem:
        raise EntryRefused(f"another user could have written it: {problem}")
    if not _claim(path):
        return False
    try:
        manifest = read_manifest(path)
        _check_artifacts(path, manifest, locked=locked)
    except EntryRefused:
        _drop(path)
        raise
    except (OSError, ValueError):
        _drop(path)
        return False
    _touch(path)
    return True


def _check_artifacts(path: Path, manifest: dict[str, Any], *, locked: bool) -> None:
    """The sha256 of every recorded artifact, on every start, before Inductor unpickles or loads any of
    them: a size and mtime check let an altered pickle with its mtime restored through (the cost, ~1 ms
    per MB, is measured by benchmarks/compile_cache.py). `locked`: the caller holds the writer lock
    already (flock is per open file: taking it again would wait)."""
    full = manifest["verified"] < manifest["generation"]
    result = integrity.check(path, manifest["artifacts"], full=True)
    if not result.ok:
        raise EntryRefused("its artifacts changed after they were recorded: " + "; ".join(result.problems()))
    if full or result.moved:
        with contextlib.nullcontext() if locked else locks.exclusive(path.parent / LOCK), \
                contextlib.suppress(OSError, ValueError):
                current = read_manifest(path)
                if current["generation"] == manifest["generation"]:
                    current["artifacts"].update(result.moved)
                    if full:
                        current["verified"] = current["generation"]
                    write_json_atomic(path / MANIFEST, current)
        if full:
            _log.info("compile cache: verified the sha256 of %d new artifacts of %s (first use after a write)",
                      result.hashed, path.name)


def _claim(path: Path) -> bool:
    """Hold the entry's shared in-use lock, then check the manifest (an entry renamed away between the
    two steps fails the check)."""
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


def _drop(path: Path) -> None:
    fd = _held.pop(path, None)
    if fd is not None:
        os.close(fd)


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
        trust.make_private_dirs(tmp / sub)
    os.close(trust.open_private(tmp / MARKER, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)))
    manifest = {"format": FORMAT, "fingerprint": fp.digest, "description": fp.description,
                "components": fp.components, "created": timestamp(), "artifacts": {}, "generation": 0,
                "verified": 0, "warmup": []}
    write_json_atomic(tmp / MANIFEST, manifest)
    os.rename(tmp, path)  # the entry appears complete or not at all


def _to_trash(path: Path) -> Path:
    target = path.parent / f"{_TRASH}{path.name}-{os.getpid()}-{time.monotonic_ns()}"
    os.rename(path, target)
    return target


def _quarantine(path: Path) -> Path:
    """Move a refused entry out of the way (kept: what was planted or altered is evidence)."""
    target = path.parent / f"{QUARANTINE}{path.name}-{os.getpid()}-{time.monotonic_ns()}"
    os.rename(path, target)
    _drop(path)
    return target


def _sweep_leftovers(root: Path) -> None:
    """Remove what killed writers left. Called under the writer lock: no writer is mid-write."""
    for child in root.iterdir():
        if child.name.startswith((_TMP, _TRASH)):
            shutil.rmtree(child, ignore_errors=True)
        elif child.is_dir() and not child.is_symlink() and not child.name.startswith("."):
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


def private_subdir(root: Path, name: str) -> Path:
    """`root`/`name` for files shared by the root's entries, created 0700; when it is not this user's
    alone (or holds another user's files) it is moved aside (``.quarantine-``) and recreated."""
    path = root / name
    with locks.exclusive(root / LOCK):
        if os.path.lexists(path):
            problem = trust.entry_problem(path)
            if problem:
                kept = _quarantine(path)
                _log.warning("compile cache: %s is not used: another user could have written it: %s. It was "
                             "moved to %s for inspection.", path, problem, kept)
        trust.make_private_dirs(path)
    return path


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
    _update_manifest(entry, lambda m: m.__setitem__("warmup", (m.get("warmup", []) + records)[-_WARMUP_RECORDS:]),
                     "recording the warm-up")


def seal(entry: Entry) -> list[str]:
    """Record the sha256 of every artifact now in the entry (new and changed ones are hashed) and make
    the entry's files 0600 and directories 0700. Called after each compilation of this process and at
    exit. Returns the artifacts whose recorded content changed (rewritten by this process's compile)."""
    if not entry.path.is_dir():  # removed since (cache clear, a temporary root gone by exit): nothing to record
        return []
    trust.tighten(entry.path)
    if (entry.root / HEADERS).is_dir():
        trust.tighten(entry.root / HEADERS)
    changed: list[str] = []

    def apply(manifest: dict[str, Any]) -> None:
        records, diff = integrity.update(entry.path, manifest["artifacts"], manifest["generation"] + 1)
        if records != manifest["artifacts"]:
            manifest["artifacts"] = records
            manifest["generation"] += 1
        changed.extend(diff)

    _update_manifest(entry, apply, "recording artifact hashes")
    if changed:
        _log.info("compile cache: re-recorded %d artifact(s) rewritten by this process: %s", len(changed),
                  ", ".join(changed[:5]))
    return changed


def _update_manifest(entry: Entry, change: Any, what: str) -> None:
    with locks.exclusive(entry.root / LOCK):
        for leftover in entry.path.glob(f"{MANIFEST}{_TMP}*"):
            leftover.unlink(missing_ok=True)
        try:
            manifest = read_manifest(entry.path)
        except (OSError, ValueError) as exc:
            # The compiled code is in place either way; the next start checks (and rebuilds) the entry.
            _log.warning("compile cache: %s in %s failed: %s", what, entry.path, exc)
            return
        before = json.dumps(manifest, sort_keys=True)
        change(manifest)
        if json.dumps(manifest, sort_keys=True) != before:
            try:
                write_json_atomic(entry.path / MANIFEST, manifest)
            except OSError as exc:  # the compiled code is in place; the next start rebuilds what is missing
                _log.warning("compile cache: %s", trust.unusable(entry.root, exc, doing=what))


# Inspection (torchfl cache info / verify / clear) -------------------------------------------------
@dataclass
class EntryStatus:
    name: str
    path: Path
    status: str  # ok | corrupt | untrusted | leftover | quarantined | shared
    problem: str = ""
    manifest: dict[str, Any] | None = None
    size: int = 0
    last_used: float = 0.0
    in_use: bool = False
    altered: list[str] = field(default_factory=list)  # artifacts that differ from their records
    artifacts: int = 0
    unrecorded: int = 0

    @property
    def description(self) -> str:
        return str((self.manifest or {}).get("description", ""))


def scan(root: Path, *, full: bool = False) -> list[EntryStatus]:
    """Every directory under `root` with its status: ok (valid manifest whose fingerprint re-hashes to
    the directory name, this user's alone, artifacts matching their records), corrupt, untrusted,
    quarantined (refused earlier, kept for inspection), leftover (debris of an interrupted write) or
    shared (Inductor's precompiled headers, used by every entry of the root).
    `full`: hash every artifact (otherwise size and mtime)."""
    statuses: list[EntryStatus] = []
    if not root.is_dir():
        return statuses
    for child in sorted(root.iterdir()):
        if not child.is_dir() or child.is_symlink():
            if child.is_symlink():
                statuses.append(EntryStatus(child.name, child, "untrusted",
                                            f"a symbolic link (to {os.readlink(child)}), not an entry"))
            continue
        if child.name.startswith("."):
            if child.name.startswith((_TMP, _TRASH)):
                statuses.append(EntryStatus(child.name, child, "leftover",
                                            "debris of an interrupted write or removal",
                                            size=_size(child)))
            elif child.name == HEADERS:
                problem = trust.entry_problem(child)
                statuses.append(EntryStatus(child.name, child, "untrusted" if problem else "shared",
                                            problem or "Inductor's precompiled headers, shared by the entries",
                                            size=_size(child)))
            elif child.name.startswith(QUARANTINE):
                statuses.append(EntryStatus(child.name, child, "quarantined",
                                            "an entry refused as untrusted or altered, kept for inspection",
                                            size=_size(child)))
            continue
        statuses.append(_status(child, full))
    return statuses


def _status(child: Path, full: bool) -> EntryStatus:
    status = EntryStatus(child.name, child, "ok", size=_size(child), last_used=_last_used(child))
    problem = trust.entry_problem(child)
    if problem:
        status.status, status.problem = "untrusted", problem
        return status  # nothing in it is opened, not even the manifest
    try:
        status.manifest = read_manifest(child)
    except FileNotFoundError:
        status.status, status.problem = "corrupt", "no manifest.json"
    except (OSError, ValueError) as exc:
        status.status, status.problem = "corrupt", f"manifest.json: {exc}"
    if status.manifest is not None:
        result = integrity.check(child, status.manifest["artifacts"], full=full)
        status.artifacts, status.unrecorded = len(status.manifest["artifacts"]), len(result.unrecorded)
        if not result.ok:
            status.altered = result.problems()
            status.status = "corrupt"
            status.problem = f"{len(status.altered)} artifact(s) differ from their recorded sha256"
    partial = sorted(p.name for p in child.glob(f"{MANIFEST}{_TMP}*"))
    if partial and status.status == "ok":
        status.problem = f"leftover partial write {', '.join(partial)} (harmless; the manifest is intact)"
    with locks.exclusive_if_free(child / INUSE) as free:
        status.in_use = not free and child not in _held
    return status


def _size(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def created_by_torch_fl(path: Path) -> bool:
    """Whether torch-fl made the directory `path` under a cache root: its marker, a valid manifest (entries
    written before the marker), one of the names torch-fl renames entries to (.tmp-, .trash-,
    .quarantine-) or the shared headers directory. Anything else (a user's folder under a root set to
    the wrong place) is never removed."""
    if path.is_symlink():
        return True  # only the link is removed, never what it points to
    if path.name.startswith((_TMP, _TRASH, QUARANTINE)) or path.name == HEADERS:
        return True
    if (path / MARKER).is_file():
        return True
    try:
        read_manifest(path)
    except (OSError, ValueError):
        return False
    return True


def remove(root: Path, names: list[str], *, force: bool = False,
           foreign: list[str] | None = None) -> tuple[list[str], list[str]]:
    """Remove entries (and leftovers) by directory name under the writer lock. Entries a running process
    uses are skipped unless `force`; directories torch-fl did not create are never removed (appended to
    `foreign`). Returns (removed, skipped)."""
    removed, skipped, trash = [], [], []
    with locks.exclusive(root / LOCK):
        for name in names:
            path = root / name
            if not os.path.lexists(path):
                continue
            if not created_by_torch_fl(path):
                if foreign is not None:
                    foreign.append(name)
                continue
            if name.startswith(".") or path.is_symlink():
                trash.append(path)
                removed.append(name)
                continue
            with locks.exclusive_if_free(path / INUSE) as free:
                if not free and not force and path not in _held:
                    skipped.append(name)
                    continue
                trash.append(_to_trash(path))
                removed.append(name)
            _drop(path)
    for directory in trash:
        if directory.is_symlink():
            directory.unlink()
        else:
            shutil.rmtree(directory, ignore_errors=True)
    return removed, skipped
