"""The artifacts of a compile cache entry and their sha256 records.

An artifact is every regular file that Inductor, AOTAutograd or Triton wrote into the entry (generated
C++/Python, ``.so`` files, pickled FX-graph and AOTAutograd cache entries, precompiled headers, ...). The
manifest records, per artifact, its sha256, size, mtime and the generation of the record that added it
(``artifacts``: relative path -> [sha256, size, mtime_ns, generation]).

Checks:

``quick``  size and mtime of every recorded artifact (one ``lstat`` each): ``torchfl cache info``. A file
           whose size or mtime moved is hashed; only a different hash is an alteration (Inductor may
           rewrite an identical file). Not enough before loading: an altered pickle whose mtime was
           restored (``touch -r``) passes it.
``full``   the sha256 of every recorded artifact: every start (cache._check_artifacts, before Inductor
           unpickles or loads anything) and ``torchfl cache verify``. ``since`` limits it to the
           artifacts recorded after a generation (not used on the load path).

Files not recorded yet were written by a process of this user that has not recorded them (a compile in
progress, or one that was killed): the entry directory is private, so nobody else could have written
them; the next record (cache.seal) hashes them.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# torch-fl's own bookkeeping files in the entry (not artifacts: JSON we parse ourselves, and locks).
OWN = frozenset({"manifest.json", ".inuse", "isa_probe.json", "torch_key.json"})
_CHUNK = 1 << 20


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def artifact_files(entry: Path) -> dict[str, os.stat_result]:
    """Every artifact under `entry` (relative POSIX path -> lstat), without torch-fl's own files, lock
    files and hidden temporary files (Inductor writes '.<pid>.<tid>.tmp' and renames it)."""
    found: dict[str, os.stat_result] = {}
    for dirpath, dirnames, filenames in os.walk(entry):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        rel_dir = os.path.relpath(dirpath, entry)
        for name in filenames:
            if name.startswith(".") or name.endswith(".lock") or (rel_dir == "." and (
                    name.startswith(tuple(OWN)))):  # and their temporary files
                continue
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                found[Path(os.path.relpath(path, entry)).as_posix()] = st
    return found


def record_of(path: str | os.PathLike, st: os.stat_result, generation: int) -> list[Any]:
    return [sha256_file(path), st.st_size, st.st_mtime_ns, generation]


def records_problem(data: Any) -> str:
    """Why a manifest's ``artifacts`` value is malformed ('' when it is fine)."""
    if not isinstance(data, dict):
        return "artifacts is not a table"
    for rel, rec in data.items():
        if (not isinstance(rel, str) or rel.startswith("/") or ".." in Path(rel).parts
                or not isinstance(rec, list) or len(rec) != 4 or not isinstance(rec[0], str)
                or not all(isinstance(v, int) for v in rec[1:])):
            return f"artifact record {rel!r} is malformed"
    return ""


@dataclass
class Check:
    """What a check of an entry's artifacts found."""

    altered: list[str] = field(default_factory=list)  # 'path: why'
    missing: list[str] = field(default_factory=list)
    unrecorded: list[str] = field(default_factory=list)
    moved: dict[str, list[Any]] = field(default_factory=dict)  # same content, new mtime: fresh records
    hashed: int = 0

    @property
    def ok(self) -> bool:
        return not self.altered and not self.missing

    def problems(self) -> list[str]:
        return [f"{a}" for a in self.altered] + [f"{m}: recorded artifact is missing" for m in self.missing]


def check(entry: Path, records: dict[str, list[Any]], *, full: bool, since: int = -1) -> Check:
    """Compare the artifacts under `entry` with their records (quick: size and mtime; full: sha256 of
    those recorded by a generation after `since`, all by default)."""
    result = Check()
    files = artifact_files(entry)
    for rel, (digest, size, mtime_ns, generation) in sorted(records.items()):
        st = files.get(rel)
        if st is None:
            result.missing.append(rel)
            continue
        if (not full or generation <= since) and st.st_size == size and st.st_mtime_ns == mtime_ns:
            continue
        try:
            actual = sha256_file(entry / rel)
        except OSError as exc:
            result.altered.append(f"{rel}: unreadable ({exc})")
            continue
        result.hashed += 1
        if actual != digest:
            what = f"size {size} -> {st.st_size}" if st.st_size != size else "same size"
            result.altered.append(f"{rel}: sha256 {digest[:12]}... recorded, {actual[:12]}... now ({what})")
        elif st.st_mtime_ns != mtime_ns:
            result.moved[rel] = [digest, st.st_size, st.st_mtime_ns, generation]
    result.unrecorded = sorted(set(files) - set(records))
    return result


def update(entry: Path, records: dict[str, list[Any]],
           generation: int) -> tuple[dict[str, list[Any]], list[str]]:
    """Records for every artifact now under `entry`: unchanged ones kept, new and changed ones hashed
    (tagged `generation`), vanished ones dropped. Returns (records, paths whose content changed)."""
    files = artifact_files(entry)
    fresh: dict[str, list[Any]] = {}
    changed = []
    for rel, st in files.items():
        old = records.get(rel)
        if old and old[1] == st.st_size and old[2] == st.st_mtime_ns:
            fresh[rel] = old
            continue
        try:
            fresh[rel] = record_of(entry / rel, st, generation)
        except OSError:
            continue  # vanished meanwhile
        if old and old[0] != fresh[rel][0]:
            changed.append(rel)
    return fresh, changed
