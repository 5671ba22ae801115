"""Discovery of device descriptions.

Order (a later source replaces an earlier description of the same name):
  1. built-ins shipped in torch_fl/description/builtin/*.toml
  2. entry points in the group ``torch_fl.devices``; each entry point's object is a callable that
     returns a path or a list of paths of description files
  3. *.toml files in the directories of ``FL_DESCRIPTION_PATH`` (os.pathsep-separated)
  4. the single file named by ``FL_DESCRIPTION``
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from .. import _env, _toml
from .._state import process
from ..errors import DescriptionError, UnknownDescriptionError, did_you_mean
from . import loader
from .loader import load, parse, read_raw, read_text
from .model import Description

ENTRY_POINT_GROUP = "torch_fl.devices"
BUILTIN_DIR = Path(__file__).parent / "builtin"
_log = logging.getLogger("torch_fl.description")
_lock = threading.Lock()
# What is discovered is the process's state (torch_fl/_state.py: `process.descriptions`, `process.shadowed`).
_shadowed: dict[str, tuple[str, str]] = process.shadowed


def _entry_point_paths() -> Iterable[tuple[str, Path]]:
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            produced = ep.load()()
        except Exception as exc:  # a broken vendor package must not break torch-fl for everyone
            _log.warning("entry point %r of group %s (from %s) failed: %s: %s; its descriptions are "
                         "skipped", ep.name, ENTRY_POINT_GROUP, ep.value, type(exc).__name__, exc)
            continue
        paths = [produced] if isinstance(produced, (str, os.PathLike)) else list(produced or [])
        for path in paths:
            yield f"entry point {ep.name} ({ep.value})", Path(path)


def _sources() -> Iterable[tuple[str, Path, bool]]:
    for path in sorted(BUILTIN_DIR.glob("*.toml")):
        yield "built-in", path, True
    for origin, path in _entry_point_paths():
        yield origin, path, False
    for folder in _env.FL_DESCRIPTION_PATH.value():
        if not folder.is_dir():
            _log.warning("FL_DESCRIPTION_PATH entry %s is not a directory; skipped", folder)
            continue
        if not os.access(folder, os.R_OK | os.X_OK):  # glob would find nothing in it, without a word
            _log.warning("FL_DESCRIPTION_PATH entry %s cannot be read (permission denied); its descriptions "
                         "are skipped. Fix: chmod u+rx %s, or remove it from FL_DESCRIPTION_PATH", folder, folder)
            continue
        for path in sorted(folder.glob("*.toml")):
            yield "FL_DESCRIPTION_PATH", path, False
    explicit = _env.FL_DESCRIPTION.value()
    if explicit is not None:
        yield "FL_DESCRIPTION", explicit, False


def _discover() -> dict[str, Description]:
    found: dict[str, Description] = {}
    rank: dict[str, int] = {}  # name -> the position of its source (a later source replaces an earlier)
    # Files that extend another description wait until every file has been read: each extends the
    # description of that name that wins (a site's own npu.toml, then, for the built-in npu-910).
    waiting: list[tuple[int, str, Path, bool, str, dict]] = []
    for index, (origin, path, builtin) in enumerate(_sources()):
        if not builtin and not path.is_file():
            raise DescriptionError(f"{origin} names {_not_a_file(path)}", path=str(path))
        text = read_text(path)
        raw = read_raw(text, str(path))
        base = raw.get("extends", "")
        if base == "":
            _add(found, rank, index, origin, path, builtin, parse(text, str(path), builtin=builtin, raw=raw))
        elif not isinstance(base, str):
            parse(text, str(path), builtin=builtin, bases={})  # the validator's error for the file
        else:
            waiting.append((index, origin, path, builtin, text, raw))
    while waiting:
        names = {raw.get("name") for *_, raw in waiting}
        # ready: its base is known and no waiting file would still replace that base (a file may extend
        # the description of its own name: a site's npu.toml that refines the built-in one)
        ready = [w for w in waiting if w[5]["extends"] in found and
                 (w[5]["extends"] not in names or w[5]["extends"] == w[5].get("name"))]
        if not ready:  # the rest extend unknown names, or each other in a loop
            for _, _, path, builtin, text, raw in waiting:
                if raw["extends"] not in found and raw["extends"] not in names:
                    parse(text, str(path), builtin=builtin, bases=found)  # raises the "did you mean" error
            *_, path, _, _, raw = waiting[0]
            raise DescriptionError(f"extends '{raw['extends']}', which extends this file back (directly or "
                                   f"through others): {', '.join(sorted(map(str, names)))}", path=str(path), key="extends")
        for item in ready:
            waiting.remove(item)
            index, origin, path, builtin, text, raw = item
            _add(found, rank, index, origin, path, builtin, parse(text, str(path), builtin=builtin, bases=found,
                                                                 raw=raw))
    _check_priorities(found)
    return found


def _competes(a: Description, b: Description) -> bool:
    """Whether auto-detection could find both `a` and `b` on one machine and must order them by priority:
    one device type, torch builds that can be the same build (cuda and rocm share 'cuda', but a torch is
    a CUDA build or a HIP one), both auto-detected (a negative priority never is)."""
    builds = {a.section("detect")["torch_build"], b.section("detect")["torch_build"]}
    return a.device_type == b.device_type and (len(builds) == 1 or "any" in builds) and \
        min(a.section("detect")["priority"], b.section("detect")["priority"]) >= 0


def _check_priorities(found: dict[str, Description]) -> None:
    """Two descriptions of one device type with one detect.priority: which one auto-detection takes would
    be decided by their names, so it is an error naming both (the file that is not built in is blamed)."""
    ordered = sorted(found.values(), key=lambda d: (d.builtin, d.name))  # a user's file first
    for desc in ordered:
        priority = desc.section("detect")["priority"]
        tied = [d for d in ordered if d is not desc and d.section("detect")["priority"] == priority
                and _competes(desc, d)]
        if not tied:
            continue
        other = tied[0]
        taken = sorted({d.section("detect")["priority"] for d in found.values() if _competes(desc, d)},
                       reverse=True)
        used = ", ".join(f"{d.section('detect')['priority']} {d.name}" for d in sorted(
            (d for d in found.values() if _competes(desc, d)), key=lambda d: -d.section("detect")["priority"]))
        free = next(p for p in range(priority - 1, -2, -1) if p not in taken)
        from .loader import find_line

        try:
            text = _toml.read_text(Path(desc.path))
        except (OSError, ValueError):
            text = ""
        raise DescriptionError(
            f"{priority} is also the detect.priority of '{other.name}' ({other.path}), a description of "
            f"the same device type '{desc.device_type}': auto-detection would choose between '{desc.name}' and "
            f"'{other.name}' by their names. Priorities of '{desc.device_type}': {used}. Fix: give '{desc.name}' "
            f"a priority no other '{desc.device_type}' description has (e.g. {free}; a negative one: never "
            f"auto-detected), or remove one of the files",
            path=desc.path, line=find_line(text, "detect", "priority") if text else None, key="detect.priority")


def _add(found: dict[str, Description], rank: dict[str, int], index: int, origin: str, path: Path, builtin: bool,
         desc: Description) -> None:
    earlier = found.get(desc.name)
    if earlier is not None and rank[desc.name] > index:
        return  # a later source already replaced this one (a description that extends waited its turn)
    if earlier is not None and origin == "FL_DESCRIPTION_PATH" and earlier.path and \
            Path(earlier.path).parent == path.parent:
        # which one wins would be an accident of file names: say so instead of picking one
        raise DescriptionError(f"two files in {path.parent} describe '{desc.name}': {Path(earlier.path).name} "
                               f"and {path.name}. Fix: keep one of them (or rename one's `name`)",
                               path=str(path))
    if earlier is not None:
        _log.debug("description %r from %s (%s) replaces the one from %s", desc.name, path, origin, earlier.path)
        if earlier.builtin and not builtin:
            _shadowed[desc.name] = (str(path), origin)
    found[desc.name], rank[desc.name] = desc, index


def _not_a_file(path: Path) -> str:
    # what it is, so a FIFO or /dev/zero is not reported as "does not exist"
    try:
        kind = _toml.file_kind(os.stat(path).st_mode)
    except FileNotFoundError:
        return "a description file that does not exist"
    except OSError as exc:
        return f"a description file that cannot be read ({exc.strerror or exc})"
    return "a folder, not a description file" if kind == "a folder" else f"{kind}, not a description file"


def shadowed() -> dict[str, tuple[str, str]]:
    """Built-in descriptions replaced by a file of the same name (allowed: a site may refine its chip's
    description), as name -> (path, origin); doctor and `describe --list` warn about each."""
    descriptions()
    return dict(_shadowed)


def descriptions() -> dict[str, Description]:
    """Every known description by name (discovered once; see `reload`)."""
    found = process.descriptions
    if found is None:
        with _lock:
            found = process.descriptions
            if found is None:
                found = process.descriptions = _discover()
    return found


def reload() -> None:
    """Forget discovered descriptions so the next call rediscovers them (after changing FL_* vars)."""
    with _lock:
        process.descriptions = None
        _shadowed.clear()


def is_path(text: str) -> bool:
    """Whether `text` names a description file rather than a description: a .toml, or anything with a
    path separator ('/' everywhere, and the platform's own)."""
    return text.endswith(".toml") or "/" in text or os.sep in text


def get(name_or_path: str) -> Description:
    """A description by name, or by path when the argument names an existing .toml file."""
    if is_path(name_or_path):
        return load(Path(name_or_path).expanduser())
    known = descriptions()
    if name_or_path not in known:
        raise UnknownDescriptionError(
            f"no device description named '{name_or_path}'.{did_you_mean(name_or_path, known)} "
            f"Known: {', '.join(sorted(known))}. Add one with FL_DESCRIPTION=path/to/file.toml, a "
            f"directory in FL_DESCRIPTION_PATH, or an entry point in the group '{ENTRY_POINT_GROUP}'.")
    return known[name_or_path]


# A file loaded by path that extends a description by name finds it among the discovered ones.
loader.default_bases = descriptions
